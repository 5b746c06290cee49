"""The replay of coordinator partitions, as the broker's load of each: every rule of jobs.replay in order.

Like GroupCoordinatorShard.replay, it hands each record to one place: offset records to the offsets (and, with
the history, to offset_commits), group records to the group replay, markers to the transactions; then retention
is applied at as_of. Its input is the partitions' checked rows, whole or reduced (jobs.replay.reduction), in any
order; its outputs are named tables (OUTPUTS), which a runner writes where the run keeps them. The rules key
records by partition and offset, and groups by id: several partitions are replayed at once when no group id is
in two of them (`partition_sets`), which is how Kafka places groups.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, epoch_us, mask
from jobs.base.retention import HistoryCutoff, kept_rows
from jobs.base.tables import FOLD_STATE, HISTORY_STATE, REPLAY_STATE, arrow_schema
from jobs.replay import contract
from jobs.replay.contract import VIOLATION_SCHEMA
from jobs.replay.counts import COUNT_SCHEMA, count_rows
from jobs.replay.duplicates import DUPLICATE_SCHEMA, deduplicate
from jobs.replay.expiry import apply_expiry
from jobs.replay.groups import (GROUP_ROWS_SCHEMA, GROUP_TYPES, existing_groups, group_activity, member_level, of_kind,
                                remaining_groups, replay_groups)
from jobs.replay.history import (COMMIT_WINDOW_SCHEMA, CONSUME_RATE_SCHEMA, commit_state,
                                 commit_windows, consume_rates, offset_commits)
from jobs.replay.applied import applied_sequence
from jobs.replay.offsets import offset_state
from jobs.replay.reduction import fold_decided
from jobs.replay.resume import (COUNTED_BY, history_state, keyed_state, replay_changed_groups, state_rows,
                                unreplayed, without_superseded)
from jobs.replay.transactions import markers
from offsets_codec import REGISTRY
from offsets_codec.registry import OFFSET_COMMIT_TYPES


@dataclass(frozen=True)
class ReplaySettings:
    """What the replay of every partition shares: the moment and the rules' parameters."""

    as_of: datetime
    retention_ms: int
    history: bool = True  # offset_commits, group_events, and what group_status and consume rates read
    status_window: int = 10  # group_status: commits judged per offset (Burrow's intervals)
    rate_window_ms: int = 15 * 60_000  # consumer_lag: rates over (as_of - this, as_of]
    keep_log: bool = False  # leave the partition's folded log for the next run (jobs.replay.resume)
    # A run that resumes with the history: per coordinator partition, the offset through which the previous run
    # replayed its records (its rows of the history tables are written; those of the records after it are new).
    replayed_through: dict[int, int] | None = None
    history_cutoff: HistoryCutoff | None = None  # --history-days: the history rows before it are not written

    @property
    def as_of_us(self) -> int:
        return epoch_us(self.as_of)

    @property
    def as_of_ms(self) -> int:
        return self.as_of_us // 1000


# What the replay of a partition gives: contract tables (their schema) and what the steps after it read.
OUTPUTS: dict[str, pa.Schema] = {
    **{t: arrow_schema(t) for t in ("committed_offsets", "expired_offsets", "consumer_groups",
                                    "pending_transactions", "quarantine", "offset_commits", "group_events")},
    # The group replay's rows the derivation names members from (groups.member_level): jobs.derive.members.
    "group_rows": GROUP_ROWS_SCHEMA,
    "offset_topics": pa.schema([("topic_id", pa.string()), ("topic", pa.string())]),
    "commit_windows": COMMIT_WINDOW_SCHEMA,
    "consume_rates": CONSUME_RATE_SCHEMA,
    "violations": VIOLATION_SCHEMA,
    "counts": COUNT_SCHEMA,
    "duplicates": DUPLICATE_SCHEMA,
    REPLAY_STATE: arrow_schema(REPLAY_STATE),
    FOLD_STATE: arrow_schema(FOLD_STATE),
    HISTORY_STATE: arrow_schema(HISTORY_STATE),
}
NON_OFFSET_TYPES = [t for t in REGISTRY if t not in OFFSET_COMMIT_TYPES]


