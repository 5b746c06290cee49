"""Decoded records as the replay's columns: per-record functions over the codec (no Spark, no Arrow).

They run only where the replay needs a record's contents: on the offset winners the bulk reader
(jobs.decode.arrow_reader) cannot prove, and on group records, which are few; the bulk of the log is never
decoded into rich values.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from offsets_codec import REGISTRY, DecodeError, decode_key, decode_value
from offsets_codec.consumer_protocol import decode_assignment, decode_subscription, subscribed_topics_v0

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
CONSUMER_PROTOCOL = "consumer"
_INT16 = struct.Struct(">h")

CHECK_DDL = "record_type smallint, group_id string, error string"
OFFSET_COMMIT_DDL = (
    "topic string, partition int, committed_offset bigint, leader_epoch int, metadata string, "
    "commit_timestamp_ms bigint, expire_timestamp_ms bigint, topic_id string, value_version smallint"
)
ASSIGNED_PARTITIONS_DDL = "array<struct<topic:string,partition:int,topic_id:string>>"
MEMBER_DDL = (
    "struct<member_id:string, group_instance_id:string, client_id:string, client_host:string, "
    "session_timeout_ms:int, rebalance_timeout_ms:int, subscribed_topics:array<string>, "
    f"assigned_partitions:{ASSIGNED_PARTITIONS_DDL}, subscription_version:smallint, member_payload_error:string>"
)
GROUP_METADATA_DDL = (
    "protocol_type string, generation int, protocol string, leader_id string, "
    "current_state_timestamp_ms bigint, value_version smallint, "
    f"members array<{MEMBER_DDL}>, subscribed_topics array<string>"
)

# KIP-848 consumer, share and streams records: one superset struct, each record type filling its fields.
PARTITIONS_DDL = "array<struct<topic_id:string,subtopology_id:string,partition:int,assignment_epoch:int>>"
MODERN_DDL = (
    "member_id string, regex string, epoch int, metadata_hash bigint, validated_topology_epoch int, "
    "stored_description_topology_epoch int, failed_description_topology_epoch int, assignment_epoch int, "
    "assignment_timestamp_ms bigint, instance_id string, rack_id string, client_id string, client_host string, "
    "subscribed_topic_names array<string>, subscribed_topic_regex string, rebalance_timeout_ms int, "
    "server_assignor string, classic_session_timeout_ms int, is_classic_member boolean, topology_epoch int, "
    "process_id string, member_epoch int, previous_member_epoch int, member_state smallint, "
    f"assigned {PARTITIONS_DDL}, pending_revocation {PARTITIONS_DDL}, "
    "topic_names array<struct<topic_id:string,topic:string>>, regex_topics array<string>, "
    "subtopologies array<struct<subtopology_id:string,source_topics:array<string>,source_topic_regex:array<string>,"
    "repartition_source_topics:array<string>,repartition_sink_topics:array<string>,changelog_topics:array<string>>>"
)


# --- per-record functions (plain Python) -------------------------------------------------------


def offset_commit_columns(key: bytes, value: bytes) -> dict[str, Any]:
    """An offset-commit record (type 0 or 1, not a tombstone) as committed_offsets columns."""
    k = decode_key(key).data
    v = decode_value(_INT16.unpack_from(key)[0], value)
    d = v.data
    topic_id = d.get("topicId")
    return {
        "topic": k["topic"],
        "partition": k["partition"],
        "committed_offset": d["offset"],
        "leader_epoch": _sentinel(d.get("leaderEpoch", -1)),
        "metadata": d["metadata"] if d["metadata"] is not None else "",
        "commit_timestamp_ms": d["commitTimestamp"],
        "expire_timestamp_ms": _sentinel(d.get("expireTimestamp", -1)),
        "topic_id": None if topic_id in (None, ZERO_UUID) else topic_id,
        "value_version": v.version,
    }


def group_metadata_columns(record_type: int, value: bytes) -> dict[str, Any]:
    """A classic group's metadata value (type 2) as group columns, with decoded members.

    `subscribed_topics` is the broker's view used by offset expiry (ClassicGroup.computeSubscribedTopics):
    None (unknown) unless the protocol type is `consumer` and every member's subscription parses.
    """
    v = decode_value(record_type, value)
    d = v.data
    protocol_type = d["protocolType"] or None  # "" (a new coordinator's brand-new group) means none
    is_consumer = protocol_type == CONSUMER_PROTOCOL
    members = [_member_columns(m, is_consumer) for m in d["members"]]
    return {
        "protocol_type": protocol_type,
        "generation": d["generation"],
        "protocol": d["protocol"],
        "leader_id": d["leader"],
        "current_state_timestamp_ms": _sentinel(d.get("currentStateTimestamp", -1)),
        "value_version": v.version,
        "members": members,
        "subscribed_topics": _broker_subscribed_topics(d, is_consumer),
    }


def _member_columns(m: dict[str, Any], is_consumer: bool) -> dict[str, Any]:
    row = {
        "member_id": m["memberId"],
        "group_instance_id": m.get("groupInstanceId"),
        "client_id": m["clientId"],
        "client_host": m["clientHost"],
        "session_timeout_ms": m["sessionTimeout"],
        "rebalance_timeout_ms": _sentinel(m.get("rebalanceTimeout", -1)),
        "subscribed_topics": [],
        "assigned_partitions": [],
        "subscription_version": None,
        "member_payload_error": None,
    }
    if not is_consumer:
        return row  # connect, sr, ...: the member bytes are not the consumer protocol
    errors = []
    try:
        subscription = decode_subscription(m["subscription"])
        row["subscribed_topics"] = subscription["topics"]
        row["subscription_version"] = subscription["version"]
    except DecodeError as e:
        errors.append(f"subscription: {e}")
    if m["assignment"]:  # like Kafka's admin client, an empty assignment means "none yet"
        try:
            row["assigned_partitions"] = [
                {"topic": tp["topic"], "partition": p, "topic_id": None}
                for tp in decode_assignment(m["assignment"])["assignedPartitions"]
                for p in tp["partitions"]
            ]
        except DecodeError as e:
            errors.append(f"assignment: {e}")
    row["member_payload_error"] = "; ".join(errors) or None
    return row


def _broker_subscribed_topics(d: dict[str, Any], is_consumer: bool) -> list[str] | None:
    if not is_consumer:
        return None
    if not d["members"]:
        return []
    if d["protocol"] is None:
        return None
    topics: set[str] = set()
    for m in d["members"]:
        try:
            topics.update(subscribed_topics_v0(m["subscription"]))
        except DecodeError:
            return None
    return sorted(topics)


def modern_columns(key: bytes, value: bytes | None) -> dict[str, Any]:
    """A consumer, share or streams group record (types 3-23) as MODERN_DDL columns; absent fields are null.

    A tombstone still yields its key's member id or regular expression (tombstones name what they delete).
    """
    k = decode_key(key)
    row: dict[str, Any] = {"member_id": k.data.get("MemberId"), "regex": k.data.get("RegularExpression")}
    if value is not None:
        row.update(_MODERN_FIELDS[REGISTRY[k.record_type].name](decode_value(k.record_type, value).data))
    return row


def _group_epoch(v: dict) -> dict:
    """Streams groups' topology epochs are -1 for none: the topology not validated (4.2+), no description stored
    or refused by KIP-1331's plugin (4.4+); a stored epoch of -2 says a plugin operation was interrupted."""
    return {"epoch": v["Epoch"], "metadata_hash": v.get("MetadataHash"),
            "validated_topology_epoch": _sentinel(v.get("ValidatedTopologyEpoch", -1)),
            "stored_description_topology_epoch": _sentinel(v.get("StoredDescriptionTopologyEpoch", -1)),
            "failed_description_topology_epoch": _sentinel(v.get("FailedDescriptionTopologyEpoch", -1))}


