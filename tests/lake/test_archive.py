"""rebuild --archive: raw_records across runs, so that the history outlives the cluster's compaction.

Two dumps of one log: the first holds its first part; the second is that log compacted (older records of keys
written again are gone) plus newer records. The archive's runs must give the tables of a plain rebuild of every
record (the union), whatever happened in between: a rerun, a failed run. Then a live source: librdkafka's mock
cluster, whose older records are deleted between the runs (it moves the log start, as retention does; the mock
cannot compact).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_mock import MockCluster, produce_rows
from offsets_log import DAY, HOUR, MINUTE, T0, OffsetsLog, member, compacted, write_dump
from runs import read_tables

import jobs.lake.sink
from jobs.base.storage import Location
from jobs.base.tables import ARCHIVE, ARCHIVE_OFFSETS, arrow_schema
from jobs.config import RebuildConfig
from jobs.lake.runs import delta_table, snapshot
from jobs.pipeline import run
from jobs.sources.archive import merged, offset_ranges
from jobs.sources.kafka_client import OFFSETS_TOPIC

AS_OF = str(T0 + DAY)
COMPARED = ("offset_commits", "committed_offsets", "expired_offsets", "consumer_groups", "group_events",
            "quarantine", "pending_transactions")


def the_log() -> tuple[OffsetsLog, int]:
    """A log over two coordinator partitions, and how many of its rows the first part holds."""
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["orders"], {"orders": [0, 1]})], coordinator=0)
    for i in range(1, 4):
        log.commit("g", "orders", 0, 10 * i, T0 + i * MINUTE, coordinator=0)
    log.commit("g", "orders", 1, 7, T0 + MINUTE, coordinator=0)
    log.commit("s", "payments", 0, 5, T0 + MINUTE, coordinator=1)
    log.commit("s", "payments", 0, 6, T0 + 2 * MINUTE, coordinator=1)
    log.commit("old", "orders", 0, 3, T0 + MINUTE, coordinator=1)
    log.delete_offset("old", "orders", 0, T0 + 5 * MINUTE, coordinator=1)
    first = len(log.rows)
    for i in range(4, 6):
        log.commit("g", "orders", 0, 10 * i, T0 + HOUR + i * MINUTE, coordinator=0)
    log.commit("s", "payments", 0, 9, T0 + HOUR, coordinator=1)
    log.commit("h", "orders", 1, 2, T0 + HOUR, coordinator=1)
    log.group("g", T0 + HOUR, members=[member("m2", ["orders"], {"orders": [0, 1]})], generation=2,
              coordinator=0)
    return log, first


def rebuild(source: str, out: Path, archive: bool = True, **options: Any) -> dict[str, Any]:
    cfg = RebuildConfig.build(source=source, output=str(out), as_of=AS_OF, engine="local", workers=0,
                              archive=archive, **options)
    return run(cfg)


def archived(out: Path) -> list[dict[str, Any]]:
    """raw_records as a reader sees it (the newest complete run's version)."""
    tables = snapshot(out, [ARCHIVE])
    return tables.open(ARCHIVE).to_pyarrow_table().to_pylist() if ARCHIVE in tables.versions else []


def assert_unique(rows: list[dict[str, Any]]) -> None:
    keys = [(r["topic"], r["partition"], r["offset"]) for r in rows]
    assert len(keys) == len(set(keys))


def same_tables(out: Path, expected: dict[str, Any]) -> None:
    found = read_tables(out)
    for table in COMPARED:
        assert found.get(table) == expected.get(table), table


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Any]:
    """The log, its two dumps, and the tables of a plain rebuild of every record."""
    base = tmp_path_factory.mktemp("archive")
    log, first = the_log()
    kept = compacted(log.rows)
    second = [r for r in log.rows[:first] if r in kept] + log.rows[first:]  # the newest records: not cleaned yet
    assert len(second) < len(log.rows)  # the second dump lacks records of the first
    union = write_dump(log.rows, base / "union")
    rebuild(f"parquet:{union}", base / "plain", archive=False)
    return {"log": log, "first": write_dump(log.rows[:first], base / "first"), "second": write_dump(second, base / "second"),
            "records": len(log.rows), "first_records": first, "plain": read_tables(base / "plain"),
            "base": base}


