"""--source kafka:..., --end-offsets kafka and `dump`, against librdkafka's mock cluster (tests/kafka_mock.py).

The mock is a real Kafka-protocol broker on localhost. It does not implement read_committed (its last stable
offset is the high watermark and aborted records are delivered), DeleteRecords or ACLs, so those paths are
tested by their plumbing and by injected errors. A live source runs on the local runner (read_slice in its
workers) unless --engine spark (the Python data source, jobs.sources.kafka_spark) is asked for.
"""
from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from kafka_mock import MockCluster, produce_data, produce_rows
from offsets_log import HOUR, MINUTE, T0, OffsetsLog, member

import jobs.runtime.session
import jobs.sources.kafka as kafka_source
from jobs.base.errors import BadInput
from jobs.base.tables import TABLES
from jobs.cli import cli
from jobs.config import KafkaOptions, SourceSpec
from jobs.sources.kafka import Slice, read_slice
from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster
from jobs.sources.plan import plan_source
from jobs.sources.tasks import task_errors

TOPIC_AUTHORIZATION_FAILED, OFFSET_OUT_OF_RANGE, FETCH = 29, 1, 1
SECRET = "n0t-in-any-0utput"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@contextmanager
def progress_lines() -> Iterator[list[str]]:
    """The driver's `offsetlake` log lines (its stderr handler is bound to the stream of the first CLI call)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("offsetlake")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def offsets_log() -> OffsetsLog:
    """Groups spread over three coordinator partitions, with the cases replay must get right."""
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["orders"], {"orders": [0, 1]}, client_id="c1")], coordinator=1)
    log.commit("g", "orders", 0, 5, T0 + MINUTE, coordinator=1)
    log.commit("g", "orders", 1, 50, T0 + MINUTE, leader_epoch=3, coordinator=1)  # beyond the end: lag -30
    log.commit("g", "payments", 0, 1, T0 + MINUTE, coordinator=1)
    log.delete_offset("g", "payments", 0, T0 + 2 * MINUTE, coordinator=1)
    log.commit("s", "orders", 0, 2, T0 + MINUTE, coordinator=2)  # a simple group
    log.commit("s", "payments", 0, 3, T0 + MINUTE, version=4, coordinator=2)
    log.commit("s", "deleted-topic", 0, 9, T0 + MINUTE, coordinator=2)  # no such topic now: no lag row
    log.group("gone", T0, coordinator=0)
    log.commit("gone", "orders", 1, 7, T0, coordinator=0)
    log.delete_group("gone", T0 + MINUTE, coordinator=0)  # leaves an orphan
    log.raw(b"\x00\x01\x00", b"\x00\x03", T0 + HOUR, partition=0)  # truncated: quarantined
    return log


@pytest.fixture(scope="module")
def log() -> OffsetsLog:
    return offsets_log()


@pytest.fixture(scope="module")
def cluster(log):
    mock = MockCluster()
    try:
        mock.create_topic(OFFSETS_TOPIC, 3)
        mock.create_topic("orders", 2)
        mock.create_topic("payments", 1)
        produce_rows(mock.bootstrap, OFFSETS_TOPIC, log.rows)
        produce_data(mock.bootstrap, "orders", {0: 10, 1: 20})
        produce_data(mock.bootstrap, "payments", {0: 4})
        yield mock
    finally:
        mock.close()


@pytest.fixture(scope="module")
def from_kafka(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("kafka") / "tables"
    started = time.monotonic()
    with progress_lines() as lines:
        result = invoke("rebuild", "--source", f"kafka:{cluster.bootstrap}", "--output", str(out), "--end-offsets", "kafka")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return out, json.loads(result.stdout.strip().splitlines()[-1]), "\n".join(lines), time.monotonic() - started


@pytest.fixture(scope="module")
def dumped(cluster, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dump") / "dump"
    result = invoke("dump", "--source", f"kafka:{cluster.bootstrap}", "--output", str(path))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert json.loads(result.stdout.strip().splitlines()[-1])["records"] == 12
    return path


def rows(out: Path, table: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    data = DeltaTable(str(out / table)).to_pyarrow_table().to_pylist()
    return sorted((tuple((k, v) for k, v in r.items() if k not in drop) for r in data), key=repr)


def test_rebuild_from_kafka_with_live_end_offsets(from_kafka):
    out, summary, stderr, _ = from_kafka
    assert (summary["records_read"], summary["records_quarantined"]) == (12, 1)
    assert (summary["groups"], summary["committed_offsets"], summary["members"]) == (3, 6, 1)
    assert summary["orphan_groups"] == ["gone"] and summary["consumer_lag"] == 5
    lag = {(r["group_id"], r["topic"], r["partition"]): r for r in DeltaTable(str(out / "consumer_lag")).to_pyarrow_table().to_pylist()}
    assert {k: (r["committed_offset"], r["log_end_offset"], r["lag"]) for k, r in lag.items()} == {
        ("g", "orders", 0): (5, 10, 5), ("g", "orders", 1): (50, 20, -30), ("s", "orders", 0): (2, 10, 8),
        ("s", "payments", 0): (3, 4, 1), ("gone", "orders", 1): (7, 20, 13),
    }  # s/deleted-topic/0 has no end offset: no row, as kafka-consumer-groups.sh shows none
    assert {(r["log_start_offset"], r["below_log_start"]) for r in lag.values()} == {(0, False)}  # nothing deleted
    assert len({r["end_offsets_fetched_at"] for r in lag.values()}) == 1 and None not in {r["end_offsets_fetched_at"] for r in lag.values()}
    # Progress: the driver's plan (per partition, from watermarks) and the end-offset fetch.
    assert "3 partitions, up to 12 records" in stderr and "0:[0,4), 1:[0,5), 2:[0,3)" in stderr
    assert "fetched end offsets of 3 topic-partition(s)" in stderr  # deleted-topic has none


def test_dump_holds_exactly_the_records_of_the_topic(dumped, log):
    table = pq.read_table(dumped)
    assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    got = sorted((r["partition"], r["offset"], r["key"], r["value"], r["topic"], r["timestampType"],
                  int(r["timestamp"].timestamp() * 1000)) for r in table.to_pylist())
    want = sorted((p, o, k, v, t, 0, ts) for k, v, t, p, o, ts, *_ in log.rows)
    assert got == want  # CreateTime kept, null values (tombstones) kept


# How a run went, not what it found: its id, its times and memory, and the work of whichever runner ran it.
VOLATILE = ("run_id", "seconds", "output", "cluster", "runner", "delta_engine", "spark_jobs", "spark_stages", "spark_tasks",
            "driver_python_peak_mb", "driver_jvm_peak_mb", "worker_peak_mb")
# What only a live fetch of end offsets knows (when, the log start), or knows at a different moment each run.
LIVE_ONLY = {"consumer_lag": ("end_offsets_fetched_at", "log_start_offset", "below_log_start", "records_lost"),
             "end_offsets_history": ("observed_at", "fetched_at", "log_start_offset")}


def found(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_the_spark_runner_reads_the_cluster_as_the_local_runner_does(spark, cluster, from_kafka, tmp_path):
    """--engine spark: the same snapshot read by the Python data source in Spark's tasks, the same tables."""
    kafka_out, kafka_summary, _, _ = from_kafka
    out = tmp_path / "tables"
    with progress_lines() as lines:
        result = invoke("rebuild", "--engine", "spark", "--source", f"kafka:{cluster.bootstrap}", "--output", str(out),
                        "--end-offsets", "kafka")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["runner"], kafka_summary["runner"]) == ("spark", "local")
    assert "Spark's tasks read the source's 3 task(s) themselves" in lines
    assert "3 partitions, up to 12 records" in "\n".join(lines)
    assert "read __consumer_offsets-1: 5 records in [0, 5)" in "\n".join(lines)  # by the task of the partition
    assert found(summary) == found(kafka_summary)
    for table in TABLES:
        assert rows(out, table, LIVE_ONLY.get(table, ())) == rows(kafka_out, table, LIVE_ONLY.get(table, ())), table


