"""Share groups' progress in a whole run: a Parquet dump of both internal topics, `__consumer_offsets` and the
share coordinator's `__share_group_state`, rebuilt by the command, then described as kafka-share-groups.sh does."""
from __future__ import annotations

import base64
import json

from click.testing import CliRunner
from offsets_log import MINUTE, T0, OffsetsLog

from jobs.cli import cli


ORDERS = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
AUDIT = base64.urlsafe_b64encode(bytes(range(17, 33))).decode().rstrip("=")
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


def share_log() -> OffsetsLog:
    log = OffsetsLog()
    log.commit("cg", "orders", 0, 40, T0)  # a consumer group at coordinator partition 0, as the share state below
    log.record("ShareGroupMemberMetadata", {"GroupId": "sg", "MemberId": "m1"},
               {"RackId": None, "ClientId": "c1", "ClientHost": "/10.0.0.9", "SubscribedTopicNames": ["orders"]}, T0)
    log.record("ShareGroupCurrentMemberAssignment", {"GroupId": "sg", "MemberId": "m1"},
               {"MemberEpoch": 3, "PreviousMemberEpoch": 2, "State": 0,
                "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": [1, 0]}]}, T0)
    log.record("ShareGroupTargetAssignmentMetadata", {"GroupId": "sg"}, {"AssignmentEpoch": 3}, T0)
    log.record("ShareGroupMetadata", {"GroupId": "sg"}, {"Epoch": 3, "MetadataHash": 0}, T0)
    log.share_snapshot("sg", ORDERS, 0, T0, start=10, batches=[(10, 19, AVAILABLE, 1)], leader_epoch=1)
    # 15-17 delivered (4.2+ brokers count them: KIP-1226's DeliveryCompleteCount), 18-19 not yet.
    log.share_update("sg", ORDERS, 0, T0 + 1, start=15, batches=[(15, 16, ACKNOWLEDGED, 1), (17, 17, ARCHIVED, 2)],
                     delivery_complete_count=3)
    log.share_snapshot("sg", ORDERS, 1, T0, start=-1, coordinator=1)  # initializing: no start offset yet
    log.share_snapshot("sg", AUDIT, 0, T0, start=7, coordinator=1)  # no name known for this topic id
    log.share_update("sg", ORDERS, 0, T0 + 5 * MINUTE, start=19)  # after as_of
    log.raw(b"\x00\x01", b"\x00\x00", T0 + 2, 1, topic="__share_group_state")  # a truncated key
    return log


