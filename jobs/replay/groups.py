"""Group replay: the coordinator's load of group records, one coordinator partition at a time.

Group records (classic type 2; KIP-848 consumer, share and streams types 3-23) are a small part of the log
and must be decoded by the Python codec anyway, so they are replayed in log order by plain Python, per
coordinator partition (a group lives in exactly one, spec §9). The replay follows spec §7.3-§7.5:

1. Identity. Per group id, the newest *identity event* decides who holds it: a value record of a family
   creates or keeps that family's group, a type-2 value makes it classic, and a type-2 tombstone or a
   family's group-level tombstone removes it. A modern holder's current incarnation is its records after
   the newest event of another family (or its own group tombstone). Kafka throws when a modern record
   arrives for an id held by another non-simple family; here the later family wins and the group is
   reported as a conflict (contract, "Semantics").
2. Within the incarnation the newest record per key wins (all these records are last-value records).
3. Members, assignments, regular expressions and topologies are assembled from those records and the state
   is derived as ConsumerGroup / ShareGroup / StreamsGroup.maybeUpdateGroupState do.

Every group-level change (a classic group's type-2 record, a modern group's epoch, members joining and
leaving, a family change) is also emitted as a group event, with the state after it; so is the type-2
tombstone of a group that held only offsets (a simple group, or one whose offsets were expired). Offsets are not
replayed here (jobs.replay.offsets), but which groups exist is decided here alone: a group id with offsets and no
holder is a simple group (`existing_groups`), and retention's cleanup deletes Empty groups left with no offsets
(`remaining_groups`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask, run_starts
from jobs.base.tables import FOLD_STATE, arrow_schema
from jobs.decode.columns import group_metadata_columns, modern_columns
from jobs.replay.transactions import with_pending
from offsets_codec import REGISTRY, decode_value

CLASSIC = "classic"
FAMILIES = ("consumer", "share", "streams")
# Member state codes: consumer and share STABLE is 0, streams STABLE is 1 (streams/MemberState.java).
STABLE_STATE = {"consumer": 0, "share": 0, "streams": 1}
FAMILY = {t: rt.group_family for t, rt in REGISTRY.items()}

# What each modern record type is to its group, by the record's name in the codec's registry.
_ROLES = {
    "GroupMetadata": ("ConsumerGroupMetadata", "ShareGroupMetadata", "StreamsGroupMetadata"),
    "TargetAssignmentMetadata": ("ConsumerGroupTargetAssignmentMetadata", "ShareGroupTargetAssignmentMetadata",
                                 "StreamsGroupTargetAssignmentMetadata"),
    "MemberMetadata": ("ConsumerGroupMemberMetadata", "ShareGroupMemberMetadata", "StreamsGroupMemberMetadata"),
    "CurrentAssignment": ("ConsumerGroupCurrentMemberAssignment", "ShareGroupCurrentMemberAssignment",
                          "StreamsGroupCurrentMemberAssignment"),
    "TargetMember": ("ConsumerGroupTargetAssignmentMember", "ShareGroupTargetAssignmentMember",
                     "StreamsGroupTargetAssignmentMember"),
    "RegularExpression": ("ConsumerGroupRegularExpression",),
    "Topology": ("StreamsGroupTopology",),
    "TopicNames": ("ConsumerGroupPartitionMetadata", "ShareGroupPartitionMetadata",
                   "ShareGroupStatePartitionMetadata", "StreamsGroupPartitionMetadata"),
}
ROLE = {t: role for role, names in _ROLES.items() for t, rt in REGISTRY.items() if rt.name in names}
GROUP_TYPES = sorted(t for t, f in FAMILY.items() if f in (CLASSIC, *FAMILIES))
GROUP_METADATA = next(t for t, f in FAMILY.items() if f == CLASSIC)  # type 2: a classic group's record
# A streams group's metadata record's topology epochs (jobs.decode.columns), as consumer_groups shows them.
TOPOLOGY_EPOCHS = ("validated_topology_epoch", "stored_description_topology_epoch", "failed_description_topology_epoch")

# --- output ----------------------------------------------------------------------------------------

# The group replay's rows: one per (group, kind), the kind's struct filled. The kinds' layouts are data, in the
# schema of the table that keeps them between runs (jobs.replay.resume), less its fingerprint columns.
GROUP_ROWS_SCHEMA = pa.schema([f for f in arrow_schema(FOLD_STATE) if not f.name.startswith("folded_")])
KINDS = tuple(GROUP_ROWS_SCHEMA.names[3:])


def of_kind(rows: pa.Table, kind: str) -> pa.Table:
    """The group replay's `rows` of one kind, with the key columns and that kind's struct only: a filter costs what it
    copies, and the other kinds' (nested, null) columns would cost most."""
    return rows.select([*GROUP_ROWS_SCHEMA.names[:3], kind]).filter(pc.equal(rows.column("kind"), kind))


