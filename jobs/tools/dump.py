"""`offsetlake dump`: a source's raw records written as a Parquet dump (the contract's input schema)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
from pyspark.sql import SparkSession

from jobs.config import KafkaOptions, SourceSpec, output_folder
from jobs.sources import read_source

log = logging.getLogger("offsetlake")


def write_dump(spark: SparkSession, source: SourceSpec, kafka: KafkaOptions, output: Path) -> dict[str, Any]:
    """Read `source` once and write it under `output` (which must not exist); returns record counts."""
    output_folder(str(output), new=True)
    read = read_source(spark, source, kafka)
    raw = read.records
    # Spark's Kafka-source column order, then the batch metadata a segment source has (for exact transactions).
    columns = [c for c in ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "producer_id",
                           "producer_epoch", "is_transactional", "is_control") if c in raw.columns]
    try:
        raw.select(columns).write.parquet(str(output))
        problems = read.segment_errors.collect() if read.segment_errors is not None else []
        for e in problems:
            log.warning("%s: %s at byte %s: %s", e.file, e.action, e.position, e.reason)
    finally:
        read.release()
    records = pads.dataset(output, format="parquet").count_rows()  # from the footers
    log.info("wrote %d records of %s to %s", records, source, output)
    return {"records": records, "source": str(source), "output": str(output), "segment_errors": len(problems)}
