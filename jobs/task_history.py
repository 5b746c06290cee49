"""offset_commits rows made inside a source task, in Arrow, for the keys whose every applied record it holds.

A task of a large dump (jobs.sources.reduced_dump) reads every offset record of its share of the offset keys that
it can read (jobs.partial_reduce.readable_records: plain and transactional, a tombstone or a value
jobs.arrow_check proves) and every transaction marker, so it holds each of its keys' applied records whole, a
transactional commit at its COMMIT marker (jobs.partial_reduce.applied). For a key with no other applied record
(no value only the Python codec proves: the key is not `whole` in jobs.history.offset_keys) those are its
history: sorted by application order, the same rules for transactional commits, each row's previous offset, the
time since it and the key's records after it are the same window jobs.history computes in Spark, here with
numpy, and the task writes the rows as offset_commits files itself. The `whole` keys' records go back to Spark,
which merges them with the records kept whole. Each key is finished on one side only.

No Spark import: pyarrow and numpy, run in a task's Python worker.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from jobs.partial_reduce import OFFSET_KEY_PREFIXES, TIMESTAMP, offset_keys

# The named offset keys a task receives (jobs.history.offset_keys).
KEY_FIELDS = (("coordinator_partition", pa.int32()), ("offset_key", pa.binary()), ("group_id", pa.string()),
              ("topic", pa.string()), ("partition", pa.int32()), ("whole", pa.bool_()))
# Commit timestamps Spark can hold (jobs.types.ms_to_timestamp): others are null there, and here.
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999
PARTITION = "commit_date"


def split_keys(commits: pa.Table, keys: pa.Table, schema: pa.Schema, applied: np.ndarray | None = None,
               recent: int | None = None) -> tuple[pa.Table, pa.Table]:
    """(`schema`'s rows for the commits of keys that are not `whole`, the commits of the `whole` keys).

    `commits`: PLAIN_FIELDS, every applied readable record of their keys up to as_of (jobs.partial_reduce.applied);
    `keys`: KEY_FIELDS; `applied`: which commits the coordinator applied (default: all). The commits of the
    `whole` keys are given as Spark reads them: COMMIT_FIELDS. A commit whose key is not among `keys` is
    dropped, as Spark drops a key no valid record names. `recent`: the rows of each key's last `recent` records
    come first (write_history then writes them apart without a filter)."""
    key = _key_index(commits, keys)
    named = key >= 0
    if applied is not None:
        named &= applied
    whole = np.append(keys.column("whole").to_numpy(zero_copy_only=False), False)[key]  # -1: the appended False
    whole &= named
    rest = commits.take(np.flatnonzero(whole))  # few rows: a take, not a filter of every column
    rest = rest.set_column(1, "offset_key", offset_keys(rest.column("key")))
    rows = np.flatnonzero(named & ~whole)
    return _history(commits, rows, key[rows], keys, schema, recent), rest


def _applies(key: np.ndarray, position: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per row, jobs.history's rules for transactional commits, in application order per key (record_offset,
    then source_record_offset): a commit followed by one at the same position (the same transaction's later
    commit on the key) was replaced before it applied; a commit applies only when every earlier record of its
    key is older than it. Plain records always apply."""
    result = np.ones(len(key), bool)
    moved = position != source  # transactional commits: only their keys' rows can be ruled out
    if not moved.any():
        return result
    has_moved = np.zeros(int(key.max()) + 1, bool)
    has_moved[key[moved]] = True
    ruled = np.flatnonzero(has_moved[key])
    result[ruled] = _applies_on(key[ruled], position[ruled], source[ruled])
    return result


def _applies_on(key: np.ndarray, position: np.ndarray, source: np.ndarray) -> np.ndarray:
    n = len(key)
    order = np.lexsort((source, position, key))
    key, position, source = key[order], position[order], source[order]
    same_key = np.zeros(n, bool)  # the row follows another of its key
    same_key[1:] = key[1:] == key[:-1]
    superseded = np.zeros(n, bool)
    superseded[:-1] = same_key[1:] & (position[1:] == position[:-1])
    # Each row's newest source position so far on its key: a running maximum that restarts with each key, in one
    # pass when (keys x the positions' range) fits in int64, as it does for any real log; key by key otherwise.
    starts = np.flatnonzero(~same_key)
    ends = np.append(starts[1:], n)
    low, width = int(source.min()), int(source.max() - source.min()) + 1
    if len(starts) * width < 1 << 62:
        run = np.repeat(np.arange(len(starts), dtype=np.int64), ends - starts) * width
        newest = np.maximum.accumulate(run + (source - low)) - run + low
    else:
        newest = np.concatenate([np.maximum.accumulate(source[a:b]) for a, b in zip(starts, ends)])
    newest_before = np.empty(n, np.int64)
    newest_before[1:] = newest[:-1]
    applies = ~superseded & (~same_key | (newest_before < source))
    result = np.empty(n, bool)
    result[order] = applies
    return result


def _key_index(commits: pa.Table, keys: pa.Table) -> np.ndarray:
    """Per commit, the row of `keys` naming its (coordinator partition, key); -1 where none does."""
    partition = commits.column("coordinator_partition").to_numpy()
    if len(pc.unique(keys.column("offset_key"))) < keys.num_rows:  # a key in two coordinator partitions
        named = keys.select(["coordinator_partition", "offset_key"]).append_column(
            "key_index", pa.array(np.arange(keys.num_rows)))
        rows = pa.table({"coordinator_partition": commits.column("coordinator_partition"),
                         "offset_key": offset_keys(commits.column("key")), "row": np.arange(commits.num_rows)})
        found = rows.join(named, ["coordinator_partition", "offset_key"], join_type="inner", use_threads=False)
        index = np.full(commits.num_rows, -1)
        index[found.column("row").to_numpy()] = found.column("key_index").to_numpy()
        return index
    # Each offset key once: look the record's whole key up, in both key types' spellings (the same offset key).
    spelled = pa.array([prefix + k for prefix in OFFSET_KEY_PREFIXES for k in keys.column("offset_key").to_pylist()],
                       pa.binary())
    found = pc.fill_null(pc.index_in(commits.column("key"), value_set=spelled), -1).to_numpy()
    index = np.where(found >= 0, found % max(keys.num_rows, 1), -1)
    partitions = np.append(keys.column("coordinator_partition").to_numpy(), -1)  # -1: the appended "none"
    return np.where(partitions[index] == partition, index, -1)


def _history(commits: pa.Table, rows: np.ndarray, key: np.ndarray, keys: pa.Table, schema: pa.Schema,
             recent: int | None) -> pa.Table:
    """offset_commits rows for `commits`' rows `rows` (whose rows of `keys` are `key`) that apply (`_applies`), in
    that order (those with fewer than `recent` later records first, when given): each commit with its key's
    previous one (in log order), the movement since, and the key's records after it
    (jobs.history.offset_commits)."""
    position = _numbers(commits, "record_offset")[rows]
    source = _numbers(commits, "source_record_offset")[rows]
    keep = _applies(key, position, source)
    rows, key, position = rows[keep], key[keep], position[keep]
    n = len(rows)
    # Only positions are sorted: the rows stay in the order they came in (a sequential copy of each column), and
    # each row looks its previous one up.
    order = _by_key_and_position(key, position)
    follows = np.zeros(n, bool)  # in `order`: the row follows another of its key
    follows[1:] = key[order[1:]] == key[order[:-1]]
    before = np.full(n, -1)
    before[order[1:][follows[1:]]] = order[:-1][follows[1:]]
    starts = np.flatnonzero(~follows)
    ends = np.append(starts, n)[1:]
    later = np.empty(n, np.int64)
    later[order] = np.repeat(ends, ends - starts) - np.arange(n) - 1
    if recent is not None:
        first = np.concatenate([np.flatnonzero(later < recent), np.flatnonzero(later >= recent)])
        moved_to = np.empty(n, np.int64)
        moved_to[first] = np.arange(n)
        rows, key, later, before = rows[first], key[first], later[first], before[first]
        before = np.where(before >= 0, moved_to[before], -1)
    has_before = before >= 0
    taken = commits.drop_columns(["key"]).take(rows)

    def shifted(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The value of the row's previous one, and where there is one."""
        return values[before], valid[before] & has_before

    offset_column = taken.column("committed_offset")
    has_offset = _valid(offset_column)
    offset = _numbers(taken, "committed_offset")
    previous, has_previous = shifted(offset, has_offset)
    stamp = taken.column("record_timestamp")
    has_stamp = _valid(stamp)
    seconds = pc.cast(stamp, pa.int64()).fill_null(0).to_numpy().astype(np.float64) / 1e6
    seconds_before, has_stamp_before = shifted(seconds, has_stamp)
    commit_ms = _numbers(taken, "commit_timestamp_ms")
    in_range = _valid(taken.column("commit_timestamp_ms")) & (commit_ms >= _MIN_MS) & (commit_ms <= _MAX_MS)
    both = has_offset & has_previous  # a commit after a commit: a movement
    named = pa.array(key)
    values = {
        "group_id": pc.take(keys.column("group_id"), named),
        "topic": pc.take(keys.column("topic"), named),
        "partition": pc.take(keys.column("partition"), named),
        "kind": pc.if_else(pa.array(has_offset), "commit", "delete"),
        "committed_offset": offset_column,
        "previous_offset": pa.array(previous, pa.int64(), mask=~has_previous),
        "offset_delta": pa.array(offset - previous, pa.int64(), mask=~both),
        "commit_timestamp": pa.array(np.where(in_range, commit_ms, 0) * 1000, pa.int64(), mask=~in_range
                                     ).cast(TIMESTAMP),
        "record_timestamp": stamp,
        "seconds_since_previous": pa.array(seconds - seconds_before, pa.float64(),
                                           mask=~(has_previous & has_stamp & has_stamp_before)),
        "is_rewind": pa.array(both & (offset < previous)),
        "leader_epoch": taken.column("leader_epoch"),
        "metadata": taken.column("metadata"),
        "producer_id": taken.column("producer_id"),
        "coordinator_partition": taken.column("coordinator_partition"),
        "record_offset": taken.column("record_offset"),
        PARTITION: pc.cast(stamp, pa.date32()),
        "source_record_offset": taken.column("source_record_offset"),
        "later_records": pa.array(later),
    }
    return pa.table([values[f.name] for f in schema], schema=schema)


def _numbers(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as int64 numpy, 0 where null."""
    return np.asarray(pc.fill_null(table.column(name), 0).to_numpy(), dtype=np.int64)


def _valid(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _by_key_and_position(key: np.ndarray, position: np.ndarray) -> np.ndarray:
    """The order of rows by key, then position: one sort of a single int64 when (keys x the positions' range)
    fits in it, as it does for any real log; two otherwise."""
    if not len(key):
        return np.zeros(0, np.int64)
    low, width = int(position.min()), int(position.max() - position.min()) + 1
    if (int(key.max()) + 1) * width < 1 << 62:
        return np.argsort(key.astype(np.int64) * width + (position - low), kind="stable")
    return np.lexsort((position, key))


def write_history(rows: pa.Table, out: Path, name: str, recent: int | None = None) -> None:
    """`rows` as Parquet files under `out`, in one folder per commit date as Spark lays out a partitioned table
    (`commit_date=2026-11-20`, a null date in Spark's null folder); file names start with `name`.

    `recent`: each key's last `recent` records (later_records below it: what group_status reads, jobs.status)
    go to files of their own, so a reader filtering on later_records skips the other files by their statistics;
    when they come first (split_keys with `recent`), they are sliced off, not filtered."""
    if not rows.num_rows:
        return
    days = len(pc.unique(rows.column(PARTITION)))
    partitioning = pads.partitioning(pa.schema([rows.schema.field(PARTITION)]), flavor="hive")
    # Dictionaries for the strings only: for numbers they cost more to build than they save.
    options = pads.ParquetFileFormat().make_write_options(
        use_dictionary=[f.name for f in rows.schema if pa.types.is_string(f.type)])
    parts = [(name, rows)]
    if recent is not None:
        is_recent = pc.less(rows.column("later_records"), recent).to_numpy(zero_copy_only=False)
        first = int(is_recent.sum())
        if is_recent[:first].all():
            parts = [(f"{name}-recent", rows.slice(0, first)), (name, rows.slice(first))]
        else:
            parts = [(f"{name}-recent", rows.filter(pa.array(is_recent))), (name, rows.filter(pa.array(~is_recent)))]
    for basename, part in parts:
        if part.num_rows:
            pads.write_dataset(part, out, format="parquet", basename_template=f"{basename}-{{i}}.parquet",
                               partitioning=partitioning, existing_data_behavior="overwrite_or_ignore",
                               max_partitions=days + 1, use_threads=False, file_options=options)