def _assignment_epoch(v: dict) -> dict:
    """KIP-1263's AssignmentTimestamp (4.3+) is 0 when unknown, as Kafka reads it (canComputeNextTargetAssignment);
    Kafka refuses a negative one (TargetAssignmentMetadata)."""
    timestamp = v.get("AssignmentTimestamp") or 0
    return {"assignment_epoch": v["AssignmentEpoch"], "assignment_timestamp_ms": timestamp if timestamp > 0 else None}


def _member(v: dict) -> dict:
    classic = v.get("ClassicMemberMetadata")
    is_classic = bool(classic and classic.get("SupportedProtocols"))
    return {
        "instance_id": v.get("InstanceId"), "rack_id": v.get("RackId"), "client_id": v["ClientId"],
        "client_host": v["ClientHost"], "subscribed_topic_names": v.get("SubscribedTopicNames"),
        "subscribed_topic_regex": v.get("SubscribedTopicRegex"),
        "rebalance_timeout_ms": _sentinel(v.get("RebalanceTimeoutMs", -1)), "server_assignor": v.get("ServerAssignor"),
        "classic_session_timeout_ms": classic["SessionTimeoutMs"] if is_classic else None,
        "is_classic_member": is_classic, "topology_epoch": v.get("TopologyEpoch"), "process_id": v.get("ProcessId"),
    }


