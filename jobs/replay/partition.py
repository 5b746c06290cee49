"""The replay of coordinator partitions, as the broker's load of each: every rule of jobs.replay in order.

Like GroupCoordinatorShard.replay, it hands each record to one place: offset records to the offsets (and, with
the history, to offset_commits), group records to the group fold, markers to the transactions; then retention
is applied at as_of. Its input is the partitions' checked rows, whole or reduced (jobs.replay.reduction), in any
order; its outputs are named tables (OUTPUTS), which a runner writes where the run keeps them. The rules key
records by partition and offset, and groups by id: several partitions are replayed at once when no group id is
in two of them (`together`), which is how Kafka places groups.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.tables import FOLD_STATE, HISTORY_STATE, REPLAY_STATE, arrow_schema, conform
from jobs.replay.counts import COUNT_SCHEMA, count_rows
from jobs.replay.duplicates import DUPLICATE_SCHEMA, deduplicate
from jobs.replay.expiry import apply_expiry
from jobs.replay.groups import CLASSIC, FOLD_SCHEMA, GROUP_TYPES, of_kind, replay_partition as fold_groups
from jobs.replay.history import (COMMIT_WINDOW_SCHEMA, CONSUME_RATE_SCHEMA, MAX_MS, MIN_MS, commit_state,
                                 commit_windows, consume_rates, offset_commits)
from jobs.base.arrow import TIMESTAMP, epoch_us, mask, numbers
from jobs.replay.offsets import offset_state
from jobs.replay.reduction import fold_decided
from jobs.replay.resume import (fingerprints, fold_state, history_state, keyed_state, reusable, state_rows,
                                unreplayed)
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

    @property
    def as_of_us(self) -> int:
        return epoch_us(self.as_of)

    @property
    def as_of_ms(self) -> int:
        return self.as_of_us // 1000


# What the replay of a partition gives: contract tables (their schema) and what the steps after it read.
VIOLATION_SCHEMA = pa.schema([("group_id", pa.string()), ("reason", pa.string())])
OUTPUTS: dict[str, pa.Schema] = {
    **{t: arrow_schema(t) for t in ("committed_offsets", "expired_offsets", "consumer_groups",
                                    "pending_transactions", "quarantine", "offset_commits", "group_events")},
    "fold": FOLD_SCHEMA,  # members, target assignments, topologies and topic names, for jobs.derive.members
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
GROUP_KEY = ["coordinator_partition", "group_id"]
NON_OFFSET_TYPES = [t for t in REGISTRY if t not in OFFSET_COMMIT_TYPES]


def together(inputs: dict[str, pa.Table], keyed: Iterable[str]) -> Iterator[dict[str, pa.Table]]:
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


def replay_partition(rows: pa.Table, settings: ReplaySettings, folded: pa.Table | None = None,
                     tail: pa.Table | None = None) -> Iterator[tuple[str, pa.Table]]:
    """(output name, table) for coordinator partitions' checked rows (with jobs.replay.reduction's fields), as the
    replay of each alone gives them, when no group id is in two of them (`together`); `folded`: the group fold an
    earlier run kept of the partitions (FOLD_STATE rows), `tail`: its history state (HISTORY_STATE rows), when
    the rows are that run's replay state and the new records (jobs.replay.resume)."""
    rows, duplicates, conflicts = deduplicate(rows)
    yield "duplicates", pa.table({"duplicates": [duplicates], "conflicts": [conflicts]}, schema=DUPLICATE_SCHEMA)
    unfolded = rows if settings.keep_log else None
    if settings.keep_log:  # the fold of every record so far: the next run starts from it, and so does this replay
        rows = fold_decided(rows)
        yield REPLAY_STATE, state_rows(rows)
    yield "counts", count_rows(rows, settings.as_of_us)
    failed = mask(pc.is_valid(rows.column("error")))
    if failed.any():
        yield "quarantine", _quarantine(rows.filter(pa.array(failed)))
    valid = _valid(rows, settings)
    if valid.any():
        yield from _replay(rows, valid, settings, folded, unfolded, tail)


