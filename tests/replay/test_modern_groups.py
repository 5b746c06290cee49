"""KIP-848 consumer, share and streams groups (spec §7.4-§7.5, §8.3): scenario logs written with the encoder,
rebuilt whole by the local runner in this process (tests/runs.py), and the group fold (jobs.replay.groups) record by
record. One scenario is also rebuilt by the Spark runner, whose tables must be the local runner's."""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from offsets_log import DAY, HOUR, MINUTE, T0, OffsetsLog, member
from runs import rebuild_tables, utc_ms as utc

from jobs.decode.check import check
from jobs.replay.groups import GROUP_TYPES, replay_groups
from jobs.replay.records import records

ORDERS = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
PAYMENTS = base64.urlsafe_b64encode(bytes(range(17, 33))).decode().rstrip("=")
UNKNOWN = base64.urlsafe_b64encode(bytes(range(33, 49))).decode().rstrip("=")


def rebuild_log(log: OffsetsLog, base: Path, as_of_ms: int, retention_ms: int = 7 * DAY,
                topic_ids: dict[str, str] | None = None, **options: Any) -> dict:
    """`log` rebuilt as of `as_of_ms` under `base` (a folder of its own), with a --topic-ids file when given."""
    base.mkdir(parents=True, exist_ok=True)
    if topic_ids is not None:
        path = base / "topic_ids.csv"
        path.write_text("topic_id,topic\n" + "".join(f"{i},{t}\n" for i, t in topic_ids.items()))
        options["topic_ids"] = str(path)
    return rebuild_tables(log, base, as_of_ms=as_of_ms, retention_ms=retention_ms, **options)


def copy(log: OffsetsLog) -> OffsetsLog:
    """A log to append to without changing `log`."""
    other = OffsetsLog()
    other.rows, other.next_offset = list(log.rows), dict(log.next_offset)
    return other


def groups(tables) -> dict:
    return {r["group_id"]: r for r in tables["consumer_groups"]}


def members(tables) -> dict:
    return {(r["group_id"], r["member_id"]): r for r in tables["group_members"]}


PARTITION = ("topic", "partition", "topic_id")
DETAIL = ("topic", "partition", "topic_id", "assignment_epoch", "pending_revocation")


def parts(partitions: list[dict] | None, fields: tuple[str, ...] = PARTITION) -> list[tuple]:
    """A member's partitions (assigned_partitions or current_assignment_detail) as tuples, in their order."""
    return [tuple(p[f] for f in fields) for p in partitions]


# consumer group records, by name
def cg_member(log, g, m, at, topics=("orders",), regex=None, instance=None, assignor="uniform"):
    return log.record("ConsumerGroupMemberMetadata", {"GroupId": g, "MemberId": m}, {
        "InstanceId": instance, "RackId": "rack-a", "ClientId": f"client-{m}", "ClientHost": "/10.0.0.7",
        "SubscribedTopicNames": list(topics), "SubscribedTopicRegex": regex, "RebalanceTimeoutMs": 30_000,
        "ServerAssignor": assignor, "ClassicMemberMetadata": None}, at)


def cg_epoch(log, g, epoch, at):
    return log.record("ConsumerGroupMetadata", {"GroupId": g}, {"Epoch": epoch, "MetadataHash": 0}, at)


def cg_target(log, g, m, partitions, at):
    return log.record("ConsumerGroupTargetAssignmentMember", {"GroupId": g, "MemberId": m},
                      {"TopicPartitions": [{"TopicId": t, "Partitions": ps} for t, ps in partitions]}, at)


def cg_target_epoch(log, g, epoch, at):
    return log.record("ConsumerGroupTargetAssignmentMetadata", {"GroupId": g}, {"AssignmentEpoch": epoch}, at)


def cg_current(log, g, m, epoch, partitions, at, previous=None, state=0):
    return log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": g, "MemberId": m}, {
        "MemberEpoch": epoch, "PreviousMemberEpoch": epoch - 1 if previous is None else previous, "State": state,
        "AssignedPartitions": [{"TopicId": t, "Partitions": ps} for t, ps in partitions],
        "PartitionsPendingRevocation": []}, at)


def cg_delete(log, g, member_ids, at):
    """ConsumerGroup.createGroupTombstoneRecords: 8s, 7s, 6, 5s, then 3."""
    for name in ("ConsumerGroupCurrentMemberAssignment", "ConsumerGroupTargetAssignmentMember"):
        for m in member_ids:
            log.record(name, {"GroupId": g, "MemberId": m}, None, at)
    log.record("ConsumerGroupTargetAssignmentMetadata", {"GroupId": g}, None, at)
    for m in member_ids:
        log.record("ConsumerGroupMemberMetadata", {"GroupId": g, "MemberId": m}, None, at)
    log.record("ConsumerGroupMetadata", {"GroupId": g}, None, at)