def _partitions(entries: list[dict] | None, default_epoch: int | None, by: str = "TopicId") -> list[dict]:
    """Topic (or subtopology) partitions, one row each, with the epoch it was assigned to the member at (KIP-1251).

    An entry whose AssignmentEpochs (4.3+; streams 4.2+) is absent or not one per partition takes `default_epoch`
    for all its partitions, as Kafka loads it (Utils.assignmentFromTopicPartitions, TasksTupleWithEpochs).
    """
    rows = []
    for e in entries or []:
        partitions = e["Partitions"]
        epochs = e.get("AssignmentEpochs")
        if epochs is None or len(epochs) != len(partitions):
            epochs = [default_epoch] * len(partitions)
        rows += [{"topic_id": e.get("TopicId") if by == "TopicId" else None,
                  "subtopology_id": e.get("SubtopologyId"), "partition": p, "assignment_epoch": epoch}
                 for p, epoch in zip(partitions, epochs)]
    return rows


def _current_assignment(v: dict, epoch: int | None) -> dict:
    """`epoch`: the assignment epoch of partitions whose record gives none (`_partitions`)."""
    if "ActiveTasks" in v:  # streams: tasks are (subtopology, partition)
        assigned = _partitions(v["ActiveTasks"], epoch, by="SubtopologyId")
        pending = _partitions(v["ActiveTasksPendingRevocation"], epoch, by="SubtopologyId")
    else:
        assigned = _partitions(v["AssignedPartitions"], epoch)
        pending = _partitions(v.get("PartitionsPendingRevocation"), epoch)
    return {"member_epoch": v["MemberEpoch"], "previous_member_epoch": v["PreviousMemberEpoch"],
            "member_state": v["State"], "assigned": assigned, "pending_revocation": pending}


def _target_assignment(v: dict) -> dict:
    if "ActiveTasks" in v:
        return {"assigned": _partitions(v["ActiveTasks"], None, by="SubtopologyId")}
    return {"assigned": _partitions(v["TopicPartitions"], None)}


def _topic_names(v: dict) -> dict:
    lists = [v.get("Topics"), v.get("InitializingTopics"), v.get("InitializedTopics"), v.get("DeletingTopics")]
    return {"topic_names": [{"topic_id": t["TopicId"], "topic": t["TopicName"]} for ts in lists for t in ts or []]}


def _topology(v: dict) -> dict:
    return {"epoch": v["Epoch"], "subtopologies": [{
        "subtopology_id": s["SubtopologyId"], "source_topics": s["SourceTopics"],
        "source_topic_regex": s["SourceTopicRegex"],
        "repartition_source_topics": [t["Name"] for t in s["RepartitionSourceTopics"]],
        "repartition_sink_topics": s["RepartitionSinkTopics"],
        "changelog_topics": [t["Name"] for t in s["StateChangelogTopics"]],
    } for s in v["Subtopologies"]]}


# Which columns each modern record fills, by the record's name in the codec's registry.
_MODERN_FIELDS: dict[str, Callable[[dict], dict]] = {
    "ConsumerGroupMetadata": _group_epoch, "ShareGroupMetadata": _group_epoch, "StreamsGroupMetadata": _group_epoch,
    "ConsumerGroupTargetAssignmentMetadata": _assignment_epoch,
    "ShareGroupTargetAssignmentMetadata": _assignment_epoch,
    "StreamsGroupTargetAssignmentMetadata": _assignment_epoch,
    "ConsumerGroupMemberMetadata": _member, "ShareGroupMemberMetadata": _member, "StreamsGroupMemberMetadata": _member,
    # Assignment epochs by default: at least 0 in consumer groups (a static member that left for a while has epoch
    # -2), the member epoch in streams groups, none in share groups (their members keep no epochs).
    "ConsumerGroupCurrentMemberAssignment": lambda v: _current_assignment(v, max(v["MemberEpoch"], 0)),
    "ShareGroupCurrentMemberAssignment": lambda v: _current_assignment(v, None),
    "StreamsGroupCurrentMemberAssignment": lambda v: _current_assignment(v, v["MemberEpoch"]),
    "ConsumerGroupTargetAssignmentMember": _target_assignment,
    "ShareGroupTargetAssignmentMember": _target_assignment,
    "StreamsGroupTargetAssignmentMember": _target_assignment,
    "ConsumerGroupPartitionMetadata": _topic_names, "ShareGroupPartitionMetadata": _topic_names,
    "ShareGroupStatePartitionMetadata": _topic_names, "StreamsGroupPartitionMetadata": _topic_names,
    "ConsumerGroupRegularExpression": lambda v: {"regex_topics": v["Topics"]},
    "StreamsGroupTopology": _topology,
}


def _sentinel(n: int) -> int | None:
    """Kafka's Utils.ofSentinel: -1 means absent."""
    return None if n == -1 else n
