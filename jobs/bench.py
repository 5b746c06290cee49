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
from jobs.sample import write_log_dir, write_sample
from jobs.session import get_spark

log = logging.getLogger("offsetlake")


def scan_seconds(spark: SparkSession, dump: Path) -> float:
    started = time.monotonic()
    spark.read.parquet(str(dump)).agg(F.bit_xor(F.xxhash64("key", "value"))).collect()  # a checksum: ANSI-safe
    return time.monotonic() - started


def run_bench(records: int, dump: Path | None, work: Path, source_format: str = "parquet") -> dict[str, Any]:
    """Generate (or reuse) a dump, warm the JVM with one scan, then time the rebuild and the scan.

    With `source_format="segments"` the dump is first written as a broker log dir and the rebuild reads
    that; the scan stays the Parquet scan, so the two ratios compare the sources."""
    if dump is None:
        dump = work / f"dump-{records}"
        if not (dump / "part-00000.parquet").exists():
            log.info("generating a %d-record dump in %s", records, dump)
            write_sample(dump, records, seed=7)
    cfg = RebuildConfig.build(source=f"parquet:{dump}", output=str(work / "tables"))  # checks the dump
    if source_format == "segments":
        log_dir = work / f"{dump.name}-segments"
        if not log_dir.exists():
            log.info("writing %s as a broker log dir in %s", dump, log_dir)
            write_log_dir(dump, log_dir)
        cfg = RebuildConfig.build(source=f"segments:{log_dir}", output=str(work / "tables"))
    spark = get_spark()
    scan_seconds(spark, dump)  # warm-up: JIT, file listing, page cache
    started = time.monotonic()
    summary = run(spark, cfg)
    rebuild = time.monotonic() - started
    # A scan takes well under a second on a small dump: the fastest of five keeps one slow one (a noisy
    # neighbour, a GC pause) from moving the ratio.
    scan = min(scan_seconds(spark, dump) for _ in range(5))
    return {
        "records": summary["records_read"],
        "rebuild_seconds": round(rebuild, 2),
        "scan_seconds": round(scan, 2),
        "ratio": round(rebuild / scan, 2),
        "groups": summary["groups"],
        "committed_offsets": summary["committed_offsets"],
        "dump": str(dump),
        "source": str(cfg.source),
        "cores": spark.sparkContext.defaultParallelism,
    }
