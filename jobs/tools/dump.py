"""`offsetlake dump`: a source's raw records written as a Parquet dump (the contract's input schema), one file per
task of its plan, read as a rebuild reads it (no Spark)."""
from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.base.storage import Location, close_parquet, located
from jobs.config import KafkaOptions, SourceSpec, output_folder
from jobs.sources.plan import plan_source

log = logging.getLogger("offsetlake")
# Spark's Kafka-source column order, then the batch metadata a segment source has (for exact transactions).
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "producer_id",
           "producer_epoch", "is_transactional", "is_control")


def write_dump(source: SourceSpec, kafka: KafkaOptions, output: "Location | str") -> dict[str, Any]:
    """Read `source` once and write it under `output` (which must not exist); returns record counts."""
    output = located(output)
    output_folder(output.uri, new=True, storage_options=dict(output.options))
    plan = plan_source(source, kafka, cores=1)
    output.mkdir()
    records = problems = 0
    for index, task in enumerate(plan.tasks or ()):
        writer = None
        try:
            for batch in plan.read(task):
                table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
                if "problem" in table.column_names:
                    damaged = pc.is_valid(table.column("problem"))
                    for p in table.filter(damaged).column("problem").to_pylist():
                        log.warning("%s: %s at byte %s: %s", p["file"], p["action"], p["position"], p["reason"])
                        problems += 1
                    table = table.filter(pc.invert(damaged))
                table = table.select([c for c in COLUMNS if c in table.column_names])
                if writer is None:
                    part = output.child(f"part-{index:05d}.parquet")
                    writer = pq.ParquetWriter(part.path, table.schema, filesystem=part.fs)
                writer.write_table(table)
                records += table.num_rows
        finally:
            if writer is not None:
                close_parquet(writer)
    for item in plan.ignored:
        log.warning("not read: %s (%s)", item.path, item.reason)
    log.info("wrote %d records of %s to %s", records, source, output)
    return {"records": records, "source": str(source), "output": output.uri,
            "segment_errors": problems + len(plan.ignored)}