@dataclass
class GroupRecord:
    offset: int
    timestamp_ms: int | None
    record_type: int
    key: bytes
    value: bytes | None
    _decoded: dict | None = None

    @property
    def is_value(self) -> bool:
        return self.value is not None

    def modern(self) -> dict[str, Any]:
        """MODERN_DDL columns (jobs.decode.columns); decoded once."""
        if self._decoded is None:
            self._decoded = modern_columns(self.key, self.value)
        return self._decoded


@dataclass
class GroupIdState:
    """Everything the partition's load knows about one group id."""

    identity: dict[tuple[str, bool], int] = field(default_factory=dict)  # (family, is value) -> newest offset
    classic: GroupRecord | None = None  # the newest type-2 record, value or tombstone
    modern: dict[str, dict[bytes, GroupRecord]] = field(default_factory=dict)  # family -> key -> newest record
    violation: dict[str, str] = field(default_factory=dict)  # family -> reason (its newest group tombstone)
    witnesses: dict[str, tuple[int, ...]] = field(default_factory=dict)  # family -> the records its reason names
    summary: dict[str, Any] | None = None  # after the previous group event
    event_timestamp_ms: int | None = None
    event_offset: int = -1  # of the previous group event

    def holder(self) -> tuple[str | None, int]:
        """(family holding the id or None, the offset its incarnation starts after)."""
        if not self.identity:
            return None, -1
        (family, is_value), newest = max(self.identity.items(), key=lambda kv: kv[1])
        if not is_value:
            return None, -1
        start = max((o for (f, v), o in self.identity.items() if f != family or not v), default=-1)
        return family, start

    def conflict(self) -> str | None:
        """The family whose value started the holder's incarnation while it held the id (Kafka would throw)."""
        family, start = self.holder()
        if family not in FAMILIES:
            return None
        return next((f for (f, v), o in self.identity.items() if v and f != family and o == start), None)


# A simple group: what offset commits make of an id no group record holds (a "group" row of the group replay).
# A group's fields an event shows (with its members): what a group event compares, and a group's last event keeps.
SUMMARY_FIELDS = ("group_type", "generation", "state", "protocol", "leader_id")
SIMPLE_GROUP = {**{f.name: None for f in GROUP_ROWS_SCHEMA.field("group").type}, "group_type": CLASSIC,
                "state": "Empty", "generation": 0, "member_count": 0, "subscribed_topics": []}


def _by_role(records: dict[bytes, GroupRecord], start: int) -> dict[str | None, list[GroupRecord]]:
    """The incarnation's records (after `start`) by their role, in the order of `records`."""
    roles: dict[str | None, list[GroupRecord]] = {}
    for r in records.values():
        if r.offset > start:
            roles.setdefault(ROLE.get(r.record_type), []).append(r)
    return roles


def _partitions(rows: list[dict] | None, epoch: int | None = None) -> list[dict]:
    return [{"topic": None, "topic_id": p["topic_id"], "subtopology_id": p["subtopology_id"],
             "partition": p["partition"],
             "assignment_epoch": p["assignment_epoch"] if epoch is None else epoch} for p in rows or []]


@dataclass
class ModernGroup:
    """A modern group assembled from the newest record per key of its incarnation."""

    group: dict[str, Any]
    members: list[dict[str, Any]]
    targets: list[dict[str, Any]]
    topology: list[dict[str, Any]]
    topic_names: list[dict[str, Any]]


