"""Share groups' progress (KIP-932): the share coordinator's load of `__share_group_state`, per share partition.

As ShareCoordinatorShard.replay, per key (group id, topic id, partition) in log order: a ShareSnapshot is the
whole new state; a ShareUpdate applies on top of it (a new start offset and leader epoch unless -1, its state
batches merged by `combine_state_batches`); a tombstone deletes the key. The records are the share
coordinator's, in their own topic and registry (offsets_codec.SHARE_STATE): never a `__consumer_offsets`
partition's, whose numbers they share, so they travel apart (`share_log`) and meet nothing else here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask
from jobs.base.tables import REPLAY_STATE, arrow_schema
from jobs.decode.check import check_share_state
from jobs.replay.contract import timestamps_ms
from jobs.replay.counts import COUNT_SCHEMA, count_rows
from jobs.replay.duplicates import DUPLICATE_SCHEMA, deduplicate
from jobs.replay.resume import state_rows
from offsets_codec import SHARE_STATE
from offsets_codec.registry import SHARE_SNAPSHOT, SHARE_STATE_TOPIC

# Delivery states as persisted (RecordState): 1 Acquired and 3 Archiving are never written.
DELIVERY_STATES = {0: "Available", 2: "Acknowledged", 4: "Archived"}
NO_OFFSET = -1  # StartOffset, LeaderEpoch of a ShareUpdate: "not changed"; StartOffset of a snapshot: uninitialized
Batch = tuple[int, int, int, int]  # first offset, last offset, delivery state, delivery count
# What the replay of the topic gives besides quarantine rows: the state (share_partition_state rows whose topic
# jobs.derive names) and its counts (COUNT_SCHEMA, the record types of this topic's registry).
OUTPUTS = {"share_state": arrow_schema("share_partition_state"), "share_counts": COUNT_SCHEMA}


def combine_state_batches(so_far: list[Batch], new: list[Batch], start_offset: int) -> list[Batch]:
    """PersisterStateBatchCombiner: the batches of both lists, those below `start_offset` pruned (unless it is -1),
    where two overlap the higher (delivery count, delivery state) wins, and neighbours alike coalesced.

    Computed per elementary range between the batches' bounds, which gives each offset its winner directly
    rather than by Kafka's pairwise splitting; in sorted order, non-overlapping, contiguous ranges alike joined."""
    batches = [(max(f, start_offset) if start_offset != NO_OFFSET else f, last, s, c)
               for f, last, s, c in [*so_far, *new] if start_offset == NO_OFFSET or last >= start_offset]
    if not batches:
        return []
    bounds = sorted({b[0] for b in batches} | {b[1] + 1 for b in batches})
    result: list[Batch] = []
    for low, high in zip(bounds, bounds[1:]):
        covering = [(c, s) for f, last, s, c in batches if f <= low and high - 1 <= last]
        if not covering:
            continue  # a gap: no state is kept for these offsets
        count, state = max(covering)
        if result and result[-1][1] == low - 1 and result[-1][2:] == (state, count):
            result[-1] = (result[-1][0], high - 1, state, count)
        else:
            result.append((low, high - 1, state, count))
    return result


