"""A sequential reference replay ("oracle") of ``__consumer_offsets`` for tests.

It folds the log one record at a time, the way Kafka's new group coordinator loads a partition
(spec §7.1-§7.3), so that the set-based Spark job can be checked against it. Clarity over speed.

Followed, from Kafka trunk (group-coordinator/src/main/java/org/apache/kafka/coordinator/group/):

* ``GroupCoordinatorShard.replay``: types 0 and 1 go to the offsets replay (type 0 converted to type 1),
  type 2 to the classic-group replay; ``replayEndTransactionMarker`` hands COMMIT/ABORT to the offsets.
* ``OffsetMetadataManager.replay`` / ``replayEndTransactionMarker``: committed and pending offsets.
* ``GroupMetadataManager.replay(GroupMetadataKey, GroupMetadataValue)`` and
  ``getOrMaybeCreateClassicGroup``: classic groups, and the "simple" group an offset commit creates.

Deliberate differences from the broker (this is a test oracle, not a coordinator):

* Only offsets (types 0, 1) and classic groups (type 2) are modelled. Records of other known types are
  ignored, so "no group holds the id" means "no *classic* group holds the id".
* Records whose key or value does not decode are skipped and counted (Kafka fails the load instead).
* A simple group's ``current_state_timestamp`` is None: Kafka sets it to the wall-clock time of the load,
  which the log does not contain.
* Type 0 values keep every field the codec decodes. Kafka 4.1+ converts a type-0 value keeping only
  offset, metadata and commitTimestamp, but it accepts only v0 there, which has no other field; Kafka
  <= 4.0 kept them all. For v0 the result is the same.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from offsets_codec import DecodeError, decode_key, decode_value

NO_PRODUCER_ID = -1
LEGACY_OFFSET_COMMIT, OFFSET_COMMIT, GROUP_METADATA = 0, 1, 2


class LogEntry(NamedTuple):
    """One record of a ``__consumer_offsets`` partition, in log order."""

    partition: int  # coordinator partition
    offset: int  # the record's offset in that partition
    producer_id: int  # -1: not transactional
    control: str | None  # "COMMIT" / "ABORT" for a transaction marker, else None
    key: bytes | None
    value: bytes | None  # None: tombstone


@dataclass(frozen=True)
class OffsetState:
    offset: int
    leader_epoch: int | None  # None for -1 (Utils.ofSentinel)
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None  # None when absent or -1
    record_offset: int  # offset of the offset-commit record (not of any marker)


@dataclass(frozen=True)
class PendingState:
    offset: int
    record_offset: int


@dataclass(frozen=True)
class GroupState:
    protocol_type: str | None  # None when "" or null
    state: str  # "Empty" or "Stable": the only states a replayed classic group can have
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int | None  # None when absent or -1, and for simple groups (see module doc)
    member_ids: tuple[str, ...]  # in record order
    is_simple: bool  # ClassicGroup.isSimpleGroup(): no protocol type and no members


class Applied(NamedTuple):
    """One offset record applied (offset_commits): where, to which key, and what it replaced."""

    partition: int  # coordinator partition
    position: int  # the record's offset, or its COMMIT marker's for a transactional commit
    key: tuple[str, str, int]  # group, topic, partition
    offset: int | None  # None: deleted
    previous: int | None  # the committed offset it replaced; None when none was live
    producer_id: int


@dataclass
class ReplayResult:
    committed: dict[tuple[int, str, str, int], OffsetState] = field(default_factory=dict)
    # (partition, group, topic, topic_partition, producer_id): offsets of transactions still open at the end
    pending: dict[tuple[int, str, str, int, int], PendingState] = field(default_factory=dict)
    groups: dict[tuple[int, str], GroupState] = field(default_factory=dict)
    history: list[Applied] = field(default_factory=list)  # in log order per coordinator partition
    skipped: int = 0  # records whose key or value did not decode


def _offset_state(value_data: dict, record_offset: int) -> OffsetState:
    leader_epoch = value_data.get("leaderEpoch", -1)
    expire = value_data.get("expireTimestamp", -1)
    return OffsetState(
        offset=value_data["offset"],
        leader_epoch=None if leader_epoch == -1 else leader_epoch,
        metadata=value_data["metadata"],
        commit_timestamp=value_data["commitTimestamp"],
        expire_timestamp=None if expire == -1 else expire,
        record_offset=record_offset,
    )


def _simple_group() -> GroupState:
    # new ClassicGroup(groupId, EMPTY, time): generation 0, no protocol type, name or leader.
    return GroupState(None, "Empty", 0, None, None, None, (), True)


def _group_state(d: dict) -> GroupState:
    protocol_type = d["protocolType"] or None  # "" and null both mean "none"
    timestamp = d.get("currentStateTimestamp", -1)
    member_ids = tuple(m["memberId"] for m in d["members"])
    return GroupState(
        protocol_type=protocol_type,
        state="Stable" if member_ids else "Empty",
        generation=d["generation"],
        protocol=d["protocol"],
        leader=d["leader"],
        current_state_timestamp=None if timestamp == -1 else timestamp,
        member_ids=member_ids,
        is_simple=protocol_type is None and not member_ids,
    )


class _Partition:
    """The state of one coordinator partition (a group lives in exactly one)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.history: list[Applied] = []
        self.committed: dict[tuple[str, str, int], OffsetState] = {}
        self.pending: dict[int, dict[tuple[str, str, int], OffsetState]] = {}  # producer id -> offsets
        self.groups: dict[str, GroupState] = {}

    def replay_offset(self, record_offset: int, producer_id: int, k: tuple[str, str, int], value: dict | None):
        if value is not None:
            group = k[0]
            if group not in self.groups:
                self.groups[group] = _simple_group()
            if producer_id == NO_PRODUCER_ID:
                self._apply(record_offset, k, _offset_state(value, record_offset), producer_id)
            else:
                self.pending.setdefault(producer_id, {})[k] = _offset_state(value, record_offset)
        else:
            # A tombstone, whatever its producer: drop the committed offset and every open
            # transaction's pending offset for the key. (Kafka finds those producers through its
            # openTransactions index; it holds exactly the producers with a pending entry for the key.)
            self._apply(record_offset, k, None, producer_id)
            for offsets in self.pending.values():
                offsets.pop(k, None)

    def _apply(self, position: int, k: tuple[str, str, int], state: OffsetState | None, producer_id: int) -> None:
        previous = self.committed.pop(k, None)
        if state is not None:
            self.committed[k] = state
        self.history.append(Applied(self.partition, position, k, state and state.offset,
                                    previous and previous.offset, producer_id))

    def replay_marker(self, marker_offset: int, producer_id: int, result: str) -> None:
        offsets = self.pending.pop(producer_id, None)
        if offsets is None or result != "COMMIT":
            return  # unknown producer, or ABORT: nothing to apply
        for k, pending in offsets.items():
            existing = self.committed.get(k)
            # Keep the most recent commit by *record* position, not by marker position.
            if existing is None or pending.record_offset > existing.record_offset:
                self._apply(marker_offset, k, pending, producer_id)

    def replay_group(self, group: str, value: dict | None) -> None:
        if value is None:
            self.groups.pop(group, None)  # offsets are left alone
        else:
            self.groups[group] = _group_state(value)