def partition_sets(inputs: dict[str, pa.Table], keyed: Iterable[str]) -> Iterator[dict[str, pa.Table]]:
    """`inputs` (tables with coordinator_partition) cut into the sets of coordinator partitions that the replay
    (or the derivation) takes at once: its rules key a group by its id, so the partitions that share a group id
    in the `keyed` inputs go one at a time, and the others all together. In Kafka a group id is in one partition
    of the offsets topic, so that is nearly always one set."""
    if len({p for t in inputs.values() for p in pc.unique(t.column("coordinator_partition")).to_pylist()}) <= 1:
        yield inputs  # one partition (a large group's task gives them one by one): nothing to cut
        return
    pairs = pa.concat_tables([inputs[name].select(["coordinator_partition", "group_id"]) for name in keyed]) \
        .group_by(["coordinator_partition", "group_id"], use_threads=False).aggregate([])
    pairs = pairs.filter(pc.and_(pc.is_valid(pairs.column("coordinator_partition")),
                                 pc.is_valid(pairs.column("group_id"))))
    spread = pairs.group_by("group_id", use_threads=False).aggregate([("coordinator_partition", "count")])
    spread = spread.filter(pc.greater(spread.column("coordinator_partition_count"), 1)).column("group_id")
    alone = pc.unique(pairs.filter(pc.is_in(pairs.column("group_id"), value_set=spread))
                      .column("coordinator_partition"))
    if not len(alone):
        yield inputs
        return
    yield {name: t.filter(pc.invert(pc.fill_null(pc.is_in(t.column("coordinator_partition"), value_set=alone),
                                                 False))) for name, t in inputs.items()}
    for partition in sorted(alone.to_pylist()):
        yield {name: t.filter(pc.fill_null(pc.equal(t.column("coordinator_partition"), partition), False))
               for name, t in inputs.items()}


def replay_partition(rows: pa.Table, settings: ReplaySettings, kept_groups: pa.Table | None = None,
                     tail: pa.Table | None = None) -> Iterator[tuple[str, pa.Table]]:
    """(output name, table) for coordinator partitions' checked rows (with jobs.replay.reduction's fields), as the
    replay of each alone gives them, when no group id is in two of them (`partition_sets`); `kept_groups`: the
    group replay's rows an earlier run kept of the partitions (FOLD_STATE rows), `tail`: its history state
    (HISTORY_STATE rows), when the rows are that run's replay state and the new records (jobs.replay.resume)."""
    rows, duplicates, conflicts = deduplicate(rows)
    yield "duplicates", pa.table({"duplicates": [duplicates], "conflicts": [conflicts]}, schema=DUPLICATE_SCHEMA)
    unfolded = rows if settings.keep_log else None
    if settings.keep_log:  # the fold of every record so far: the next run starts from it, and so does this replay
        rows = fold_decided(rows)
    yield "counts", count_rows(rows, settings.as_of_us)
    failed = mask(pc.is_valid(rows.column("error")))
    if failed.any():
        yield "quarantine", contract.quarantine(rows.filter(pa.array(failed)))
    valid = _valid(rows, settings)
    superseded: list[pa.Table] = []  # the group records the state need not keep, as the group replay found
    if valid.any():
        yield from _replay(rows, valid, settings, kept_groups, unfolded, tail, superseded)
    if settings.keep_log:
        yield REPLAY_STATE, state_rows(without_superseded(rows, pa.concat_tables([COUNTED_BY.empty_table(),
                                                                                  *superseded])))


def _valid(rows: pa.Table, settings: ReplaySettings) -> np.ndarray:
    """Per row: a record the replay applies (checked, and up to as_of)."""
    late = mask(pc.greater(rows.column("record_timestamp"), pa.scalar(settings.as_of_us, TIMESTAMP)))
    return ~mask(pc.is_valid(rows.column("error"))) & ~late & ~mask(rows.column("after_as_of"))


# What the rules read of offset records (a filter copies every column it keeps, and offset records are the log).
OFFSET_COLUMNS = ["coordinator_partition", "record_offset", "record_timestamp", "key", "value", "producer_id",
                  "producer_epoch", "group_id", "reduced"]


def _of_types(rows: pa.Table, valid: np.ndarray, types: Iterable[int], columns: list[str] | None = None) -> pa.Table:
    """The `valid` rows of `types` (only `columns`, when given)."""
    kept = valid & mask(pc.is_in(rows.column("record_type"), value_set=pa.array(types, pa.int16())))
    return (rows if columns is None else rows.select(columns)).filter(pa.array(kept))