@pytest.fixture(scope="module")
def join_log():
    """One member joining a consumer group: Assigning at T0+1m, Reconciling at T0+2m, Stable at T0+3m."""
    log = OffsetsLog()
    log.commit("cg", "orders", 0, 10, T0, version=4, topic_id=ORDERS)  # names the ORDERS topic id
    cg_member(log, "cg", "m1", T0 + MINUTE)
    cg_epoch(log, "cg", 1, T0 + MINUTE)
    cg_target(log, "cg", "m1", [(ORDERS, [0, 1]), (PAYMENTS, [0])], T0 + 2 * MINUTE)
    cg_target_epoch(log, "cg", 1, T0 + 2 * MINUTE)
    cg_current(log, "cg", "m1", 1, [(ORDERS, [0, 1]), (PAYMENTS, [0])], T0 + 3 * MINUTE, previous=0)
    return log


@pytest.fixture(scope="module")
def join_runs(join_log, tmp_path_factory):
    """The join log's rebuild as of a moment, with or without --topic-ids naming PAYMENTS: each rebuilt once."""
    base = tmp_path_factory.mktemp("join")
    done: dict[tuple[int, bool], dict] = {}

    def run(as_of_ms: int, named: bool) -> dict:
        if (as_of_ms, named) not in done:
            done[(as_of_ms, named)] = rebuild_log(join_log, base / f"{as_of_ms}-{named}", as_of_ms,
                                                  topic_ids={PAYMENTS: "payments"} if named else None)
        return done[(as_of_ms, named)]

    return run


@pytest.mark.parametrize("as_of, state, member_epoch", [
    (T0 + MINUTE, "Assigning", 0),  # group epoch 1 > target assignment epoch 0
    (T0 + 2 * MINUTE, "Reconciling", 0),  # the member has not reached epoch 1 yet
    (T0 + 3 * MINUTE, "Stable", 1),
])
def test_consumer_group_from_join_to_stable(join_runs, as_of, state, member_epoch):
    tables = join_runs(as_of, named=True)
    g = groups(tables)["cg"]
    assert (g["group_type"], g["protocol_type"], g["state"], g["generation"], g["member_count"], g["offset_count"]) \
        == ("consumer", "consumer", state, 1, 1, 1)
    assert g["protocol"] is None and g["leader_id"] is None and g["current_state_timestamp"] is None
    m = members(tables)[("cg", "m1")]
    assert m["member_epoch"] == member_epoch and m["rack_id"] == "rack-a" and m["client_id"] == "client-m1"
    assert m["subscribed_topics"] == ["orders"] and m["member_state"] == "STABLE"
    if state == "Stable":
        assert parts(m["assigned_partitions"]) == [
            ("orders", 0, ORDERS), ("orders", 1, ORDERS), ("payments", 0, PAYMENTS)]
        # without the AssignmentEpochs tag each partition's epoch is max(member epoch, 0)
        assert parts(m["current_assignment_detail"], DETAIL) == [
            ("orders", 0, ORDERS, 1, False), ("orders", 1, ORDERS, 1, False), ("payments", 0, PAYMENTS, 1, False)]
        targets = sorted((r["member_id"], r["topic"], r["partition"], r["assignment_epoch"])
                         for r in tables["group_target_assignments"])
        assert targets == [("m1", "orders", 0, 1), ("m1", "orders", 1, 1), ("m1", "payments", 0, 1)]


def test_unresolvable_topic_ids_keep_a_null_topic(join_runs):
    tables = join_runs(T0 + 3 * MINUTE, named=False)  # no --topic-ids: PAYMENTS is unknown
    m = members(tables)[("cg", "m1")]
    assert ("payments", 0, PAYMENTS) not in parts(m["assigned_partitions"])
    assert (None, 0, PAYMENTS) in parts(m["assigned_partitions"])
    assert tables["summary"]["unresolved_topic_ids"] == 2  # the current and the target assignment's


