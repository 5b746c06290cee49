"""`offsetlake dump`: a source's raw records written as a Parquet dump (the contract's input schema)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
from pyspark.sql import SparkSession

from jobs.config import KafkaOptions, SourceSpec
from jobs.errors import BadInput
from jobs.sources import read_source

log = logging.getLogger("offsetlake")


def write_dump(spark: SparkSession, source: SourceSpec, kafka: KafkaOptions, output: Path) -> dict[str, Any]:
    """Read `source` once and write it under `output` (which must not exist); returns record counts."""
    if output.exists():
        raise BadInput(f"--output {output}: already exists (a dump is never overwritten)")
    raw = read_source(spark, source, kafka)
    # Spark's Kafka-source column order; topic and timestampType are present for a kafka: source.
    columns = [c for c in ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType") if c in raw.columns]
    raw.select(columns).write.parquet(str(output))
    records = pads.dataset(output, format="parquet").count_rows()  # from the footers
    log.info("wrote %d records of %s to %s", records, source, output)
    return {"records": records, "source": str(source), "output": str(output)}
