"""Rebuilds killed at several moments (reading, replay, staging, committing): sql, show, describe,
reset-offsets and register_tables keep showing the previous run, whole, every Delta table opens, and the next
complete run is seen whole, leaves nothing behind and keeps every earlier version readable. A second rebuild
started while one holds the output is refused in one line.

Killed rebuilds run in processes of their own (the only way to kill them for real) with the test hook
OFFSETLAKE_KILL_AT (jobs/kill_points.py), which kills the whole process group as a lost container would; the
complete ones share the test session's Spark.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member
from takeover import wait_until_stopped

from jobs.base.tables import TABLES
from jobs.cli import cli
from jobs.kill_points import KILL_AT, PAUSE_AT
from jobs.lake.output_lock import STAGING_DIR, holder_of
from jobs.lake.runs import finished_runs, is_fence, run_id_of, table_folders, unreferenced_files
from jobs.readers.views import register_tables

# Moments to kill at, in order, each into the output the previous one left: the source read, the replay's
# counts computed, every table staged, and two table commits made (committed_offsets and expired_offsets).
KILLED_AT = ("read", "replayed", "staged", "committed:2")
KILLED_AFTER = 2  # table commits of the last one


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def write_dump(path: Path, later: bool) -> Path:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    if later:  # the second dump: newer offsets, and a second group
        log.commit("g", "t", 0, 95, T0 + 2 * MINUTE)
        log.commit("g", "t", 1, 130, T0 + 2 * MINUTE)
        log.group("h", T0 + 2 * MINUTE, members=[member("m2", ["t"], {"t": [0]}, client_id="c2")])
        log.commit("h", "t", 0, 5, T0 + 2 * MINUTE)
    log.write_parquet(path)
    return path


def rebuild(dump: Path, out: Path, ends: Path) -> str:
    """A complete rebuild in this process; returns its run id."""
    invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(out), "--end-offsets", str(ends))
    return finished_runs(out)[-1]["run_id"]


def seen_by_readers(out: Path) -> dict[str, str]:
    """What the reading commands print, and every Delta table's newest version opened."""
    for path in table_folders(out):
        DeltaTable(path.path).to_pyarrow_table()  # raises on a missing or damaged file
    return {"sql": offsets_csv(out),
            "show": invoke("show", "--output", str(out), "--rows", "5").stdout,
            "describe": invoke("describe", "--output", str(out), "--group", "g").stdout,
            "reset": invoke("reset-offsets", "--output", str(out), "--group", "g").stdout}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("runs")
    first, second = write_dump(base / "first", later=False), write_dump(base / "second", later=True)
    ends = base / "end-offsets.txt"
    ends.write_text("t:0:100\nt:1:140\n")
    out = base / "tables"
    first_run = rebuild(first, out, ends)
    exe = Path(sys.executable).with_name("offsetlake")
    command = [str(exe), "--quiet", "rebuild", "--source", f"parquet:{second}", "--output", str(out),
               "--end-offsets", str(ends)]
    # While a run holds the output (paused, alive), a second rebuild is refused before Spark starts.
    paused = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, env={**os.environ, PAUSE_AT: "read"})
    wait_until_stopped(paused)
    refused = (holder_of(out)["run_id"], subprocess.run(command, capture_output=True, text=True, timeout=120))
    os.killpg(paused.pid, signal.SIGKILL)
    paused.communicate(timeout=60)
    seen = {}
    for moment in KILLED_AT:
        killed = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True, env={**os.environ, KILL_AT: moment})
        _, err = killed.communicate(timeout=600)
        assert killed.returncode == -9, err  # SIGKILL, as the hook does it
        seen[moment] = seen_by_readers(out)
    # The next complete run goes to a copy, so the killed state stays for the tests that read it.
    again = base / "tables-again"
    shutil.copytree(out, again)
    return {"out": out, "first_run": first_run, "again": again, "second": second, "ends": ends, "seen": seen,
            "refused": refused}


@pytest.fixture(scope="module")
def third(runs) -> tuple[Path, str]:
    return runs["again"], rebuild(runs["second"], runs["again"], runs["ends"])


def offsets_csv(out: Path) -> str:
    return invoke("sql", "--output", str(out), "--format", "csv",
                  "SELECT o.group_id, o.partition, o.committed_offset, l.lag, g.offset_count "
                  "FROM committed_offsets o JOIN consumer_lag l USING (group_id, topic, partition) "
                  "JOIN consumer_groups g USING (group_id) ORDER BY 1, 2").stdout


FIRST_RUN = "group_id,partition,committed_offset,lag,offset_count\ng,0,90,10,2\ng,1,120,20,2\n"
THIRD_RUN = "group_id,partition,committed_offset,lag,offset_count\ng,0,95,5,2\ng,1,130,10,2\nh,0,5,95,1\n"


