"""The output lock (jobs/lake/output_lock.py): who may take it and when, fencing of a holder that lost it, what
a run cleans up after a dead one; and keeping old versions (jobs/lake/runs.keep_runs). Without Spark, on tables
written with delta-rs as the sink writes them."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from delta_runs import commit_run
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties

from jobs.base.errors import BadInput, LockLost
from jobs.lake.output_lock import (_SCHEMA, LOCK_TABLE, RUN_FOLDER, STAGING_DIR, OutputLock, holder_of,
                                   this_process, unlock)
from jobs.base.storage import located
from jobs.base.tables import arrow_schema
from jobs.lake.runs import fenced_commit, finished_runs, keep_runs, snapshot


def offsets(committed: int) -> dict[str, list[dict]]:
    return {"committed_offsets": [{"group_id": "g", "topic": "t", "partition": 0, "committed_offset": committed}],
            "consumer_groups": [{"group_id": "g", "offset_count": 1}]}


def newest(out) -> list[int]:
    """committed_offsets as a plain Delta reader sees it: its newest version."""
    return DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().column("committed_offset").to_pylist()


def write_lock(out, landed_s_ago: float = 0, lease: float | None = 300, **holder) -> None:
    """A lock row of another run, as if its heartbeat had landed `landed_s_ago` seconds ago (by the storage's
    clock: its log entry's modification time)."""
    now = datetime.now(timezone.utc)
    boot_id, namespace, start = this_process()
    row = {"run_id": "dead", "host": socket.gethostname(), "pid": 1, "started_at": now - timedelta(hours=1),
           "beat_at": now, "boot_id": boot_id, "pid_namespace": namespace, "process_start": None,
           "lease_seconds": lease, "epoch": 0, **holder}
    write_deltalake(str(out / LOCK_TABLE), pa.Table.from_pylist([row], schema=_SCHEMA), mode="overwrite",
                    schema_mode="overwrite")
    entry = out / LOCK_TABLE / "_delta_log" / f"{DeltaTable(str(out / LOCK_TABLE)).version():020d}.json"
    os.utime(entry, (time.time() - landed_s_ago, time.time() - landed_s_ago))


def holder(out) -> list[str]:
    return DeltaTable(str(out / LOCK_TABLE)).to_pyarrow_table().column("run_id").to_pylist()


def stray_lock_files(out) -> set[str]:
    """The lock table's data files on disk that its newest version does not reference."""
    referenced = {os.path.basename(u) for u in DeltaTable(str(out / LOCK_TABLE)).file_uris()}
    return {p.name for p in (out / LOCK_TABLE).glob("*.parquet")} - referenced


def test_a_second_run_is_refused_naming_the_run_that_holds_the_output(tmp_path):
    with OutputLock.acquire(tmp_path, "first-run"):
        with pytest.raises(BadInput, match=r"run first-run \(process \d+ on .*, last heartbeat \d+ s ago\) is "
                                           r"writing these tables.*offsetlake unlock"):
            OutputLock.acquire(tmp_path, "second-run")
    assert holder(tmp_path) == []  # released
    with OutputLock.acquire(tmp_path, "second-run"):  # the next one gets it
        assert holder(tmp_path) == ["second-run"]


def test_of_runs_racing_for_the_lock_exactly_one_holds_it_and_the_losers_leave_no_file(tmp_path):
    outcomes: list[str] = []
    start = threading.Barrier(5)

    def race(n: int) -> None:
        start.wait()
        try:
            OutputLock.acquire(tmp_path, f"run-{n}")
            outcomes.append("held")
        except BadInput:
            outcomes.append("refused")

    threads = [threading.Thread(target=race, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 4
    assert len(holder(tmp_path)) == 1
    assert stray_lock_files(tmp_path) == set()  # every file on disk is the holder's row: no loser left one


def test_a_run_whose_process_is_gone_loses_its_lock_at_once(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_lock(tmp_path, pid=int(gone.stdout))
    with OutputLock.acquire(tmp_path, "next"):
        assert holder(tmp_path) == ["next"]


def test_a_reused_pid_is_not_the_holder(tmp_path):
    # The pid is alive (this very process), but it started at another moment than the holder's process did.
    _, _, start = this_process()
    write_lock(tmp_path, pid=os.getpid(), process_start=start + 1)
    with OutputLock.acquire(tmp_path, "next"):
        assert holder(tmp_path) == ["next"]


def test_a_zombie_is_not_the_holder(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped
        time.sleep(0.01)
    try:
        write_lock(tmp_path, pid=child.pid)
        with OutputLock.acquire(tmp_path, "next"):
            assert holder(tmp_path) == ["next"]
    finally:
        child.wait()


def test_a_live_process_holds_the_lock_only_while_its_heartbeat_is_younger_than_its_lease(tmp_path):
    _, _, start = this_process()
    # This process's identity: alive; what decides then is the heartbeat (a paused process is alive too).
    write_lock(tmp_path, pid=os.getpid(), process_start=start, landed_s_ago=250)
    with pytest.raises(BadInput, match="run dead"):
        OutputLock.acquire(tmp_path, "next")
    write_lock(tmp_path, pid=os.getpid(), process_start=start, landed_s_ago=30 * 86400)  # 30 days old
    OutputLock.acquire(tmp_path, "next").release()


@pytest.mark.parametrize("same_host_name", [False, True], ids=["another host", "a restarted container"])
def test_a_holder_this_host_cannot_see_is_taken_over_once_its_heartbeat_is_older_than_its_lease(
        tmp_path, same_host_name):
    # A restarted container keeps its host name, but its pid namespace is new: pid 1 there is not the holder.
    other = {"host": socket.gethostname(), "pid_namespace": "pid:[4026532999]"} if same_host_name else \
        {"host": "another-host"}
    write_lock(tmp_path, pid=1, lease=60, landed_s_ago=50, **other)
    with pytest.raises(BadInput, match="run dead"):
        OutputLock.acquire(tmp_path, "next")
    write_lock(tmp_path, pid=1, lease=60, landed_s_ago=70, **other)
    OutputLock.acquire(tmp_path, "next").release()


def test_the_holders_clock_never_counts_only_when_its_heartbeat_landed(tmp_path):
    # A heartbeat written by a clock a day ahead, landed 70 s ago: taken over once the lease (60 s) is past.
    ahead = datetime.now(timezone.utc) + timedelta(days=1)
    write_lock(tmp_path, host="another-host", lease=60, landed_s_ago=70, beat_at=ahead)
    OutputLock.acquire(tmp_path, "next").release()
    # One written by a clock 400 s behind, landed now: the lock is fresh.
    write_lock(tmp_path, host="another-host", lease=60, beat_at=ahead - timedelta(days=1, seconds=400))
    with pytest.raises(BadInput, match="run dead"):
        OutputLock.acquire(tmp_path, "next")


def test_a_lock_of_the_earlier_layout_is_read_and_taken_over(tmp_path):
    old = pa.schema([("run_id", pa.string()), ("host", pa.string()), ("pid", pa.int64()),
                     ("started_at", pa.timestamp("us", tz="UTC")), ("beat_at", pa.timestamp("us", tz="UTC"))])
    now = datetime.now(timezone.utc)
    write_deltalake(str(tmp_path / LOCK_TABLE), pa.Table.from_pylist(
        [{"run_id": "old", "host": "another-host", "pid": 1, "started_at": now, "beat_at": now}], schema=old))
    with pytest.raises(BadInput, match="run old"):
        OutputLock.acquire(tmp_path, "next")
    with OutputLock.acquire(tmp_path, "next", force=True):
        assert holder(tmp_path) == ["next"]


def test_a_run_that_lost_its_lock_knows_it_and_names_the_taker(tmp_path):
    lock = OutputLock.acquire(tmp_path, "slow", lease_seconds=0.3)
    write_lock(tmp_path, run_id="taker", host="another-host")  # another run took it for dead
    lock._beat.join(timeout=10)
    assert lock.lost is not None and holder(tmp_path) == ["taker"]
    with pytest.raises(LockLost, match="taken over by run taker at"):
        lock.check()
    lock.release()
    assert holder(tmp_path) == ["taker"]  # a run that lost the lock never releases the new holder's


def test_a_holder_whose_lease_lapsed_unnoticed_goes_on_when_nobody_took_over(tmp_path):
    lock = OutputLock.acquire(tmp_path, "paused", lease_seconds=600)
    lock._stop.set()  # no heartbeat: as if the process had been stopped for longer than its lease
    lock.renewed_at -= 601
    before = DeltaTable(str(tmp_path / LOCK_TABLE)).version()
    lock.check()  # renews: its renewal, a compare-and-swap, proves nobody took over
    assert DeltaTable(str(tmp_path / LOCK_TABLE)).version() == before + 1
    lock.release()


def fenced_write(out, table: str, rows: list[dict], guard) -> None:
    target = located(out / table)
    once = CommitProperties(custom_metadata={"offsetlake.run_id": "paused"}, max_commit_retries=0)
    data = pa.Table.from_pylist(rows, schema=arrow_schema(table))
    fenced_commit(target, lambda opened: write_deltalake(opened, data, mode="overwrite", commit_properties=once),
                  guard)


def test_a_commit_made_after_a_takeover_fails_whatever_moment_the_holder_paused_at(tmp_path):
    """The paused run checked its lock (still its own), then paused before committing: the takeover fences the
    table, so the commit of the version it opened fails, and its next check names the taker."""
    commit_run(tmp_path, offsets(10))
    paused = OutputLock.acquire(tmp_path, "paused", lease_seconds=600)
    paused._stop.set()
    checks = []

    def guard() -> None:
        paused.check()
        if not checks:  # the pause, right after the check: another run takes the output over
            checks.append(1)
            OutputLock.acquire(tmp_path, "taker", force=True).release()

    with pytest.raises(LockLost, match="taken over"):
        fenced_write(tmp_path, "committed_offsets", [{"committed_offset": 99}], guard)
    assert newest(tmp_path) == [10]
    fences = [c for c in DeltaTable(str(tmp_path / "committed_offsets")).history() if "offsetlake.fence" in c]
    assert len(fences) == 1 and DeltaTable(str(tmp_path / "_runs")).history(1)[0].get("offsetlake.fence")


def test_a_table_staged_but_not_created_yet_is_created_by_the_takeover_so_the_paused_creation_fails(tmp_path):
    commit_run(tmp_path, offsets(10))
    staged = tmp_path / "group_events" / f"{RUN_FOLDER}paused"
    staged.mkdir(parents=True)  # the paused run staged group_events, which no run created yet
    paused = OutputLock.acquire(tmp_path, "paused", lease_seconds=600)
    paused._stop.set()
    taken = []

    def guard() -> None:
        paused.check()
        if not taken:
            taken.append(1)
            OutputLock.acquire(tmp_path, "taker", force=True, clean_up=False).release()

    def create(table) -> None:
        assert table is None  # it opened no table: it creates one, which must not exist by now
        write_deltalake(str(tmp_path / "group_events"), pa.Table.from_pylist([], schema=arrow_schema("group_events")),
                        mode="error")

    with pytest.raises(LockLost, match="taken over by run taker"):
        fenced_commit(located(tmp_path / "group_events"), create, guard)
    assert DeltaTable(str(tmp_path / "group_events")).history(1)[0]["offsetlake.fence"]


def test_a_commit_that_landed_before_the_fence_is_undone_by_the_taker(tmp_path):
    first = commit_run(tmp_path, offsets(10))
    commit_run(tmp_path, {"committed_offsets": offsets(20)["committed_offsets"]}, finish=False)  # then it paused
    with OutputLock.acquire(tmp_path, "taker", force=True):  # fences, then restores under the fence
        assert newest(tmp_path) == [10]
        assert snapshot(tmp_path, ["committed_offsets"]).run["run_id"] == first
    for version in range(DeltaTable(str(tmp_path / "committed_offsets")).version() + 1):
        DeltaTable(str(tmp_path / "committed_offsets"), version=version).to_pyarrow_table()  # every version opens


def test_unlock_breaks_a_stale_lock_and_a_fresh_one_only_when_forced(tmp_path):
    commit_run(tmp_path, offsets(10))
    write_lock(tmp_path, host="another-host", lease=60, landed_s_ago=10)
    with pytest.raises(BadInput, match="run dead"):
        unlock(tmp_path)
    assert unlock(tmp_path, force=True)["run_id"] == "dead"
    assert holder_of(tmp_path) is None and holder(tmp_path) == []
    write_lock(tmp_path, host="another-host", lease=60, landed_s_ago=70)
    assert unlock(tmp_path)["run_id"] == "dead" and holder_of(tmp_path) is None
    assert unlock(tmp_path) is None  # nobody holds it
    assert newest(tmp_path) == [10]


def test_the_next_run_removes_a_dead_runs_staging_area_and_uncommitted_files_and_restores_its_tables(tmp_path):
    first = commit_run(tmp_path, offsets(10))
    dead = commit_run(tmp_path, {"committed_offsets": offsets(20)["committed_offsets"]}, finish=False)
    assert newest(tmp_path) == [20]  # what a plain Delta reader sees after the dead run
    # The dead run had its state in its staging area and staged a table it never committed.
    (tmp_path / STAGING_DIR / dead / "_state").mkdir(parents=True)
    stray = tmp_path / "consumer_groups" / f"{RUN_FOLDER}{dead}" / "part-00000.parquet"
    stray.parent.mkdir()
    stray.write_bytes(b"PAR1")
    # A folder of a finished run is referenced by its version: it stays.
    kept = tmp_path / "consumer_groups" / f"{RUN_FOLDER}{first}" / "part-00000.parquet"
    kept.parent.mkdir()
    kept.write_bytes(b"PAR1")
    with OutputLock.acquire(tmp_path, "next"):
        assert not (tmp_path / STAGING_DIR).exists()
        assert not stray.parent.exists() and kept.exists()
        assert newest(tmp_path) == [10]  # restored: the newest complete run's version
        assert snapshot(tmp_path, ["committed_offsets"]).run["run_id"] == first


def test_keep_runs_deletes_only_what_older_versions_reference(tmp_path):
    for committed in (10, 20, 30):
        commit_run(tmp_path, offsets(committed))
    runs = finished_runs(tmp_path)
    deleted = keep_runs(tmp_path, 2)
    assert deleted["committed_offsets"] == 1 and deleted["consumer_groups"] == 1
    for run, committed in zip(runs[1:], (20, 30)):  # the last two runs' versions still open
        version = {t["table"]: t["version"] for t in run["tables"]}["committed_offsets"]
        table = DeltaTable(str(tmp_path / "committed_offsets"), version=version).to_pyarrow_table()
        assert table.column("committed_offset").to_pylist() == [committed]
    with pytest.raises(Exception):
        DeltaTable(str(tmp_path / "committed_offsets"), version=0).to_pyarrow_table()


def test_the_newest_run_is_the_one_recorded_last_whatever_its_clock_said(tmp_path):
    from jobs.lake.runs import record_run

    first = commit_run(tmp_path, offsets(10))
    # A run on a host whose clock is a day ahead finished "tomorrow": recorded first, it is not the newest.
    record_run(tmp_path, "ahead", {}, None, "parquet:/ahead", "delta-rs")
    DeltaTable(str(tmp_path / "_runs")).update(updates={"finished_at": "finished_at + INTERVAL '1 day'"},
                                               predicate="run_id = 'ahead'")
    last = commit_run(tmp_path, offsets(30))
    assert [r["run_id"] for r in finished_runs(tmp_path)] == [first, "ahead", last]
    assert snapshot(tmp_path, ["committed_offsets"]).run["run_id"] == last