def test_dump_then_rebuild_from_parquet_gives_the_same_tables(from_kafka, dumped, tmp_path):
    kafka_out, kafka_summary, _, _ = from_kafka
    ends = tmp_path / "ends.txt"
    ends.write_text("orders:0:10\norders:1:20\npayments:0:4\n")  # what the mock holds
    out = tmp_path / "tables"
    result = invoke("rebuild", "--source", f"parquet:{dumped}", "--output", str(out), "--end-offsets", str(ends))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert found(summary) == found(kafka_summary)
    for table in TABLES:
        assert rows(out, table, LIVE_ONLY.get(table, ())) == rows(kafka_out, table, LIVE_ONLY.get(table, ())), table
    assert {r[-5:-1] for r in rows(out, "consumer_lag")} == {(("end_offsets_fetched_at", None), ("log_start_offset", None),
                                                            ("below_log_start", None), ("records_lost", None))}


def read_locally(plan) -> list[tuple]:
    """What the local runner's tasks read of `plan`: (partition, offset, key, value), sorted."""
    return sorted((p, o, k, v) for task in plan.tasks for batch in plan.read(task) for p, o, k, v in zip(
        *(batch.column(c).to_pylist() for c in ("partition", "offset", "key", "value"))))


def test_the_snapshot_is_bounded_while_a_producer_keeps_writing(spark, monkeypatch):
    from confluent_kafka import Producer

    mock = MockCluster()
    stop, delivered, failures = threading.Event(), {}, []
    planned: list[list[Slice]] = []
    real_plan = kafka_source.plan_snapshot
    monkeypatch.setattr(kafka_source, "plan_snapshot", lambda *a, **k: planned.append(real_plan(*a, **k)) or planned[-1])

    def produce() -> None:
        producer = Producer({"bootstrap.servers": mock.bootstrap, "linger.ms": 2})

        def on_delivery(err, msg):
            if err is not None:
                failures.append(err)
            else:
                delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        i = 0
        while not stop.is_set():
            log = OffsetsLog()
            log.commit(f"g{i % 7}", "orders", i % 3, i, T0 + i)
            producer.produce(OFFSETS_TOPIC, key=log.rows[0][0], value=log.rows[0][1], partition=i % 2,
                             timestamp=T0 + i, on_delivery=on_delivery)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(10)

    thread = threading.Thread(target=produce, daemon=True)
    try:
        mock.create_topic(OFFSETS_TOPIC, 2)
        thread.start()
        while len(delivered) < 200:
            time.sleep(0.05)
        plan = plan_source(SourceSpec("kafka", mock.bootstrap), KafkaOptions(timeout_s=10), cores=2)
        first = read_locally(plan)
        time.sleep(0.5)  # the topic grows further between the reads
        frame = plan.frame(spark)  # the Spark runner's read of the same plan
        second = sorted((r.partition, r.offset, r.key, r.value) for r in frame.collect())
        time.sleep(0.5)
        third = read_locally(plan)
    finally:
        stop.set()
        thread.join(30)
        mock.close()
    assert not thread.is_alive() and not failures
    plan, share = planned
    assert share == []  # no __share_group_state topic on this cluster: nothing planned, no error
    ends = {s.partition: s.end for s in plan}
    want = sorted((p, o, k, v) for (p, o), (k, v) in delivered.items() if o < ends[p])
    assert first == want and second == want and third == want and len(want) >= 200
    assert {s.start for s in plan} == {0}
    assert max(o for p, o in delivered if p == 0) >= ends[0] and max(o for p, o in delivered if p == 1) >= ends[1]