def test_a_dump_of_both_topics_gives_share_partitions_and_their_lag(tmp_path):
    share_log().write_parquet(tmp_path / "dump")
    ends, ids = tmp_path / "ends.txt", tmp_path / "topic-ids.csv"
    ends.write_text("orders:0:100\norders:1:50\naudit:0:9\n")
    ids.write_text(f"topic_id,topic\n{ORDERS},orders\n")
    out = tmp_path / "tables"
    runner = CliRunner()
    result = runner.invoke(cli, ["rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(out),
                                 "--as-of", str(T0 + MINUTE), "--end-offsets", str(ends), "--topic-ids", str(ids)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["share_partitions"] == 3
    assert summary["records_by_type"]["ShareSnapshot"] == 3 and summary["records_by_type"]["ShareUpdate"] == 2
    assert summary["records_after_as_of"] == 1
    assert summary["records_quarantined"] == 1 and summary["committed_offsets"] == 1

    state = sql(runner, out, "SELECT group_id, topic, topic_id, partition, start_offset, leader_epoch, in_flight, "
                             "snapshot_epoch, updates_since_snapshot, coordinator_partition, record_offset "
                             "FROM share_partition_state ORDER BY coordinator_partition, record_offset")
    assert state == [
        {"group_id": "sg", "topic": "orders", "topic_id": ORDERS, "partition": 0, "start_offset": 15, "leader_epoch": 1,
         "in_flight": [{"first_offset": 15, "last_offset": 16, "delivery_state": "Acknowledged", "delivery_count": 1},
                       {"first_offset": 17, "last_offset": 17, "delivery_state": "Archived", "delivery_count": 2},
                       {"first_offset": 18, "last_offset": 19, "delivery_state": "Available", "delivery_count": 1}],
         "snapshot_epoch": 0, "updates_since_snapshot": 1, "coordinator_partition": 0, "record_offset": 1},
        {"group_id": "sg", "topic": "orders", "topic_id": ORDERS, "partition": 1, "start_offset": -1,
         "leader_epoch": 0, "in_flight": [], "snapshot_epoch": 0, "updates_since_snapshot": 0,
         "coordinator_partition": 1, "record_offset": 0},
        {"group_id": "sg", "topic": None, "topic_id": AUDIT, "partition": 0, "start_offset": 7, "leader_epoch": 0,
         "in_flight": [], "snapshot_epoch": 0, "updates_since_snapshot": 0, "coordinator_partition": 1,
         "record_offset": 1}]

    counts = sql(runner, out, "SELECT delivery_complete_count AS n FROM share_partition_state ORDER BY record_offset, "
                              "coordinator_partition")
    assert [r["n"] for r in counts] == [-1, 3, -1]  # KIP-1226's count: kept from the update that carried it
    lag = sql(runner, out, "SELECT group_id, topic, partition, committed_offset, log_end_offset, lag, progress "
                           "FROM consumer_lag ORDER BY group_id, topic, partition")
    assert lag == [
        {"group_id": "cg", "topic": "orders", "partition": 0, "committed_offset": 40, "log_end_offset": 100,
         "lag": 60, "progress": "commit"},
        {"group_id": "sg", "topic": "orders", "partition": 0, "committed_offset": 15, "log_end_offset": 100,
         "lag": 82, "progress": "share_start_offset"},  # 100 - 15 - 3 delivered above the start offset
        {"group_id": "sg", "topic": "orders", "partition": 1, "committed_offset": None, "log_end_offset": 50,
         "lag": None, "progress": "share_start_offset"}]  # no start offset yet: no lag
    [bad] = sql(runner, out, "SELECT coordinator_partition, error FROM quarantine")
    assert bad["coordinator_partition"] == 1 and bad["error"].startswith("__share_group_state: ")

    described = runner.invoke(cli, ["describe", "--output", str(out), "--group", "sg"])
    assert described.exit_code == 0, described.output
    lines = described.stdout.split("\n")
    assert lines[0] == "" and lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [line.split() for line in lines[2:] if line.strip()] == [
        ["sg", AUDIT, "0", "7", "-"], ["sg", "orders", "0", "15", "82"], ["sg", "orders", "1", "-", "-"]]
    assert lines[1].index("PARTITION") == 16 + max(15, len(AUDIT)) + 1  # %-15s group, %-Ns topic
    verbose = runner.invoke(cli, ["describe", "--output", str(out), "--group", "sg", "--verbose"])
    assert verbose.stdout.split("\n")[1].split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET",
                                                     "LAG"]
    assert verbose.stdout.split("\n")[3].split() == ["sg", "orders", "0", "1", "15", "82"]

    state = runner.invoke(cli, ["describe", "--output", str(out), "--group", "sg", "--state", "--verbose"])
    assert state.stdout.split("\n")[1:3] == [
        "GROUP           COORDINATOR (ID)          STATE           GROUP-EPOCH  ASSIGNMENT-EPOCH  #MEMBERS",
        "sg              __consumer_offsets-0  (-) Stable          3            3                 1"]
    members = runner.invoke(cli, ["describe", "--output", str(out), "--group", "sg", "--members"])
    assert members.stdout.split("\n")[1:3] == [
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT",
        "sg              m1              /10.0.0.9       c1              2            orders:0,1"]


def sql(runner: CliRunner, out, query: str) -> list[dict]:
    result = runner.invoke(cli, ["sql", "--output", str(out), "--format", "json", query], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_both_runners_give_the_same_share_partitions(tmp_path, spark):
    from runs import rebuild_tables

    ends, ids = tmp_path / "ends.txt", tmp_path / "topic-ids.csv"
    ends.write_text("orders:0:100\norders:1:50\n")
    ids.write_text(f"topic_id,topic\n{ORDERS},orders\n")
    log = share_log()
    options = {"as_of_ms": T0 + MINUTE, "end_offsets": ends, "topic_ids": str(ids)}
    local = rebuild_tables(log, tmp_path, engine="local", **options)
    on_spark = rebuild_tables(log, tmp_path, engine="spark", spark=spark, **options)
    for table in ("share_partition_state", "consumer_lag", "quarantine", "committed_offsets"):
        assert on_spark[table] == local[table], table
    assert len(local["share_partition_state"]) == 3 and len(local["consumer_lag"]) == 3


def test_a_log_dir_with_share_state_folders_gives_the_same_as_its_dump(tmp_path):
    log = share_log()
    log.write_segments(tmp_path / "kafka-logs")
    assert (tmp_path / "kafka-logs" / "__share_group_state-1").is_dir()
    log.write_parquet(tmp_path / "dump")
    runner = CliRunner()
    found = {}
    for name, source in (("segments", f"segments:{tmp_path / 'kafka-logs'}"), ("parquet", f"parquet:{tmp_path / 'dump'}")):
        out = tmp_path / name
        result = runner.invoke(cli, ["rebuild", "--source", source, "--output", str(out), "--as-of", str(T0 + MINUTE)],
                               catch_exceptions=False)
        assert result.exit_code == 0, result.output
        found[name] = sql(runner, out, "SELECT * FROM share_partition_state ORDER BY coordinator_partition, "
                                       "record_offset")
    assert found["segments"] == found["parquet"] and len(found["parquet"]) == 3

    decoded = runner.invoke(cli, ["decode", "--source", f"segments:{tmp_path / 'kafka-logs'}"])
    snapshots = [json.loads(line) for line in decoded.stdout.splitlines() if '"startOffset":10' in line]
    assert snapshots[0]["key"] == {"type": 0, "data": {"groupId": "sg", "topicId": ORDERS, "partition": 0}}


def test_a_reduced_run_gives_the_same_share_partitions(tmp_path):
    """Without the history the offsets topic is reduced as it is read; the share coordinator's records never
    are (a ShareUpdate is a delta), so the share partitions are the same."""
    from runs import rebuild_tables

    log = share_log()
    whole = rebuild_tables(log, tmp_path, as_of_ms=T0 + MINUTE)
    (tmp_path / "out-local").rename(tmp_path / "whole")
    reduced = rebuild_tables(log, tmp_path, as_of_ms=T0 + MINUTE, history=False)
    assert reduced["share_partition_state"] == whole["share_partition_state"]
    assert len(reduced["share_partition_state"]) == 3