@pytest.mark.parametrize("moment", KILLED_AT)
def test_after_each_kill_every_reader_sees_the_first_run_whole(runs, moment):
    seen = runs["seen"][moment]
    assert seen["sql"] == FIRST_RUN
    assert seen["show"].startswith(f"run {runs['first_run']}: as of 2026-11-01T00:01:00Z")
    assert [line.split()[:6] for line in seen["describe"].splitlines()[2:]] == [
        ["g", "t", "0", "90", "100", "10"], ["g", "t", "1", "120", "140", "20"]]
    assert seen["reset"] == "t,0,90\nt,1,120\n"


def test_a_second_rebuild_is_refused_in_one_line_naming_the_run_that_holds_the_output(runs):
    holder, refused = runs["refused"]
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and f"run {holder} " in lines[0] and "is writing these tables" in lines[0], lines


def test_the_killed_run_replaced_some_tables_and_did_not_record_itself(runs):
    out = runs["out"]
    # Each killed run's successor fenced every table when it took the dead run's lock over: empty commits.
    authors = {t: [run_id_of(c) for c in DeltaTable(str(out / t)).history() if not is_fence(c)] for t in TABLES}
    first = runs["first_run"]
    assert [t for t, by in authors.items() if by[0] != first] == list(TABLES[:KILLED_AFTER])
    assert all(by == [first] for t, by in authors.items() if t not in TABLES[:KILLED_AFTER])
    assert len(DeltaTable(str(out / "_runs")).to_pyarrow_table()) == 1
    newest = DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().column("committed_offset").to_pylist()
    assert sorted(newest) == [5, 95, 130]  # the new data is there, and readers must not see it


def test_register_tables_sees_the_first_run(spark, runs):
    names = register_tables(spark, runs["out"], prefix="killed_")
    assert set(names) == {f"killed_{t}" for t in TABLES}
    rows = spark.sql("SELECT group_id, partition, committed_offset FROM killed_committed_offsets ORDER BY 1, 2").collect()
    assert [tuple(r) for r in rows] == [("g", 0, 90), ("g", 1, 120)]
    assert spark.sql("SELECT count(*) FROM killed_consumer_groups").collect()[0][0] == 1


def test_the_next_complete_run_cleans_up_after_the_killed_ones(runs, third):
    out, _ = third
    assert not (out / STAGING_DIR).exists() and holder_of(out) is None
    # Every data file in a table folder is one a version references: no killed run's file is left.
    assert unreferenced_files(out) == []


def test_every_version_of_every_table_opens_and_holds_the_as_of_of_its_run(runs, third):
    out, _ = third
    recorded = finished_runs(out)
    assert len(recorded) == 2
    for run in recorded:
        for entry in run["tables"]:
            table = DeltaTable(str(out / entry["table"]), version=entry["version"]).to_pyarrow_table()
            if "as_of" in table.column_names and table.num_rows:
                as_of = {moment.replace(tzinfo=None) for moment in table.column("as_of").to_pylist()}
                assert as_of == {run["as_of"]}, entry


def test_the_next_complete_run_is_seen_whole(spark, runs, third):
    out, run_id = third
    assert offsets_csv(out) == THIRD_RUN
    assert invoke("show", "--output", str(out)).stdout.startswith(f"run {run_id}: as of 2026-11-01T00:02:00Z")
    assert invoke("describe", "--output", str(out), "--group", "g").stdout.splitlines()[2].split()[:4] == \
        ["g", "t", "0", "95"]
    register_tables(spark, out, prefix="third_")
    assert spark.sql("SELECT sum(committed_offset) FROM third_committed_offsets").collect()[0][0] == 95 + 130 + 5
    recorded = list(csv.DictReader(io.StringIO(invoke("sql", "--output", str(out), "--format", "csv",
                                                      "SELECT run_id, source FROM _runs ORDER BY finished_at").stdout)))
    assert [r["run_id"] for r in recorded] == [runs["first_run"], run_id]
    assert recorded[1]["source"] == f"parquet:{runs['second']}"
    summary = json.loads(invoke("sql", "--output", str(out), "--format", "json",
                                "SELECT count(*) AS n FROM consumer_groups").stdout)
    assert summary == {"n": 2}


def test_a_worker_killed_by_the_system_fails_the_run_in_one_line_and_changes_nothing(runs, tmp_path):
    """A local runner's worker killed (as the out-of-memory killer does) fails the run with one line, where a
    pool that quietly replaced it would wait forever; the tables stay as they were."""
    out = tmp_path / "tables"
    shutil.copytree(runs["again"], out)
    before = offsets_csv(out)
    exe = Path(sys.executable).with_name("offsetlake")
    died = subprocess.run([str(exe), "--quiet", "rebuild", "--source", f"parquet:{runs['second']}", "--output",
                           str(out), "--end-offsets", str(runs["ends"])], capture_output=True, text=True,
                          timeout=300, env={**os.environ, KILL_AT: "worker"})
    assert died.returncode == 1
    lines = died.stderr.strip().splitlines()
    assert len(lines) == 1 and "a worker process died" in lines[0], lines
    assert offsets_csv(out) == before and not (out / STAGING_DIR).exists() and holder_of(out) is None
