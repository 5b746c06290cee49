"""A Parquet dump: a file or folder with the columns of Spark's Kafka source."""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.errors import BadInput


def read_parquet(spark: SparkSession, location: str) -> DataFrame:
    """Open the dump lazily; a missing or unreadable path is the user's error, not a traceback."""
    if "://" not in location and not Path(location).exists():
        raise BadInput(f"--source parquet:{location}: no such file or directory")
    try:
        # Schema inference reads the footers now, so a file that is not Parquet fails here, before any work.
        return spark.read.parquet(location)
    except Exception as e:  # AnalysisException, or a Py4JJavaError from the footer reader
        raise BadInput(f"--source parquet:{location}: cannot read Parquet ({root_cause(e)})") from None


def root_cause(e: Exception) -> str:
    """The innermost Java cause of a Spark error (the useful part), else the first line of the message."""
    cause = getattr(e, "java_exception", None)
    while cause is not None and cause.getCause() is not None:
        cause = cause.getCause()
    text = cause.toString() if cause is not None else (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:300]
