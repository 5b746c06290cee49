"""Live source: a bounded snapshot of `__consumer_offsets` read straight from a cluster.

The driver plans the snapshot once: for every offsets-topic partition, [log start, end) where the end is
the high watermark (read_uncommitted) or the last stable offset (read_committed, spec §1), captured now.
Each partition is then read in its own Spark task up to that end, so the run sees a reproducible snapshot
while the topic keeps growing. Two readers take the same plan: the Python data source below (over
confluent-kafka) and, when its jar is on the classpath, Spark's own Kafka source.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from jobs.errors import BadInput
from jobs.runtime.session import has_jvm_class
from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster
from jobs.sources.tasks import BATCH_ROWS, RAW_FIELDS, RAW_SCHEMA, RecordColumns, task_error, task_logger

log = logging.getLogger("offsetlake")
SOURCE_NAME = "offsetlake_kafka"
SPARK_KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


@dataclass(frozen=True)
class Slice(InputPartition):
    """One offsets-topic partition's planned range [start, end): one Spark task."""

    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        """Upper bound of the records in the range (compaction and transaction markers leave gaps)."""
        return self.end - self.start


def plan_snapshot(cluster: Cluster, topic: str = OFFSETS_TOPIC) -> list[Slice]:
    """[log start, end) of every partition of `topic`, from two batched ListOffsets requests."""
    admin = cluster.admin()
    partitions = cluster.partitions(admin, topic)
    tps = [(topic, p) for p in partitions]
    starts = cluster.list_offsets(admin, tps, latest=False, isolation="read_uncommitted")
    ends = cluster.list_offsets(admin, tps, latest=True, isolation=cluster.isolation)
    return [Slice(p, starts[(topic, p)], max(ends[(topic, p)], starts[(topic, p)])) for p in partitions]


def read_kafka(spark: SparkSession, cluster: Cluster, slices: list[Slice], wanted: str = "auto") -> DataFrame:
    """The raw-record frame of the planned snapshot `slices` of the cluster's offsets topic (`wanted`:
    --kafka-reader)."""
    reader = choose_reader(spark, wanted)
    planned = sum(s.records for s in slices)
    log.info("kafka snapshot of %s on %s (%s, %s reader): %d partitions, up to %d records",
             OFFSETS_TOPIC, cluster.bootstrap, cluster.isolation, reader, len(slices), planned)
    log.info("planned offsets per partition [start, end): %s",
             ", ".join(f"{s.partition}:[{s.start},{s.end})" for s in slices if s.records) or "all empty")
    if reader == "spark":
        return spark.read.format("kafka").options(**spark_kafka_options(cluster, slices)).load()
    todo = [s for s in slices if s.records]
    if not todo:
        return spark.createDataFrame([], RAW_SCHEMA)
    spark.dataSource.register(OffsetsTopicSource)
    return spark.read.format(SOURCE_NAME).options(**source_options(cluster, todo)).load()


def choose_reader(spark: SparkSession, wanted: str) -> str:
    """`spark` (Spark's Kafka source) or `python` (this module's data source) for --kafka-reader."""
    available = has_jvm_class(spark, SPARK_KAFKA_CLASS)
    if wanted == "spark" and not available:
        raise BadInput("--kafka-reader spark: Spark's Kafka source is not on the classpath "
                       "(add --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>)")
    if wanted == "auto":
        return "spark" if available else "python"
    return wanted


def spark_kafka_options(cluster: Cluster, slices: list[Slice], topic: str = OFFSETS_TOPIC) -> dict[str, str]:
    """Options for spark.read.format("kafka") that read exactly the planned snapshot.

    Client settings keep their Java names (`kafka.` + key), as Spark's source hands them to the Java client.
    """
    ms = str(int(cluster.timeout_s * 1000))
    options = {f"kafka.{k}": v for k, v in cluster.java.items()}
    options.update({
        "kafka.bootstrap.servers": cluster.bootstrap,
        "kafka.isolation.level": cluster.isolation,
        "kafka.request.timeout.ms": cluster.java.get("request.timeout.ms", ms),
        "kafka.default.api.timeout.ms": cluster.java.get("default.api.timeout.ms", ms),
        "kafkaConsumer.pollTimeoutMs": ms,
        "assign": json.dumps({topic: [s.partition for s in slices]}),
        "startingOffsets": json.dumps({topic: {str(s.partition): s.start for s in slices}}),
        "endingOffsets": json.dumps({topic: {str(s.partition): s.end for s in slices}}),
        # Records missing inside the planned range (retention ran during the read) fail the query.
        "failOnDataLoss": "true",
        "includeHeaders": "false",
    })
    return options


