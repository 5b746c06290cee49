"""The log's reduction (jobs.reduce), begun inside a source task: Arrow batches in, far fewer Arrow batches out.

A task that reads its share of the log as Arrow batches (a local Parquet dump: jobs.sources.reduced_dump) folds
it before Spark sees a row: per coordinator partition and key, only the newest reducible plain commit is kept,
with how many records it stands for; every other record passes whole. The task then checks what it keeps, as
jobs.records.check would (`checked`: Arrow where it proves the record, the Python codec elsewhere), and Spark
finishes the reduction across tasks (jobs.reduce.combine_partials). What "plain" and "reducible" mean is
jobs.reduce's rule; here it is read with Arrow kernels and jobs.arrow_check, which proves no more than the
codec accepts, so a record that is folded away is one the check would have passed. `readable_records` gives the
history (jobs.history, jobs.task_history) every offset record such a task reads itself, decoded, and `applied`
places transactional commits where the coordinator applied them; every other offset record reaches the history
through the reduced log (its rows that are not `readable`).

A task also folds the transactional commits whose fate it sees (`reduce_batches` with
`spans`): a transactional commit's fate is its producer's next marker in its coordinator partition (spec §7.2,
jobs.transactions), and for the state only the newest committed one per key matters (it competes with plain
commits by its own offset) and no aborted one does. So per key, the newest commit of each fate stands for the
others; Spark's window then gives that row the same fate, from the same marker, which the reduced log keeps.
That holds when no other task holds a marker of the coordinator partition between a commit and the marker the
task found: each task records the span of offsets of its transactional commits and markers per coordinator
partition, and the caller checks that the tasks' spans are disjoint (jobs.sources.reduced_dump).

No Spark import: the functions take and give pyarrow data, and run in a task's Python worker.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.arrow_check import BulkRead, proven, read
from jobs.record_check import verdicts
from offsets_codec import REGISTRY
from offsets_codec.registry import OFFSET_COMMIT_TYPES
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

VALUE_LAYOUT = REGISTRY[OFFSET_COMMIT_TYPES[0]].value
KEY_LAYOUT = REGISTRY[OFFSET_COMMIT_TYPES[0]].key
# Both offset-commit key types are read as the key layout's one version (their first two bytes are the type).
KEY_HEADS = {t: KEY_LAYOUT.valid.lowest for t in OFFSET_COMMIT_TYPES}
# The first two bytes of an offset-commit key: its type.
OFFSET_KEY_PREFIXES = tuple(t.to_bytes(2, "big", signed=True) for t in OFFSET_COMMIT_TYPES)
TIMESTAMP = pa.timestamp("us", tz="UTC")
# What a task adds to each record (jobs.reduce.reduce_log's columns).
# readable: an offset record the history's tasks read themselves (a tombstone, or a value jobs.arrow_check proves).
PARTIAL_FIELDS = (("records", pa.int64()), ("newest_timestamp", TIMESTAMP), ("after_as_of", pa.bool_()),
                  ("reduced", pa.bool_()), ("fate", pa.string()), ("readable", pa.bool_()))
# The check's columns (jobs.records.CHECK_COLUMNS), as a task gives them.
CHECK_FIELDS = (("record_type", pa.int16()), ("group_id", pa.string()), ("error", pa.string()))
# A folded row stands for its key's records of one kind: plain (fate null), or transactional of one fate; a key's
# tombstones are folded apart from its commits (jobs.reduce.tombstone).
GROUP = ["partition", "key", "after_as_of", "fate"]
# Reducible rows held before they are folded: bounds a task's memory by the number of keys, not the log.
FOLD_ROWS = 1 << 20
# What `markers` gives.
MARKER_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("producer_id", pa.int64()),
                           ("fate", pa.string())])
# Transactional commits held until the task has seen every marker, at most; beyond it they pass whole.
TRANSACTIONAL_ROWS = 4 << 20


def _column(batch: pa.Table, name: str) -> pa.ChunkedArray | None:
    return batch.column(name) if name in batch.column_names else None


def _offset_records(batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per record: (an offset commit or tombstone at a known position, not a control record; written without
    a producer)."""
    head = pc.binary_slice(batch.column("key"), 0, 2)
    rows = _mask(pc.is_in(head, value_set=pa.array(OFFSET_KEY_PREFIXES, pa.binary())))
    control = _column(batch, "is_control")
    if control is not None:
        rows &= ~_mask(control)
    for position in ("partition", "offset"):
        rows &= _mask(pc.is_valid(batch.column(position)))
    producer = _column(batch, "producer_id")
    no_producer = (np.ones(batch.num_rows, bool) if producer is None
                   else _mask(pc.equal(pc.fill_null(producer, NO_PRODUCER), NO_PRODUCER)))
    return rows, no_producer


