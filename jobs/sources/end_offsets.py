"""Topic end offsets for lag: kafka-get-offsets.sh text (`topic:partition:offset`), CSV or Parquet,
or fetched from a live cluster (`kafka`, `kafka:HOST:PORT`) for the topic-partitions with a committed offset."""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import KafkaOptions, SourceSpec
from jobs.errors import BadInput

if TYPE_CHECKING:
    from jobs.sources.kafka_client import Cluster

log = logging.getLogger("offsetlake")
COLUMNS = ("topic", "partition", "offset")
# Topic names are [a-zA-Z0-9._-]+, so the last two colons split a kafka-get-offsets.sh line.
TEXT_LINE = r"^\s*(.+):(-?\d+):(-?\d+)\s*$"


def read_end_offsets(spark: SparkSession, location: str) -> DataFrame:
    """topic string, partition int, offset bigint; malformed input is a BadInput naming the problem."""
    if is_live(location):  # the caller fetches these with live_end_offsets, once offsets are known
        raise BadInput(f"--end-offsets {location}: a cluster, not a file")
    path = Path(location)
    if not path.exists():
        raise BadInput(f"--end-offsets {location}: no such file or directory")
    try:
        if path.suffix == ".parquet" or path.is_dir():
            df = _with_columns(spark.read.parquet(location), location)
        elif path.suffix == ".csv":
            df = _with_columns(spark.read.option("header", True).csv(location), location)
        else:
            df = _text(spark, location)
        typed = df.select(
            F.col("topic").cast("string").alias("topic"),
            F.expr("try_cast(partition as int)").alias("partition"),
            F.expr("try_cast(offset as bigint)").alias("offset"),
        )
        bad = typed.where(F.col("topic").isNull() | F.col("partition").isNull() | F.col("offset").isNull()).limit(1).collect()
    except AnalysisException as e:
        raise BadInput(f"--end-offsets {location}: cannot read ({str(e).splitlines()[0][:200]})") from None
    if bad:
        raise BadInput(f"--end-offsets {location}: a row has no valid topic, partition and offset: {bad[0].asDict()}")
    return typed


def _with_columns(df: DataFrame, location: str) -> DataFrame:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise BadInput(f"--end-offsets {location}: missing column(s) {', '.join(missing)}; expected topic, partition, offset")
    return df


def _text(spark: SparkSession, location: str) -> DataFrame:
    lines = spark.read.text(location).where(F.trim("value") != "")
    bad = lines.where(~F.col("value").rlike(TEXT_LINE)).limit(1).collect()
    if bad:
        raise BadInput(f"--end-offsets {location}: expected topic:partition:offset per line, got {bad[0].value!r}")
    return lines.select(
        F.regexp_extract("value", TEXT_LINE, 1).alias("topic"),
        F.regexp_extract("value", TEXT_LINE, 2).alias("partition"),
        F.regexp_extract("value", TEXT_LINE, 3).alias("offset"),
    )


# --- live end offsets ------------------------------------------------------------------------------------


def is_live(location: str) -> bool:
    """`kafka` (the cluster of --source) or `kafka:HOST:PORT[,...]`."""
    return location == "kafka" or location.startswith("kafka:")


def live_cluster(location: str, source: SourceSpec, options: KafkaOptions) -> "Cluster":
    """The cluster to ask, checked before any work: `kafka` needs a kafka: source."""
    from jobs.sources.kafka_client import Cluster

    if location == "kafka":
        if source.kind != "kafka":
            raise BadInput(f"--end-offsets kafka: takes the cluster of --source, but --source is {source.kind}:; "
                           "give one with --end-offsets kafka:HOST:PORT")
        bootstrap = source.location
    else:
        bootstrap = location[len("kafka:"):]
    return Cluster.open(bootstrap, options, f"--end-offsets kafka:{bootstrap}")


def fetch_end_offsets(cluster: "Cluster", topic_partitions: list[tuple[str, int]]) -> list[tuple[str, int, int, int | None]]:
    """(topic, partition, log end offset, log start offset) per topic-partition, as kafka-consumer-groups.sh
    sees them: high watermarks (read_uncommitted), in batched ListOffsets requests. Partitions of deleted
    topics are left out (no end offset, no lag row), as the tool shows them without one."""
    from confluent_kafka import KafkaError

    missing: list[tuple[str, int]] = []

    def skip_unknown(tp: tuple[str, int], err) -> None:
        if err.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
            raise cluster.fail(f"cannot list offsets of {tp[0]}-{tp[1]}", err)
        missing.append(tp)

    admin = cluster.admin()
    ends = cluster.list_offsets(admin, topic_partitions, latest=True, isolation="read_uncommitted", on_error=skip_unknown)
    starts = cluster.list_offsets(admin, list(ends), latest=False, isolation="read_uncommitted",
                                  on_error=lambda tp, err: None)  # log start is a hint: unknown stays null
    if missing:
        log.info("no end offset for %d topic-partition(s) that no longer exist, e.g. %s-%d",
                 len(missing), *missing[0])
    return [(t, p, end, starts.get((t, p))) for (t, p), end in sorted(ends.items())]


def live_end_offsets(spark: SparkSession, committed: DataFrame, cluster: "Cluster") -> DataFrame:
    """End offsets of the topic-partitions in `committed` (one small row each, so collected), fetched now.

    Columns: topic, partition, offset, log_start_offset, fetched_at (what consumer_lag records).
    """
    tps = [(r.topic, r.partition) for r in committed.select("topic", "partition").distinct().collect()]
    fetched_at = datetime.now(timezone.utc)
    rows = fetch_end_offsets(cluster, sorted(tps)) if tps else []
    log.info("fetched end offsets of %d topic-partition(s) from %s", len(rows), cluster.bootstrap)
    schema = "topic string, partition int, offset bigint, log_start_offset bigint"
    return spark.createDataFrame(rows, schema).withColumn("fetched_at", F.lit(fetched_at).cast("timestamp"))
