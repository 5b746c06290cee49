"""describe for KIP-848 consumer groups: epochs and target assignments, as kafka-consumer-groups.sh --verbose."""
from __future__ import annotations

import base64
import json

from click.testing import CliRunner
from offsets_log import MINUTE, T0, OffsetsLog

from jobs.cli import cli

ORDERS = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
AUDIT = base64.urlsafe_b64encode(bytes(range(17, 33))).decode().rstrip("=")


def test_describe_members_and_state_verbose_for_a_consumer_group(tmp_path):
    log = OffsetsLog()
    log.commit("cg", "orders", 0, 10, T0, version=4, topic_id=ORDERS)
    for m, parts in (("m1", [0, 1]), ("m2", [2])):
        log.record("ConsumerGroupMemberMetadata", {"GroupId": "cg", "MemberId": m}, {
            "InstanceId": None, "RackId": None, "ClientId": f"c-{m}", "ClientHost": "/10.0.0.7",
            "SubscribedTopicNames": ["orders"], "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 30_000,
            "ServerAssignor": "range", "ClassicMemberMetadata": None}, T0)
        log.record("ConsumerGroupTargetAssignmentMember", {"GroupId": "cg", "MemberId": m},
                   {"TopicPartitions": [{"TopicId": ORDERS, "Partitions": parts + [3] if m == "m2" else parts}]}, T0)
        log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": "cg", "MemberId": m}, {
            "MemberEpoch": 7, "PreviousMemberEpoch": 6, "State": 0,
            "AssignedPartitions": [{"TopicId": ORDERS, "Partitions": parts}] + ([{"TopicId": AUDIT, "Partitions": [0]}]
                                                                                if m == "m1" else []),
            "PartitionsPendingRevocation": []}, T0)
    log.record("ConsumerGroupMetadata", {"GroupId": "cg"}, {"Epoch": 8, "MetadataHash": 0}, T0)
    log.record("ConsumerGroupTargetAssignmentMetadata", {"GroupId": "cg"}, {"AssignmentEpoch": 8}, T0)
    log.write_parquet(tmp_path / "dump")
    runner = CliRunner()
    out = tmp_path / "tables"
    ids = tmp_path / "topic-ids.csv"
    ids.write_text(f"topic_id,topic\n{AUDIT},audit\n")  # ORDERS is named by the v4 offset commit itself
    result = runner.invoke(cli, ["rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(out),
                                 "--as-of", str(T0 + MINUTE), "--topic-ids", str(ids)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["topic_ids"] == 1 and summary["unresolved_topic_ids"] == 0

    members = runner.invoke(cli, ["describe", "--output", str(out), "--group", "cg", "--members", "--verbose"])
    lines = members.stdout.split("\n")
    assert lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    rows = sorted(line.split() for line in lines[2:] if line.strip())
    assert rows == [["cg", "m1", "/10.0.0.7", "c-m1", "3", "7", "audit:0;orders:0,1", "8", "orders:0,1"],
                    ["cg", "m2", "/10.0.0.7", "c-m2", "1", "7", "orders:2", "8", "orders:2,3"]]
    assert "is rebalancing" in members.stderr  # epoch 7 members, target epoch 8: Reconciling

    state = runner.invoke(cli, ["describe", "--output", str(out), "--group", "cg", "--state", "--verbose"])
    assert state.stdout.split("\n")[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                                   "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert state.stdout.split("\n")[2].split() == ["cg", "__consumer_offsets-0", "(-)", "range", "Reconciling", "8", "8", "2"]
