"""The scan floor of `offsetlake bench`: a fresh Spark process that reads every key and value byte of a dump.

    python jobs/tools/bench_floor.py DUMP

What any Spark job over the dump pays at least: interpreter, JVM and session start, and one scan
(`sum(length(key) + coalesce(length(value), 0))`, local[2], or the master of the spark-submit that runs it).
Spark's own defaults, nothing of offsetlake's.
Prints the byte count, so the scan cannot be optimised away.
"""
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(dump: str) -> None:
    builder = SparkSession.builder.appName("offsetlake-bench-floor")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, whose --master stands
        builder = builder.master("local[2]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    total = spark.read.parquet(dump).agg(
        F.sum(F.length("key") + F.coalesce(F.length("value"), F.lit(0)))).first()[0]
    print(total)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
