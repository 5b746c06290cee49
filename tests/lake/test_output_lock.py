"""The output lock and what a run cleans up after a dead one (jobs/output_lock.py), and keeping old versions
(jobs/runs.keep_runs): without Spark, on tables written with delta-rs as the sink writes them."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from delta_runs import commit_run
from deltalake import DeltaTable, write_deltalake

from jobs.errors import BadInput
from jobs.lake.output_lock import _SCHEMA, LOCK_TABLE, RUN_FOLDER, STALE_SECONDS, STAGING_DIR, OutputLock
from jobs.lake.runs import finished_runs, keep_runs, snapshot


def offsets(committed: int) -> dict[str, list[dict]]:
    return {"committed_offsets": [{"group_id": "g", "topic": "t", "partition": 0, "committed_offset": committed}],
            "consumer_groups": [{"group_id": "g", "offset_count": 1}]}


def newest(out) -> list[int]:
    """committed_offsets as a plain Delta reader sees it: its newest version."""
    return DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().column("committed_offset").to_pylist()


def write_lock(out, beat_age_s: float = 0, **holder) -> None:
    now = datetime.now(timezone.utc)
    row = {"run_id": "dead", "host": socket.gethostname(), "pid": 1, "started_at": now - timedelta(hours=1),
           "beat_at": now - timedelta(seconds=beat_age_s), **holder}
    write_deltalake(str(out / LOCK_TABLE), pa.Table.from_pylist([row], schema=_SCHEMA), mode="overwrite")


def holder(out) -> list[str]:
    return DeltaTable(str(out / LOCK_TABLE)).to_pyarrow_table().column("run_id").to_pylist()


def test_a_second_run_is_refused_naming_the_run_that_holds_the_output(tmp_path):
    with OutputLock.acquire(tmp_path, "first-run"):
        with pytest.raises(BadInput, match=r"run first-run \(process \d+ on .*\) is writing these tables"):
            OutputLock.acquire(tmp_path, "second-run")
    assert holder(tmp_path) == []  # released
    with OutputLock.acquire(tmp_path, "second-run"):  # the next one gets it
        assert holder(tmp_path) == ["second-run"]


def test_of_runs_racing_for_the_lock_exactly_one_holds_it(tmp_path):
    # Each reads the lock and commits over the version it read: Delta's commit lets one of them through.
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def race(n: int) -> None:
        start.wait()
        try:
            OutputLock.acquire(tmp_path, f"run-{n}")
            outcomes.append("held")
        except BadInput:
            outcomes.append("refused")

    threads = [threading.Thread(target=race, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["held", "refused", "refused", "refused"]
    assert len(holder(tmp_path)) == 1


def test_a_run_whose_process_is_gone_loses_its_lock_at_once(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_lock(tmp_path, pid=int(gone.stdout))
    with OutputLock.acquire(tmp_path, "next"):
        assert holder(tmp_path) == ["next"]


def test_a_lock_from_another_host_is_taken_over_only_once_its_heartbeat_has_stopped(tmp_path):
    write_lock(tmp_path, host="another-host", pid=os.getpid(), beat_age_s=STALE_SECONDS - 60)
    with pytest.raises(BadInput, match="run dead"):
        OutputLock.acquire(tmp_path, "next")
    write_lock(tmp_path, host="another-host", pid=os.getpid(), beat_age_s=STALE_SECONDS + 60)
    OutputLock.acquire(tmp_path, "next").release()


def test_a_run_that_lost_its_lock_knows_it(tmp_path, monkeypatch):
    import jobs.lake.output_lock as output_lock

    monkeypatch.setattr(output_lock, "HEARTBEAT_SECONDS", 0.05)
    lock = OutputLock.acquire(tmp_path, "slow")
    write_lock(tmp_path, run_id="taker", pid=os.getpid())  # another run took it for dead
    lock._beat.join(timeout=10)
    assert lock.lost and holder(tmp_path) == ["taker"]
    lock.release()
    assert holder(tmp_path) == ["taker"]  # a run that lost the lock never releases the new holder's


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
        assert DeltaTable(str(tmp_path / "committed_offsets"), version=1).to_pyarrow_table().num_rows == 1
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