def test_isolation_level_reaches_the_consumer_and_the_end_bound(cluster, monkeypatch):
    """The mock's LSO equals its high watermark and it delivers aborted records, so read_committed cannot
    filter anything here: check that the setting reaches both the ListOffsets bound and the consumer."""
    import confluent_kafka
    import confluent_kafka.admin

    seen: dict[str, list] = {"list_offsets": [], "consumer": []}

    real_list_offsets = confluent_kafka.admin.AdminClient.list_offsets

    def list_offsets(self, offsets, **kwargs):
        seen["list_offsets"].append(kwargs["isolation_level"].name)
        return real_list_offsets(self, offsets, **kwargs)

    class Consumer(confluent_kafka.Consumer):
        def __init__(self, conf):
            seen["consumer"].append(conf["isolation.level"])
            super().__init__(conf)

    monkeypatch.setattr(confluent_kafka.admin.AdminClient, "list_offsets", list_offsets)
    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    for isolation in ("read_committed", "read_uncommitted"):
        c = Cluster.open(cluster.bootstrap, KafkaOptions(isolation=isolation, timeout_s=10), "--source kafka")
        plan = kafka_source.plan_snapshot(c)
        batches = list(read_slice(c, OFFSETS_TOPIC, plan[1]))
        assert sum(b.num_rows for b in batches) == 5
    assert seen["consumer"] == ["read_committed", "read_uncommitted"]
    assert seen["list_offsets"] == ["READ_UNCOMMITTED", "READ_COMMITTED",  # start, end
                                                        "READ_UNCOMMITTED", "READ_UNCOMMITTED"]
    result = invoke("rebuild", "--source", "kafka:h:1", "--output", "x", "--kafka-isolation", "dirty")
    one_line_error(result, "--kafka-isolation")