def _offset_records(rows: pa.Table, valid: np.ndarray) -> pa.Table:
    """The `valid` offset records, with the OFFSET_COLUMNS the rules read."""
    return _of_types(rows, valid, OFFSET_COMMIT_TYPES, OFFSET_COLUMNS)


def _replay(rows: pa.Table, valid: np.ndarray, settings: ReplaySettings, kept_groups: pa.Table | None,
            unfolded: pa.Table | None, tail: pa.Table | None, superseded: list[pa.Table]
            ) -> Iterator[tuple[str, pa.Table]]:
    """The replay of `rows`' `valid` records: each kind of record taken from `rows` once, to where it goes; the
    history's from `unfolded`, the rows before a run that keeps its log folded them (jobs.replay.resume): a resumed
    run's history rows are those of the records its state keeps whole and of the new ones, whole. `superseded`
    gains the group records a run that keeps its log need not keep (jobs.replay.resume.replay_changed_groups)."""
    def of_types(types: Iterable[int]) -> pa.Table:
        return _of_types(rows, valid, types)

    found = markers(rows, valid)
    offset_records = _offset_records(rows, valid)
    sequence = applied_sequence(offset_records, found)  # both the state and offset_commits follow from it
    offsets = offset_state(offset_records, sequence)
    group_records = of_types(GROUP_TYPES)
    if settings.history and unfolded is not None:
        unfolded_valid = _valid(unfolded, settings)
        history_records = _offset_records(unfolded, unfolded_valid)
    else:
        history_records = offset_records
    # Which group held offsets when its group tombstone came (a group event): a record folded into a newer one
    # of its key the same replay placed (the state's are folded apart from the new ones).
    placed = history_records.select(["coordinator_partition", "group_id", "record_offset"])
    if settings.keep_log:  # kept for the next run, which replays only the groups with new records again
        group_rows, kept, dropped = replay_changed_groups(group_records, kept_groups, settings.history,
                                                          placed if settings.history else None,
                                                          settings.replayed_through)
        superseded.append(dropped)
        yield FOLD_STATE, kept
    else:
        group_rows = replay_groups(group_records, settings.history, placed)

    groups = existing_groups(of_kind(group_rows, "group"), of_kind(group_rows, "identity"), offsets.committed,
                             offsets.pending)
    expiry = apply_expiry(offsets.committed, groups, offsets.pending, settings.as_of_ms, settings.retention_ms)
    groups = remaining_groups(groups, expiry.live, offsets.pending)
    as_of = pa.scalar(settings.as_of, TIMESTAMP)
    yield "committed_offsets", contract.offset_rows(expiry.live, as_of, "committed_offsets")
    yield "expired_offsets", contract.offset_rows(expiry.expired, as_of, "expired_offsets")
    existing = contract.consumer_groups(groups, group_activity(offsets.winners, of_types(NON_OFFSET_TYPES)), as_of)
    yield "consumer_groups", existing
    if offsets.pending.num_rows:
        yield "pending_transactions", contract.pending_transactions(offsets.pending, as_of)
    yield "group_rows", member_level(group_rows, existing)
    topics = offsets.committed.filter(pc.is_valid(offsets.committed.column("topic_id")))
    yield "offset_topics", topics.select(["topic_id", "topic"])
    violations = of_kind(group_rows, "violation")
    if violations.num_rows:
        yield "violations", contract.violations(violations)
    if settings.history:
        events = contract.group_events(of_kind(group_rows, "event"))
        yield "group_events", kept_rows(settings.history_cutoff, "group_events", events)
        if unfolded is not None:  # the history's records are not the state's
            whole_valid = unfolded_valid & unreplayed(unfolded, settings.replayed_through)
            offset_records = _offset_records(unfolded, whole_valid)
            sequence = applied_sequence(offset_records, markers(unfolded, whole_valid))
        earlier = keyed_state(tail)
        commits, keys = offset_commits(offset_records, sequence, earlier)
        yield "offset_commits", kept_rows(settings.history_cutoff, "offset_commits", commits)
        window_us = settings.rate_window_ms * 1000
        state = commit_state(commits, settings.status_window, settings.as_of_us - window_us, keys, earlier)
        yield "commit_windows", commit_windows(state)
        yield "consume_rates", consume_rates(state, settings.as_of_us, window_us)
        if settings.keep_log:
            yield HISTORY_STATE, history_state(state, commits, events, tail, settings.status_window,
                                               settings.rate_window_ms)