def foldable(batch: pa.Table, fields: tuple[str, ...] = ()
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, BulkRead | None]:
    """Per record: (reducible: a plain offset record (`_offset_records`, written without a producer) whose value
    is null or proven valid (jobs.arrow_check); transactional: a transactional offset commit whose value is
    proven valid, which a task may fold once it knows its fate; readable: an offset record, transactional or
    not, whose value is null or proven valid), and the values read, with `fields` (None when there is no offset
    record)."""
    rows, no_producer = _offset_records(batch)
    if not rows.any():
        return rows, rows, rows, None
    values = batch.column("value")
    null = _is_null(values)
    value = read(values, VALUE_LAYOUT, fields)
    readable = rows & (null | value.ok)
    return readable & no_producer, readable & ~no_producer & ~null, readable, value


def _is_null(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _late(batch: pa.Table, as_of_us: int | None) -> pa.Array | pa.ChunkedArray:
    if as_of_us is None:
        return pa.array(np.zeros(batch.num_rows, bool))
    return pc.fill_null(pc.greater(batch.column("timestamp"), pa.scalar(as_of_us, TIMESTAMP)), False)


def at_or_before(batch: pa.Table, as_of_us: int | None) -> np.ndarray:
    """Per record: replayed as of as_of (a record without a timestamp always is)."""
    return ~_mask(_late(batch, as_of_us))


def _with_partial(batch: pa.Table, late: pa.ChunkedArray | pa.Array, reduced: bool, readable: np.ndarray
                  ) -> pa.Table:
    n = batch.num_rows
    return (batch.append_column("records", pa.array(np.ones(n, np.int64)))
            .append_column("newest_timestamp", batch.column("timestamp"))
            .append_column("after_as_of", late)
            .append_column("reduced", pa.array(np.full(n, reduced)))
            .append_column("fate", pa.nulls(n, pa.string()))
            .append_column("readable", pa.array(readable)))


def _mask(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)


def markers(batch: pa.Table, among: np.ndarray | None = None) -> pa.Table:
    """The transaction markers among `batch` (and `among`, a mask, when given) that the replay applies (a control
    record whose key reads COMMIT or ABORT: jobs.records.transaction_marker): partition, offset, producer_id,
    fate."""
    control = _column(batch, "is_control")
    if control is None:
        return MARKER_SCHEMA.empty_table()
    rows = _mask(control) & _mask(pc.is_valid(batch.column("partition"))) & _mask(pc.is_valid(batch.column("offset")))
    if among is not None:
        rows &= among
    found = batch.filter(pa.array(rows))
    keys = found.column("key")
    sound = sound_control_keys(keys)
    kind = pc.binary_slice(keys, 2, 4)
    fate = pc.if_else(pa.array(sound), pc.if_else(pc.equal(kind, pa.scalar(b"\x00\x01", pa.binary())), "COMMIT",
                      pc.if_else(pc.equal(kind, pa.scalar(b"\x00\x00", pa.binary())), "ABORT", None)), None)
    producer = pc.fill_null(found.column("producer_id"), NO_PRODUCER) if "producer_id" in found.column_names \
        else pa.array(np.full(found.num_rows, NO_PRODUCER, np.int64))
    table = pa.table([found.column("partition"), found.column("offset"), producer, fate], schema=MARKER_SCHEMA)
    return table.filter(pc.is_valid(table.column("fate")))


def sound_control_keys(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per control record key: Kafka reads it (jobs.records.transaction_marker is not null): at least 4 bytes and
    a version that is not negative (its top bit clear)."""
    return _mask(pc.and_(pc.greater_equal(pc.binary_length(keys), 4),
                         pc.less(pc.binary_slice(keys, 0, 1), pa.scalar(b"\x80", pa.binary()))))


def count_rows(rows: pa.Table) -> list[dict]:
    """What jobs.pipeline.record_counts aggregates, from the tasks' combined rows (`combine`), whose after_as_of is
    the run's: per (record_type, ok) the records, those after as_of, the newest timestamp, the transactional
    records and the rows of a bad key standing for several records. ok: no error, and a control record's key
    sound (Spark adds a malformed one's error: jobs.reduce.combine_partials)."""
    control = _column(rows, "is_control")
    control = np.zeros(rows.num_rows, bool) if control is None else _mask(control)
    sound = sound_control_keys(rows.column("key"))
    producer = _column(rows, "producer_id")
    transactional = control & sound
    if producer is not None:
        transactional |= _mask(pc.not_equal(pc.fill_null(producer, NO_PRODUCER), NO_PRODUCER))
    records = rows.column("records")
    no_error = _mask(pc.is_null(rows.column("error")))
    ok = no_error & ~(control & ~sound)
    zero = pa.scalar(0, pa.int64())
    table = pa.table({
        "record_type": rows.column("record_type"), "ok": pa.array(ok), "count": records,
        "after": pc.if_else(rows.column("after_as_of"), records, zero),
        "newest": rows.column("newest_timestamp"),
        "transactional": pc.if_else(pa.array(transactional), records, zero),
        "scattered": pa.array((~no_error & _mask(pc.greater(records, 1))).astype(np.int64)),
    })
    totals = table.group_by(["record_type", "ok"], use_threads=False).aggregate(
        [("count", "sum"), ("after", "sum"), ("newest", "max"), ("transactional", "sum"), ("scattered", "sum")])
    return [{k.rsplit("_", 1)[0] if k.endswith(("_sum", "_max")) else k: v for k, v in row.items()}
            for row in totals.to_pylist()]


def next_markers(commits: pa.Table, found: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Per commit of `commits` (partition, offset, producer_id): (the fate, the offset) of its producer's next
    marker among `found` (`markers`) in its coordinator partition, by offset; nulls when `found` has none after
    it."""
    n = commits.num_rows
    if not found.num_rows:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    partition = np.concatenate([commits.column("partition").to_numpy(), found.column("partition").to_numpy()])
    producer = np.concatenate([commits.column("producer_id").to_numpy(), found.column("producer_id").to_numpy()])
    offset = np.concatenate([commits.column("offset").to_numpy(), found.column("offset").to_numpy()])
    is_marker = np.arange(len(offset)) >= n
    order = np.lexsort((offset, producer, partition))
    partition, producer, is_marker = partition[order], producer[order], is_marker[order]
    run = np.concatenate([[0], np.cumsum((np.diff(partition) != 0) | (np.diff(producer) != 0))])
    # The first marker at or after each position (in sorted order), if it is the same producer's run.
    position = np.arange(len(order))
    nearest = np.minimum.accumulate(np.where(is_marker, position, len(order))[::-1])[::-1]
    found_one = nearest < len(order)
    same_run = found_one & (run[np.minimum(nearest, len(order) - 1)] == run)
    fates = np.asarray(found.column("fate").to_numpy(zero_copy_only=False), dtype=object)
    positions = np.asarray(found.column("offset").to_numpy(zero_copy_only=False), dtype=np.int64)
    marker = np.full(len(order), -1)  # per sorted row: its marker's row in `found`, -1 for none
    marker[same_run] = order[nearest[same_run]] - n
    by_commit = np.full(n, -1)
    commit_rows = ~is_marker
    by_commit[order[commit_rows]] = marker[commit_rows]
    none = by_commit < 0
    which = np.maximum(by_commit, 0)  # any row: masked where there is none
    return (pa.array(np.where(none, None, fates[which]), pa.string()), pa.array(positions[which], mask=none))


def _fold(tables: list[pa.Table]) -> pa.Table:
    """One row per GROUP and tombstone or not (jobs.reduce.tombstone): the newest record, standing for all of
    them."""
    rows = pa.concat_tables(tables)
    keyed = rows.append_column("tombstone", rows.column("value").is_null())
    newest = keyed.group_by(GROUP + ["tombstone"], use_threads=False).aggregate(
        [("offset", "max"), ("records", "sum"), ("newest_timestamp", "max")])
    newest = newest.select(["partition", "offset_max", "records_sum", "newest_timestamp_max"]).rename_columns(
        ["partition", "offset", "records", "newest_timestamp"])
    winners = rows.drop_columns(["records", "newest_timestamp"]).join(
        newest, ["partition", "offset"], join_type="inner", use_threads=False)
    return winners.select(rows.column_names)


def combine(tables: list[pa.Table]) -> pa.Table:
    """Several tasks' rows (`reduce_batches`) as one task's: of the folded rows of each (partition, key,
    after_as_of, fate), the newest, standing for all their records (jobs.reduce.combine_partials in Spark)."""
    rows = pa.concat_tables(tables)
    reduced = rows.column("reduced")
    folded = rows.filter(reduced)
    return pa.concat_tables([rows.filter(pc.invert(reduced)), _fold([folded]) if folded.num_rows else folded])


def checked(batch: pa.Table) -> pa.Table:
    """`batch` plus CHECK_FIELDS, as jobs.records.check gives them: an offset commit whose key and value (or
    tombstone) jobs.arrow_check proves is read here; every other record by the Python codec (jobs.record_check),
    except control records, whose columns stay null (Spark reads a marker's key: jobs.records.control_error)."""
    keys, values = batch.column("key").combine_chunks(), batch.column("value").combine_chunks()
    key = read(keys, KEY_LAYOUT, ("group",), heads=KEY_HEADS)
    control = _column(batch, "is_control")
    control = np.zeros(batch.num_rows, bool) if control is None else _mask(control)
    native = key.ok & (_is_null(values) | proven(values, VALUE_LAYOUT)) & ~control
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


def reduce_batches(batches: Iterable[pa.Table], as_of_us: int | None, spans: dict[int, list[int]] | None = None,
                   history: Callable[[pa.Table, pa.Table], None] | None = None) -> Iterator[pa.Table]:
    """`batches` (contract columns, timestamp as TIMESTAMP) with PARTIAL_FIELDS and CHECK_FIELDS, reduced: every
    record that is not reducible, as it is; of the reducible ones, the newest per (partition, key, after_as_of).
    Each row is checked (`checked`) after the reduction: the rows folded away never are (jobs.reduce).

    `spans`: given, the transactional commits up to as_of whose producer's next marker this task holds are
    folded too, the newest per (partition, key, fate) (see the module), and `spans` receives, per coordinator
    partition, the [lowest, highest] offset of the transactional commits and markers the task read: the fates
    it found are right when no other task's span overlaps its own.

    `history`: given, it receives each batch's readable offset records up to as_of (PLAIN_FIELDS, as
    `readable_records` gives them: their values are read once, for both) and its markers up to as_of."""
    folding: list[pa.Table] = []
    held = 0
    pending: list[pa.Table] = []  # transactional commits up to as_of, until every marker is seen
    found: list[pa.Table] = []
    waiting = 0
    for batch in batches:
        late = _late(batch, as_of_us)
        rows, transactional, readable, value = foldable(batch, PLAIN_VALUE_FIELDS if history else ())
        whole = ~rows
        in_window = ~_mask(late)
        found_here = markers(batch, in_window) if spans is not None or history is not None else None
        if history is not None:
            history(plain_records(batch, readable & in_window, value), found_here)
        if spans is not None:
            if waiting <= TRANSACTIONAL_ROWS:
                held_back = transactional & in_window
                if held_back.any():
                    pending.append(_with_partial(batch, late, True, readable).filter(pa.array(held_back)))
                    waiting += pending[-1].num_rows
                    whole &= ~held_back
            found.append(found_here)  # every one, for the span, even past the limit
        mask = pa.array(rows)
        if whole.any():
            yield checked(_with_partial(batch, late, False, readable).filter(pa.array(whole)))
        if rows.any():
            folding.append(_with_partial(batch, late, True, readable).filter(mask))
            held += folding[-1].num_rows
            if held > FOLD_ROWS:
                folding = [_fold(folding)]
                held = folding[0].num_rows
    if folding:
        yield checked(_fold(folding))
    if spans is None:
        return
    # A task's markers count in its span even when it holds no commit: another task's fold may lie across them.
    found_markers = pa.concat_tables(found) if found else None
    if found_markers is not None:
        _widen(spans, found_markers)
    if pending:
        commits = pa.concat_tables(pending)
        _widen(spans, commits)
        yield from _fold_transactional(commits, found_markers, waiting <= TRANSACTIONAL_ROWS)


def _fold_transactional(commits: pa.Table, found: pa.Table, fold: bool) -> Iterator[pa.Table]:
    """The held transactional commits: those whose next marker the task saw, folded per fate; the others whole."""
    fates = next_markers(commits, found)[0] if fold else pa.nulls(commits.num_rows, pa.string())
    commits = commits.set_column(commits.column_names.index("fate"), "fate", fates)
    known = pc.is_valid(fates)
    if pc.any(known).as_py():
        yield checked(_fold([commits.filter(known)]))
    unknown = commits.filter(pc.invert(known))
    if unknown.num_rows:
        n = unknown.num_rows
        yield checked(unknown.set_column(unknown.column_names.index("reduced"), "reduced", pa.array(np.zeros(n, bool))))


def _widen(spans: dict[int, list[int]], batch: pa.Table) -> None:
    """Widen each coordinator partition's [lowest, highest] offset in `spans` by `batch`'s."""
    known = _mask(pc.and_(pc.is_valid(batch.column("partition")), pc.is_valid(batch.column("offset"))))
    partition = np.asarray(batch.column("partition").to_numpy(zero_copy_only=False))[known].astype(np.int64)
    offset = np.asarray(batch.column("offset").to_numpy(zero_copy_only=False))[known].astype(np.int64)
    if not len(partition):
        return
    order = np.argsort(partition, kind="stable")
    partition, offset = partition[order], offset[order]
    starts = np.flatnonzero(np.concatenate([[True], partition[1:] != partition[:-1]]))
    lows, highs = np.minimum.reduceat(offset, starts), np.maximum.reduceat(offset, starts)
    for p, low, high in zip(partition[starts].tolist(), lows.tolist(), highs.tolist()):
        span = spans.setdefault(p, [low, high])
        span[0], span[1] = min(span[0], low), max(span[1], high)


# jobs.history's applied records: (column, type) in its order (history.APPLIED, then `proven`).
COMMIT_FIELDS = (("coordinator_partition", pa.int32()), ("offset_key", pa.binary()), ("record_offset", pa.int64()),
                 ("source_record_offset", pa.int64()), ("record_timestamp", TIMESTAMP), ("producer_id", pa.int64()),
                 ("committed_offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
                 ("commit_timestamp_ms", pa.int64()), ("proven", pa.bool_()))
# What `readable_records` yields: the same, with the record's whole key in place of offset_key (`offset_keys`).
PLAIN_FIELDS = tuple(("key", pa.binary()) if name == "offset_key" else (name, t) for name, t in COMMIT_FIELDS)
# The value fields PLAIN_FIELDS hold (jobs.arrow_check.read).
PLAIN_VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp")


def readable_records(batches: Iterable[pa.Table], as_of_us: int | None) -> Iterator[pa.Table]:
    """The offset records of `batches` that are readable (`foldable`) and at or before as_of, transactional or
    not, each decoded: PLAIN_FIELDS (a transactional commit at its own position: see `applied`). The other offset
    records are in the reduced log whole, not readable."""
    for batch in batches:
        rows = _offset_records(batch)[0] & at_or_before(batch, as_of_us)
        if not rows.any():
            continue
        kept = batch.filter(pa.array(rows))
        value = read(kept.column("value"), VALUE_LAYOUT, PLAIN_VALUE_FIELDS)
        yield plain_records(kept, _is_null(kept.column("value")) | value.ok, value)


def plain_records(batch: pa.Table, readable: np.ndarray, value: BulkRead | None) -> pa.Table:
    """PLAIN_FIELDS of `batch`'s `readable` rows, `value` being its values read with PLAIN_VALUE_FIELDS (None
    when none is readable)."""
    if value is None or not readable.any():
        return pa.schema(PLAIN_FIELDS).empty_table()
    keep = pa.array(readable)
    kept = batch.filter(keep)
    fields = {name: column.filter(keep) for name, column in value.fields.items()}
    epoch = fields["leaderEpoch"]
    offsets = kept.column("offset")
    producer = _column(kept, "producer_id")
    return pa.table([
        kept.column("partition"), kept.column("key"), offsets, offsets, kept.column("timestamp"),
        pa.array(np.full(kept.num_rows, NO_PRODUCER, np.int64)) if producer is None
        else pc.fill_null(producer, NO_PRODUCER), fields["offset"],
        pc.if_else(pc.equal(epoch, -1), pa.scalar(None, pa.int64()), epoch).cast(pa.int32()),
        fields["metadata"], fields["commitTimestamp"], pa.array(np.ones(kept.num_rows, bool)),
    ], schema=pa.schema(PLAIN_FIELDS))


def applied(records: pa.Table, found: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """(`records`, which of them the coordinator applies), given `readable_records` and every marker up to as_of
    of their coordinator partitions (`markers`): a record written without a producer and a tombstone where they
    are; a transactional commit at its COMMIT marker (record_offset), its own position kept as
    source_record_offset; a commit whose transaction aborted or is still open, not at all (spec §7.2,
    jobs.transactions)."""
    producer = records.column("producer_id")
    transactional = _mask(pc.and_(pc.not_equal(producer, NO_PRODUCER), pc.is_valid(records.column("committed_offset"))))
    if not transactional.any():
        return records, ~transactional
    which = np.flatnonzero(transactional)
    position = records.column("record_offset").to_numpy().copy()  # one chunk's would be read-only
    commits = pa.table({"partition": records.column("coordinator_partition").to_numpy()[which],
                        "offset": position[which], "producer_id": producer.to_numpy()[which]})
    fate, marker = next_markers(commits, found)
    committed = _mask(pc.equal(fate, "COMMIT"))
    position[which[committed]] = marker.filter(pa.array(committed)).to_numpy()
    keep = ~transactional
    keep[which[committed]] = True
    return records.set_column(records.column_names.index("record_offset"), "record_offset", pa.array(position)), keep


def offset_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Offset-commit keys' bytes after their type (jobs.replay.offset_key: the same for both key types)."""
    if not len(keys):
        return keys
    # An explicit end: pyarrow sizes its output by it.
    return pc.binary_slice(keys, 2, max(pc.max(pc.binary_length(keys)).as_py() or 2, 2))
