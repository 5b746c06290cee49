"""offset_commits rows made in a task (jobs.task_history), on hand-made commits: the same movement as Spark's
window (jobs.history; the sample's whole table is compared in test_partial_reduce), each key finished on one side."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from jobs.partial_reduce import PLAIN_FIELDS
from jobs.lake.tables import arrow_schema
from jobs.task_history import KEY_FIELDS, split_keys, write_history
from offsets_codec import encode_key

SCHEMA = arrow_schema("offset_commits")
T0 = datetime(2026, 11, 20, 23, 59, 58, tzinfo=timezone.utc)
T0_US = int(T0.timestamp() * 1_000_000)


def _key(group: str, version: int = 1, partition: int = 0) -> bytes:
    return encode_key(version, {"group": group, "topic": "t", "partition": partition})


def _commits(rows: list[tuple]) -> pa.Table:
    """(coordinator partition, key, record offset, seconds after T0 or None, committed offset or None)."""
    columns = {name: [] for name, _ in PLAIN_FIELDS}
    for partition, key, offset, seconds, committed in rows:
        for name, value in (("coordinator_partition", partition), ("key", key), ("record_offset", offset),
                            ("source_record_offset", offset),
                            ("record_timestamp", None if seconds is None else T0_US + seconds * 1_000_000),
                            ("producer_id", -1), ("committed_offset", committed), ("leader_epoch", None),
                            ("metadata", None if committed is None else ""),
                            ("commit_timestamp_ms", None if committed is None else 5), ("proven", True)):
            columns[name].append(value)
    return pa.table(columns, schema=pa.schema(PLAIN_FIELDS))


def _keys(rows: list[tuple]) -> pa.Table:
    """(coordinator partition, group, whole)."""
    return pa.table({"coordinator_partition": [r[0] for r in rows], "offset_key": [_key(r[1])[2:] for r in rows],
                     "group_id": [r[1] for r in rows], "topic": ["t"] * len(rows), "partition": [0] * len(rows),
                     "whole": [r[2] for r in rows]}, schema=pa.schema(KEY_FIELDS))


@pytest.mark.parametrize("shared_key", [False, True], ids=["one_partition_a_key", "a_key_in_two_partitions"])
def test_each_commit_gets_its_keys_previous_one_in_log_order(shared_key):
    keys = [(0, "a", False), (0, "w", True)] + ([(1, "a", False)] if shared_key else [])
    commits = _commits([
        (0, _key("a"), 30, 3, 90),             # out of log order in the input: sorted by position, not by row
        (0, _key("a", version=0), 10, 1, 100),  # a v0 key names the same offset key as v1
        (0, _key("w"), 11, 1, 5),               # a `whole` key: Spark's
        (0, _key("a"), 20, None, None),         # a tombstone without a timestamp
        (0, _key("a"), 40, 6, 120),
        (0, _key("nobody"), 12, 1, 1),          # no valid record names it: dropped
        (1, _key("a"), 15, 2, 7),               # another coordinator partition's "a"
    ])
    finished, rest = split_keys(commits, _keys(keys), SCHEMA)
    assert finished.schema == SCHEMA and rest.column_names[1] == "offset_key"
    assert rest.column("offset_key").to_pylist() == [_key("w")[2:]] and rest.column("record_offset").to_pylist() == [11]
    rows = {(r["coordinator_partition"], r["record_offset"]): r for r in finished.to_pylist()}
    assert sorted(rows) == ([(0, 10), (0, 20), (0, 30), (0, 40)] + ([(1, 15)] if shared_key else []))
    got = [(o, rows[0, o]["kind"], rows[0, o]["previous_offset"], rows[0, o]["offset_delta"], rows[0, o]["is_rewind"],
            rows[0, o]["seconds_since_previous"], rows[0, o]["later_records"]) for o in (10, 20, 30, 40)]
    assert got == [(10, "commit", None, None, False, None, 3),
                   (20, "delete", 100, None, False, None, 2),   # no timestamp: no time since
                   (30, "commit", None, None, False, None, 1),  # after a tombstone: nothing to compare with
                   (40, "commit", 90, 30, False, 3.0, 0)]
    assert rows[0, 30]["group_id"] == "a" and rows[0, 30]["commit_date"].isoformat() == "2026-11-21"
    assert rows[0, 10]["commit_date"].isoformat() == "2026-11-20" and rows[0, 20]["commit_date"] is None
    if shared_key:
        assert rows[1, 15]["previous_offset"] is None and rows[1, 15]["later_records"] == 0


def test_transactional_commits_apply_at_their_marker_unless_replaced_or_older():
    """jobs.history's rules, on a key's applied records (record_offset: where applied, source_record_offset: where
    written): a transaction's earlier commit on the key is replaced by its later one; a transactional commit
    applies only if no earlier applied record is newer than it."""
    rows = _commits([(0, _key("a"), 5, 0, 1), (0, _key("a"), 15, 1, 3)])  # plain: at their own positions
    for applied_at, written_at, committed in ((20, 10, 10), (20, 12, 12), (20, 14, 14), (30, 25, 25)):
        rows = pa.concat_tables([rows, _commits([(0, _key("a"), applied_at, 2, committed)]).set_column(
            3, "source_record_offset", pa.array([written_at], pa.int64())).set_column(
            5, "producer_id", pa.array([7], pa.int64()))])
    finished, _ = split_keys(rows, _keys([(0, "a", False)]), SCHEMA)
    got = [(r["record_offset"], r["source_record_offset"], r["committed_offset"], r["previous_offset"])
           for r in sorted(finished.to_pylist(), key=lambda r: r["record_offset"])]
    # (20, 10) and (20, 12) are replaced by (20, 14), their transaction's last commit on the key, which is older
    # than the plain commit at 15 and does not apply; (30, 25) applies.
    assert got == [(5, 5, 1, None), (15, 15, 3, 1), (30, 25, 25, 3)]


def test_a_rewind_is_a_commit_below_the_previous_one():
    finished, _ = split_keys(_commits([(0, _key("a"), 1, 0, 50), (0, _key("a"), 2, 1, 20)]),
                             _keys([(0, "a", False)]), SCHEMA)
    assert finished.column("is_rewind").to_pylist() == [False, True]
    assert finished.column("offset_delta").to_pylist() == [None, -30]


def test_rows_are_written_in_date_folders_as_spark_partitions_them(tmp_path):
    commits = _commits([(0, _key("a"), 1, 0, 1), (0, _key("a"), 2, 3, 2), (0, _key("a"), 3, None, None)])
    finished, _ = split_keys(commits, _keys([(0, "a", False)]), SCHEMA)
    write_history(finished, tmp_path, "part-history-00000")
    folders = sorted(p.parent.name for p in tmp_path.rglob("*.parquet"))
    assert folders == ["commit_date=2026-11-20", "commit_date=2026-11-21", "commit_date=__HIVE_DEFAULT_PARTITION__"]
    assert all(p.name.startswith("part-history-00000") for p in tmp_path.rglob("*.parquet"))
    read = pads.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(read.column("record_offset").to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("ordered", [False, True], ids=["filtered", "recent_rows_first"])
def test_the_rows_group_status_reads_are_in_files_of_their_own(tmp_path, ordered):
    """Each key's last `recent` records (later_records below it) apart: a reader filtering on later_records skips
    the other files by their statistics. split_keys with `recent` puts them first, and they are sliced off."""
    commits = _commits([(0, _key("a"), offset, 0, offset) for offset in range(1, 6)] + [(0, _key("b"), 9, 0, 9)])
    finished, _ = split_keys(commits, _keys([(0, "a", False), (0, "b", False)]), SCHEMA, recent=2 if ordered else None)
    if ordered:
        assert finished.column("later_records").to_pylist()[:3] == [1, 0, 0]
        by_offset = {r["record_offset"]: r for r in finished.to_pylist()}
        assert [by_offset[o]["previous_offset"] for o in (1, 2, 5, 9)] == [None, 1, 4, None]
    write_history(finished, tmp_path, "part-history-00000", recent=2)
    by_file = {p.name: pads.dataset(p, format="parquet").to_table() for p in tmp_path.rglob("*.parquet")}
    recent = [t for name, t in by_file.items() if name.startswith("part-history-00000-recent-")]
    older = [t for name, t in by_file.items() if not name.startswith("part-history-00000-recent-")]
    assert sorted(o for t in recent for o in t.column("record_offset").to_pylist()) == [4, 5, 9]
    assert sorted(o for t in older for o in t.column("record_offset").to_pylist()) == [1, 2, 3]
    assert all(max(t.column("later_records").to_pylist()) < 2 for t in recent)
    assert all(min(t.column("later_records").to_pylist()) >= 2 for t in older)


def test_a_task_whose_keys_are_all_whole_writes_nothing():
    finished, rest = split_keys(_commits([(0, _key("w"), 1, 0, 1), (0, _key("w"), 2, 0, 2)]), _keys([(0, "w", True)]),
                                SCHEMA)
    assert finished.num_rows == 0 and finished.schema == SCHEMA and rest.column("record_offset").to_pylist() == [1, 2]


def test_without_named_keys_every_commit_is_dropped():
    """No valid offset record named any key (every key failed its check): nothing is written, nothing is Spark's."""
    finished, rest = split_keys(_commits([(0, _key("a"), 1, 0, 1), (0, _key("b"), 2, 0, 2)]), _keys([]), SCHEMA)
    assert finished.num_rows == 0 and rest.num_rows == 0 and finished.schema == SCHEMA


def test_rows_are_ordered_by_key_and_position_whatever_their_ranges():
    """One sort of a combined int64 when keys x positions fit (int32 keys must not overflow), two otherwise."""
    from jobs.task_history import _by_key_and_position

    rng = np.random.default_rng(7)
    for key_count, top in ((60_000, 500_000), (3, 1 << 61)):
        key = rng.integers(0, key_count, 5000).astype(np.int32)
        position = rng.choice(top, 5000, replace=False).astype(np.int64)
        assert (_by_key_and_position(key, position) == np.lexsort((position, key))).all()
