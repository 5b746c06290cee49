"""A rebuild killed between two table commits: sql, show, describe and register_tables all keep showing the
previous run, whole; the next complete run is then seen whole.

One rebuild runs in its own process (the only way to kill it for real), with the sink's test hook
OFFSETLAKE_FAIL_AFTER_COMMITS; the complete ones share the test session's Spark.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member

from jobs.cli import cli
from jobs.runs import finished_runs
from jobs.tables import TABLES
from jobs.views import register_tables

KILLED_AFTER = 2  # table commits: committed_offsets and expired_offsets are replaced, the others are not


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


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("runs")
    first, second = write_dump(base / "first", later=False), write_dump(base / "second", later=True)
    ends = base / "end-offsets.txt"
    ends.write_text("t:0:100\nt:1:140\n")
    out = base / "tables"
    first_run = rebuild(first, out, ends)
    exe = Path(sys.executable).with_name("offsetlake")
    killed = subprocess.run([str(exe), "--quiet", "rebuild", "--source", f"parquet:{second}", "--output", str(out),
                             "--end-offsets", str(ends)], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OFFSETLAKE_FAIL_AFTER_COMMITS": str(KILLED_AFTER)})
    assert killed.returncode == -9, killed.stderr  # SIGKILL, as the hook does it
    # The next complete run goes to a copy, so the killed state stays for the tests that read it.
    again = base / "tables-again"
    shutil.copytree(out, again)
    return {"out": out, "first_run": first_run, "again": again, "second": second, "ends": ends}


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


def test_the_killed_run_replaced_some_tables_and_did_not_record_itself(runs):
    out = runs["out"]
    versions = {t: DeltaTable(str(out / t)).version() for t in TABLES}
    assert [t for t, v in versions.items() if v == 1] == list(TABLES[:KILLED_AFTER])
    assert all(v == 0 for t, v in versions.items() if t not in TABLES[:KILLED_AFTER])
    assert len(DeltaTable(str(out / "_runs")).to_pyarrow_table()) == 1
    newest = DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().column("committed_offset").to_pylist()
    assert sorted(newest) == [5, 95, 130]  # the new data is there, and readers must not see it


def test_sql_sees_the_first_run_whole(runs):
    assert offsets_csv(runs["out"]) == FIRST_RUN


def test_show_sees_the_first_run(runs):
    text = invoke("show", "--output", str(runs["out"]), "--rows", "5").stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"run {runs['first_run']}: as of 2026-11-01T00:01:00Z")
    assert "committed_offsets: 2 rows" in text and "consumer_groups: 1 rows" in text
    assert "committed_offset=95" not in text and "committed_offset=90" in text


def test_describe_sees_the_first_run(runs):
    result = invoke("describe", "--output", str(runs["out"]), "--group", "g")
    assert [line.split()[:6] for line in result.stdout.splitlines()[2:]] == [
        ["g", "t", "0", "90", "100", "10"], ["g", "t", "1", "120", "140", "20"]]
    missing = invoke("describe", "--output", str(runs["out"]), "--group", "h")
    assert "does not exist" in missing.stdout


def test_register_tables_sees_the_first_run(spark, runs):
    names = register_tables(spark, runs["out"], prefix="killed_")
    assert set(names) == {f"killed_{t}" for t in TABLES}
    rows = spark.sql("SELECT group_id, partition, committed_offset FROM killed_committed_offsets ORDER BY 1, 2").collect()
    assert [tuple(r) for r in rows] == [("g", 0, 90), ("g", 1, 120)]
    assert spark.sql("SELECT count(*) FROM killed_consumer_groups").collect()[0][0] == 1


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
