"""`offsetlake reset-offsets`: the reset plan `kafka-consumer-groups.sh --reset-offsets --from-file` reads,
from tables written with delta-rs alone (tests/delta_runs.py): no Spark anywhere."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from delta_runs import commit_run

from jobs.cli import cli

REPO = Path(__file__).resolve().parents[2]
T = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)


def offsets(group: str, rows: list[tuple[str, int, int]]) -> list[dict]:
    return [{"group_id": group, "topic": t, "partition": p, "committed_offset": o, "commit_timestamp": T,
             "metadata": "", "as_of": T} for t, p, o in rows]


def group(group_id: str) -> dict:
    return {"group_id": group_id, "group_type": "classic", "state": "Empty", "member_count": 0, "as_of": T}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tables")
    # Rows out of order on purpose; partition 10 sorts after 9 as a number.
    committed = offsets("g", [("orders", 10, 1000), ("billing", 0, 5), ("orders", 9, 900), ("orders", 0, 42)])
    committed += offsets("other", [("orders", 0, 1)])
    commit_run(path, {"committed_offsets": committed,
                      "consumer_groups": [group("g"), group("other"), group("no-offsets")]})
    # A run killed after its table commits (never recorded in _runs): its offsets must not be offered.
    commit_run(path, {"committed_offsets": offsets("g", [("orders", 0, 999_999)]),
                      "consumer_groups": [group("g")]}, finish=False)
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, ["reset-offsets", *args], catch_exceptions=False)


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_the_plan_is_topic_partition_offset_lines_sorted_without_header(out):
    result = invoke("--output", str(out), "--group", "g")
    assert result.exit_code == 0, result.output
    assert result.stdout == "billing,0,5\norders,0,42\norders,9,900\norders,10,1000\n"
    assert result.stderr == ""


def test_topic_keeps_only_that_topic(out):
    assert invoke("--output", str(out), "--group", "g", "--topic", "orders").stdout == \
        "orders,0,42\norders,9,900\norders,10,1000\n"


@pytest.mark.parametrize("args, fragments", [
    (["--group", "nope"], ["--group nope: no such group at 2026-11-01T08:00:00Z"]),
    (["--group", "no-offsets"], ["--group no-offsets: the group has no committed offsets at 2026-11-01T08:00:00Z"]),
    (["--group", "g", "--topic", "payments"], ["--topic payments: group g has no committed offsets on it"]),
], ids=["unknown group", "group without offsets", "topic without offsets"])
def test_nothing_to_reset_is_one_line_and_exit_2(out, args, fragments):
    one_line_error(invoke("--output", str(out), *args), *fragments)


def test_a_missing_or_empty_output_folder_is_one_line_and_exit_2(tmp_path):
    one_line_error(invoke("--output", str(tmp_path / "nope"), "--group", "g"), "no such directory")
    one_line_error(invoke("--output", str(tmp_path), "--group", "g"), "no committed_offsets table there")


def test_the_command_starts_no_jvm(out, tmp_path):
    """As a process: SPARK_HOME points at a spark-submit that records a launch (none may happen)."""
    home = tmp_path / "spark-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text('#!/bin/sh\ntouch "$(dirname "$0")/../started"\nexit 1\n')
    (home / "bin" / "spark-submit").chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}, "SPARK_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "reset-offsets", "--output", str(out), "--group", "g",
                             "--topic", "billing"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, "billing,0,5\n", "")
    assert not (home / "started").exists()


# --- --execute: the plan committed to a cluster (librdkafka's mock cluster, tests/kafka_mock.py) -----------------

@pytest.fixture(scope="module")
def cluster():
    """A mock cluster holding topics orders (3 partitions) and billing, and a consumer of group `busy` that holds
    its membership (the session outlives the tests that use it)."""
    from confluent_kafka import Consumer
    from kafka_mock import MockCluster, produce_data

    mock = MockCluster()
    mock.create_topic("orders", 11)
    mock.create_topic("billing", 1)
    produce_data(mock.bootstrap, "orders", {0: 50, 9: 950, 10: 1100})
    produce_data(mock.bootstrap, "billing", {0: 10})
    member = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "busy", "session.timeout.ms": 60_000,
                       "enable.auto.commit": False})
    member.subscribe(["orders"])
    deadline = datetime.now().timestamp() + 20
    while not member.assignment() and datetime.now().timestamp() < deadline:
        member.poll(0.2)
    assert member.assignment(), "the consumer never joined"
    yield mock
    member.close()
    mock.close()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """Tables of two runs: an earlier one (as of T) and a newer one whose offsets are further on; `busy` too."""
    path = tmp_path_factory.mktemp("restore")
    earlier = [("orders", 10, 1000), ("billing", 0, 5), ("orders", 9, 900), ("orders", 0, 42)]
    commit_run(path, {"committed_offsets": offsets("g", earlier) + offsets("busy", [("orders", 0, 7)]),
                      "consumer_groups": [group("g"), group("busy")]}, as_of=T)
    later = [(t, p, o + 5) for t, p, o in earlier]
    commit_run(path, {"committed_offsets": offsets("g", later) + offsets("busy", [("orders", 0, 9)]),
                      "consumer_groups": [group("g"), group("busy")]}, as_of=T.replace(hour=9))
    return path


def committed_on(mock, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": mock.bootstrap})
    asked = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in partitions])
    found = admin.list_consumer_group_offsets([asked], request_timeout=10)[group_id].result(timeout=15)
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}


PLAN = [("billing", 0), ("orders", 0), ("orders", 9), ("orders", 10)]


def test_a_dry_run_shows_current_and_new_offsets_and_commits_nothing(two_runs, cluster):
    result = invoke("--output", str(two_runs), "--group", "g", "--bootstrap-server", cluster.bootstrap)
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert lines == [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                     ["g", "billing", "0", "-", "10"], ["g", "orders", "0", "-", "47"],
                     ["g", "orders", "9", "-", "905"], ["g", "orders", "10", "-", "1005"]]
    assert "dry run: nothing was committed" in result.stderr
    assert set(committed_on(cluster, "g", PLAN).values()) == {-1001}  # nothing there


def test_execute_commits_an_earlier_runs_offsets_and_reads_them_back(two_runs, cluster):
    result = invoke("--output", str(two_runs), "--group", "g", "--as-of", "2026-11-01T08:30:00Z",
                    "--bootstrap-server", cluster.bootstrap, "--execute")
    assert result.exit_code == 0, result.output
    assert "committed 4 offset(s) of group g" in result.stderr and "every partition holds its new offset" in result.stderr
    # The mock answers no DescribeGroups: said, and the commit itself is what refuses a group with members.
    assert "the cluster does not describe groups" in result.stderr
    assert committed_on(cluster, "g", PLAN) == {("billing", 0): 5, ("orders", 0): 42, ("orders", 9): 900,
                                                ("orders", 10): 1000}  # the run as of 08:00, not 09:00's
    again = invoke("--output", str(two_runs), "--group", "g", "--bootstrap-server", cluster.bootstrap)
    assert [line.split()[3:] for line in again.stdout.splitlines()[2:]] == [["5", "10"], ["42", "47"], ["900", "905"],
                                                                          ["1000", "1005"]]


def test_a_group_with_members_is_refused_in_one_line(two_runs, cluster):
    result = invoke("--output", str(two_runs), "--group", "busy", "--bootstrap-server", cluster.bootstrap, "--execute")
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("offsetlake: error: --group busy: ") and "UNKNOWN_MEMBER_ID" in line
    assert "stop its consumers first" in line
    assert committed_on(cluster, "busy", [("orders", 0)]) == {("orders", 0): -1001}


def test_execute_needs_a_cluster_and_an_earlier_run(two_runs):
    one_line_error(invoke("--output", str(two_runs), "--group", "g", "--execute"), "need --bootstrap-server")
    one_line_error(invoke("--output", str(two_runs), "--group", "g", "--as-of", "2026-10-01T00:00:00Z"),
                   "--as-of 2026-10-01T00:00:00Z: no complete run", "describes that moment or an earlier one")


class FakeAdmin:
    """An admin client of a broker that describes groups (as a real one does) and reads back `back`."""

    def __init__(self, state: str, members: int, back: dict[tuple[str, int], int]) -> None:
        self.state, self.members, self.back, self.altered = state, members, back, []

    def describe_consumer_groups(self, groups, request_timeout):
        from concurrent.futures import Future
        from types import SimpleNamespace

        done = Future()
        done.set_result(SimpleNamespace(state=SimpleNamespace(name=self.state), members=[object()] * self.members))
        return {groups[0]: done}

    def list_consumer_group_offsets(self, asked, request_timeout):
        from concurrent.futures import Future
        from types import SimpleNamespace

        from confluent_kafka import TopicPartition

        done = Future()
        done.set_result(SimpleNamespace(topic_partitions=[
            TopicPartition(tp.topic, tp.partition, self.back.get((tp.topic, tp.partition), -1001))
            for tp in asked[0].topic_partitions]))
        return {asked[0].group_id: done}

    def alter_consumer_group_offsets(self, target, request_timeout):
        from concurrent.futures import Future
        from types import SimpleNamespace

        self.altered.append(target)
        done = Future()
        done.set_result(SimpleNamespace(topic_partitions=[]))
        return {target[0].group_id: done}


def test_a_stable_group_is_refused_before_any_commit_and_a_differing_read_back_is_named(two_runs, monkeypatch):
    """Against a broker that answers DescribeGroups: a Stable group is refused before the commit; after a commit,
    partitions read back with other offsets (another writer got there) are named, exit 1."""
    from jobs.sources.kafka_client import Cluster

    stable = FakeAdmin("STABLE", 2, {})
    monkeypatch.setattr(Cluster, "admin", lambda self: stable)
    result = invoke("--output", str(two_runs), "--group", "g", "--bootstrap-server", "b:9092", "--execute")
    assert result.exit_code == 1 and stable.altered == []
    assert result.stderr.strip() == ("offsetlake: error: --group g is Stable on b:9092 with 2 member(s): offsets are "
                                     "reset only while a group is Empty or gone, as kafka-consumer-groups.sh "
                                     "requires; stop its consumers first")
    raced = FakeAdmin("EMPTY", 0, {("billing", 0): 10, ("orders", 0): 47, ("orders", 9): 3, ("orders", 10): 1005})
    monkeypatch.setattr(Cluster, "admin", lambda self: raced)
    result = invoke("--output", str(two_runs), "--group", "g", "--bootstrap-server", "b:9092", "--execute")
    assert result.exit_code == 1 and len(raced.altered) == 1
    assert result.stderr.strip() == ("offsetlake: error: read back, 1 partition(s) of group g differ from the plan: "
                                     "orders-9 holds 3, not 905")