def test_partitions_pending_revocation_and_explicit_assignment_epochs(tmp_path):
    log = OffsetsLog()
    cg_member(log, "cg", "m1", T0)
    cg_epoch(log, "cg", 3, T0)
    log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": "cg", "MemberId": "m1"}, {
        "MemberEpoch": 3, "PreviousMemberEpoch": 2, "State": 1,
        "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [0, 1], "AssignmentEpochs": [2, 3]}],
        "PartitionsPendingRevocation": [{"TopicId": ORDERS, "Partitions": [5], "AssignmentEpochs": [1]}]}, T0)
    m = members(rebuild_log(log, tmp_path, T0))[("cg", "m1")]
    assert m["member_state"] == "UNREVOKED_PARTITIONS" and m["previous_member_epoch"] == 2
    assert parts(m["assigned_partitions"]) == [(None, 0, ORDERS), (None, 1, ORDERS)]
    assert parts(m["current_assignment_detail"], DETAIL) == [
        (None, 0, ORDERS, 2, False), (None, 1, ORDERS, 3, False), (None, 5, ORDERS, 1, True)]


def test_static_member_leaving_temporarily_is_still_a_member(tmp_path, join_log):
    log = copy(join_log)
    cg_current(log, "cg", "m1", -2, [], T0 + 4 * MINUTE, previous=1)
    tables = rebuild_log(log, tmp_path, T0 + 5 * MINUTE)
    g = groups(tables)["cg"]
    assert g["member_count"] == 1 and g["state"] == "Reconciling"  # epoch -2 is not the target epoch
    assert members(tables)[("cg", "m1")]["member_epoch"] == -2


def test_deleting_a_consumer_group_with_its_tombstones(tmp_path, join_log):
    log = copy(join_log)
    log.delete_offset("cg", "orders", 0, T0 + 4 * MINUTE)
    cg_delete(log, "cg", ["m1"], T0 + 4 * MINUTE)
    tables = rebuild_log(log, tmp_path, T0 + 5 * MINUTE)
    assert tables["consumer_groups"] == [] and tables["group_members"] == []
    assert tables["group_target_assignments"] == []


def test_classic_upgraded_to_consumer_and_downgraded_back(tmp_path):
    log = OffsetsLog()
    log.group("mig", T0, members=[member("c1", ["orders"], {"orders": [0]})], generation=4)
    log.commit("mig", "orders", 0, 5, T0)
    log.delete_group("mig", T0 + MINUTE)  # upgrade: the classic group's tombstone, then the consumer records
    cg_member(log, "mig", "m1", T0 + MINUTE)
    cg_epoch(log, "mig", 5, T0 + MINUTE)
    cg_target(log, "mig", "m1", [(ORDERS, [0])], T0 + MINUTE)
    cg_target_epoch(log, "mig", 5, T0 + MINUTE)
    cg_current(log, "mig", "m1", 5, [(ORDERS, [0])], T0 + MINUTE)
    upgraded = rebuild_log(log, tmp_path / "upgraded", T0 + MINUTE)
    g = groups(upgraded)["mig"]
    assert (g["group_type"], g["state"], g["generation"], g["offset_count"]) == ("consumer", "Stable", 5, 1)
    cg_delete(log, "mig", ["m1"], T0 + 2 * MINUTE)  # downgrade: the consumer tombstones, then a type-2 value
    log.group("mig", T0 + 2 * MINUTE, members=[member("c2", ["orders"], {"orders": [0]})], generation=6)
    downgraded = rebuild_log(log, tmp_path / "downgraded", T0 + 3 * MINUTE)
    g = groups(downgraded)["mig"]
    assert (g["group_type"], g["protocol_type"], g["state"], g["generation"]) == ("classic", "consumer", "Stable", 6)
    assert list(members(downgraded)) == [("mig", "c2")]


def test_a_modern_record_for_a_live_classic_group_is_a_conflict_the_later_family_wins(tmp_path):
    log = OffsetsLog()
    log.group("both", T0, members=[member("c1", ["orders"])])
    cg_member(log, "both", "m1", T0 + MINUTE)  # no type-2 tombstone first: Kafka's replay would throw here
    cg_epoch(log, "both", 1, T0 + MINUTE)
    log.commit("simple-then-consumer", "orders", 0, 1, T0)  # a simple group is replaced silently
    cg_member(log, "simple-then-consumer", "m1", T0 + MINUTE)
    tables = rebuild_log(log, tmp_path, T0 + HOUR)
    g = groups(tables)
    assert g["both"]["group_type"] == "consumer" and g["simple-then-consumer"]["group_type"] == "consumer"
    violations = {v["group_id"]: v["reason"] for v in tables["summary"]["replay_violations"]}
    assert violations == {"both": "a consumer group record arrived while a classic group held the id "
                                  "(Kafka's replay would fail); the later family was kept"}