def _valid(rows: pa.Table, settings: ReplaySettings) -> np.ndarray:
    """Per row: a record the replay applies (checked, and up to as_of)."""
    late = mask(pc.greater(rows.column("record_timestamp"), pa.scalar(settings.as_of_us, TIMESTAMP)))
    return ~mask(pc.is_valid(rows.column("error"))) & ~late & ~mask(rows.column("after_as_of"))


# What the rules read of offset records (a filter copies every column it keeps, and offset records are the log).
OFFSET_COLUMNS = ["coordinator_partition", "record_offset", "record_timestamp", "key", "value", "producer_id",
                  "producer_epoch", "group_id", "reduced"]


def _of_types(rows: pa.Table, valid: np.ndarray, types: Iterable[int]) -> pa.Table:
    """The `valid` rows of `types` (of offset records, only OFFSET_COLUMNS)."""
    kept = valid & mask(pc.is_in(rows.column("record_type"), value_set=pa.array(types, pa.int16())))
    return (rows.select(OFFSET_COLUMNS) if types is OFFSET_COMMIT_TYPES else rows).filter(pa.array(kept))


def _replay(rows: pa.Table, valid: np.ndarray, settings: ReplaySettings, folded: pa.Table | None,
            unfolded: pa.Table | None, tail: pa.Table | None) -> Iterator[tuple[str, pa.Table]]:
    """The replay of `rows`' `valid` records: each kind of record taken from `rows` once, to where it goes; the
    history's from `unfolded`, the rows before a run that keeps its log folded them (jobs.replay.resume): a resumed
    run's history rows are those of the records its state keeps whole and of the new ones, whole."""
    def of_types(types: Iterable[int]) -> pa.Table:
        return _of_types(rows, valid, types)

    found = markers(rows.filter(pa.array(valid & mask(rows.column("is_control")))))
    offset_records = of_types(OFFSET_COMMIT_TYPES)
    offsets = offset_state(offset_records, found)
    group_records = of_types(GROUP_TYPES)
    if settings.history and unfolded is not None:
        history_records = _of_types(unfolded, _valid(unfolded, settings), OFFSET_COMMIT_TYPES)
    else:
        history_records = offset_records
    # Which group held offsets when its group tombstone came (a group event): a record folded into a newer one
    # of its key the same replay placed (the state's are folded apart from the new ones).
    placed = history_records.select(["coordinator_partition", "group_id", "record_offset"])
    if settings.keep_log:  # the fold is kept for the next run, which reuses the rows of groups without new records
        prints = fingerprints(group_records)
        reused = reusable(folded, prints) if folded is not None else FOLD_SCHEMA.empty_table()
        again = pc.invert(pc.is_in(group_records.column("group_id"), value_set=pc.unique(reused.column("group_id"))))
        refolded = group_records.filter(again)
        last_events = of_kind(folded, "last_event") if folded is not None and settings.history else None
        fold = pa.concat_tables([fold_groups(refolded, settings.history, placed if settings.history else None,
                                             settings.replayed_through, last_events),
                                 reused.select(FOLD_SCHEMA.names).cast(FOLD_SCHEMA)])
        kept = fold.filter(pc.not_equal(fold.column("kind"), "event"))  # events are the history's, never state
        yield FOLD_STATE, fold_state(kept, prints)
    else:
        fold = fold_groups(group_records, settings.history, placed)

    def of(kind: str) -> pa.Table:
        return of_kind(fold, kind)

    groups = _groups(of("group"), of("identity"), offsets.committed, offsets.pending)
    expiry = apply_expiry(offsets.committed, groups, offsets.pending, settings.as_of_ms, settings.retention_ms)
    as_of = pa.scalar(settings.as_of, TIMESTAMP)
    yield "committed_offsets", _offset_rows(expiry.live, as_of, "committed_offsets")
    yield "expired_offsets", _offset_rows(expiry.expired, as_of, "expired_offsets")
    existing = _consumer_groups(expiry.groups, _activity(offsets.winners, of_types(NON_OFFSET_TYPES)), as_of)
    yield "consumer_groups", existing
    if offsets.pending.num_rows:
        yield "pending_transactions", _pending_rows(offsets.pending, as_of)
    yield "fold", _member_level(fold, existing)
    topics = offsets.committed.filter(pc.is_valid(offsets.committed.column("topic_id")))
    yield "offset_topics", topics.select(["topic_id", "topic"])
    violations = of("violation")
    if violations.num_rows:
        yield "violations", pa.table([violations.column("group_id"), pc.struct_field(violations.column("violation"),
                                                                                     "reason")],
                                     schema=VIOLATION_SCHEMA)
    if settings.history:
        events = _group_events(of("event"))
        yield "group_events", events
        if unfolded is not None:  # the history's records are not the state's
            whole = unreplayed(unfolded, settings.replayed_through)
            whole_valid = _valid(whole, settings)
            found = markers(whole.filter(pa.array(whole_valid & mask(whole.column("is_control")))))
            offset_records = _of_types(whole, whole_valid, OFFSET_COMMIT_TYPES)
        earlier = keyed_state(tail)
        commits, keys = offset_commits(offset_records, found, earlier)
        yield "offset_commits", commits
        window_us = settings.rate_window_ms * 1000
        state = commit_state(commits, settings.status_window, settings.as_of_us - window_us, keys, earlier)
        yield "commit_windows", commit_windows(state)
        yield "consume_rates", consume_rates(state, settings.as_of_us, window_us)
        if settings.keep_log:
            yield HISTORY_STATE, history_state(state, commits, events, tail, settings.status_window,
                                               settings.rate_window_ms)