def assemble_modern(family: str, records: dict[bytes, GroupRecord], start: int, summary: bool = False) -> ModernGroup:
    """Spec §7.4-§7.5 on the incarnation's newest records: members, epochs, target assignment, state.
    `summary`: the group and its members without their partitions (a group event's view), and no targets,
    topology or topic names."""
    newest = _by_role(records, start)
    metadata = [r for r in newest.get("GroupMetadata", []) if r.is_value]
    meta = metadata[0].modern() if metadata else {}
    target_meta = newest.get("TargetAssignmentMetadata", [])
    target = target_meta[0].modern() if target_meta and target_meta[0].is_value else {}
    target_epoch = target.get("assignment_epoch", -1) if target_meta else None  # -1: tombstoned
    topology_records = [r for r in newest.get("Topology", []) if r.is_value]
    topology = topology_records[0].modern() if topology_records else None
    regexes = {r.modern()["regex"]: r.modern()["regex_topics"] or [] for r in newest.get("RegularExpression", [])
               if r.is_value}
    source_topics = sorted({t for s in (topology or {}).get("subtopologies") or [] for t in s["source_topics"] or []})

    by_member: dict[str, dict[str, GroupRecord]] = {}
    for role, name in (("MemberMetadata", "member"), ("CurrentAssignment", "assignment")):
        for r in newest.get(role, []):
            by_member.setdefault(r.modern()["member_id"], {})[name] = r
    members = []
    for member_id, recs in by_member.items():
        member, assignment = recs.get("member"), recs.get("assignment")
        member_value = member is not None and member.is_value
        assignment_value = assignment is not None and assignment.is_value
        assignment_after_member = assignment is not None and (member is None or assignment.offset > member.offset)
        if not (member_value or (assignment_value and assignment_after_member)):
            continue
        epochs_from_assignment = assignment_value and (member_value or assignment_after_member)
        # A current-assignment tombstone after the member's metadata: the member left.
        left = assignment is not None and not assignment.is_value and assignment_after_member
        attrs = member.modern() if member_value else {}
        current = assignment.modern() if epochs_from_assignment else {}
        names = attrs.get("subscribed_topic_names") or []
        regex = attrs.get("subscribed_topic_regex")
        subscribed = source_topics if family == "streams" else sorted(set(names) | set(regexes.get(regex, [])))
        members.append({
            "member_id": member_id, "family": family,
            "group_instance_id": attrs.get("instance_id"), "client_id": attrs.get("client_id") or "",
            "client_host": attrs.get("client_host") or "", "rack_id": attrs.get("rack_id"),
            "session_timeout_ms": attrs.get("classic_session_timeout_ms"),
            "rebalance_timeout_ms": attrs.get("rebalance_timeout_ms"),
            "subscribed_topics": subscribed, "subscribed_topic_names": names,
            "member_epoch": current["member_epoch"] if epochs_from_assignment else (-1 if left else 0),
            "previous_member_epoch": current["previous_member_epoch"] if epochs_from_assignment else -1,
            "member_state": current["member_state"] if epochs_from_assignment else STABLE_STATE[family],
            "assigned": [] if summary else _partitions(current.get("assigned")),
            "pending_revocation": [] if summary else _partitions(current.get("pending_revocation")),
            "server_assignor": attrs.get("server_assignor"), "subscribed_topic_regex": regex,
            "is_classic_member": bool(attrs.get("is_classic_member")),
            "subscription_version": None, "member_payload_error": None,
        })

    group_epoch = meta.get("epoch") or 0
    effective_target = target_epoch if target_epoch is not None else 0
    unreconciled = any(not (m["member_state"] == STABLE_STATE[family] and m["member_epoch"] == effective_target)
                       for m in members)
    topology_epoch = topology["epoch"] if topology else None
    validated = meta.get("validated_topology_epoch")
    if not members:
        state = "Empty"
    elif family == "share":
        state = "Stable"
    elif family == "streams" and (topology_epoch is None or topology_epoch != (validated if validated is not None else -1)):
        state = "NotReady"
    elif group_epoch > effective_target:
        state = "Assigning"
    elif unreconciled:
        state = "Reconciling"
    else:
        state = "Stable"
    # Topics whose offsets never expire (spec §8.3): consumer: member subscriptions and resolved regexes;
    # streams: topology source and repartition-source topics unless Empty; share groups hold no offsets.
    if family == "consumer":
        never_expire = {t for m in members for t in m["subscribed_topic_names"]} | {t for ts in regexes.values() for t in ts}
    elif family == "streams" and members:
        never_expire = {t for s in (topology or {}).get("subtopologies") or []
                        for t in (s["source_topics"] or []) + (s["repartition_source_topics"] or [])}
    else:
        never_expire = set()
    group = {
        "group_type": family, "protocol_type": family, "state": state, "generation": group_epoch,
        "protocol": None, "leader_id": None, "current_state_timestamp_ms": None, "member_count": len(members),
        "subscribed_topics": sorted(never_expire), "metadata_record_offset": metadata[0].offset if metadata else None,
        "target_assignment_epoch": effective_target, "topology_epoch": topology_epoch,
        **{k: meta.get(k) for k in TOPOLOGY_EPOCHS},
    }
    if summary:
        return ModernGroup(group, members, [], [], [])
    targets = [{"member_id": r.modern()["member_id"], "assignment_timestamp_ms": target.get("assignment_timestamp_ms"),
                "partitions": _partitions(r.modern()["assigned"], effective_target)}
               for r in newest.get("TargetMember", []) if r.is_value]
    topology_rows = [{"topology_epoch": topology_epoch, **s} for s in (topology or {}).get("subtopologies") or []]
    topic_names = [t for r in newest.get("TopicNames", []) if r.is_value for t in r.modern()["topic_names"] or []]
    return ModernGroup(group, members, targets, topology_rows, topic_names)


