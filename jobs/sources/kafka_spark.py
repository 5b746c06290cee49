"""The planned snapshot of a live cluster (jobs.sources.kafka) read by Spark: the Python data source below (one
task per slice, over confluent-kafka) or, when its jar is on the classpath, Spark's own Kafka source."""
from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from jobs.base.errors import BadInput
from jobs.runtime.classpath import has_jvm_class
from jobs.sources.kafka import Slice, read_slice
from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster
from jobs.sources.tasks import RAW_FIELDS

log = logging.getLogger("offsetlake")
SOURCE_NAME = "offsetlake_kafka"
SPARK_KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
RAW_SCHEMA = from_arrow_schema(pa.schema(RAW_FIELDS))


class SliceTask(Slice, InputPartition):
    """A slice as a data source's partition: one Spark task."""


def read_kafka(spark: SparkSession, cluster: Cluster, slices: list[Slice], wanted: str = "auto") -> DataFrame:
    """The raw-record frame of the planned snapshot `slices` of the cluster's offsets topic (`wanted`:
    --kafka-reader)."""
    reader = choose_reader(spark, wanted)  # the snapshot was logged where it was planned (jobs.sources.plan)
    log.info("Spark reads the kafka snapshot with the %s reader", reader)
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


def spark_kafka_options(cluster: Cluster, slices: list[Slice]) -> dict[str, str]:
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
        "assign": json.dumps(_by_topic(slices, lambda group: [s.partition for s in group])),
        "startingOffsets": json.dumps(_by_topic(slices, lambda group: {str(s.partition): s.start for s in group})),
        "endingOffsets": json.dumps(_by_topic(slices, lambda group: {str(s.partition): s.end for s in group})),
        # Records missing inside the planned range (retention ran during the read) fail the query.
        "failOnDataLoss": "true",
        "includeHeaders": "false",
    })
    return options


def _by_topic(slices: list[Slice], each: Any) -> dict[str, Any]:
    """topic -> each(its slices), for Spark's per-topic options (the offsets topic even when it has none)."""
    topics = sorted({OFFSETS_TOPIC, *(s.topic for s in slices)})
    return {t: each([s for s in slices if s.topic == t]) for t in topics}


def source_options(cluster: Cluster, slices: list[Slice]) -> dict[str, str]:
    """Options for the Python data source: the plan, the bounds and librdkafka's settings (`kafka.` + key)."""
    options = {f"kafka.{k}": v for k, v in cluster.librdkafka.items()}
    options.update({
        "bootstrap": cluster.bootstrap, "isolation": cluster.isolation,
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

    def partitions(self) -> list[SliceTask]:
        return [SliceTask(**s) for s in json.loads(self.options["slices"])]

    def read(self, partition: Slice) -> Iterator[Any]:
        o = self.options
        settings = {k[len("kafka."):]: v for k, v in o.items() if k.startswith("kafka.")}
        cluster = Cluster(o["bootstrap"], {}, settings, o["isolation"], float(o["timeout"]), o["origin"])
        yield from read_slice(cluster, partition.topic, partition)