def test_a_group_tombstone_before_its_members_tombstones_is_reported(tmp_path, join_log, join_runs):
    log = copy(join_log)
    log.record("ConsumerGroupMetadata", {"GroupId": "cg"}, None, T0 + 4 * MINUTE)  # m1 and its assignments remain
    tables = rebuild_log(log, tmp_path, T0 + 5 * MINUTE)
    g = groups(tables)["cg"]  # the consumer group is gone; its committed offset is left behind as an orphan
    assert (g["group_type"], g["protocol_type"], g["is_orphan"], g["member_count"]) == ("classic", None, True, 0)
    (v,) = tables["summary"]["replay_violations"]
    assert v["group_id"] == "cg" and v["reason"] == (
        "a consumer group tombstone while its target assignment metadata and members and target assignments "
        "remained (Kafka's replay would fail); the group was removed")
    clean = join_runs(T0 + 5 * MINUTE, named=False)
    assert clean["summary"]["replay_violations"] == []


def test_tombstones_for_unknown_groups_and_members_are_ignored(tmp_path):
    log = OffsetsLog()
    log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": "ghost", "MemberId": "m"}, None, T0)
    log.record("ConsumerGroupMemberMetadata", {"GroupId": "ghost", "MemberId": "m"}, None, T0)
    cg_member(log, "cg", "m1", T0)
    cg_epoch(log, "cg", 1, T0)
    log.record("ConsumerGroupMemberMetadata", {"GroupId": "cg", "MemberId": "never-joined"}, None, T0)
    tables = rebuild_log(log, tmp_path, T0 + MINUTE)
    assert list(groups(tables)) == ["cg"] and list(members(tables)) == [("cg", "m1")]


def test_consumer_group_offsets_expire_for_unsubscribed_topics_only(tmp_path):
    log = OffsetsLog()
    log.commit("cg", "orders", 0, 1, T0)
    log.commit("cg", "legacy", 0, 1, T0)
    log.commit("cg", "matched", 0, 1, T0)
    cg_member(log, "cg", "m1", T0, topics=["orders"], regex="match.*")
    log.record("ConsumerGroupRegularExpression", {"GroupId": "cg", "RegularExpression": "match.*"},
               {"Topics": ["matched"], "Version": 7, "Timestamp": T0}, T0)
    cg_epoch(log, "cg", 1, T0)
    tables = rebuild_log(log, tmp_path, T0 + 2 * DAY, retention_ms=DAY)
    live = {r["topic"]: r["expires_at"] for r in tables["committed_offsets"]}
    assert live == {"orders": None, "matched": None}  # subscribed by name and through the resolved regex
    assert [(r["topic"], r["expired_at"]) for r in tables["expired_offsets"]] == [("legacy", utc(T0 + DAY))]
    assert members(tables)[("cg", "m1")]["subscribed_topics"] == ["matched", "orders"]


