"""A record seen twice is one record: overlapping exports, a rerun appended to a dump, a damaged log dir.

A coordinator partition's log has one record per offset. Two rows at one offset with the same contents are one
record read twice: it is replayed once and counted (`duplicate_records`). Two rows at one offset with other
contents cannot both be the log: neither is replayed, both go to the quarantine with CONFLICT.

Finding them needs all of a partition's rows in one place (`deduplicate`), which a whole-log replay has anyway.
A reduction folds each task's share apart, so `spans` records, per batch and coordinator partition, the offsets
it holds and whether they rise strictly; when no two spans of a partition overlap and every batch rises, no
record can be there twice and the folded log is exact (`overlapping` tells the runner otherwise).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask, numbers, run_starts

CONFLICT = "another record at this offset of this coordinator partition has other contents (a conflicting copy)"
# How many copies a partition's replay dropped, and how many rows conflict (the run summary's counts).
DUPLICATE_SCHEMA = pa.schema([("duplicates", pa.int64()), ("conflicts", pa.int64())])
SPAN_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("low", pa.int64()), ("high", pa.int64()),
                         ("rows", pa.int64()), ("rising", pa.bool_())])
# What makes two rows the same record.
_CONTENTS = ("key", "value", "record_timestamp", "producer_id", "producer_epoch", "is_control")


def spans(records: pa.Table) -> pa.Table:
    """Per coordinator partition of one batch: its lowest and highest offset, its rows, and whether its offsets
    rise strictly in the batch's order (SPAN_SCHEMA). Rows without a partition or offset are left out."""
    partition, offset = records.column("coordinator_partition"), records.column("record_offset")
    placed = mask(pc.and_(pc.is_valid(partition), pc.is_valid(offset)))
    if not placed.any():
        return SPAN_SCHEMA.empty_table()
    p = numbers(partition)[placed]
    o = numbers(offset)[placed]
    order = np.argsort(p, kind="stable")
    p, o = p[order], o[order]
    starts = run_starts(p)
    ends = np.append(starts[1:], len(p))
    steps = np.concatenate([[True], (p[1:] != p[:-1]) | (o[1:] > o[:-1])])  # each row above the one before
    rising = np.logical_and.reduceat(steps, starts)
    return pa.table([pa.array(p[starts], pa.int32()), pa.array(np.minimum.reduceat(o, starts)),
                     pa.array(np.maximum.reduceat(o, starts)), pa.array(ends - starts), pa.array(rising)],
                    schema=SPAN_SCHEMA)


def overlapping(all_spans: pa.Table) -> bool:
    """Some record may be there twice: a batch's offsets do not rise, or two batches' spans of one coordinator
    partition share an offset."""
    if not all_spans.num_rows:
        return False
    if not mask(all_spans.column("rising")).all():
        return True
    p, low, high = (numbers(all_spans.column(c)) for c in ("coordinator_partition", "low", "high"))
    order = np.lexsort((low, p))
    p, low, high = p[order], low[order], high[order]
    # Sorted by their start, spans overlap somewhere only if two neighbours do.
    return bool(((p[1:] == p[:-1]) & (low[1:] <= high[:-1])).any())


def deduplicate(rows: pa.Table) -> tuple[pa.Table, int, int]:
    """Coordinator partitions' checked rows, each offset of a partition once: of rows with the same place and
    contents the first is kept, and rows with the same place and other contents are all kept with the error
    CONFLICT. Returns (the rows, how many copies were dropped, how many rows conflict)."""
    placed = mask(pc.is_valid(rows.column("record_offset")))
    offset = numbers(rows.column("record_offset"))[placed]
    partition = numbers(rows.column("coordinator_partition"), -1)[placed]
    if len(offset) < 2 or (((partition[1:] == partition[:-1]) & (offset[1:] > offset[:-1])) |
                           (partition[1:] > partition[:-1])).all():
        return rows, 0, 0  # a log read in order rises: the first test settles it
    order = np.lexsort((offset, partition))
    p, o = partition[order], offset[order]
    again = (p[1:] == p[:-1]) & (o[1:] == o[:-1])
    if not again.any():
        return rows, 0, 0
    if not placed.all():  # a row without an offset is an error of its own, never anyone's copy
        unplaced = rows.filter(pa.array(~placed))
        kept, dropped, conflicts = deduplicate(rows.filter(pa.array(placed)))
        return pa.concat_tables([kept, unplaced]), dropped, conflicts
    rows = rows.take(pa.array(order))
    place = np.cumsum(np.concatenate([[True], ~again]))  # a number per (partition, offset), in order
    first, in_conflict = copies(rows, place, _CONTENTS)
    keep = first | in_conflict
    dropped = int((~keep).sum())
    rows = rows.filter(pa.array(keep))
    if in_conflict.any():
        error = pc.if_else(pa.array(in_conflict[keep]), pa.scalar(CONFLICT), rows.column("error"))
        rows = rows.set_column(rows.column_names.index("error"), "error", error)
    return rows, dropped, int(in_conflict.sum())


def copies(rows: pa.Table, offset: np.ndarray, contents: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by `offset` (their offsets, placed): (the first row at each offset, the rows at an offset
    whose rows differ in some column of `contents`)."""
    first = np.concatenate([[True], offset[1:] != offset[:-1]])
    same = np.ones(len(offset), bool)  # the row has its group's first row's contents
    leader = np.maximum.accumulate(np.where(first, np.arange(len(offset)), 0))
    for name in contents:
        column = rows.column(name)
        led = column.take(pa.array(leader))
        equal = pc.fill_null(pc.equal(column, led), False)
        both_null = pc.and_(pc.is_null(column), pc.is_null(led))
        same &= mask(pc.or_(equal, both_null))
    group = np.cumsum(first) - 1
    conflicted = np.zeros(group[-1] + 1, bool)
    np.logical_or.at(conflicted, group, ~same)
    return first, conflicted[group]
