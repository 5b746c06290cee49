"""A Parquet dump: a file or folder with the columns of Spark's Kafka source."""
from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from jobs.errors import BadInput


def read_parquet(spark: SparkSession, location: str) -> DataFrame:
    """Open the dump lazily; a missing or unreadable path is the user's error, not a traceback."""
    if "://" not in location and not Path(location).exists():
        raise BadInput(f"--source parquet:{location}: no such file or directory")
    try:
        df = spark.read.parquet(location)
        df.schema  # noqa: B018 - forces Spark to read the footers now, so a bad file fails here
    except AnalysisException as e:
        raise BadInput(f"--source parquet:{location}: cannot read Parquet ({_first_line(e)})") from None
    return df


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:300]