def replay_log(entries: Iterable[LogEntry]) -> ReplayResult:
    """Replay ``entries`` (in log order, any mix of partitions) and return the final state."""
    partitions: dict[int, _Partition] = {}
    skipped = 0
    for e in entries:
        p = partitions.setdefault(e.partition, _Partition(e.partition))
        if e.control is not None:
            if e.control in ("COMMIT", "ABORT"):
                p.replay_marker(e.offset, e.producer_id, e.control)
            continue
        try:
            key = decode_key(e.key)
            if key.record_type not in (LEGACY_OFFSET_COMMIT, OFFSET_COMMIT, GROUP_METADATA):
                continue  # not modelled
            value = None if e.value is None else decode_value(key.record_type, e.value).data
        except DecodeError:
            skipped += 1
            continue
        d = key.data
        if key.record_type == GROUP_METADATA:
            p.replay_group(d["group"], value)
        else:
            p.replay_offset(e.offset, e.producer_id, (d["group"], d["topic"], d["partition"]), value)

    result = ReplayResult(skipped=skipped)
    for n, p in partitions.items():
        result.history += p.history
        for (g, t, tp), o in p.committed.items():
            result.committed[(n, g, t, tp)] = o
        for pid, offsets in p.pending.items():
            for (g, t, tp), o in offsets.items():
                result.pending[(n, g, t, tp, pid)] = PendingState(o.offset, o.record_offset)
        for g, s in p.groups.items():
            result.groups[(n, g)] = s
    return result
