"""The scan floor of `offsetlake bench`: a fresh Spark process that reads every key and value byte of a dump.

    python jobs/tools/bench_floor.py DUMP

What any Spark job over the dump pays at least: interpreter, JVM and session start, and one scan
(`sum(length(key) + coalesce(length(value), 0))`, local[2]). Spark's own defaults, nothing of offsetlake's.
Prints the byte count, so the scan cannot be optimised away.
"""
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(dump: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("offsetlake-bench-floor").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    total = spark.read.parquet(dump).agg(
        F.sum(F.length("key") + F.coalesce(F.length("value"), F.lit(0)))).first()[0]
    print(total)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
