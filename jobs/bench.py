"""`offsetlake bench`: a rebuild timed against a plain Spark scan of the same dump, in one session.

Machines here are noisy, so the figure that matters is the ratio: rebuild seconds / scan seconds, where
the scan reads every key and value byte (xxhash64 over both) and the rebuild writes every table.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.config import RebuildConfig
from jobs.pipeline import run
from jobs.sample import write_sample
from jobs.session import get_spark

log = logging.getLogger("offsetlake")


def scan_seconds(spark: SparkSession, dump: Path) -> float:
    started = time.monotonic()
    spark.read.parquet(str(dump)).agg(F.bit_xor(F.xxhash64("key", "value"))).collect()  # a checksum: ANSI-safe
    return time.monotonic() - started


def run_bench(records: int, dump: Path | None, work: Path) -> dict[str, Any]:
    """Generate (or reuse) a dump, warm the JVM with one scan, then time the rebuild and the scan."""
    if dump is None:
        dump = work / f"dump-{records}"
        if not (dump / "part-00000.parquet").exists():
            log.info("generating a %d-record dump in %s", records, dump)
            write_sample(dump, records, seed=7)
    spark = get_spark()
    scan_seconds(spark, dump)  # warm-up: JIT, file listing, page cache
    started = time.monotonic()
    summary = run(spark, RebuildConfig.build(source=f"parquet:{dump}", output=str(work / "tables")))
    rebuild = time.monotonic() - started
    scan = scan_seconds(spark, dump)
    return {
        "records": summary["records_read"],
        "rebuild_seconds": round(rebuild, 2),
        "scan_seconds": round(scan, 2),
        "ratio": round(rebuild / scan, 2),
        "groups": summary["groups"],
        "committed_offsets": summary["committed_offsets"],
        "dump": str(dump),
        "cores": spark.sparkContext.defaultParallelism,
    }