def classic_group(record: GroupRecord) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A classic group and its members from its type-2 value (spec §7.3)."""
    g = group_metadata_columns(record.record_type, record.value)
    group = {
        "group_type": CLASSIC, "protocol_type": g["protocol_type"], "state": "Stable" if g["members"] else "Empty",
        "generation": g["generation"], "protocol": g["protocol"], "leader_id": g["leader_id"],
        "current_state_timestamp_ms": g["current_state_timestamp_ms"], "member_count": len(g["members"]),
        "subscribed_topics": g["subscribed_topics"], "metadata_record_offset": record.offset,
        "target_assignment_epoch": None, "topology_epoch": None, **dict.fromkeys(TOPOLOGY_EPOCHS),
    }
    members = [{**m, "family": CLASSIC, "rack_id": None, "member_epoch": None, "previous_member_epoch": None,
                "member_state": None, "pending_revocation": [], "server_assignor": None,
                "subscribed_topic_regex": None, "is_classic_member": None,
                "assigned": [{"topic": p["topic"], "topic_id": None, "subtopology_id": None, "partition": p["partition"],
                              "assignment_epoch": None} for p in m["assigned_partitions"]]}
               for m in g["members"]]
    return group, members


def classic_summary(record: GroupRecord) -> dict[str, Any]:
    """What a group event says of a classic group (`classic_group`'s values), without decoding its members'
    subscriptions and assignments."""
    d = decode_value(record.record_type, record.value).data
    members = {m["memberId"] for m in d["members"]}
    return {"group_type": CLASSIC, "state": "Stable" if members else "Empty", "generation": d["generation"],
            "protocol": d["protocol"], "leader_id": d["leader"], "members": members}


def _tombstone_violation(family: str, records: dict[bytes, GroupRecord]) -> tuple[str | None, tuple[int, ...]]:
    """What a family's group tombstone left behind (Kafka's replay refuses it): live members, target
    assignments or target assignment metadata, by the newest record of each key before it; with the offset of a
    record of each kind that remained (`witnesses`: what a replay of fewer records must still see)."""
    remaining: dict[str, int] = {}
    for r in records.values():
        role = ROLE.get(r.record_type)
        if r.is_value and role in _REMAINING:
            remaining.setdefault(_REMAINING[role], r.offset)
    if not remaining:
        return None, ()
    return (f"a {family} group tombstone while {' and '.join(sorted(remaining))} remained (Kafka's replay would fail); "
            "the group was removed"), tuple(remaining.values())


_REMAINING = {"MemberMetadata": "members", "TargetMember": "target assignments",
              "TargetAssignmentMetadata": "its target assignment metadata"}


_MEMBER_ROLES = ("MemberMetadata", "CurrentAssignment", "TargetMember")


def _members_left(records: dict[bytes, GroupRecord], alone: set[bytes]) -> list[int]:
    """The offsets of the member records of a family's `records` (newest per key) whose member left: each of its
    keys holds a tombstone, the only record kept of that key (`alone`)."""
    members: dict[str, list[GroupRecord]] = {}
    for r in records.values():
        if ROLE.get(r.record_type) in _MEMBER_ROLES:
            members.setdefault(r.modern()["member_id"], []).append(r)
    return [r.offset for kept in members.values() if all(not r.is_value and r.key in alone for r in kept)
            for r in kept]


class PartitionReplay:
    """The group state of one coordinator partition, fed its group records in log order. A run that resumes
    (jobs.replay.resume) feeds a group's records the previous run replayed (at or below `quiet_through`) without
    events, its newest event as that run left it (`last_events`, by group id: `last_event` rows), then its new
    records with events: the events of the new records, as a replay of them all gives them."""

    def __init__(self, events: bool = True, offsets: dict[str, np.ndarray] | None = None, quiet_through: int = -1,
                 last_events: dict[str, dict[str, Any]] | None = None) -> None:
        self.id_states: dict[str, GroupIdState] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.record_events = events
        self.offsets = offsets or {}  # group id -> the sorted offsets of its offset records
        self.quiet_through = quiet_through
        self.last_events = last_events or {}
        self.versions: dict[bytes, list[int]] = {}  # key -> the offsets of its records fed, in log order

    def superseded(self) -> list[int]:
        """The offsets of the records fed that a replay of the others alone would not miss: every record of a key
        before the oldest one the state still holds (the newest per key, the classic group's record, each
        identity's newest event, the records a tombstone's violation names). From that one on a key's records
        stay, so that whatever a replay reads of a key at any of the records kept, it finds as before. And the
        tombstones of a member that left, when they are all that is kept of it: a member with no value is no
        member, and no tombstone of a member is an identity event or names a violation."""
        held: set[int] = set()
        for id_state in self.id_states.values():
            held.update(id_state.identity.values())
            held.update(o for witnesses in id_state.witnesses.values() for o in witnesses)
            if id_state.classic is not None:
                held.add(id_state.classic.offset)
            held.update(r.offset for records in id_state.modern.values() for r in records.values())
        gone: list[int] = []
        alone: set[bytes] = set()  # keys of which only the newest record stays
        for key, offsets in self.versions.items():
            first = next(i for i, o in enumerate(offsets) if o in held)  # the newest is held: there is one
            gone.extend(offsets[:first])
            if first == len(offsets) - 1:
                alone.add(key)
        for id_state in self.id_states.values():
            if id_state.identity:  # its identity's records stay: the group's id is still seen
                for records in id_state.modern.values():
                    gone.extend(_members_left(records, alone))
        return gone

    def _id_state(self, group_id: str) -> GroupIdState:
        id_state = self.id_states.get(group_id)
        if id_state is None:
            id_state = self.id_states[group_id] = GroupIdState()
            last = self.last_events.get(group_id)
            if last is not None:  # quiet feeding leaves these as they are: the new records' events start from them
                id_state.summary = {**{k: last[k] for k in SUMMARY_FIELDS},
                                    "members": set(last["members"] or ())} if last["held"] else None
                id_state.event_timestamp_ms, id_state.event_offset = last["event_timestamp_ms"], last["event_offset"]
        return id_state

    def feed(self, record: GroupRecord, group_id: str) -> None:
        id_state = self._id_state(group_id)
        self.versions.setdefault(record.key, []).append(record.offset)
        family = FAMILY[record.record_type]
        role = ROLE.get(record.record_type)
        loud = self.record_events and record.offset > self.quiet_through
        before = id_state.holder() if loud else None  # only events compare holders
        if family == CLASSIC:
            id_state.classic = record
            id_state.identity[(CLASSIC, record.is_value)] = record.offset
        else:
            records = id_state.modern.setdefault(family, {})
            if role == "GroupMetadata" and not record.is_value:
                reason, witnesses = _tombstone_violation(family, records)
                if reason:
                    id_state.violation[family], id_state.witnesses[family] = reason, witnesses
                else:
                    id_state.violation.pop(family, None)
                    id_state.witnesses.pop(family, None)
            records[record.key] = record
            if record.is_value or role == "GroupMetadata":
                id_state.identity[(family, record.is_value)] = record.offset
        if loud and (family == CLASSIC or role in ("GroupMetadata", "MemberMetadata") or id_state.holder() != before):
            self._event(group_id, id_state, record, before[0])

    def _summary(self, id_state: GroupIdState) -> dict[str, Any] | None:
        family, start = id_state.holder()
        if family is None:
            return None
        if family == CLASSIC:
            return classic_summary(id_state.classic)
        assembled = assemble_modern(family, id_state.modern.get(family, {}), start, summary=True)
        return {**assembled.group, "members": {m["member_id"] for m in assembled.members}}

    def _held_offsets(self, group_id: str, id_state: GroupIdState, record: GroupRecord) -> bool:
        """The group held offsets since its previous event, when `record` (a type-2 tombstone) deletes it: a
        simple group, or one whose offsets the broker expired (their tombstones come just before)."""
        offsets = self.offsets.get(group_id)
        if offsets is None or FAMILY[record.record_type] != CLASSIC or record.is_value:
            return False
        since = np.searchsorted(offsets, id_state.event_offset, side="right")
        return since < np.searchsorted(offsets, record.offset)

    def _event(self, group_id: str, id_state: GroupIdState, record: GroupRecord, family_before: str | None) -> None:
        previous = id_state.summary
        now = self._summary(id_state)
        if now is None and previous is None:
            if not self._held_offsets(group_id, id_state, record):
                return
            previous = {**SIMPLE_GROUP, "members": set()}  # the group its offsets made, which the tombstone deletes
        if now is not None and previous is not None and all(
                now[k] == previous[k] for k in (*SUMMARY_FIELDS, "members")):
            if FAMILY[record.record_type] != CLASSIC:
                return  # a modern record that changed nothing group-level
        joined = sorted((now or {}).get("members", set()) - (previous or {}).get("members", set()))
        left = sorted((previous or {}).get("members", set()) - (now or {}).get("members", set()))
        if now is None:
            event = "deleted"
        elif previous is not None and family_before not in (None, now["group_type"]):
            event = "converted"
        elif previous is not None and now["state"] == "Empty" and previous["state"] != "Empty":
            event = "emptied"
        elif FAMILY[record.record_type] == CLASSIC or (previous is not None and now["generation"] != previous["generation"]):
            event = "rebalanced"  # a classic group's type-2 value is a completed rebalance
        elif joined:
            event = "member_joined"
        elif left:
            event = "member_left"
        else:
            event = "rebalanced"
        since = None
        if id_state.event_timestamp_ms is not None and record.timestamp_ms is not None:
            since = (record.timestamp_ms - id_state.event_timestamp_ms) / 1000
        shown = now or previous
        self.events.append((group_id, {
            "group_type": shown["group_type"], "event": event, "event_timestamp_ms": record.timestamp_ms,
            "generation": now["generation"] if now else None,
            "previous_generation": previous["generation"] if previous else None,
            "state": now["state"] if now else None,
            "protocol": now["protocol"] if now else None, "leader_id": now["leader_id"] if now else None,
            "member_count": len(now["members"]) if now else 0,
            "members_joined": joined, "members_left": left, "seconds_since_previous": since,
            "record_offset": record.offset,
        }))
        id_state.summary = now
        id_state.event_timestamp_ms = record.timestamp_ms
        id_state.event_offset = record.offset

    def results(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(group id, kind, row) for every output kind (KINDS)."""
        for group_id, id_state in self.id_states.items():
            family, start = id_state.holder()
            yield group_id, "identity", {"holder": family,
                                         "newest_identity_offset": max(id_state.identity.values(), default=None)}
            conflict = id_state.conflict()
            if conflict:
                yield group_id, "violation", {"reason": f"a {family} group record arrived while a {conflict} group held "
                                                        "the id (Kafka's replay would fail); the later family was kept"}
            for reason in id_state.violation.values():
                yield group_id, "violation", {"reason": reason}
            if family == CLASSIC:
                group, members = classic_group(id_state.classic)
                yield group_id, "group", group
                for m in members:
                    yield group_id, "member", m
            elif family is not None:
                assembled = assemble_modern(family, id_state.modern.get(family, {}), start)
                yield group_id, "group", assembled.group
                for m in assembled.members:
                    yield group_id, "member", m
                for t in assembled.targets:
                    yield group_id, "target", t
                for t in assembled.topology:
                    yield group_id, "topology", t
                for t in assembled.topic_names:
                    yield group_id, "topic_name", t
        for group_id, event in self.events:
            yield group_id, "event", event
        if self.record_events:  # what the next run's events of a group start from (jobs.replay.resume)
            for group_id, id_state in self.id_states.items():
                if id_state.event_offset >= 0:
                    summary = id_state.summary or {}
                    yield group_id, "last_event", {
                        "held": id_state.summary is not None,
                        **{k: summary.get(k) for k in SUMMARY_FIELDS},
                        "members": sorted(summary.get("members", ())),
                        "event_timestamp_ms": id_state.event_timestamp_ms,
                        "event_offset": id_state.event_offset}


