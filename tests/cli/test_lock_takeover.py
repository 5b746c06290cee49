"""A run that loses its output while it cannot renew its lock (paused: SIGSTOP, as a long GC pause or a frozen
VM would) commits nothing more: when it resumes it exits 1 with one line, and readers see the run that took
the output over, whole; every version of every table opens. A holder this host cannot see (a restarted
container with the same host name, in a new pid namespace) is taken over once its heartbeat is older than
its lease. Whole `offsetlake` processes (jobs/lake/output_lock.py; the same on S3: tests/lake/test_object_store.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member
from takeover import OFFSETLAKE, paused_takeover

from jobs.lake.output_lock import holder_of
from jobs.lake.runs import finished_runs, table_folders, unreferenced_files

CONSUMER_LAG = "SELECT group_id, topic, partition, committed_offset, lag FROM consumer_lag ORDER BY 1, 2, 3"


def write_dump(path: Path, later: bool) -> Path:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    if later:
        log.commit("g", "t", 0, 95, T0 + 2 * MINUTE)
        log.group("h", T0 + 2 * MINUTE, members=[member("m2", ["t"], {"t": [0]}, client_id="c2")])
        log.commit("h", "t", 0, 5, T0 + 2 * MINUTE)
    log.write_parquet(path)
    return path


def offsetlake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([OFFSETLAKE, "--quiet", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("takeover")
    ends = base / "ends.txt"
    ends.write_text("t:0:100\nt:1:140\n")
    found = {"base": base, "ends": ends, "first": write_dump(base / "first", False),
             "second": write_dump(base / "second", True)}
    # The tables of the first dump, then of the second, each rebuilt alone: what readers must show.
    for name in ("first", "second"):
        out = base / f"alone-{name}"
        assert offsetlake("rebuild", "--source", f"parquet:{found[name]}", "--output", str(out), "--end-offsets",
                          str(ends), cwd=base).returncode == 0
        found[f"{name}-lag"] = offsetlake("sql", "--output", str(out), "--format", "csv", CONSUMER_LAG, cwd=base).stdout
    return found


@pytest.mark.parametrize("moment", ["staged", "committed:2"], ids=["before its commits", "after two commits"])
def test_a_paused_run_that_lost_its_output_exits_1_and_readers_see_the_taker_whole(inputs, tmp_path, moment):
    out = tmp_path / "tables"
    ends = ["--end-offsets", str(inputs["ends"])]
    assert offsetlake("rebuild", "--source", f"parquet:{inputs['first']}", "--output", str(out), *ends,
                      cwd=tmp_path).returncode == 0
    result = paused_takeover(str(out), ["--source", f"parquet:{inputs['second']}", *ends],
                             ["--source", f"parquet:{inputs['first']}", *ends], env=dict(os.environ), cwd=tmp_path,
                             moment=moment)
    taker = result["taker"]
    assert taker.returncode == 0, taker.stderr
    status, err = result["holder"]
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1, err
    taker_run = finished_runs(out)[-1]["run_id"]
    assert f"the output was taken over by run {taker_run} at " in lines[0] and "recorded nothing" in lines[0]
    assert len(finished_runs(out)) == 2  # the first run and the taker's: never the paused one
    assert offsetlake("sql", "--output", str(out), "--format", "csv", CONSUMER_LAG,
                      cwd=tmp_path).stdout == inputs["first-lag"]
    for path in table_folders(out):  # every version of every table opens
        for version in range(DeltaTable(path.path).version() + 1):
            DeltaTable(path.path, version=version).to_pyarrow_table()
    # The next run undoes what the paused one left and ends clean.
    assert offsetlake("rebuild", "--source", f"parquet:{inputs['second']}", "--output", str(out), *ends,
                      cwd=tmp_path).returncode == 0
    assert offsetlake("sql", "--output", str(out), "--format", "csv", CONSUMER_LAG,
                      cwd=tmp_path).stdout == inputs["second-lag"]
    assert unreferenced_files(out) == []


def in_container(command: list[str], host: str = "jobpod") -> list[str]:
    """`command` in a new pid namespace with host name `host`, as a container runs it: each time the same small
    pid (its shell is pid 1, which a process inside cannot SIGKILL)."""
    script = f'hostname {host} && "$@"'
    return ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh", *command]


def test_a_restarted_container_with_the_same_host_name_takes_the_output_over_once_the_lease_passed(inputs,
                                                                                                    tmp_path):
    if shutil.which("unshare") is None or subprocess.run(in_container(["true"]), capture_output=True).returncode:
        pytest.skip("unshare cannot make a pid and UTS namespace here (needs root or user namespaces)")
    out = tmp_path / "tables"
    rebuild = [OFFSETLAKE, "--quiet", "rebuild", "--source", f"parquet:{inputs['first']}", "--output", str(out),
               "--lock-lease", "3"]
    killed = subprocess.run(in_container(rebuild), capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "OFFSETLAKE_KILL_AT": "read"}, start_new_session=True)
    assert killed.returncode != 0  # SIGKILLed holding the lock: "pid 3 on jobpod"
    assert holder_of(out)["host"] == "jobpod"
    started = time.monotonic()
    retries = []
    while True:  # the retry is pid 1 on jobpod too, in a pid namespace of its own
        retry = subprocess.run(in_container(rebuild), capture_output=True, text=True, cwd=tmp_path, timeout=300)
        retries.append(retry.returncode)
        if retry.returncode != 2 or time.monotonic() - started > 30:
            break
        assert "is writing these tables" in retry.stderr
        time.sleep(0.5)
    assert retry.returncode == 0, retry.stderr
    assert time.monotonic() - started >= 2  # not before its heartbeat was older than the lease (3 s)
    assert len(finished_runs(out)) == 1


def test_unlock_prints_the_holder_and_breaks_only_a_stale_lock_unless_forced(inputs, tmp_path):
    from click.testing import CliRunner

    from jobs.cli import cli
    from jobs.lake.output_lock import OutputLock

    out = tmp_path / "tables"
    assert offsetlake("rebuild", "--source", f"parquet:{inputs['first']}", "--output", str(out),
                      cwd=tmp_path).returncode == 0
    assert CliRunner().invoke(cli, ["unlock", "--output", str(out)]).stdout == f"{out}: nobody holds the lock\n"
    held = OutputLock.acquire(out, "stuck", lease_seconds=600)
    held._stop.set()  # a holder whose heartbeat is fresh
    refused = CliRunner().invoke(cli, ["unlock", "--output", str(out)])
    assert refused.exit_code == 2 and "run stuck" in refused.stderr and "is writing these tables" in refused.stderr
    assert refused.stdout.startswith(f"{out}: held by run stuck (process {os.getpid()} on ")
    forced = CliRunner().invoke(cli, ["unlock", "--output", str(out), "--force"])
    assert forced.exit_code == 0 and forced.stdout.splitlines()[-1] == (
        f"{out}: lock removed; the next rebuild cleans up after run stuck")
    assert holder_of(out) is None
    assert offsetlake("rebuild", "--source", f"parquet:{inputs['second']}", "--output", str(out),
                      cwd=tmp_path).returncode == 0