def source_options(cluster: Cluster, slices: list[Slice], topic: str = OFFSETS_TOPIC) -> dict[str, str]:
    """Options for the Python data source: the plan, the bounds and librdkafka's settings (`kafka.` + key)."""
    options = {f"kafka.{k}": v for k, v in cluster.librdkafka.items()}
    options.update({
        "bootstrap": cluster.bootstrap, "topic": topic, "isolation": cluster.isolation,
        "timeout": str(cluster.timeout_s), "origin": cluster.origin,
        "slices": json.dumps([asdict(s) for s in slices]),
    })
    return options


class OffsetsTopicSource(DataSource):
    """`spark.read.format("offsetlake_kafka")`: one task per planned slice (see source_options)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return RAW_SCHEMA

    def reader(self, schema: Any) -> "OffsetsTopicReader":
        return OffsetsTopicReader(dict(self.options))


class OffsetsTopicReader(DataSourceReader):
    """Reads each slice with its own consumer, opened on the executor."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[Slice]:
        return [Slice(**s) for s in json.loads(self.options["slices"])]

    def read(self, partition: Slice) -> Iterator[Any]:
        o = self.options
        settings = {k[len("kafka."):]: v for k, v in o.items() if k.startswith("kafka.")}
        cluster = Cluster(o["bootstrap"], {}, settings, o["isolation"], float(o["timeout"]), o["origin"])
        yield from read_slice(cluster, o["topic"], partition)


def read_slice(cluster: Cluster, topic: str, part: Slice) -> Iterator[Any]:
    """pyarrow RecordBatches of `part`, every record in [start, end), or an error: never a partial range.

    Gaps are normal (compaction, transaction markers, aborted records under read_committed), so completeness
    is judged by the consumer's position reaching `end`; records deleted under us fail as out of range.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    worker_log = task_logger()
    started = time.monotonic()
    try:
        consumer = Consumer(cluster.conf(**{
            "group.id": "offsetlake-snapshot",  # required by librdkafka; never joined or committed (assign only)
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "error",  # the planned start deleted by retention must fail, not skip
            "enable.partition.eof": True, "isolation.level": cluster.isolation,
        }))
    except KafkaException as e:
        raise task_error(cluster.fail("cannot create a consumer", e)) from None
    columns = RecordColumns(RAW_FIELDS, topic, part.partition)
    total = 0
    try:
        consumer.assign([TopicPartition(topic, part.partition, part.start)])
        last_progress, position, done = time.monotonic(), part.start, False
        while not done:
            for m in consumer.consume(num_messages=BATCH_ROWS, timeout=min(1.0, cluster.timeout_s)):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue  # the position check below decides
                    if m.topic() is None and not err.fatal():
                        cluster.last_error = err.str()  # transient (retried by librdkafka); bounded by timeout
                        continue
                    raise task_error(cluster.fail(f"cannot read {topic}-{part.partition} at offset {position}", err))
                if m.offset() >= part.end:
                    done = True
                    break
                kind, ts = m.timestamp()
                # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark's column: 0 CreateTime, 1 LogAppendTime.
                columns.add(m.key(), m.value(), m.offset(), ts if kind else None, kind - 1 if kind else None)
                if m.offset() == part.end - 1:
                    done = True
                    break
            now = time.monotonic()
            current = consumer.position([TopicPartition(topic, part.partition)])[0].offset
            if current > position:
                position, last_progress = current, now
            done = done or position >= part.end
            if columns.full or (done and len(columns)):
                total += len(columns)
                yield columns.batch()
            if not done and now - last_progress > cluster.timeout_s:
                raise task_error(cluster.fail(
                    f"cannot read {topic}-{part.partition} up to the planned offset {part.end}",
                    f"no progress at offset {position} for {cluster.timeout_s:g}s"
                    + (f" (last error: {cluster.last_error})" if cluster.last_error else "")))
    finally:
        consumer.close()
    worker_log.info("read %s-%d: %d records in [%d, %d) in %.1fs", topic, part.partition, total, part.start,
                    part.end, time.monotonic() - started)