def existing_groups(held: pa.Table, identity: pa.Table, committed: pa.Table, pending: pa.Table) -> pa.Table:
    """The partitions' groups: those a family holds (`replay_groups`'), and the simple groups, made by offsets of an id
    no family holds (state Empty, generation 0, no protocol type). When the newest record that removed an id's
    group (a type-2 or modern group tombstone) came after every commit, its offsets are orphans the pre-4.0
    coordinator loaded as a simple group (`is_orphan`). Open transactional commits count too: their replay
    created the group, and they keep it (spec §8.4)."""
    fields = GROUP_ROWS_SCHEMA.field("group").type
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
        group_rows.append({"coordinator_partition": partition, "group_id": g, **SIMPLE_GROUP,
                           "is_orphan": newest_identity is not None and newest_identity > newest})
    schema = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()), *fields,
                        ("is_orphan", pa.bool_())])
    return pa.Table.from_pylist(group_rows, schema=schema)


def remaining_groups(groups: pa.Table, live: pa.Table, pending: pa.Table) -> pa.Table:
    """The `groups` (`existing_groups`) that still exist once expiry has run, with offset_count (their `live`
    offsets): the cleanup deletes an Empty group left with no offsets and no open transaction (spec §8.4;
    `pending`: the open transactional commits), but never a share group."""
    counts = pc.value_counts(live.column("group_id")).flatten() if live.num_rows else \
        [pa.array([], pa.string()), pa.array([], pa.int64())]
    at = pc.index_in(groups.column("group_id"), value_set=counts[0])
    offset_count = pc.fill_null(pc.take(counts[1], at), 0).cast(pa.int32())
    with_counts = groups.append_column("offset_count", offset_count)
    deletable = (mask(pc.equal(groups.column("state"), "Empty")) & (offset_count.to_numpy() == 0)
                 & ~mask(pc.equal(groups.column("group_type"), "share")) & ~with_pending(groups, pending, ["group_id"]))
    return with_counts.filter(pa.array(~deletable))


