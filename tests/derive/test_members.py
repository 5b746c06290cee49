"""The newest fields of modern group records, from the codec to the tables (jobs.decode.columns, jobs.replay.groups,
jobs.derive.members) on one small log written with the encoder and replayed once, without a run: each group is one
case, with the field (a value to show) or without it (records of an older Kafka: null, or Kafka's default)."""
from __future__ import annotations

import base64
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from offsets_log import DAY, T0, OffsetsLog

from jobs.decode.check import check
from jobs.derive.members import member_tables
from jobs.replay.partition import ReplaySettings, replay_partition
from jobs.replay.records import records
from jobs.replay.reduction import whole

ORDERS = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
PAYMENTS = base64.urlsafe_b64encode(bytes(range(17, 33))).decode().rstrip("=")
NAMES = {ORDERS: "orders", PAYMENTS: "payments"}
AS_OF = datetime.fromtimestamp((T0 + DAY) / 1000, tz=timezone.utc)
COMPUTED = T0 - 5_000  # when a target assignment was computed: before its record's timestamp, T0


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def consumer_group(log: OffsetsLog, g: str, target: dict, current: dict) -> None:
    """A consumer group of one member, m1: its target assignment metadata `target` (ConsumerGroupTargetAssignment-
    MetadataValue fields) and current assignment `current` (ConsumerGroupCurrentMemberAssignmentValue fields)."""
    log.record("ConsumerGroupMemberMetadata", {"GroupId": g, "MemberId": "m1"}, {
        "InstanceId": None, "RackId": None, "ClientId": "c", "ClientHost": "/10.0.0.1",
        "SubscribedTopicNames": ["orders"], "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 30_000, "ServerAssignor": "uniform",
        "ClassicMemberMetadata": None}, T0)
    log.record("ConsumerGroupMetadata", {"GroupId": g}, {"Epoch": 3, "MetadataHash": 0}, T0)
    log.record("ConsumerGroupTargetAssignmentMember", {"GroupId": g, "MemberId": "m1"},
               {"TopicPartitions": [{"TopicId": ORDERS, "Partitions": [0]}]}, T0)
    log.record("ConsumerGroupTargetAssignmentMetadata", {"GroupId": g}, target, T0)
    log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": g, "MemberId": "m1"},
               {"PreviousMemberEpoch": 2, "State": 0, "PartitionsPendingRevocation": [], **current}, T0)


