"""The log's reduction (jobs.reduce), begun inside a source task: Arrow batches in, far fewer Arrow batches out.

A task that reads its share of the log as Arrow batches (a local Parquet dump: jobs.sources.reduced_dump) folds
it before Spark sees a row: per coordinator partition and key, only the newest reducible plain commit is kept,
with how many records it stands for; every other record passes whole. The task then checks what it keeps, as
jobs.records.check would (`checked`: Arrow where it proves the record, the Python codec elsewhere), and Spark
finishes the reduction across tasks (jobs.reduce.combine_partials). What "plain" and "reducible" mean is
jobs.reduce's rule; here it is read with Arrow kernels and jobs.arrow_check, which proves no more than the
codec accepts, so a record that is folded away is one the check would have passed. `plain_commits` gives the
history (jobs.history) exactly the records the reduction folds, decoded (jobs.task_history); every other offset
record reaches it through the reduced log.

No Spark import: the functions take and give pyarrow data, and run in a task's Python worker.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.arrow_check import proven, read
from jobs.record_check import verdicts
from offsets_codec import REGISTRY
from offsets_codec.registry import OFFSET_COMMIT_TYPES
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

_VALUE_LAYOUT = REGISTRY[OFFSET_COMMIT_TYPES[0]].value
_KEY_LAYOUT = REGISTRY[OFFSET_COMMIT_TYPES[0]].key
# Both offset-commit key types are read as the key layout's one version (their first two bytes are the type).
_KEY_HEADS = {t: _KEY_LAYOUT.valid.lowest for t in OFFSET_COMMIT_TYPES}
# The first two bytes of an offset-commit key: its type.
OFFSET_KEY_PREFIXES = tuple(t.to_bytes(2, "big", signed=True) for t in OFFSET_COMMIT_TYPES)
TIMESTAMP = pa.timestamp("us", tz="UTC")
# What a task adds to each record (jobs.reduce.reduce_log's columns).
PARTIAL_FIELDS = (("records", pa.int64()), ("newest_timestamp", TIMESTAMP), ("after_as_of", pa.bool_()),
                  ("reduced", pa.bool_()))
# The check's columns (jobs.records.CHECK_COLUMNS), as a task gives them.
CHECK_FIELDS = (("record_type", pa.int16()), ("group_id", pa.string()), ("error", pa.string()))
GROUP = ["partition", "key", "after_as_of"]
# Reducible rows held before they are folded: bounds a task's memory by the number of keys, not the log.
FOLD_ROWS = 1 << 20


def _column(batch: pa.Table, name: str) -> pa.ChunkedArray | None:
    return batch.column(name) if name in batch.column_names else None


def plain(batch: pa.Table) -> np.ndarray:
    """Per record: a plain offset commit or tombstone (offset-commit key type, not a control record, no producer)
    at a known position."""
    head = pc.binary_slice(batch.column("key"), 0, 2)
    mask = pc.fill_null(pc.is_in(head, value_set=pa.array(OFFSET_KEY_PREFIXES, pa.binary())), False)
    control = _column(batch, "is_control")
    if control is not None:
        mask = pc.and_(mask, pc.invert(pc.fill_null(control, False)))
    producer = _column(batch, "producer_id")
    if producer is not None:
        mask = pc.and_(mask, pc.equal(pc.fill_null(producer, NO_PRODUCER), NO_PRODUCER))
    for position in ("partition", "offset"):
        mask = pc.and_(mask, pc.is_valid(batch.column(position)))
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def reducible(batch: pa.Table) -> np.ndarray:
    """Per record: `plain`, and its value is null or proven valid (jobs.arrow_check)."""
    rows = plain(batch)
    if not rows.any():
        return rows
    values = batch.column("value")
    return rows & (_is_null(values) | proven(values, _VALUE_LAYOUT))


def _is_null(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _late(batch: pa.Table, as_of_us: int | None) -> pa.Array | pa.ChunkedArray:
    if as_of_us is None:
        return pa.array(np.zeros(batch.num_rows, bool))
    return pc.fill_null(pc.greater(batch.column("timestamp"), pa.scalar(as_of_us, TIMESTAMP)), False)


def _with_partial(batch: pa.Table, late: pa.ChunkedArray | pa.Array, reduced: bool) -> pa.Table:
    n = batch.num_rows
    return (batch.append_column("records", pa.array(np.ones(n, np.int64)))
            .append_column("newest_timestamp", batch.column("timestamp"))
            .append_column("after_as_of", late)
            .append_column("reduced", pa.array(np.full(n, reduced))))


def _fold(tables: list[pa.Table]) -> pa.Table:
    """One row per (partition, key, after_as_of): the newest record, standing for all of them."""
    rows = pa.concat_tables(tables)
    newest = rows.group_by(GROUP, use_threads=False).aggregate(
        [("offset", "max"), ("records", "sum"), ("newest_timestamp", "max")])
    newest = newest.select(["partition", "offset_max", "records_sum", "newest_timestamp_max"]).rename_columns(
        ["partition", "offset", "records", "newest_timestamp"])
    winners = rows.drop_columns(["records", "newest_timestamp"]).join(
        newest, ["partition", "offset"], join_type="inner", use_threads=False)
    return winners.select(rows.column_names)


def checked(batch: pa.Table) -> pa.Table:
    """`batch` plus CHECK_FIELDS, as jobs.records.check gives them: an offset commit whose key and value (or
    tombstone) jobs.arrow_check proves is read here; every other record by the Python codec (jobs.record_check),
    except control records, whose columns stay null (Spark reads a marker's key: jobs.records.control_error)."""
    keys, values = batch.column("key").combine_chunks(), batch.column("value").combine_chunks()
    key = read(keys, _KEY_LAYOUT, ("group",), heads=_KEY_HEADS)
    control = _column(batch, "is_control")
    control = (np.zeros(batch.num_rows, bool) if control is None
               else np.asarray(pc.fill_null(control, False).to_numpy(zero_copy_only=False), dtype=bool))
    native = key.ok & (_is_null(values) | proven(values, _VALUE_LAYOUT)) & ~control
    head = pc.binary_slice(keys, 0, 2)
    types = np.zeros(batch.num_rows, np.int16)
    for record_type, prefix in zip(OFFSET_COMMIT_TYPES, OFFSET_KEY_PREFIXES):  # a proven key's type
        types[np.asarray(pc.fill_null(pc.equal(head, pa.scalar(prefix, pa.binary())), False))] = record_type
    columns = [pa.array(types, mask=~native), pc.if_else(pa.array(native), key.fields["group"], None),
               pa.nulls(batch.num_rows, pa.string())]
    rest = np.flatnonzero(~native & ~control)
    if len(rest):  # the codec's verdicts, null where native code gave them
        columns = [pc.coalesce(ours, theirs) for ours, theirs in zip(columns, verdicts(keys, values, pa.array(rest)))]
    for (name, _), column in zip(CHECK_FIELDS, columns):
        batch = batch.append_column(name, column)
    return batch


def reduce_batches(batches: Iterable[pa.Table], as_of_us: int | None) -> Iterator[pa.Table]:
    """`batches` (contract columns, timestamp as TIMESTAMP) with PARTIAL_FIELDS and CHECK_FIELDS, reduced: every
    record that is not reducible, as it is; of the reducible ones, the newest per (partition, key, after_as_of).
    Each row is checked (`checked`) after the reduction: the rows folded away never are (jobs.reduce)."""
    folding: list[pa.Table] = []
    held = 0
    for batch in batches:
        late = _late(batch, as_of_us)
        rows = reducible(batch)
        mask = pa.array(rows)
        if not rows.all():
            yield checked(_with_partial(batch, late, False).filter(pc.invert(mask)))
        if rows.any():
            folding.append(_with_partial(batch, late, True).filter(mask))
            held += folding[-1].num_rows
            if held > FOLD_ROWS:
                folding = [_fold(folding)]
                held = folding[0].num_rows
    if folding:
        yield checked(_fold(folding))


# jobs.history's plain commits: (column, type) in its order (history.APPLIED, then `proven`).
COMMIT_FIELDS = (("coordinator_partition", pa.int32()), ("offset_key", pa.binary()), ("record_offset", pa.int64()),
                 ("source_record_offset", pa.int64()), ("record_timestamp", TIMESTAMP), ("producer_id", pa.int64()),
                 ("committed_offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
                 ("commit_timestamp_ms", pa.int64()), ("proven", pa.bool_()))
# What `plain_commits` yields: the same, with the record's whole key in place of offset_key (`offset_keys`).
PLAIN_FIELDS = tuple(("key", pa.binary()) if name == "offset_key" else (name, t) for name, t in COMMIT_FIELDS)


def plain_commits(batches: Iterable[pa.Table], as_of_us: int | None) -> Iterator[pa.Table]:
    """The records `reduce_batches` folds (reducible, at or before as_of), each decoded: PLAIN_FIELDS. Every other
    offset record is in the reduced log whole."""
    for batch in batches:
        rows = plain(batch) & ~np.asarray(_late(batch, as_of_us).to_numpy(zero_copy_only=False), dtype=bool)
        if not rows.any():
            continue
        kept = batch.filter(pa.array(rows))
        value = read(kept.column("value"), _VALUE_LAYOUT, ("offset", "leaderEpoch", "metadata", "commitTimestamp"))
        folded = pa.array(_is_null(kept.column("value")) | value.ok)  # as `reducible` says
        kept = kept.filter(folded)
        fields = {name: column.filter(folded) for name, column in value.fields.items()}
        epoch = fields["leaderEpoch"]
        offsets = kept.column("offset")
        yield pa.table([
            kept.column("partition"), kept.column("key"), offsets, offsets, kept.column("timestamp"),
            pa.array(np.full(kept.num_rows, NO_PRODUCER, np.int64)), fields["offset"],
            pc.if_else(pc.equal(epoch, -1), pa.scalar(None, pa.int64()), epoch).cast(pa.int32()),
            fields["metadata"], fields["commitTimestamp"], pa.array(np.ones(kept.num_rows, bool)),
        ], schema=pa.schema(PLAIN_FIELDS))


def offset_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Offset-commit keys' bytes after their type (jobs.replay.offset_key: the same for both key types)."""
    if not len(keys):
        return keys
    # An explicit end: pyarrow sizes its output by it.
    return pc.binary_slice(keys, 2, max(pc.max(pc.binary_length(keys)).as_py() or 2, 2))
