"""Runs (jobs/lake/runs.py), without Spark: readers see every table of the newest complete run, whatever point a
later run was stopped at; tables written before runs were recorded are read as before."""
from __future__ import annotations

import pytest
from delta_runs import commit_run, write_table
from deltalake import DeltaTable

from jobs.base.tables import TABLES
from jobs.lake import runs
from jobs.lake.runs import committed_version, finished_runs, run_id_of, snapshot, spark_user_metadata

READ = ("committed_offsets", "consumer_lag", "consumer_groups")


def offsets(committed: int) -> dict[str, list[dict]]:
    """One run's three tables, all saying the same committed offset."""
    return {
        "committed_offsets": [{"group_id": "g", "topic": "t", "partition": 0, "committed_offset": committed}],
        "consumer_lag": [{"group_id": "g", "topic": "t", "partition": 0, "committed_offset": committed,
                          "log_end_offset": 100, "lag": 100 - committed}],
        "consumer_groups": [{"group_id": "g", "offset_count": committed}],
    }


def seen(out) -> set[int]:
    """The committed offsets the three tables show through a snapshot: one value when they are consistent."""
    tables = snapshot(out, READ)
    values = set()
    for table, column in (("committed_offsets", "committed_offset"), ("consumer_lag", "committed_offset"),
                          ("consumer_groups", "offset_count")):
        values |= set(tables.open(table).to_pyarrow_table().column(column).to_pylist())
    return values


@pytest.mark.parametrize("committed_tables", [1, 2, 3])
def test_a_run_stopped_after_any_table_commit_is_not_seen(tmp_path, committed_tables):
    first = commit_run(tmp_path, offsets(10))
    second = offsets(20)
    commit_run(tmp_path, dict(list(second.items())[:committed_tables]), finish=False)
    assert DeltaTable(str(tmp_path / "committed_offsets")).version() == 1  # the newest version is the new one
    assert seen(tmp_path) == {10}
    assert snapshot(tmp_path, READ).run["run_id"] == first
    third = commit_run(tmp_path, offsets(30))
    assert seen(tmp_path) == {30}
    assert snapshot(tmp_path, READ).run["run_id"] == third
    assert [r["run_id"] for r in finished_runs(tmp_path)] == [first, third]


def test_the_run_row_records_every_table_version_and_the_run(tmp_path):
    first = commit_run(tmp_path, offsets(10))
    second = commit_run(tmp_path, offsets(20))
    [_, run] = finished_runs(tmp_path)
    assert run["run_id"] == second and run["source"] == "parquet:/test" and run["delta_engine"] == "delta-rs"
    assert run["as_of"].isoformat() == "2026-11-01T08:00:00"  # naive UTC
    assert run["tables"] == [{"table": t, "version": 1} for t in READ]
    assert [run_id_of(c) for c in DeltaTable(str(tmp_path / "consumer_lag")).history()] == [second, first]


def test_tables_written_before_runs_were_recorded_are_read_at_their_newest_version(tmp_path):
    for committed in (1, 2):  # an older offsetlake: no run tags, no _runs
        for table, rows in offsets(committed).items():
            write_table(tmp_path, table, rows)
    assert seen(tmp_path) == {2} and snapshot(tmp_path, READ).run is None
    # The first run of a newer offsetlake is stopped midway: its commits belong to no complete run.
    commit_run(tmp_path, {**offsets(3), "segment_errors": []}, finish=False)
    assert seen(tmp_path) == {2}
    assert "segment_errors" not in snapshot(tmp_path, [*READ, "segment_errors"]).versions  # only that run wrote it
    commit_run(tmp_path, offsets(4))
    assert seen(tmp_path) == {4}


def test_a_table_the_newest_run_did_not_record_is_read_at_its_newest_finished_version(tmp_path):
    write_table(tmp_path, "segment_errors", [{"file": "a"}])  # no run wrote it
    commit_run(tmp_path, offsets(1))
    assert snapshot(tmp_path, [*READ, "segment_errors"]).versions["segment_errors"] == 0
    commit_run(tmp_path, {"segment_errors": [{"file": "b"}]}, finish=False)
    assert snapshot(tmp_path, [*READ, "segment_errors"]).versions["segment_errors"] == 0
    assert "quarantine" not in snapshot(tmp_path, TABLES).versions  # never written: absent, not an error


def test_a_run_finds_its_own_commit_when_another_writer_committed_after_it(tmp_path):
    first = commit_run(tmp_path, {"committed_offsets": []}, finish=False)
    commit_run(tmp_path, {"committed_offsets": []}, finish=False)
    assert committed_version(tmp_path / "committed_offsets", first) == 0
    with pytest.raises(RuntimeError, match="no commit of run nope"):
        committed_version(tmp_path / "committed_offsets", "nope")


def test_spark_commits_carry_the_run_in_user_metadata():
    assert run_id_of({"userMetadata": spark_user_metadata("abc"), "version": 3}) == "abc"
    assert run_id_of({"userMetadata": "someone else's"}) is None
    assert run_id_of({"offsetlake.run_id": "abc"}) == "abc"


def test_the_runs_table_is_compacted_and_keeps_every_run(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "RUNS_FILES_BEFORE_COMPACTION", 3)
    ids = [commit_run(tmp_path, {"committed_offsets": []}) for _ in range(5)]
    assert len(DeltaTable(str(tmp_path / "_runs")).file_uris()) <= 3
    assert [r["run_id"] for r in finished_runs(tmp_path)] == ids
    assert snapshot(tmp_path, ["committed_offsets"]).versions == {"committed_offsets": 4}
