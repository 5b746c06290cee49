"""The reduction: a source task's share of the log folded before the replay sees it (spec §7.7).

Almost every record is a plain offset commit, and for those the coordinator's fold ends in "the newest record
per key wins": so per coordinator partition and key only the newest plain commit is kept, and the newest plain
tombstone beside it (a tombstone also removes the key's open transactional commits, which a newer commit does
not: jobs.replay.offsets), each standing for the records it replaced (`records`). Every other record is kept
whole: group records, transactional commits and markers (their fate is their producer's next marker), records
that failed the check (the quarantine keeps them all), and records after the cutoff (counted, never replayed).

The fold is associative: a task folds its batches, and `combine` folds tasks' rows the same way, so any runner
may split the log into any chunks. It is only right when no record is seen twice: jobs.replay.duplicates tells
when chunks overlap, and the log is then replayed whole instead.

A run that keeps its reduced log for the next one (jobs.replay.resume) keeps the records after the cutoff whole
(`keep_late`): the next run's as_of may be later, and a folded row cannot be split at it. It also folds the
transactions its log has decided (`fold_decided`): a committed transactional commit then applies like a plain one.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask, micros, numbers
from jobs.replay.transactions import decided, transactional
from offsets_codec.registry import OFFSET_COMMIT_TYPES
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

# What the reduction adds to each checked record.
REDUCED_FIELDS = (("records", pa.int64()), ("newest_timestamp", TIMESTAMP), ("after_as_of", pa.bool_()),
                  ("reduced", pa.bool_()))
# A folded row stands for its key's plain records on one side of the cutoff; commits and tombstones apart, and
# records of a transaction (decided ones: `fold_decided`) apart from plain ones, for the counts.
_FOLD_KEY = ["coordinator_partition", "key", "after_as_of", "tombstone", "transactional"]
# Reducible rows held before they are folded: bounds a task's memory by its keys, not by its share of the log.
FOLD_ROWS = 1 << 20


def after(records: pa.Table, cutoff_us: int | None) -> np.ndarray:
    """Per record: its timestamp is after the cutoff (a record without one never is)."""
    if cutoff_us is None:
        return np.zeros(records.num_rows, bool)
    return mask(pc.greater(records.column("record_timestamp"), pa.scalar(cutoff_us, TIMESTAMP)))


def whole(checked: pa.Table, cutoff_us: int | None) -> pa.Table:
    """Checked records with REDUCED_FIELDS, each standing for itself."""
    n = checked.num_rows
    return (checked.append_column("records", pa.array(np.ones(n, np.int64)))
            .append_column("newest_timestamp", checked.column("record_timestamp"))
            .append_column("after_as_of", pa.array(after(checked, cutoff_us)))
            .append_column("reduced", pa.array(np.zeros(n, bool))))


def reducible(checked: pa.Table) -> np.ndarray:
    """Per record: a valid offset commit or tombstone written outside a transaction."""
    plain = mask(pc.is_in(checked.column("record_type"), value_set=pa.array(OFFSET_COMMIT_TYPES, pa.int16())))
    plain &= mask(pc.is_null(checked.column("error"))) & ~mask(checked.column("is_control"))
    return plain & mask(pc.equal(checked.column("producer_id"), NO_PRODUCER))


def prefold(checked: Iterable[pa.Table], cutoff_us: int | None, keep_late: bool = False) -> Iterator[pa.Table]:
    """A task's checked batches reduced: the rows that are not `reducible` whole, the reducible ones folded (the
    newest per coordinator partition, key, side of the cutoff and tombstone or not). REDUCED_FIELDS added.
    `keep_late`: the records after the cutoff stay whole."""
    folding: list[pa.Table] = []
    held = 0
    for batch in checked:
        rows = whole(batch, cutoff_us)
        fold = reducible(batch)
        if keep_late:
            fold &= ~mask(rows.column("after_as_of"))
        if not fold.all():
            yield rows.filter(pa.array(~fold))
        if fold.any():
            folding.append(_fold([rows.filter(pa.array(fold))]))  # a batch repeats its keys: folded at once
            held += folding[-1].num_rows
            if held > FOLD_ROWS:
                folding = [_fold(folding)]
                held = folding[0].num_rows
    if folding:
        yield _fold(folding)


def combine(tables: list[pa.Table]) -> pa.Table:
    """Several tasks' rows (`prefold`, or whole) as one task's: the folded rows folded again with the reducible
    whole ones up to the cutoff, the others as they are. Only once no record is there twice."""
    rows = pa.concat_tables(tables)
    return _fold_where(rows, _foldable(rows))


def _foldable(rows: pa.Table) -> np.ndarray:
    """Per row: folded already, or a reducible record up to the cutoff (`combine` folds them together)."""
    return mask(rows.column("reduced")) | (reducible(rows) & ~mask(rows.column("after_as_of")))


def _fold_where(rows: pa.Table, folded: np.ndarray) -> pa.Table:
    """`rows`, those where `folded` folded (`_fold`), the others as they are."""
    if not folded.any():
        return rows
    return pa.concat_tables([rows.filter(pa.array(~folded)), _fold([rows.filter(pa.array(folded))])])


def _fold(tables: list[pa.Table]) -> pa.Table:
    """One row per _FOLD_KEY: the newest record, standing for all of them."""
    rows = pa.concat_tables(tables)
    keyed = rows.append_column("tombstone", rows.column("value").is_null()).append_column(
        "transactional", pc.not_equal(rows.column("producer_id"), NO_PRODUCER))
    newest = keyed.group_by(_FOLD_KEY, use_threads=False).aggregate(
        [("record_offset", "max"), ("records", "sum"), ("newest_timestamp", "max")])
    newest = newest.select(["coordinator_partition", "record_offset_max", "records_sum", "newest_timestamp_max"]
                           ).rename_columns(["coordinator_partition", "record_offset", "records", "newest_timestamp"])
    winners = rows.drop_columns(["records", "newest_timestamp", "reduced"]).join(
        newest, ["coordinator_partition", "record_offset"], join_type="inner", use_threads=False)
    winners = winners.append_column("reduced", pa.array(np.ones(winners.num_rows, bool)))
    return winners.select(rows.column_names)


def fold_decided(rows: pa.Table) -> pa.Table:
    """One coordinator partition's rows `combine`d, with the transactions decided before the cutoff folded in the
    same fold, for a run that keeps its reduced log (jobs.replay.resume): the committed transactional commits and
    the markers that decide nothing left whole (jobs.replay.transactions.decided) are folded like plain commits
    (`reduced`: decided); the aborted commits, which never apply, are counted by a folded transactional commit of
    their type (`counted_by`), and where there is none, kept whole with their markers."""
    ok = mask(pc.is_null(rows.column("error"))) & ~mask(rows.column("after_as_of"))
    committed, deciding, idle, aborted, aborting = decided(rows, ok)
    if idle is None:
        return _fold_where(rows, _foldable(rows))
    reduced = mask(rows.column("reduced")).copy()
    reduced[committed] = True
    counted = _counters(rows, reduced, aborted)
    idle[aborting[~counted]] = False  # an aborted commit kept whole keeps the marker that tells its fate
    aborted = aborted[counted]
    reduced |= idle
    # A folded commit stands for its marker too: no as_of before the marker is replayed from it.
    stamp = micros(rows.column("newest_timestamp")).copy()
    decided_at = micros(rows.column("record_timestamp"))[deciding]
    stamp[committed] = np.maximum(stamp[committed], decided_at)
    known = mask(pc.is_valid(rows.column("newest_timestamp")))
    rows = rows.set_column(rows.column_names.index("newest_timestamp"), "newest_timestamp",
                           pa.array(stamp, mask=~known).cast(TIMESTAMP))
    folded = _foldable(rows) | reduced
    rows = rows.set_column(rows.column_names.index("reduced"), "reduced", pa.array(reduced))
    partitions = numbers(rows.column("coordinator_partition"), -1)[aborted]
    offsets = numbers(rows.column("record_offset"), -1)[aborted]
    rows = _fold_where(rows, folded)  # the aborted commits are whole: they stay where they are
    if not len(aborted):
        return rows
    gone = positions(rows, partitions, offsets)
    kinds = _kinds(rows)
    counters = np.flatnonzero(_folded_commits(rows, mask(rows.column("reduced"))))
    first = dict(zip(kinds[counters][::-1].tolist(), counters[::-1].tolist()))  # per kind, its first counter
    return counted_by(rows, gone, np.array([first[k] for k in kinds[gone].tolist()], np.int64))


def counted_by(rows: pa.Table, dropped: np.ndarray, counters: np.ndarray) -> pa.Table:
    """`rows` less the rows `dropped`, each counted by the row of `counters` at the same place: its `records` and
    `newest_timestamp` stand for them too, so the counts stay and no as_of before them is replayed from the state
    (jobs.replay.resume.newest_folded)."""
    records = numbers(rows.column("records")).copy()
    np.add.at(records, counters, records[dropped])
    stamp = rows.column("newest_timestamp")
    none = np.iinfo(np.int64).min
    us = np.where(mask(pc.is_valid(stamp)), micros(stamp), none)
    np.maximum.at(us, counters, us[dropped])
    kept = np.ones(rows.num_rows, bool)
    kept[dropped] = False
    rows = rows.set_column(rows.column_names.index("records"), "records", pa.array(records))
    rows = rows.set_column(rows.column_names.index("newest_timestamp"), "newest_timestamp",
                           pa.array(us, mask=us == none).cast(TIMESTAMP))
    return rows.filter(pa.array(kept))


def _folded_commits(rows: pa.Table, reduced: np.ndarray) -> np.ndarray:
    """Per row: a checked transactional commit folded (`reduced`), which counts what it stands for."""
    return reduced & transactional(rows) & mask(pc.is_null(rows.column("error")))


def _counters(rows: pa.Table, reduced: np.ndarray, aborted: np.ndarray) -> np.ndarray:
    """Per aborted commit (rows `aborted`): a commit of its record type in its coordinator partition is folded
    (`reduced`), so the fold can count it (`counted_by`)."""
    kinds = _kinds(rows)
    return np.isin(kinds[aborted], kinds[_folded_commits(rows, reduced)])


def _kinds(rows: pa.Table) -> np.ndarray:
    """Per row: its coordinator partition and record type, as one number."""
    return in_partition(rows, numbers(rows.column("record_type"), -1))


def in_partition(rows: pa.Table, values: np.ndarray) -> np.ndarray:
    """Per row: its coordinator partition and its value of `values` (from -1 up), as one number."""
    return numbers(rows.column("coordinator_partition"), -1) * (int(values.max(initial=0)) + 2) + values


def positions(rows: pa.Table, partitions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The row of `rows` at each (coordinator partition, offset) of `partitions` and `offsets`, each of which is
    there once."""
    def places(p: np.ndarray, o: np.ndarray) -> np.ndarray:
        found = np.empty(len(p), [("partition", np.int64), ("offset", np.int64)])
        found["partition"], found["offset"] = p, o
        return found

    have = places(numbers(rows.column("coordinator_partition"), -1), numbers(rows.column("record_offset"), -1))
    order = np.argsort(have, order=("partition", "offset"))
    return order[np.searchsorted(have[order], places(partitions, offsets))]