def group_activity(winners: pa.Table, others: pa.Table) -> pa.Table:
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


def member_level(rows: pa.Table, existing: pa.Table) -> pa.Table:
    """The group replay's rows the member-level tables are named from: every member (a group expiry deletes is Empty, so
    has none), the topic names, and the target assignments and topologies of the groups that exist."""
    kind = rows.column("kind")
    keep = pc.is_in(kind, value_set=pa.array(["member", "topic_name"]))
    kept_groups = pc.is_in(rows.column("group_id"), value_set=existing.column("group_id"))
    of_existing = pc.and_(pc.is_in(kind, value_set=pa.array(["target", "topology"])), kept_groups)
    return rows.filter(pc.or_(keep, of_existing))


_TICKS_PER_MS = {"ms": 1, "us": 1000, "ns": 1_000_000}


def _epoch_ms(column: pa.ChunkedArray) -> list[int | None]:
    per_ms = _TICKS_PER_MS[column.type.unit]
    return [None if t is None else t // per_ms for t in column.cast(pa.int64()).to_pylist()]


def replay_groups(records: pa.Table, events: bool = True, offset_records: pa.Table | None = None,
                  quiet_through: dict[int, int] | None = None, last_events: pa.Table | None = None,
                  superseded: list[tuple[int, int]] | None = None) -> pa.Table:
    """The replay of coordinator partitions' valid group records up to as_of (columns coordinator_partition,
    record_offset, record_timestamp, record_type, group_id, key, value), partition by partition, as GROUP_ROWS_SCHEMA
    rows. `offset_records`: the partitions' offset records (coordinator_partition, group_id, record_offset), which
    tell a group that held only offsets when its type-2 tombstone deletes it (a group event). A resumed run's
    events (`PartitionReplay`): per partition, the offset through which the previous run replayed its records
    (`quiet_through`), and the groups' `last_event` rows that run left (`last_events`). `superseded`, when given,
    gains the (partition, offset) of the records a replay of the others gives the same rows from
    (`PartitionReplay.superseded`): a run that keeps its log drops them (jobs.replay.resume)."""
    columns: dict[str, list] = {name: [] for name in GROUP_ROWS_SCHEMA.names}
    records = records.sort_by([("coordinator_partition", "ascending"), ("record_offset", "ascending")])
    partitions = records.column("coordinator_partition").to_pylist()
    timestamps = _epoch_ms(records.column("record_timestamp"))
    rows = zip(partitions, records.column("record_offset").to_pylist(), timestamps,
               records.column("record_type").to_pylist(), records.column("group_id").to_pylist(),
               records.column("key").to_pylist(), records.column("value").to_pylist())
    if events and offset_records is not None:  # only a group's type-2 tombstone reads its offset records
        deleted = records.filter(pc.and_(pc.is_null(records.column("value")),
                                         pc.equal(records.column("record_type"), GROUP_METADATA)))
        offset_records = offset_records.filter(pc.is_in(offset_records.column("group_id"),
                                                        value_set=pc.unique(deleted.column("group_id"))))
    for partition, fed in itertools.groupby(rows, key=lambda row: row[0]):
        offsets = offset_records.filter(pc.equal(offset_records.column("coordinator_partition"), partition)) \
            if events and offset_records is not None else None
        replay = PartitionReplay(events, _offsets_by_group(offsets), (quiet_through or {}).get(partition, -1),
                                 _last_events(last_events, partition) if events else None)
        for _, offset, ts, record_type, group_id, key, value in fed:
            replay.feed(GroupRecord(offset, ts, record_type, key, value), group_id)
        if superseded is not None:
            superseded.extend((partition, o) for o in replay.superseded())
        for group_id, kind, row in replay.results():
            columns["coordinator_partition"].append(partition)
            columns["group_id"].append(group_id)
            columns["kind"].append(kind)
            for k in KINDS:
                columns[k].append(row if k == kind else None)
    return pa.table([pa.array(columns[f.name], type=f.type) for f in GROUP_ROWS_SCHEMA], schema=GROUP_ROWS_SCHEMA)


def _last_events(rows: pa.Table | None, partition: int) -> dict[str, dict[str, Any]]:
    """group id -> its `last_event` (GROUP_ROWS_SCHEMA rows of that kind) in coordinator partition `partition`."""
    if rows is None or not rows.num_rows:
        return {}
    mine = rows.filter(pc.equal(rows.column("coordinator_partition"), partition))
    return dict(zip(mine.column("group_id").to_pylist(), mine.column("last_event").to_pylist()))


def _offsets_by_group(offset_records: pa.Table | None) -> dict[str, np.ndarray]:
    """group id -> the sorted offsets of its offset records."""
    if offset_records is None or not offset_records.num_rows:
        return {}
    encoded = pc.dictionary_encode(offset_records.column("group_id")).combine_chunks()
    group = encoded.indices.to_numpy(zero_copy_only=False)
    offsets = offset_records.column("record_offset").to_numpy()
    order = np.lexsort((offsets, group))
    group, offsets = group[order], offsets[order]
    starts = run_starts(group)
    names = encoded.dictionary.to_pylist()
    return {names[group[a]]: offsets[a:b] for a, b in zip(starts, np.append(starts[1:], len(group)))}
