"""`offsetlake sql`: SQL over the tables with delta-rs's engine, no Spark: formats, limits, errors, runs."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from delta_runs import commit_run

from jobs.cli import cli
from jobs.readers.sql import csv_chunks, json_lines
from jobs.readers.sql import query as run_query

T = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)
AS_OF = datetime(2026, 11, 1, 9, 30, 0, 250000, tzinfo=timezone.utc)


def tables(committed: tuple[int, int]) -> dict[str, list[dict]]:
    offsets = [{"group_id": "g", "topic": "t", "partition": p, "committed_offset": c, "commit_timestamp": T,
                "metadata": "", "as_of": AS_OF} for p, c in enumerate(committed)]
    return {
        "committed_offsets": offsets,
        "consumer_lag": [{**o, "log_end_offset": 120, "lag": 120 - o["committed_offset"]} for o in offsets],
        "consumer_groups": [{"group_id": "g", "group_type": "classic", "state": "Stable", "member_count": 1,
                             "offset_count": len(offsets), "as_of": AS_OF}],
        "group_members": [{"group_id": "g", "member_id": "m1", "client_id": "c1", "subscribed_topics": ["t"],
                           "assigned_partitions": [{"topic": "t", "partition": 0, "topic_id": None}]}],
        "quarantine": [{"coordinator_partition": 3, "record_offset": 7, "key": b"\x00\x01\x00", "value": None,
                        "error": "truncated key"}],
    }


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tables")
    commit_run(path, tables((90, 110)))
    return path


def sql(out: Path, query: str, *options: str):
    return CliRunner().invoke(cli, ["sql", "--output", str(out), *options, query], catch_exceptions=False)


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_the_default_format_is_an_aligned_table(out):
    result = sql(out, "SELECT group_id, partition, committed_offset, commit_timestamp, as_of FROM committed_offsets "
                      "ORDER BY partition")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "group_id  partition  committed_offset  commit_timestamp      as_of",
        "--------  ---------  ----------------  --------------------  ---------------------------",
        "g                 0                90  2026-11-01T08:00:00Z  2026-11-01T09:30:00.250000Z",
        "g                 1               110  2026-11-01T08:00:00Z  2026-11-01T09:30:00.250000Z",
        "(2 rows)",
    ]
    assert result.stderr == ""


def test_tables_join_by_their_contract_names(out):
    result = sql(out, "SELECT g.state, sum(l.lag) AS total_lag FROM consumer_groups g JOIN consumer_lag l "
                      "USING (group_id) GROUP BY g.state", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"state": "Stable", "total_lag": 40}]


def test_csv_has_a_header_iso_times_base64_bytes_json_lists_and_empty_nulls(out):
    result = sql(out, "SELECT q.key, q.value, q.error, m.assigned_partitions, m.subscribed_topics, m.rack_id, "
                      "c.as_of FROM quarantine q, group_members m, consumer_groups c", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows == [
        ["key", "value", "error", "assigned_partitions", "subscribed_topics", "rack_id", "as_of"],
        ["AAEA", "", "truncated key", '[{"topic":"t","partition":0,"topic_id":null}]', '["t"]', "",
         "2026-11-01T09:30:00.250000Z"],
    ]


def test_json_is_one_object_per_line(out):
    result = sql(out, "SELECT partition, committed_offset, commit_timestamp, leader_epoch, "
                      "commit_timestamp - as_of AS age FROM committed_offsets ORDER BY partition", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"partition": p, "committed_offset": c, "commit_timestamp": "2026-11-01T08:00:00Z", "leader_epoch": None,
         "age": "-PT1H30M0.25S"} for p, c in ((0, 90), (1, 110))]


def test_the_table_stops_at_its_limit_and_says_so_on_stderr(out):
    query = "SELECT * FROM unnest(range(5)) AS t(n)"
    default = sql(out, query)
    assert default.exit_code == 0 and default.stdout.splitlines()[-1] == "(5 rows)" and default.stderr == ""
    limited = sql(out, query, "--limit", "2")
    assert limited.exit_code == 0, limited.output
    assert limited.stdout.splitlines()[2:] == ["0", "1", "(2 rows, more not shown)"]
    assert "more rows than shown" in limited.stderr and "error" not in limited.stderr
    exact = sql(out, query, "--limit", "5")
    assert exact.stdout.splitlines()[-1] == "(5 rows)" and exact.stderr == ""
    assert sql(out, query, "--limit", "2", "--format", "csv").stdout == "n\n0\n1\n"
    assert len(sql(out, query, "--format", "json").stdout.splitlines()) == 5  # csv and json: all rows by default


def test_csv_and_json_are_written_batch_by_batch(out):
    query = "SELECT n, n % 7 AS r FROM unnest(range(50000)) AS t(n)"
    chunks = list(csv_chunks(run_query(out, query), None))
    assert chunks[0] == "n,r\n" and len(chunks) > 3  # the header, then one chunk per batch as it arrives
    rows = [line.split(",") for chunk in chunks[1:] for line in chunk.splitlines()]
    assert sorted((int(n), int(r)) for n, r in rows) == [(n, n % 7) for n in range(50000)]
    lines = [json.loads(line) for chunk in json_lines(run_query(out, query), 20000) for line in chunk.splitlines()]
    assert len(lines) == 20000 and all(line["r"] == line["n"] % 7 for line in lines)


@pytest.mark.parametrize("query, fragments", [
    ("SELEC 1", ["SQL: ", "ParserError", "SELEC"]),
    ("SELECT nope FROM committed_offsets", ["No field named nope"]),
    ("SELECT * FROM offsets", ["'datafusion.public.offsets' not found", "tables here: committed_offsets, "]),
    ("SELECT 1 / (committed_offset - committed_offset) FROM committed_offsets", ["Divide by zero"]),
    ("SELECT 1; SELECT 2", ["single SQL statement"]),
    ("  ", ["no SQL given"]),
])
def test_bad_sql_is_one_line_and_exit_2(out, query, fragments):
    one_line_error(sql(out, query), *fragments)


def test_a_missing_or_empty_output_folder_is_one_line_and_exit_2(tmp_path):
    one_line_error(sql(tmp_path / "nope", "SELECT 1"), f"--output {tmp_path / 'nope'}: no such directory")
    one_line_error(sql(tmp_path, "SELECT 1"), "no offsetlake tables there", "offsetlake rebuild")


def test_sql_reads_the_newest_complete_run_and_lists_runs(tmp_path):
    first = commit_run(tmp_path, tables((90, 110)))
    commit_run(tmp_path, tables((95, 130)), finish=False)  # killed after its last table, before its run row
    query = ("SELECT o.committed_offset, l.committed_offset AS lag_offset, r.run_id FROM committed_offsets o "
             "JOIN consumer_lag l USING (partition) CROSS JOIN _runs r ORDER BY 1")
    assert sql(tmp_path, query, "--format", "csv").stdout == f"committed_offset,lag_offset,run_id\n90,90,{first}\n" \
                                                             f"110,110,{first}\n"
    third = commit_run(tmp_path, tables((96, 131)))
    assert sql(tmp_path, "SELECT committed_offset FROM committed_offsets ORDER BY 1", "--format", "csv").stdout == \
        "committed_offset\n96\n131\n"
    assert sql(tmp_path, "SELECT run_id FROM _runs ORDER BY finished_at", "--format", "csv").stdout == \
        f"run_id\n{first}\n{third}\n"


def test_the_installed_command_answers_without_a_jvm(out, tmp_path):
    exe = Path(sys.executable).with_name("offsetlake")
    no_java = {"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "no-java"), "HOME": os.environ.get("HOME", "/")}
    started = time.monotonic()
    result = subprocess.run([str(exe), "sql", "--output", str(out), "SELECT count(*) AS n FROM committed_offsets",
                             "--format", "csv"], capture_output=True, text=True, timeout=120, env=no_java)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "n\n2\n"
    assert time.monotonic() - started < 30  # about a second when the machine is idle; a JVM alone takes longer


def test_a_table_the_newest_run_did_not_write_is_labelled_with_the_run_it_comes_from(tmp_path):
    """A run with history as of B, then one with --no-history as of A: readers show offset_commits as of B, and
    each says so (sql on stderr, show beside the table, describe --state below the history)."""
    later, earlier = datetime(2026, 11, 2, tzinfo=timezone.utc), datetime(2026, 11, 1, tzinfo=timezone.utc)
    history = {**tables((90, 110)), "offset_commits": [{"group_id": "g", "topic": "t", "partition": 0,
                                                         "committed_offset": 90, "kind": "commit"}],
               "group_events": [{"group_id": "g", "event": "rebalanced", "generation": 1, "event_time": T}]}
    with_history = commit_run(tmp_path, history, as_of=later)
    commit_run(tmp_path, tables((95, 115)), as_of=earlier)  # --no-history: no history table recorded
    label = (f"offset_commits is as of 2026-11-02T00:00:00Z (run {with_history}): the newest run, as of "
             f"2026-11-01T00:00:00Z, did not write it (--no-history)")
    result = sql(tmp_path, "SELECT count(*) AS n FROM offset_commits")
    assert result.exit_code == 0 and result.stderr.strip() == f"offsetlake: {label}"
    result = sql(tmp_path, "SELECT count(*) AS n FROM committed_offsets")  # the newest run's own: no label
    assert result.exit_code == 0 and result.stderr == ""
    shown = CliRunner().invoke(cli, ["show", "--output", str(tmp_path)], catch_exceptions=False).stdout
    assert f"({label})" in next(line for line in shown.splitlines() if line.startswith("offset_commits:"))
    state = CliRunner().invoke(cli, ["describe", "--output", str(tmp_path), "--group", "g", "--state"])
    assert "group_events is as of 2026-11-02T00:00:00Z" in state.stderr, state.stderr
