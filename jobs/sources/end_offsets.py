"""Topic end offsets for lag: kafka-get-offsets.sh text (`topic:partition:offset`), CSV or Parquet."""
from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.errors import BadInput

COLUMNS = ("topic", "partition", "offset")
# Topic names are [a-zA-Z0-9._-]+, so the last two colons split a kafka-get-offsets.sh line.
TEXT_LINE = r"^\s*(.+):(-?\d+):(-?\d+)\s*$"


def read_end_offsets(spark: SparkSession, location: str) -> DataFrame:
    """topic string, partition int, offset bigint; malformed input is a BadInput naming the problem."""
    if location == "kafka" or location.startswith("kafka:"):
        raise BadInput(f"--end-offsets {location}: fetching end offsets from a cluster is not available "
                       "in this version; pass a file (kafka-get-offsets.sh output, CSV or Parquet)")
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