def test_share_group(tmp_path):
    log = OffsetsLog()
    log.record("ShareGroupMemberMetadata", {"GroupId": "sg", "MemberId": "s1"}, {
        "RackId": None, "ClientId": "share-client", "ClientHost": "/10.1.1.1", "SubscribedTopicNames": ["orders"]}, T0)
    log.record("ShareGroupMetadata", {"GroupId": "sg"}, {"Epoch": 2, "MetadataHash": 5}, T0)
    log.record("ShareGroupTargetAssignmentMember", {"GroupId": "sg", "MemberId": "s1"},
               {"TopicPartitions": [{"TopicId": ORDERS, "Partitions": [0, 1]}]}, T0)
    log.record("ShareGroupTargetAssignmentMetadata", {"GroupId": "sg"}, {"AssignmentEpoch": 2}, T0)
    log.record("ShareGroupCurrentMemberAssignment", {"GroupId": "sg", "MemberId": "s1"}, {
        "MemberEpoch": 2, "PreviousMemberEpoch": 1, "State": 0,
        "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [0, 1]}]}, T0)
    log.record("ShareGroupStatePartitionMetadata", {"GroupId": "sg"}, {
        "InitializingTopics": [], "InitializedTopics": [{"TopicId": ORDERS, "TopicName": "orders", "Partitions": [0, 1]}],
        "DeletingTopics": []}, T0)  # names the topic id
    log.record("ShareGroupMetadata", {"GroupId": "empty-share"}, {"Epoch": 1, "MetadataHash": 0}, T0)
    tables = rebuild_log(log, tmp_path, T0 + 30 * DAY)
    g = groups(tables)
    assert (g["sg"]["group_type"], g["sg"]["state"], g["sg"]["generation"], g["sg"]["member_count"]) == (
        "share", "Stable", 2, 1)
    assert g["empty-share"]["state"] == "Empty"  # share groups are never deleted by the offsets cleanup
    m = members(tables)[("sg", "s1")]
    assert parts(m["assigned_partitions"]) == [("orders", 0, ORDERS), ("orders", 1, ORDERS)]
    assert m["subscribed_topics"] == ["orders"] and m["member_epoch"] == 2


def streams_log(validated: int = 3) -> OffsetsLog:
    log = OffsetsLog()
    log.record("StreamsGroupTopology", {"GroupId": "app"}, {"Epoch": 3, "Subtopologies": [
        {"SubtopologyId": "0", "SourceTopics": ["input"], "SourceTopicRegex": [],
         "StateChangelogTopics": [{"Name": "app-store-changelog", "Partitions": 2, "ReplicationFactor": 3, "TopicConfigs": []}],
         "RepartitionSinkTopics": ["app-repartition"], "RepartitionSourceTopics": [], "CopartitionGroups": []},
        {"SubtopologyId": "1", "SourceTopics": [], "SourceTopicRegex": [], "StateChangelogTopics": [],
         "RepartitionSinkTopics": [], "CopartitionGroups": [],
         "RepartitionSourceTopics": [{"Name": "app-repartition", "Partitions": 2, "ReplicationFactor": 3, "TopicConfigs": []}]},
    ]}, T0)
    log.record("StreamsGroupMemberMetadata", {"GroupId": "app", "MemberId": "w1"}, {
        "InstanceId": None, "RackId": None, "ClientId": "app-client", "ClientHost": "/10.2.0.1",
        "RebalanceTimeoutMs": 60_000, "TopologyEpoch": 3, "ProcessId": "p1", "UserEndpoint": None, "ClientTags": []}, T0)
    log.record("StreamsGroupMetadata", {"GroupId": "app"}, {"Epoch": 4, "MetadataHash": 9,
                                                            "ValidatedTopologyEpoch": validated}, T0)
    tasks = [{"SubtopologyId": "0", "Partitions": [0, 1]}]
    log.record("StreamsGroupTargetAssignmentMember", {"GroupId": "app", "MemberId": "w1"},
               {"ActiveTasks": tasks, "StandbyTasks": [], "WarmupTasks": []}, T0)
    log.record("StreamsGroupTargetAssignmentMetadata", {"GroupId": "app"}, {"AssignmentEpoch": 4}, T0)
    log.record("StreamsGroupCurrentMemberAssignment", {"GroupId": "app", "MemberId": "w1"}, {
        "MemberEpoch": 4, "PreviousMemberEpoch": 3, "State": 1, "ActiveTasks": tasks, "StandbyTasks": [],
        "WarmupTasks": [], "ActiveTasksPendingRevocation": [], "StandbyTasksPendingRevocation": [],
        "WarmupTasksPendingRevocation": []}, T0)
    log.commit("app", "input", 0, 100, T0)
    log.commit("app", "old-input", 0, 7, T0)
    return log


def test_streams_group_with_its_topology(tmp_path):
    tables = rebuild_log(streams_log(), tmp_path, T0 + 2 * DAY, retention_ms=DAY)
    g = groups(tables)["app"]
    assert (g["group_type"], g["state"], g["generation"], g["topology_epoch"]) == ("streams", "Stable", 4, 3)
    m = members(tables)[("app", "w1")]
    assert m["subscribed_topics"] == ["input"]  # the topology's source topics
    assert parts(m["assigned_partitions"]) == [("input", 0, None), ("input", 1, None)]
    assert m["member_state"] == "STABLE"
    topology = {r["subtopology_id"]: r for r in tables["streams_topologies"]}
    assert topology["0"]["changelog_topics"] == ["app-store-changelog"] and topology["0"]["topology_epoch"] == 3
    assert topology["1"]["repartition_source_topics"] == ["app-repartition"]
    assert [r["topic"] for r in tables["committed_offsets"]] == ["input"]  # old-input expired
    assert [r["topic"] for r in tables["expired_offsets"]] == ["old-input"]


def test_streams_group_is_not_ready_until_its_topology_is_validated(tmp_path):
    tables = rebuild_log(streams_log(validated=-1), tmp_path, T0)
    assert groups(tables)["app"]["state"] == "NotReady"


def test_early_access_share_records_are_quarantined_with_a_reason(tmp_path):
    from offsets_codec import encode_key

    log = OffsetsLog()
    key = encode_key(11, {"GroupId": "ea"})
    log.raw(key, b"\x00\x00" + (3).to_bytes(4, "big") + b"\x00", T0)  # 4.0 layout: Epoch only, no MetadataHash
    tables = rebuild_log(log, tmp_path, T0)
    (q,) = tables["quarantine"]
    assert "Kafka 4.0 early-access share groups wrote an older, incompatible layout" in q["error"]
    assert tables["consumer_groups"] == []


# --- the fold, record by record ----------------------------------------------------------------------------


def _fold(rows: list[tuple]) -> list[dict]:
    """The fold's output rows (jobs.replay.groups.replay_groups) over an OffsetsLog's rows `rows` (one
    coordinator partition), checked as a run checks them, without a run."""
    log = OffsetsLog()
    log.rows = rows
    checked = check(records(log.table()))
    assert checked.column("error").null_count == checked.num_rows
    group_records = checked.filter(pc.is_in(checked.column("record_type"), pa.array(GROUP_TYPES, pa.int16())))
    return replay_groups(group_records).to_pylist()


def _events(log: OffsetsLog) -> list[dict]:
    """The fold's group events over `log` (one coordinator partition)."""
    return [{**r["event"], "group_id": r["group_id"]} for r in _fold(log.rows) if r["kind"] == "event"]


def test_a_group_has_members_exactly_when_it_is_not_empty(join_log):
    """The replay keeps every member without asking whether expiry deleted its group (jobs.replay.partition): it
    deletes only Empty groups, and a group with members is never Empty. Checked after every record of logs of
    each family: joins, leaves, deletions, a classic group emptied and removed, a streams and a share group."""
    classic = OffsetsLog()
    a, b = member("a", ["orders"], {"orders": [0]}), member("b", ["orders"], {"orders": [1]})
    classic.group("classic", T0, members=[a, b], generation=1)
    classic.group("classic", T0 + MINUTE, members=[], generation=2)
    classic.delete_group("classic", T0 + 2 * MINUTE)
    leaving = OffsetsLog()
    cg_member(leaving, "cg", "m1", T0)
    cg_epoch(leaving, "cg", 1, T0)
    cg_current(leaving, "cg", "m1", 1, [(ORDERS, [0])], T0, previous=0)
    cg_delete(leaving, "cg", ["m1"], T0 + MINUTE)
    share = OffsetsLog()
    share.record("ShareGroupMemberMetadata", {"GroupId": "sg", "MemberId": "s1"}, {
        "RackId": None, "ClientId": "share-client", "ClientHost": "/10.1.1.1", "SubscribedTopicNames": ["orders"]}, T0)
    share.record("ShareGroupMetadata", {"GroupId": "sg"}, {"Epoch": 2, "MetadataHash": 5}, T0)
    share.record("ShareGroupMemberMetadata", {"GroupId": "sg", "MemberId": "s1"}, None, T0 + MINUTE)
    checked = 0
    for log in (join_log, classic, leaving, share, streams_log(), streams_log(validated=2)):
        for end in range(1, len(log.rows) + 1):
            rows = _fold(log.rows[:end])
            with_members = {r["group_id"] for r in rows if r["kind"] == "member"}
            for g in (r for r in rows if r["kind"] == "group"):
                assert (g["group"]["state"] == "Empty") == (g["group"]["member_count"] == 0), g
                assert (g["group_id"] in with_members) == (g["group"]["member_count"] > 0), g
                checked += 1
    assert checked > 20


def test_group_events_follow_rebalances_joins_and_leaves():
    """A classic group's rebalances and its move to Empty; a consumer group's epochs, joins and leaves; each
    compared with the event before it (jobs.replay.groups, what group_events shows)."""
    log = OffsetsLog()
    a, b = member("a", ["orders"], {"orders": [0]}), member("b", ["orders"], {"orders": [1]})
    log.group("classic", T0, members=[a], generation=1)
    log.group("classic", T0 + MINUTE, members=[a, b], generation=2)
    log.group("classic", T0 + 2 * MINUTE, members=[b], generation=3)
    log.group("classic", T0 + 3 * MINUTE, members=[], generation=4)
    log.delete_group("classic", T0 + 4 * MINUTE)
    cg_epoch(log, "cg", 1, T0)
    cg_member(log, "cg", "m1", T0)
    cg_member(log, "cg", "m2", T0 + MINUTE)
    cg_epoch(log, "cg", 2, T0 + MINUTE)
    log.record("ConsumerGroupMemberMetadata", {"GroupId": "cg", "MemberId": "m1"}, None, T0 + 2 * MINUTE)
    got = [(e["group_id"], e["event"], e["generation"], e["previous_generation"], e["state"], e["member_count"],
            e["members_joined"], e["members_left"], e["seconds_since_previous"]) for e in _events(log)]
    assert got == [
        ("classic", "rebalanced", 1, None, "Stable", 1, ["a"], [], None),
        ("classic", "rebalanced", 2, 1, "Stable", 2, ["b"], [], 60.0),
        ("classic", "rebalanced", 3, 2, "Stable", 1, [], ["a"], 60.0),
        ("classic", "emptied", 4, 3, "Empty", 0, [], ["b"], 60.0),
        ("classic", "deleted", None, 4, None, 0, [], [], 60.0),
        ("cg", "rebalanced", 1, None, "Empty", 0, [], [], None),
        ("cg", "member_joined", 1, 1, "Assigning", 1, ["m1"], [], 0.0),
        ("cg", "member_joined", 1, 1, "Assigning", 2, ["m2"], [], 60.0),
        ("cg", "rebalanced", 2, 1, "Assigning", 2, [], [], 0.0),
        ("cg", "member_left", 2, 2, "Assigning", 1, [], ["m1"], 60.0),
    ]


# --- the member-level tables -----------------------------------------------------------------------------


def member_level_log() -> OffsetsLog:
    """On two coordinator partitions: topic ids named by a v4 commit, by a share group's partition metadata and
    --topic-ids (the greatest name where they differ), or by none; partitions out of order and pending revocation;
    a member without an assignment; streams tasks of a subtopology with source topics, one without any, and one
    the topology does not have; a classic group's members; the target assignment and topology of groups that expiry
    deletes (Empty, no offsets)."""
    log = streams_log()
    log.commit("cg", "orders", 0, 10, T0, version=4, topic_id=ORDERS)
    cg_member(log, "cg", "m1", T0)
    cg_member(log, "cg", "m2", T0)
    cg_member(log, "cg", "m3", T0)  # no assignment yet
    cg_epoch(log, "cg", 2, T0)
    cg_current(log, "cg", "m1", 2, [(PAYMENTS, [0]), (ORDERS, [1, 0]), (UNKNOWN, [2])], T0)
    log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": "cg", "MemberId": "m2"}, {
        "MemberEpoch": 2, "PreviousMemberEpoch": 1, "State": 1, "AssignedPartitions": [],
        "PartitionsPendingRevocation": [{"TopicId": ORDERS, "Partitions": [5, 3]}]}, T0)
    log.record("StreamsGroupMemberMetadata", {"GroupId": "app", "MemberId": "w2"}, {
        "InstanceId": None, "RackId": "r", "ClientId": "app-client", "ClientHost": "/10.2.0.2",
        "RebalanceTimeoutMs": 60_000, "TopologyEpoch": 3, "ProcessId": "p2", "UserEndpoint": None, "ClientTags": []}, T0)
    log.record("StreamsGroupCurrentMemberAssignment", {"GroupId": "app", "MemberId": "w2"}, {
        "MemberEpoch": 4, "PreviousMemberEpoch": 3, "State": 2,
        "ActiveTasks": [{"SubtopologyId": "9", "Partitions": [0]}, {"SubtopologyId": "1", "Partitions": [1]}],
        "StandbyTasks": [], "WarmupTasks": [], "StandbyTasksPendingRevocation": [], "WarmupTasksPendingRevocation": [],
        "ActiveTasksPendingRevocation": [{"SubtopologyId": "0", "Partitions": [1]}]}, T0)
    log.record("ShareGroupMemberMetadata", {"GroupId": "sg", "MemberId": "s1"}, {
        "RackId": None, "ClientId": "share-client", "ClientHost": "/10.1.1.1", "SubscribedTopicNames": ["orders"]}, T0,
        coordinator=1)
    log.record("ShareGroupMetadata", {"GroupId": "sg"}, {"Epoch": 2, "MetadataHash": 5}, T0, coordinator=1)
    log.record("ShareGroupCurrentMemberAssignment", {"GroupId": "sg", "MemberId": "s1"}, {
        "MemberEpoch": 2, "PreviousMemberEpoch": 1, "State": 0,
        "AssignedPartitions": [{"TopicId": PAYMENTS, "Partitions": [1]}]}, T0, coordinator=1)
    log.record("ShareGroupStatePartitionMetadata", {"GroupId": "sg"}, {
        "InitializingTopics": [], "InitializedTopics": [{"TopicId": PAYMENTS, "TopicName": "payments-b",
                                                         "Partitions": [1]}], "DeletingTopics": []}, T0, coordinator=1)
    log.group("classic", T0, members=[member("a", ["orders"], {"orders": [1, 0], "b": [3]}), member("b", ["orders"])],
              coordinator=1)
    cg_target(log, "cg", "m1", [(PAYMENTS, [0]), (UNKNOWN, [1])], T0)
    cg_epoch(log, "gone", 1, T0)
    cg_target(log, "gone", "x", [(ORDERS, [0])], T0)
    log.record("StreamsGroupTopology", {"GroupId": "gone-app"}, {"Epoch": 1, "Subtopologies": [
        {"SubtopologyId": "0", "SourceTopics": ["in"], "SourceTopicRegex": [], "StateChangelogTopics": [],
         "RepartitionSinkTopics": [], "RepartitionSourceTopics": [], "CopartitionGroups": []}]}, T0)
    return log