def _groups(held: pa.Table, identity: pa.Table, committed: pa.Table, pending: pa.Table) -> pa.Table:
    """The partitions' groups: those a family holds (the fold's), and the simple groups, made by offsets of an id
    no family holds (state Empty, generation 0, no protocol type). When the newest record that removed an id's
    group (a type-2 or modern group tombstone) came after every commit, its offsets are orphans the pre-4.0
    coordinator loaded as a simple group (`is_orphan`). Open transactional commits count too: their replay
    created the group, and they keep it (spec §8.4)."""
    fields = FOLD_SCHEMA.field("group").type
    group_rows = [{"coordinator_partition": p, "group_id": g, **row, "is_orphan": False} for p, g, row in
                  zip(*(held.column(c).to_pylist() for c in ("coordinator_partition", "group_id", "group")))]
    holders = {g: (i["holder"], i["newest_identity_offset"]) for g, i in
               zip(identity.column("group_id").to_pylist(), identity.column("identity").to_pylist())}
    columns = ["coordinator_partition", "group_id", "record_offset"]
    commits = pa.concat_tables([committed.select(columns), pending.select(columns)]).group_by(
        columns[:2], use_threads=False).aggregate([("record_offset", "max")])
    for partition, g, newest in zip(*(commits.column(c).to_pylist() for c in commits.column_names)):
        holder, newest_identity = holders.get(g, (None, None))
        if holder is not None:
            continue
        group_rows.append({
            "coordinator_partition": partition, "group_id": g, **{f.name: None for f in fields}, "group_type": CLASSIC,
            "state": "Empty", "generation": 0, "member_count": 0, "subscribed_topics": [],
            "is_orphan": newest_identity is not None and newest_identity > newest})
    schema = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()), *fields,
                        ("is_orphan", pa.bool_())])
    return pa.Table.from_pylist(group_rows, schema=schema)