def closed_port() -> int:
    """A local port nothing listens on: bound, read, and closed again."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", ["rebuild", "dump"])
def test_unreachable_brokers_fail_in_bounded_time(command, tmp_path, monkeypatch):
    """The cluster is asked before Spark starts, so --kafka-timeout bounds the whole failure, not the
    failure plus a JVM start."""
    monkeypatch.setattr(jobs.runtime.session, "get_spark", lambda *a, **k: pytest.fail("Spark was started"))
    bootstrap = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = invoke(command, "--source", f"kafka:{bootstrap}", "--output", str(tmp_path / "o"), "--kafka-timeout", "2")
    elapsed = time.monotonic() - started
    one_line_error(result, f"--source kafka:{bootstrap}: cannot reach the brokers", "no answer within 2s")
    assert elapsed < 2 + 10, elapsed  # generous for a loaded machine, and well under a JVM start + the timeout
    assert not (tmp_path / "o").exists()


def test_missing_topic_and_authorization_errors(tmp_path):
    mock = MockCluster()
    try:
        started = time.monotonic()
        result = invoke("rebuild", "--source", f"kafka:{mock.bootstrap}", "--output", str(tmp_path / "o"), "--kafka-timeout", "5")
        one_line_error(result, "topic __consumer_offsets does not exist")
        assert time.monotonic() - started < 5
        mock.create_topic(OFFSETS_TOPIC, 2)
        mock.set_topic_error(OFFSETS_TOPIC, TOPIC_AUTHORIZATION_FAILED)
        result = invoke("dump", "--source", f"kafka:{mock.bootstrap}", "--output", str(tmp_path / "d"), "--kafka-timeout", "5")
        one_line_error(result, "cannot describe topic __consumer_offsets", "TOPIC_AUTHORIZATION_FAILED")
    finally:
        mock.close()
    assert not (tmp_path / "o").exists() and not (tmp_path / "d").exists()


def test_a_partition_that_cannot_be_read_fully_fails_the_run(spark, tmp_path):
    """Records deleted under the read (retention) make the fetch out of range: the read fails, never partial,
    in a local worker (the whole run: one line) and in a Spark task."""
    mock = MockCluster()
    try:
        mock.create_topic(OFFSETS_TOPIC, 1)
        produce_rows(mock.bootstrap, OFFSETS_TOPIC, [(*r[:3], 0, *r[4:]) for r in offsets_log().rows[:4]])
        mock.fail_requests(FETCH, *[OFFSET_OUT_OF_RANGE] * 10)
        started = time.monotonic()
        result = invoke("rebuild", "--source", f"kafka:{mock.bootstrap}", "--output", str(tmp_path / "o"),
                        "--kafka-timeout", "5")
        assert time.monotonic() - started < 30
        one_line_error(result, f"--source kafka:{mock.bootstrap}: cannot read __consumer_offsets-0")
        assert not (tmp_path / "o" / "committed_offsets").exists()
        frame = plan_source(SourceSpec("kafka", mock.bootstrap), KafkaOptions(timeout_s=5), cores=1).frame(spark)
        mock.fail_requests(FETCH, *[OFFSET_OUT_OF_RANGE] * 10)
        started = time.monotonic()
        with pytest.raises(BadInput) as e, task_errors():
            frame.collect()
        assert time.monotonic() - started < 30
    finally:
        mock.close()
    message = str(e.value)
    assert message.startswith(f"--source kafka:{mock.bootstrap}: cannot read __consumer_offsets-0") and "\n" not in message


def test_end_offsets_kafka_needs_a_cluster(tmp_path, log):
    dump = tmp_path / "dump"
    log.write_parquet(dump)
    result = invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(tmp_path / "o"), "--end-offsets", "kafka")
    one_line_error(result, "--end-offsets kafka: takes the cluster of --source", "kafka:HOST:PORT")


def test_secrets_never_appear_in_any_output(cluster, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                      f'    username="svc" password="{SECRET}";\n')
    # The mock speaks no SASL: the handshake fails, and librdkafka's own reporting must not leak either.
    result = invoke("rebuild", "--source", f"kafka:{cluster.bootstrap}", "--output", str(tmp_path / "o"),
                    "--kafka-config", str(config), "--kafka-timeout", "3")
    line = one_line_error(result, "cannot reach the brokers")
    assert SECRET not in result.stdout + result.stderr + line
    # A whole process (librdkafka writes to fd 2 directly when not silenced), against a closed port.
    exe = Path(sys.executable).with_name("offsetlake")
    proc = subprocess.run([str(exe), "dump", "--source", "kafka:127.0.0.1:1", "--output", str(tmp_path / "d"),
                           "--kafka-config", str(config), "--kafka-timeout", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and SECRET not in proc.stdout + proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("offsetlake: error: ")] == proc.stderr.strip().splitlines()[-1:]
    assert "cannot reach the brokers" in proc.stderr


def test_share_group_state_is_read_from_the_cluster_too(tmp_path):
    """A cluster with share groups: `__share_group_state` is snapshotted beside the offsets topic, and gives the
    share partitions a dump of both topics gives."""
    from test_share_groups import ORDERS, share_log

    log = share_log()
    ids = tmp_path / "topic-ids.csv"
    ids.write_text(f"topic_id,topic\n{ORDERS},orders\n")
    mock = MockCluster()
    try:
        mock.create_topic(OFFSETS_TOPIC, 2)
        mock.create_topic("__share_group_state", 2)
        for topic in (OFFSETS_TOPIC, "__share_group_state"):
            produce_rows(mock.bootstrap, topic, [r for r in log.rows if r[2] == topic])
        produce_data(mock.bootstrap, "orders", {0: 100, 1: 50})
        result = invoke("rebuild", "--source", f"kafka:{mock.bootstrap}", "--output", str(tmp_path / "live"),
                        "--as-of", str(T0 + MINUTE), "--end-offsets", "kafka", "--topic-ids", str(ids))
        assert result.exit_code == 0, (result.stdout, result.stderr)
    finally:
        mock.close()
    lag = {(r["group_id"], r["partition"]): (r["committed_offset"], r["log_end_offset"], r["lag"], r["progress"])
           for r in DeltaTable(str(tmp_path / "live" / "consumer_lag")).to_pyarrow_table().to_pylist()}
    assert lag == {("cg", 0): (40, 100, 60, "commit"), ("sg", 0): (15, 100, 82, "share_start_offset"),
                   ("sg", 1): (None, 50, None, "share_start_offset")}  # live end offsets of the share partitions
    log.write_parquet(tmp_path / "dump")
    result = invoke("rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(tmp_path / "dumped"),
                    "--as-of", str(T0 + MINUTE), "--topic-ids", str(ids))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    live = rows(tmp_path / "live", "share_partition_state")
    assert live == rows(tmp_path / "dumped", "share_partition_state") and len(live) == 3