MEMBER_LEVEL_TOPIC_IDS = {PAYMENTS: "payments-a", ORDERS: "a-orders"}


@pytest.fixture(scope="module")
def member_level(tmp_path_factory):
    base = tmp_path_factory.mktemp("member-level")
    log = member_level_log()
    return log, base, rebuild_log(log, base, T0, topic_ids=MEMBER_LEVEL_TOPIC_IDS)


def test_member_level_tables_name_partitions_and_keep_only_existing_groups(member_level):
    _, _, tables = member_level
    existing = {(r["coordinator_partition"], r["group_id"]) for r in tables["consumer_groups"]}
    assert {"cg", "app", "sg", "classic"} <= {g for _, g in existing}
    assert not {"gone", "gone-app"} & {g for _, g in existing}
    got = members(tables)
    assert len(got) == 8
    for name in ("group_members", "group_target_assignments", "streams_topologies"):
        assert {r["as_of"] for r in tables[name]} == {utc(T0)}, name
    # ORDERS: "orders" (the v4 commit) over "a-orders"; PAYMENTS: "payments-b" (the share group's partition
    # metadata, on the other coordinator partition) over "payments-a"; UNKNOWN: no name
    assert parts(got[("cg", "m1")]["assigned_partitions"]) == [
        (None, 2, UNKNOWN), ("orders", 0, ORDERS), ("orders", 1, ORDERS), ("payments-b", 0, PAYMENTS)]
    assert got[("cg", "m2")]["assigned_partitions"] == []
    assert parts(got[("cg", "m2")]["current_assignment_detail"], DETAIL) == [
        ("orders", 3, ORDERS, 2, True), ("orders", 5, ORDERS, 2, True)]
    assert got[("cg", "m3")]["current_assignment_detail"] is None
    assert got[("cg", "m3")]["assigned_partitions"] == []
    assert parts(got[("app", "w2")]["current_assignment_detail"], DETAIL) == [
        (None, 0, None, 4, False), (None, 1, None, 4, False), ("input", 1, None, 4, True)]
    assert got[("app", "w2")]["member_state"] == "UNREVOKED_TASKS"
    assert got[("sg", "s1")]["assigned_partitions"] == [{"topic": "payments-b", "partition": 1, "topic_id": PAYMENTS}]
    assert [p["topic"] for p in got[("classic", "a")]["assigned_partitions"]] == ["b", "orders", "orders"]
    assert (got[("classic", "b")]["assigned_partitions"], got[("classic", "b")]["coordinator_partition"]) == ([], 1)
    targets = sorted(((r["group_id"], r["member_id"], r["topic"], r["partition"], r["topic_id"], r["assignment_epoch"])
                      for r in tables["group_target_assignments"]), key=repr)
    assert targets == sorted([
        ("app", "w1", "input", 0, None, 4), ("app", "w1", "input", 1, None, 4),
        ("cg", "m1", "payments-b", 0, PAYMENTS, 0), ("cg", "m1", None, 1, UNKNOWN, 0)], key=repr)
    topologies = {(r["group_id"], r["subtopology_id"]): (r["topology_epoch"], r["source_topics"],
                                                         r["repartition_source_topics"])
                  for r in tables["streams_topologies"]}
    assert topologies == {("app", "0"): (3, ["input"], []), ("app", "1"): (3, [], ["app-repartition"])}


def test_the_spark_runner_writes_the_tables_the_local_runner_writes(spark, member_level):
    log, base, local = member_level
    options = {"topic_ids": str(base / "topic_ids.csv")}
    on_spark = rebuild_tables(log, base, engine="spark", spark=spark, as_of_ms=T0, retention_ms=7 * DAY, **options)
    assert set(on_spark) == set(local)
    for table in local:
        if table != "summary":
            assert on_spark[table] == local[table], table