def _activity(winners: pa.Table, others: pa.Table) -> pa.Table:
    """Per group id, the offset and timestamp of the newest record about the group, metadata or offsets
    (group_id, record_offset, record_timestamp): a group's newest offset record is the newest record of one of its
    keys, so the keys' winners stand in for its offset records; `others`: the valid records of the other types."""
    place = ["coordinator_partition", "record_offset"]
    columns = [*place, "group_id", "record_timestamp"]
    rows = pa.concat_tables([winners.select(columns), others.select(columns).cast(winners.select(columns).schema)])
    rows = rows.filter(pc.is_valid(rows.column("group_id")))
    newest = rows.group_by(["coordinator_partition", "group_id"], use_threads=False).aggregate(
        [("record_offset", "max")])
    # Offsets are unique in a coordinator partition: the newest offset names one record.
    return rows.join(newest.select(["coordinator_partition", "record_offset_max"]).rename_columns(place), place,
                     join_type="inner", use_threads=False)


def _consumer_groups(groups: pa.Table, activity: pa.Table, as_of: pa.Scalar) -> pa.Table:
    n = groups.num_rows
    at = pc.index_in(groups.column("group_id"), value_set=activity.column("group_id"))
    columns = {name: groups.column(name) for name in groups.column_names}
    columns.update({
        "current_state_timestamp": timestamps_ms(groups.column("current_state_timestamp_ms")),
        "last_record_offset": activity.column("record_offset").take(at),
        "last_record_timestamp": activity.column("record_timestamp").take(at),
        "as_of": pa.repeat(as_of, n),
    })
    return conform(columns, "consumer_groups")


def _offset_rows(offsets: pa.Table, as_of: pa.Scalar, table: str) -> pa.Table:
    columns = {name: offsets.column(name) for name in offsets.column_names}
    columns.update({
        "commit_timestamp": timestamps_ms(offsets.column("commit_timestamp_ms")),
        "expire_timestamp": timestamps_ms(offsets.column("expire_timestamp_ms")),
        "expires_at": timestamps_ms(offsets.column("expires_at_ms")),
        "as_of": pa.repeat(as_of, offsets.num_rows),
    })
    if "expired_at_ms" in columns:
        columns["expired_at"] = timestamps_ms(offsets.column("expired_at_ms"))
    return conform(columns, table)


def _pending_rows(pending: pa.Table, as_of: pa.Scalar) -> pa.Table:
    columns = {name: pending.column(name) for name in pending.column_names}
    columns.update({"offset": pending.column("committed_offset"),
                    "commit_timestamp": timestamps_ms(pending.column("commit_timestamp_ms")),
                    "as_of": pa.repeat(as_of, pending.num_rows)})
    return conform(columns, "pending_transactions")


def timestamps_ms(ms: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Epoch milliseconds as timestamps; null outside the years a timestamp can hold."""
    values = numbers(ms)
    ok = mask(pc.is_valid(ms)) & (values >= MIN_MS) & (values <= MAX_MS)
    return pa.array(np.where(ok, values, 0) * 1000, pa.int64(), mask=~ok).cast(TIMESTAMP)


def _member_level(fold: pa.Table, existing: pa.Table) -> pa.Table:
    """The fold's rows the member-level tables are named from: every member (a group expiry deletes is Empty, so
    has none), the topic names, and the target assignments and topologies of the groups that exist."""
    kind = fold.column("kind")
    keep = pc.is_in(kind, value_set=pa.array(["member", "topic_name"]))
    kept_groups = pc.is_in(fold.column("group_id"), value_set=existing.column("group_id"))
    of_existing = pc.and_(pc.is_in(kind, value_set=pa.array(["target", "topology"])), kept_groups)
    return fold.filter(pc.or_(keep, of_existing))


def _group_events(events: pa.Table) -> pa.Table:
    fields = events.column("event").combine_chunks() if events.num_rows else None
    columns = {"group_id": events.column("group_id"), "coordinator_partition": events.column("coordinator_partition")}
    for f in FOLD_SCHEMA.field("event").type:
        columns[f.name] = pc.struct_field(fields, f.name) if fields is not None else pa.nulls(0, f.type)
    columns["event_timestamp"] = timestamps_ms(columns["event_timestamp_ms"])
    return conform(columns, "group_events")


def _quarantine(failed: pa.Table) -> pa.Table:
    return conform(failed, "quarantine")