@pytest.fixture(scope="module")
def two_runs(inputs) -> dict[str, Any]:
    out = inputs["base"] / "out"
    one = rebuild(f"parquet:{inputs['first']}", out)
    two = rebuild(f"parquet:{inputs['second']}", out)
    return {"out": out, "one": one, "two": two}


def test_the_second_run_holds_the_records_its_dump_lost_as_a_rebuild_of_every_record_does(inputs, two_runs):
    same_tables(two_runs["out"], inputs["plain"])
    commits = read_tables(two_runs["out"])["offset_commits"]
    assert sorted(r["committed_offset"] for r in commits
                  if (r["group_id"], r["topic"], r["partition"]) == ("g", "orders", 0)) == [10, 20, 30, 40, 50]


def test_raw_records_holds_every_record_once_tagged_with_the_run_that_first_read_it(inputs, two_runs):
    rows = archived(two_runs["out"])
    assert_unique(rows)
    assert len(rows) == inputs["records"]
    runs = {r["first_seen_run"] for r in rows}
    assert runs == {two_runs["one"]["run_id"], two_runs["two"]["run_id"]}
    first = [r for r in rows if r["first_seen_run"] == two_runs["one"]["run_id"]]
    assert len(first) == inputs["first_records"]


def test_the_summary_counts_the_archive(inputs, two_runs):
    one, two = two_runs["one"], two_runs["two"]
    assert (one["records_archived_before"], one["records_new"], one["records_archived_after"]) == \
        (0, inputs["first_records"], inputs["first_records"])
    new = inputs["records"] - inputs["first_records"]
    assert (two["records_archived_before"], two["records_new"], two["records_archived_after"]) == \
        (inputs["first_records"], new, inputs["records"])
    assert two["records_replayed"] == inputs["records"]


