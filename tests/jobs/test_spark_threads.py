"""Spark work on threads of its own (jobs.spark_threads, TableSink.stage_soon): counted as the run's, and a
failure on one fails the run and leaves no staged file behind."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from jobs.runtime.metrics import SparkWork
from jobs.lake.sink import STAGING_DIR, TableSink
from jobs.spark_threads import SparkThreads
from jobs.lake.tables import spark_schema


def test_jobs_started_on_spark_threads_are_counted_as_the_runs(spark):
    work = SparkWork(spark, "offsetlake test")
    before = work.counts()["spark_jobs"]
    with SparkThreads(spark, 2, "test") as threads:
        counted = [threads.submit(lambda n=n: spark.range(n).count()) for n in (3, 4, 5)]
        assert [future.result() for future in counted] == [3, 4, 5]
    assert work.counts()["spark_jobs"] >= before + 3


def test_a_table_that_fails_on_a_staging_thread_fails_the_run_and_leaves_nothing(spark, tmp_path):
    first, *rest = spark_schema("quarantine").fields
    broken = spark.range(1).select(F.raise_error(F.lit("broken table")).cast(first.dataType).alias(first.name),
                                   *[F.lit(None).cast(f.dataType).alias(f.name) for f in rest])
    sink = TableSink(spark, tmp_path / "out")
    sink.stage_soon("segment_errors", None)
    sink.stage_soon("quarantine", broken)
    sink.stage_soon("quarantine", None)  # given once: the second is ignored
    with pytest.raises(Exception, match="broken table"):
        sink.wait()
    assert sink.rows == {"segment_errors": 0}
    sink.discard()
    assert not (tmp_path / "out" / STAGING_DIR).exists()
