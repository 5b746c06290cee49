"""Transactional offset commits (spec §7.2): a commit's fate is its producer's next marker in its partition.

The broker keeps a transactional commit pending per producer until that producer's next marker in the same
coordinator partition (OffsetMetadataManager.replayEndTransactionMarker): COMMIT applies it, where the marker is
and unless the committed offset there was written by a newer record; ABORT drops it. So once each commit knows
its next marker (`next_markers`), the replay needs no in-order pass: the state and the history place each commit
by its fate (`applied`).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask, numbers
from offsets_codec.registry import OFFSET_COMMIT_TYPES, OFFSETS_TOPIC
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

MARKER_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("record_offset", pa.int64()),
                           ("producer_id", pa.int64()), ("fate", pa.string())])


def is_marker(checked: pa.Table) -> np.ndarray:
    """Per checked record: a COMMIT or ABORT marker."""
    return mask(pc.is_in(checked.column("transaction_marker"), value_set=pa.array(["COMMIT", "ABORT"]))) & \
        mask(pc.is_null(checked.column("error")))


def markers(checked: pa.Table, among: np.ndarray | None = None) -> pa.Table:
    """The COMMIT and ABORT markers among checked records (MARKER_SCHEMA), in their order; only those of the rows
    `among` selects, when given (the replay's: the records it applies, up to as_of)."""
    if among is not None:  # markers are control records: the few rows a filter copies
        checked = checked.filter(pa.array(among & mask(checked.column("is_control"))))
    found = checked.filter(pa.array(is_marker(checked)))
    return pa.table([found.column("coordinator_partition"), found.column("record_offset"),
                     found.column("producer_id"), found.column("transaction_marker")], schema=MARKER_SCHEMA)


def transactional(rows: pa.Table) -> np.ndarray:
    """Per offset record: a commit written in a transaction (its tombstones apply where they are, like anyone's)."""
    return mask(pc.not_equal(rows.column("producer_id"), NO_PRODUCER)) & mask(pc.is_valid(rows.column("value")))


def whole_commits(rows: pa.Table) -> np.ndarray:
    """Per offset record: a transactional commit kept whole, whose fate its producer's next marker tells. A folded
    one (`reduced`, when the rows have it) is of a transaction `decided` COMMIT: it applies where it is."""
    txn = transactional(rows)
    if "reduced" in rows.column_names:
        txn &= ~mask(rows.column("reduced"))
    return txn


def with_pending(rows: pa.Table, pending: pa.Table, key: list[str]) -> np.ndarray:
    """Per row of `rows`: an open transactional commit of `pending` (jobs.replay.applied) has its `key`. The
    broker's cleanup neither expires an offset with one on its partition nor deletes a group with one
    (OffsetMetadataManager.cleanupExpiredOffsets)."""
    if not pending.num_rows or not rows.num_rows:
        return np.zeros(rows.num_rows, bool)
    wanted = set(zip(*(pending.column(k).to_pylist() for k in key)))
    return np.array([k in wanted for k in zip(*(rows.column(k).to_pylist() for k in key))], bool)


def next_markers(commits: pa.Table, found: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Per commit of `commits` (coordinator_partition, record_offset, producer_id): (the fate, the offset) of its
    producer's next marker among `found` (MARKER_SCHEMA) in its coordinator partition; nulls when there is none
    after it (its transaction is still open)."""
    by_commit = next_marker_rows(commits, found)
    none = by_commit < 0
    which = np.maximum(by_commit, 0)  # any row: masked where there is none
    if not found.num_rows:
        return pa.nulls(len(which), pa.string()), pa.nulls(len(which), pa.int64())
    fates = np.asarray(found.column("fate").to_numpy(zero_copy_only=False), dtype=object)
    positions = numbers(found.column("record_offset"))
    return pa.array(np.where(none, None, fates[which]), pa.string()), pa.array(positions[which], mask=none)


def next_marker_rows(commits: pa.Table, found: pa.Table) -> np.ndarray:
    """Per commit of `commits`: the row of `found` that holds its producer's next marker in its coordinator
    partition (`next_markers`), -1 where there is none."""
    n = commits.num_rows
    if not found.num_rows or not n:
        return np.full(n, -1)
    partition = np.concatenate([numbers(commits.column("coordinator_partition")),
                                numbers(found.column("coordinator_partition"))])
    producer = np.concatenate([numbers(commits.column("producer_id")), numbers(found.column("producer_id"))])
    offset = np.concatenate([numbers(commits.column("record_offset")), numbers(found.column("record_offset"))])
    is_marker = np.arange(len(offset)) >= n
    order = np.lexsort((offset, producer, partition))
    partition, producer, is_marker = partition[order], producer[order], is_marker[order]
    run = np.concatenate([[0], np.cumsum((np.diff(partition) != 0) | (np.diff(producer) != 0))])
    # The first marker at or after each position (in sorted order), if it is the same producer's run.
    position = np.arange(len(order))
    nearest = np.minimum.accumulate(np.where(is_marker, position, len(order))[::-1])[::-1]
    same_run = (nearest < len(order)) & (run[np.minimum(nearest, len(order) - 1)] == run)
    marker = np.full(len(order), -1)  # per sorted row: its marker's row in `found`, -1 for none
    marker[same_run] = order[nearest[same_run]] - n
    by_commit = np.full(n, -1)
    commit_rows = ~is_marker
    by_commit[order[commit_rows]] = marker[commit_rows]
    return by_commit


def fates(offset_records: pa.Table, found: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per offset record: (effective: it takes part in "the newest record per key wins", a plain record or
    tombstone, or a transactional commit whose transaction committed; still open: a transactional commit with
    no marker after it; the position it applies at: its own offset, or its COMMIT marker's)."""
    position = numbers(offset_records.column("record_offset")).copy()
    txn = whole_commits(offset_records)
    effective, still_open = ~txn, np.zeros(offset_records.num_rows, bool)
    if txn.any():
        which = np.flatnonzero(txn)
        fate, marker = next_markers(
            offset_records.select(["coordinator_partition", "record_offset", "producer_id"]).take(pa.array(which)), found)
        committed = mask(pc.equal(fate, "COMMIT"))
        effective[which[committed]] = True
        still_open[which[mask(pc.is_null(fate))]] = True
        position[which[committed]] = numbers(marker)[committed]
    return effective, still_open, position


def decided(rows: pa.Table, ok: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """What a fold may take of one coordinator partition's reduced rows (`ok`: checked and up to the cutoff), for a
    run that keeps its reduced log (jobs.replay.reduction.fold_decided): (the rows of the transactional commits
    decided COMMIT, with the rows of their markers: such a commit applies at its own offset like a plain one, so
    it folds like one; per row, a marker that decides nothing left whole, None when nothing is decided; the rows
    of the commits decided ABORT, which never apply, with the rows of their markers: the fold counts those commits
    elsewhere, and their markers then decide nothing either, unless it keeps them). A commit whose marker has not
    come or lies after the cutoff stays whole, with that marker. The other markers are folded too (one row per
    fate, counted), at a place their producer had a marker, so none comes between a commit and its marker. Right
    while no record comes later at an offset among these (jobs.pipeline then replays the archive)."""
    checked = mask(pc.is_null(rows.column("error")))
    offset_commit = mask(pc.is_in(rows.column("record_type"), value_set=pa.array(OFFSET_COMMIT_TYPES, pa.int16())))
    commits = np.flatnonzero(whole_commits(rows) & offset_commit & checked)
    marker_rows = np.flatnonzero(is_marker(rows))
    if not len(commits) or not len(marker_rows):
        none = np.zeros(0, np.int64)
        return none, none, None, none, none
    found = markers(rows)  # marker_rows' markers
    at = next_marker_rows(rows.select(["coordinator_partition", "record_offset", "producer_id"])
                          .take(pa.array(commits)), found)
    deciding = np.where(at >= 0, marker_rows[np.maximum(at, 0)], -1)  # per commit: its marker's row
    settled = (deciding >= 0) & ok[commits] & ok[np.maximum(deciding, 0)]
    fate = np.asarray(found.column("fate").to_numpy(zero_copy_only=False), dtype=object)[np.maximum(at, 0)]
    committed = settled & (fate == "COMMIT")
    aborted = settled & (fate == "ABORT")
    idle = np.zeros(rows.num_rows, bool)
    partition = numbers(rows.column("coordinator_partition"), -1)  # a partition without commits keeps its markers
    idle[marker_rows] = ok[marker_rows] & np.isin(partition[marker_rows], partition[commits])
    idle[deciding[(deciding >= 0) & ~committed & ~aborted]] = False  # a marker a whole commit waits for
    return commits[committed], deciding[committed], idle, commits[aborted], deciding[aborted]


def folded_transactions(state: pa.Table) -> dict[int, int]:
    """Per coordinator partition of a replay state (jobs.replay.resume): the highest offset of a row of a
    transaction (a commit or a marker) `decided` folded. A record that comes later below it could fall between a
    commit and its marker, which the folded rows no longer show: the run then replays the archive."""
    folded = state.filter(pc.and_(pc.and_(pc.fill_null(state.column("reduced"), False),
                                          pc.not_equal(state.column("producer_id"), NO_PRODUCER)),
                                  pc.equal(state.column("topic"), OFFSETS_TOPIC)))
    ends = folded.group_by("coordinator_partition").aggregate([("record_offset", "max")])
    return dict(zip(ends.column("coordinator_partition").to_pylist(), ends.column("record_offset_max").to_pylist()))