def test_a_rerun_of_the_same_dump_appends_nothing(inputs, two_runs, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(two_runs["out"], out)
    again = rebuild(f"parquet:{inputs['second']}", out)
    assert (again["records_new"], again["records_archived_after"]) == (0, inputs["records"])
    assert len(archived(out)) == inputs["records"]
    same_tables(out, inputs["plain"])


def test_without_the_archive_nothing_changes(inputs, tmp_path):
    summary = rebuild(f"parquet:{inputs['second']}", tmp_path / "out", archive=False)
    assert "records_new" not in summary and not (tmp_path / "out" / ARCHIVE).exists()
    commits = read_tables(tmp_path / "out")["offset_commits"]
    assert len(commits) < len(inputs["plain"]["offset_commits"])  # the lost records are not there


def fail_when_recording(monkeypatch) -> None:
    """The run dies after its last table commit (raw_records' append), before it records itself."""
    def refuse(*args, **kwargs):
        raise RuntimeError("stopped before the run is recorded")

    monkeypatch.setattr(jobs.lake.sink, "record_run", refuse)


def test_a_run_that_fails_after_its_append_appends_nothing_and_the_next_run_is_right(inputs, tmp_path,
                                                                                     monkeypatch):
    out = tmp_path / "out"
    rebuild(f"parquet:{inputs['first']}", out)
    with monkeypatch.context() as patched:
        fail_when_recording(patched)
        with pytest.raises(RuntimeError, match="before the run is recorded"):
            rebuild(f"parquet:{inputs['second']}", out)
    assert delta_table(out / ARCHIVE).to_pyarrow_table().num_rows == inputs["records"]  # appended, unrecorded
    assert len(archived(out)) == inputs["first_records"]  # what readers see: the complete run's
    third = rebuild(f"parquet:{inputs['second']}", out)
    assert third["records_archived_before"] == inputs["first_records"]
    rows = archived(out)
    assert_unique(rows)
    assert len(rows) == inputs["records"]
    assert delta_table(out / ARCHIVE).to_pyarrow_table().num_rows == inputs["records"]
    same_tables(out, inputs["plain"])


def test_a_run_killed_right_after_its_append_is_undone_by_the_next_run(inputs, tmp_path):
    import os
    import subprocess
    import sys

    import jobs
    from jobs.base.tables import TABLES
    from jobs.kill_points import KILL_AT

    out = tmp_path / "out"
    rebuild(f"parquet:{inputs['first']}", out)
    command = [sys.executable, "-m", "jobs", "--source", f"parquet:{inputs['second']}", "--output", str(out),
               "--as-of", AS_OF, "--engine", "local", "--workers", "0", "--archive"]
    # raw_records is committed after every other table: its append is commit len(TABLES) + 1.
    moment = f"committed:{len(TABLES) + 1}"
    killed = subprocess.run(command, capture_output=True, text=True, timeout=300, start_new_session=True,
                            cwd=Path(jobs.__file__).parents[1], env={**os.environ, KILL_AT: moment})
    assert killed.returncode == -9, killed.stderr
    assert delta_table(out / ARCHIVE).to_pyarrow_table().num_rows == inputs["records"]  # appended, unrecorded
    assert len(archived(out)) == inputs["first_records"]
    rebuild(f"parquet:{inputs['second']}", out)
    assert delta_table(out / ARCHIVE).to_pyarrow_table().num_rows == inputs["records"]
    assert_unique(archived(out))
    same_tables(out, inputs["plain"])


def test_a_first_run_that_fails_after_its_append_leaves_nothing_archived(inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as patched:
        fail_when_recording(patched)
        with pytest.raises(RuntimeError):
            rebuild(f"parquet:{inputs['first']}", out)
    assert archived(out) == []
    rebuild(f"parquet:{inputs['first']}", out)
    rebuild(f"parquet:{inputs['second']}", out)
    assert_unique(archived(out))
    assert delta_table(out / ARCHIVE).to_pyarrow_table().num_rows == inputs["records"]
    same_tables(out, inputs["plain"])


def test_a_run_that_fails_before_committing_leaves_no_file_behind(inputs, two_runs, tmp_path, monkeypatch):
    import shutil

    import jobs.pipeline
    from jobs.lake.runs import unreferenced_files

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the replay failed")

    out = tmp_path / "out"
    shutil.copytree(two_runs["out"], out)
    log, _ = the_log()
    log.commit("g", "orders", 0, 60, T0 + 2 * HOUR, coordinator=0)
    more = write_dump(log.rows, tmp_path / "more")
    with monkeypatch.context() as patched:
        patched.setattr(jobs.pipeline, "_replay_kernel", fail)
        with pytest.raises(RuntimeError, match="the replay failed"):
            rebuild(f"parquet:{more}", out)
    assert len(archived(out)) == inputs["records"]
    assert rebuild(f"parquet:{more}", out)["records_new"] == 1
    assert unreferenced_files(out) == []
    assert len(archived(out)) == inputs["records"] + 1


def test_records_read_twice_in_one_dump_are_archived_once(inputs, tmp_path):
    rows = inputs["log"].rows
    doubled = write_dump(rows + rows[:3], tmp_path / "doubled")
    summary = rebuild(f"parquet:{doubled}", tmp_path / "out")
    assert summary["duplicate_records"] == 3 and summary["records_new"] == len(rows)
    assert_unique(archived(tmp_path / "out"))
    same_tables(tmp_path / "out", inputs["plain"])


def test_copies_that_differ_are_quarantined_in_every_run_and_never_archived(inputs, tmp_path):
    rows = inputs["log"].rows
    other = rows[1][:1] + (rows[1][1] + b"!",) + rows[1][2:]  # another value at the same offset
    conflicting = write_dump(rows + [other], tmp_path / "conflicting")
    out = tmp_path / "out"
    for new in (len(rows) - 1, 0):
        summary = rebuild(f"parquet:{conflicting}", out)
        assert (summary["conflicting_records"], summary["records_new"]) == (2, new)
    assert (rows[1][3], rows[1][4]) not in {(r["partition"], r["offset"]) for r in archived(out)}
    assert len(read_tables(out)["quarantine"]) == 2


def test_a_log_dir_is_read_after_the_archived_end(inputs, tmp_path):
    log, first = inputs["log"], inputs["first_records"]
    one, two = OffsetsLog(), OffsetsLog()
    one.rows, two.rows = log.rows[:first], log.rows
    one.write_segments(tmp_path / "logs-1", segment_records=3)
    two.write_segments(tmp_path / "logs-2", segment_records=3)
    out = tmp_path / "out"
    rebuild(f"segments:{tmp_path / 'logs-1'}", out)
    summary = rebuild(f"segments:{tmp_path / 'logs-2'}", out)
    assert summary["records_new"] == len(log.rows) - first
    assert summary["records_read"] < len(log.rows)  # whole segments at or below the archived end are skipped
    assert_unique(archived(out))
    same_tables(out, inputs["plain"])


def test_a_daily_run_from_a_cluster_that_lost_older_records_still_shows_them(inputs, tmp_path):
    log, first = inputs["log"], inputs["first_records"]
    mock = MockCluster()
    try:
        mock.create_topic(OFFSETS_TOPIC, 2)
        produce_rows(mock.bootstrap, OFFSETS_TOPIC, log.rows[:first])
        source = f"kafka:{mock.bootstrap}"
        out = tmp_path / "out"
        one = rebuild(source, out, kafka_timeout=10)
        assert one["records_read"] == one["records_new"] == first
        produce_rows(mock.bootstrap, OFFSETS_TOPIC, log.rows[first:])
        ends = {p: 1 + max(r[4] for r in log.rows[:first] if r[3] == p) for p in (0, 1)}
        for partition, end in ends.items():
            mock.delete_records(OFFSETS_TOPIC, partition, end)  # every record of the first run is gone
        two = rebuild(source, out, kafka_timeout=10)
        plain = rebuild(source, tmp_path / "plain", archive=False, kafka_timeout=10)
    finally:
        mock.close()
    new = len(log.rows) - first
    assert two["records_read"] == two["records_new"] == new  # only what lies after the archived end
    assert (two["records_archived_before"], two["records_archived_after"]) == (first, len(log.rows))
    assert plain["records_read"] == new
    lost = {(r["group_id"], r["committed_offset"]) for r in read_tables(tmp_path / "plain")["offset_commits"]}
    kept = {(r["group_id"], r["committed_offset"]) for r in read_tables(out)["offset_commits"]}
    assert ("g", 10) in kept and ("g", 10) not in lost and ("old", 3) in kept
    same_tables(out, inputs["plain"])


def test_without_the_history_the_archive_is_folded_like_the_log(inputs, tmp_path):
    out = tmp_path / "out"
    rebuild(f"parquet:{inputs['first']}", out, no_history=True)
    summary = rebuild(f"parquet:{inputs['second']}", out, no_history=True)
    assert summary["records_archived_after"] == inputs["records"]
    found = read_tables(out)
    for table in ("committed_offsets", "expired_offsets", "consumer_groups"):
        assert found[table] == inputs["plain"][table], table


def test_the_command_takes_archive(inputs, tmp_path):
    import json

    from click.testing import CliRunner

    from jobs.cli import cli

    args = ["rebuild", "--source", f"parquet:{inputs['first']}", "--output", str(tmp_path / "out"), "--as-of", AS_OF,
            "--engine", "local", "--workers", "1", "--archive"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["records_new"] == summary["records_archived_after"] == inputs["first_records"]
    counted = CliRunner().invoke(cli, ["sql", "--output", str(tmp_path / "out"), "--format", "csv",
                                       "SELECT count(DISTINCT offset * 100 + partition) AS n FROM raw_records"],
                                 catch_exceptions=False)
    assert counted.exit_code == 0, counted.stderr
    assert counted.stdout.strip().splitlines()[-1] == str(inputs["first_records"])


@pytest.mark.parametrize("source", ["parquet", "segments"])
def test_the_spark_runner_archives_as_the_local_one(spark, inputs, tmp_path, source):
    log, first = inputs["log"], inputs["first_records"]
    if source == "parquet":
        sources = [f"parquet:{inputs['first']}", f"parquet:{inputs['second']}"]
    else:
        one, two = OffsetsLog(), OffsetsLog()
        one.rows, two.rows = log.rows[:first], log.rows
        one.write_segments(tmp_path / "logs-1", segment_records=3)
        two.write_segments(tmp_path / "logs-2", segment_records=3)
        sources = [f"segments:{tmp_path / 'logs-1'}", f"segments:{tmp_path / 'logs-2'}"]
    out = tmp_path / "out"
    for name in sources:
        summary = run(RebuildConfig.build(source=name, output=str(out), as_of=AS_OF, engine="spark", archive=True),
                      spark=spark)
    assert summary["records_new"] == inputs["records"] - first
    rows = archived(out)
    assert_unique(rows)
    assert len(rows) == inputs["records"]
    same_tables(out, inputs["plain"])


def test_share_state_records_are_archived_beside_the_offsets_topics_of_the_same_numbers(tmp_path):
    """`__share_group_state-0` and `__consumer_offsets-0` both start at offset 0: two records, each archived, and
    the next run's anti-join tells them apart."""
    import base64

    orders = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
    log = OffsetsLog()
    log.commit("g", "orders", 0, 5, T0 + MINUTE, coordinator=0)
    log.share_snapshot("sg", orders, 0, T0 + MINUTE, start=10, batches=[(10, 12, 0, 1)], coordinator=0)
    first = len(log.rows)
    log.share_update("sg", orders, 0, T0 + 2 * MINUTE, start=11, coordinator=0)
    out = tmp_path / "out"
    one = rebuild(f"parquet:{write_dump(log.rows[:first], tmp_path / 'one')}", out)
    two = rebuild(f"parquet:{write_dump(log.rows, tmp_path / 'two')}", out)
    rows = archived(out)
    assert_unique(rows)
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == [
        (OFFSETS_TOPIC, 0, 0), ("__share_group_state", 0, 0), ("__share_group_state", 0, 1)]
    assert (one["records_new"], two["records_new"], two["records_replayed"]) == (2, 1, 3)
    state = read_tables(out)["share_partition_state"]
    assert [(r["group_id"], r["start_offset"], r["updates_since_snapshot"]) for r in state] == [("sg", 11, 1)]


def archived_offsets(out: Path) -> list[dict[str, Any]]:
    """_archive_offsets at the version the newest complete run recorded."""
    run = snapshot(out, []).run
    version = {t["table"]: t["version"] for t in run["tables"]}[ARCHIVE_OFFSETS]
    return delta_table(out / ARCHIVE_OFFSETS, version).to_pyarrow_table().sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("first_offset", "ascending")]).to_pylist()


def ranges_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    table = pa.Table.from_pylist(rows, schema=arrow_schema(ARCHIVE))
    return offset_ranges(table.column("topic"), table.column("partition"), table.column("offset")).to_pylist()


def test_each_run_leaves_the_archived_offsets_as_ranges(inputs, two_runs, tmp_path):
    """_archive_offsets holds what raw_records holds, as ranges, after each run; the conflicting copies no run
    archives are in neither."""
    assert archived_offsets(two_runs["out"]) == ranges_of(archived(two_runs["out"]))
    rows = inputs["log"].rows
    other = rows[1][:1] + (rows[1][1] + b"!",) + rows[1][2:]
    out = tmp_path / "out"
    rebuild(f"parquet:{write_dump(rows + [other] + rows[:2], tmp_path / 'copies')}", out)
    assert archived_offsets(out) == ranges_of(archived(out))
    assert len(archived_offsets(out)) > 1  # the offset of the copies that differ is a hole


def test_an_archive_without_its_offsets_table_is_read_from_raw_records(two_runs, monkeypatch):
    """An output whose newest run left no _archive_offsets (an older offsetlake's): the archive's offsets come from
    raw_records itself, the same."""
    from jobs.sources import archive

    newest = snapshot(Location.parse(two_runs["out"]), [ARCHIVE])
    kept = archive.Archive.open(newest, exact=True)
    monkeypatch.setattr(archive, "ARCHIVE_OFFSETS", "_not_recorded")
    scanned = archive.Archive.open(newest, exact=True)
    assert (scanned.records, scanned.ends, scanned.ranges) == (kept.records, kept.ends, kept.ranges)
    assert {k: [list(a) for a in v] for k, v in scanned.offsets.items()} == \
        {k: [list(a) for a in v] for k, v in kept.offsets.items()}


@settings(max_examples=60, deadline=None)
@given(offsets=st.lists(st.tuples(st.sampled_from(["__consumer_offsets", "__share_group_state"]), st.integers(0, 2),
                                  st.integers(0, 40)), max_size=80),
       cut=st.integers(0, 80))
def test_ranges_of_parts_merge_into_the_ranges_of_the_whole(offsets, cut):
    def ranges(part: list[tuple]) -> pa.Table:
        t, p, o = zip(*part) if part else ((), (), ())
        return offset_ranges(pa.array(t, pa.string()), pa.array(p, pa.int32()), pa.array(o, pa.int64()))

    whole = merged([ranges(offsets)])
    assert merged([ranges(offsets[:cut]), ranges(offsets[cut:])]).equals(whole)
    held = {(r["topic"], r["partition"], o) for r in whole.to_pylist()
            for o in range(r["first_offset"], r["last_offset"] + 1)}
    assert held == set(offsets)