def share_group(log: OffsetsLog, g: str, target: dict) -> None:
    log.record("ShareGroupMemberMetadata", {"GroupId": g, "MemberId": "s1"}, {
        "RackId": None, "ClientId": "c", "ClientHost": "/10.0.0.2", "SubscribedTopicNames": ["orders"]}, T0)
    log.record("ShareGroupMetadata", {"GroupId": g}, {"Epoch": 2, "MetadataHash": 0}, T0)
    log.record("ShareGroupTargetAssignmentMember", {"GroupId": g, "MemberId": "s1"},
               {"TopicPartitions": [{"TopicId": ORDERS, "Partitions": [0]}]}, T0)
    log.record("ShareGroupTargetAssignmentMetadata", {"GroupId": g}, target, T0)
    log.record("ShareGroupCurrentMemberAssignment", {"GroupId": g, "MemberId": "s1"}, {
        "MemberEpoch": 2, "PreviousMemberEpoch": 1, "State": 0,
        "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [0, 1]}]}, T0)


def streams_group(log: OffsetsLog, g: str, metadata: dict, target: dict, current: dict) -> None:
    """A streams group of one member, w1, whose topology (epoch 3) reads `input` in subtopology 0 and `other` in 1:
    `metadata`: StreamsGroupMetadataValue fields beside Epoch and MetadataHash."""
    log.record("StreamsGroupTopology", {"GroupId": g}, {"Epoch": 3, "Subtopologies": [
        {"SubtopologyId": s, "SourceTopics": [topic], "SourceTopicRegex": [], "StateChangelogTopics": [],
         "RepartitionSinkTopics": [], "RepartitionSourceTopics": [], "CopartitionGroups": []}
        for s, topic in (("0", "input"), ("1", "other"))]}, T0)
    log.record("StreamsGroupMemberMetadata", {"GroupId": g, "MemberId": "w1"}, {
        "InstanceId": "i1", "RackId": None, "ClientId": "c", "ClientHost": "/10.0.0.3", "RebalanceTimeoutMs": 60_000,
        "TopologyEpoch": 3, "ProcessId": "p1", "UserEndpoint": None, "ClientTags": []}, T0)
    log.record("StreamsGroupMetadata", {"GroupId": g}, {"Epoch": 4, "MetadataHash": 0, **metadata}, T0)
    log.record("StreamsGroupTargetAssignmentMember", {"GroupId": g, "MemberId": "w1"}, {
        "ActiveTasks": [{"SubtopologyId": "0", "Partitions": [0]}], "StandbyTasks": [], "WarmupTasks": []}, T0)
    log.record("StreamsGroupTargetAssignmentMetadata", {"GroupId": g}, target, T0)
    log.record("StreamsGroupCurrentMemberAssignment", {"GroupId": g, "MemberId": "w1"}, {
        "PreviousMemberEpoch": 3, "State": 1, "StandbyTasks": [], "WarmupTasks": [],
        "StandbyTasksPendingRevocation": [], "WarmupTasksPendingRevocation": [], **current}, T0)


def the_log() -> OffsetsLog:
    log = OffsetsLog()
    # 4.3+: the target's timestamp, assignment epochs per partition (PAYMENTS' are not one per partition)
    consumer_group(log, "cg-new", {"AssignmentEpoch": 3, "AssignmentTimestamp": COMPUTED}, {
        "MemberEpoch": 3, "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [0, 1], "AssignmentEpochs": [2, 1]},
                                                 {"TopicId": PAYMENTS, "Partitions": [0, 1], "AssignmentEpochs": [2]}]})
    # before 4.3: neither; a static member that left for a while (epoch -2)
    consumer_group(log, "cg-old", {"AssignmentEpoch": 3}, {
        "MemberEpoch": -2, "PreviousMemberEpoch": 3, "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [0]}]})
    consumer_group(log, "cg-negative", {"AssignmentEpoch": 3, "AssignmentTimestamp": -5}, {
        "MemberEpoch": 3, "AssignedPartitions": []})  # Kafka refuses a negative timestamp
    share_group(log, "sg-new", {"AssignmentEpoch": 2, "AssignmentTimestamp": COMPUTED})
    share_group(log, "sg-old", {"AssignmentEpoch": 2})
    tasks = {"ActiveTasks": [{"SubtopologyId": "0", "Partitions": [0, 1], "AssignmentEpochs": [4, 2]}],
             "ActiveTasksPendingRevocation": [{"SubtopologyId": "1", "Partitions": [0, 1], "AssignmentEpochs": [1]}]}
    streams_group(log, "app-new", {"ValidatedTopologyEpoch": 3, "StoredDescriptionTopologyEpoch": 3,
                                   "FailedDescriptionTopologyEpoch": 2},
                  {"AssignmentEpoch": 4, "AssignmentTimestamp": COMPUTED}, {"MemberEpoch": 4, **tasks})
    streams_group(log, "app-old", {}, {"AssignmentEpoch": 4}, {  # 4.1: no tags at all
        "MemberEpoch": -2, "ActiveTasks": [{"SubtopologyId": "0", "Partitions": [0]}],
        "ActiveTasksPendingRevocation": []})
    streams_group(log, "app-uncertain", {"ValidatedTopologyEpoch": 3, "StoredDescriptionTopologyEpoch": -2},
                  {"AssignmentEpoch": 4}, {"MemberEpoch": 4, "ActiveTasks": [], "ActiveTasksPendingRevocation": []})
    return log


@pytest.fixture(scope="module")
def tables() -> dict[str, list[dict]]:
    """The log's consumer_groups (the replay's) and member-level tables (the derivation's), as rows."""
    settings = ReplaySettings(AS_OF, 7 * DAY, history=False)
    found: dict[str, list[pa.Table]] = {}
    for name, table in replay_partition(whole(check(records(the_log().table())), None), settings):
        found.setdefault(name, []).append(table)
    outputs = {name: pa.concat_tables(tables) for name, tables in found.items()}
    derived = member_tables(outputs["group_rows"], NAMES, AS_OF)
    return {name: t.to_pylist() for name, t in {**outputs, **derived}.items()}


def by_group(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for r in rows:
        grouped.setdefault(r["group_id"], []).append(r)
    return grouped


def test_every_group_exists(tables):
    assert {r["group_id"] for r in tables["consumer_groups"]} == {
        "cg-new", "cg-old", "cg-negative", "sg-new", "sg-old", "app-new", "app-old", "app-uncertain"}


def test_assignment_timestamp_is_when_the_target_was_computed_and_null_without_one(tables):
    targets = by_group(tables["group_target_assignments"])
    assert {g: [r["assignment_timestamp"] for r in rows] for g, rows in targets.items()} == {
        "cg-new": [utc(COMPUTED)], "sg-new": [utc(COMPUTED)], "app-new": [utc(COMPUTED)],
        "cg-old": [None], "sg-old": [None], "app-old": [None], "app-uncertain": [None], "cg-negative": [None]}
    assert {(r["group_id"], r["topic"], r["partition"], r["assignment_epoch"]) for r in targets["app-new"]} == {
        ("app-new", "input", 0, 4)}  # the rest of the row as before


def current(tables, group: str) -> list[tuple]:
    (member,) = by_group(tables["group_members"])[group]
    return [(p["topic"], p["partition"], p["assignment_epoch"], p["pending_revocation"])
            for p in member["current_assignment_detail"] or []]


def test_assignment_epochs_per_partition_of_consumer_groups(tables):
    """Given one per partition, each partition's; otherwise the member epoch, at least 0, for every partition of
    the topic (Utils.assignmentFromTopicPartitions)."""
    assert current(tables, "cg-new") == [("orders", 0, 2, False), ("orders", 1, 1, False),
                                         ("payments", 0, 3, False), ("payments", 1, 3, False)]
    assert current(tables, "cg-old") == [("orders", 0, 0, False)]


def test_assignment_epochs_per_task_of_streams_groups(tables):
    """Active tasks only; otherwise the member epoch as it is, for every partition of the subtopology
    (TasksTupleWithEpochs)."""
    assert current(tables, "app-new") == [("input", 0, 4, False), ("input", 1, 2, False),
                                          ("other", 0, 4, True), ("other", 1, 4, True)]
    assert current(tables, "app-old") == [("input", 0, -2, False)]


def test_share_group_members_keep_no_assignment_epochs(tables):
    assert current(tables, "sg-new") == [("orders", 0, None, False), ("orders", 1, None, False)]


def test_assigned_partitions_keep_the_contract_type(tables):
    (member,) = by_group(tables["group_members"])["cg-new"]
    assert [set(p) for p in member["assigned_partitions"]] == [{"topic", "partition", "topic_id"}] * 4


@pytest.mark.parametrize("column, values", [
    ("validated_topology_epoch", {"app-new": 3, "app-uncertain": 3}),
    ("stored_description_topology_epoch", {"app-new": 3, "app-uncertain": -2}),  # -2: uncertain
    ("failed_description_topology_epoch", {"app-new": 2}),
])
def test_streams_topology_epochs_of_the_group_metadata_record(tables, column, values):
    """KIP-1331's (4.4+) and the validated one (4.2+): null when the record has none (-1, or an older Kafka's),
    and for every other family."""
    found = {r["group_id"]: r[column] for r in tables["consumer_groups"]}
    assert found == {g: values.get(g) for g in found}