@dataclass(frozen=True)
class ShareGroupOffset:
    """One share partition's state (Kafka's ShareGroupOffset), and where in the log it comes from."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp_ms: int | None
    write_timestamp_ms: int | None
    batches: list[Batch]
    updates_since_snapshot: int
    record_offset: int


def apply(state: ShareGroupOffset | None, record_type: int, value: dict | None, offset: int) -> ShareGroupOffset | None:
    """The state of a key after one record (the codec's value data; None: a tombstone, which deletes the key)."""
    if value is None:
        return None
    batches = [(b["FirstOffset"], b["LastOffset"], b["DeliveryState"], b["DeliveryCount"]) for b in value["StateBatches"]]
    if record_type == SHARE_SNAPSHOT:
        return ShareGroupOffset(value["SnapshotEpoch"], value["StateEpoch"], value["LeaderEpoch"], value["StartOffset"],
                                value["DeliveryCompleteCount"], value["CreateTimestamp"], value["WriteTimestamp"],
                                combine_state_batches([], batches, value["StartOffset"]), 0, offset)
    if state is None:  # an update without a snapshot is the state (ShareGroupOffset.fromRecord): no state epoch
        return ShareGroupOffset(value["SnapshotEpoch"], -1, value["LeaderEpoch"], value["StartOffset"],
                                value["DeliveryCompleteCount"], None, None,
                                combine_state_batches([], batches, value["StartOffset"]), 1, offset)
    start = value["StartOffset"] if value["StartOffset"] != NO_OFFSET else state.start_offset
    # The snapshot epoch and the state epoch stay the snapshot's (ShareCoordinatorShard.merge).
    return replace(state, start_offset=start, batches=combine_state_batches(state.batches, batches, start),
                   leader_epoch=value["LeaderEpoch"] if value["LeaderEpoch"] != NO_OFFSET else state.leader_epoch,
                   delivery_complete_count=value["DeliveryCompleteCount"]
                   if value["DeliveryCompleteCount"] != NO_OFFSET else state.delivery_complete_count,
                   updates_since_snapshot=state.updates_since_snapshot + 1, record_offset=offset)


def replay_share_state(rows: pa.Table, as_of_us: int, as_of: datetime, keep_log: bool = False
                       ) -> Iterator[tuple[str, pa.Table]]:
    """(output name, table) of `__share_group_state` records (jobs.replay.records' RECORD_SCHEMA, any partitions):
    `quarantine` for those that cannot be read, `duplicates` (records read twice, as jobs.replay.duplicates
    tells them), `share_counts` (COUNT_SCHEMA, of this topic's types) and `share_state`: share_partition_state
    rows, their topic not named yet (jobs.derive names it). `keep_log`: also the records, once each, as
    `_replay_state` rows (jobs.replay.resume)."""
    checked = check_share_state(rows)
    partitions = checked.column("coordinator_partition")
    states: dict[tuple, tuple[int, ShareGroupOffset]] = {}
    for p in pc.unique(partitions).to_pylist():
        part, copies, conflicts = deduplicate(checked.filter(pc.is_null(partitions) if p is None else
                                                             pc.equal(partitions, p)))
        yield "duplicates", pa.table({"duplicates": [copies], "conflicts": [conflicts]}, schema=DUPLICATE_SCHEMA)
        if keep_log:
            yield REPLAY_STATE, state_rows(part, SHARE_STATE_TOPIC)
        part = part.append_column("records", pa.array(np.ones(part.num_rows, np.int64)))
        part = part.append_column("newest_timestamp", part.column("record_timestamp"))
        yield "share_counts", count_rows(part, as_of_us)
        failed = mask(pc.is_valid(part.column("error")))
        if failed.any():
            yield "quarantine", part.filter(pa.array(failed))
        late = mask(pc.greater(part.column("record_timestamp"), pa.scalar(as_of_us, TIMESTAMP)))
        valid = part.filter(pa.array(~failed & ~late & ~mask(part.column("is_control"))))
        valid = valid.take(pc.sort_indices(valid, [("record_offset", "ascending")]))
        for key, value, offset in zip(*(valid.column(c).to_pylist() for c in ("key", "value", "record_offset"))):
            k = SHARE_STATE.decode_key(key)
            data = None if value is None else SHARE_STATE.decode_value(k.record_type, value).data
            at = (k.data["GroupId"], k.data["TopicId"], k.data["Partition"])
            state = apply(states.get(at, (p, None))[1], k.record_type, data, offset)
            if state is None:
                states.pop(at, None)
            else:
                states[at] = (p, state)
    yield "share_state", share_rows(states, as_of)


def share_rows(states: dict[tuple, tuple[int, ShareGroupOffset]], as_of: datetime) -> pa.Table:
    """share_partition_state rows of the states, keyed (group id, topic id, partition), topic unnamed."""
    schema = arrow_schema("share_partition_state")
    found = sorted(states.items())
    rows = [{"group_id": g, "topic": None, "topic_id": t, "partition": n, "coordinator_partition": p,
             "start_offset": s.start_offset, "state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch,
             "in_flight": [{"first_offset": f, "last_offset": last, "delivery_state": DELIVERY_STATES.get(d, str(d)),
                            "delivery_count": c} for f, last, d, c in s.batches],
             "snapshot_epoch": s.snapshot_epoch, "updates_since_snapshot": s.updates_since_snapshot,
             "delivery_complete_count": s.delivery_complete_count, "record_offset": s.record_offset, "as_of": as_of}
            for (g, t, n), (p, s) in found]
    table = pa.Table.from_pylist(rows, schema=schema)
    for column, ms in (("create_timestamp", [s.create_timestamp_ms for _, (_, s) in found]),
                       ("write_timestamp", [s.write_timestamp_ms for _, (_, s) in found])):
        index = schema.get_field_index(column)
        table = table.set_column(index, schema.field(index), _timestamps(pa.array(ms, pa.int64())))
    return table


def _timestamps(ms: pa.Array) -> pa.Array:
    """A share state's times (epoch milliseconds; -1: none): null when there is none, or outside the years a
    timestamp can hold (a corrupt record is no reason to stop the run)."""
    return timestamps_ms(pc.if_else(pc.less(ms, 0), pa.scalar(None, pa.int64()), ms))


def share_lag_rows(state: pa.Table) -> pa.Table:
    """The rows consumer_lag measures of share partitions: the start offset as committed_offset (null while it
    is -1, uninitialized: no lag, as kafka-share-groups.sh prints `-`), and the delivery complete count."""
    start = state.column("start_offset")
    known = pc.greater_equal(start, 0)
    return pa.table({"group_id": state.column("group_id"), "topic": state.column("topic"),
                     "partition": state.column("partition"),
                     "committed_offset": pc.if_else(known, start, pa.scalar(None, pa.int64())),
                     "as_of": state.column("as_of"),
                     "delivery_complete_count": state.column("delivery_complete_count")})

