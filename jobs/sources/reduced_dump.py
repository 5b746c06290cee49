"""A local Parquet dump read by its row groups, each task reducing what it reads (jobs.partial_reduce).

The whole dump is still `read_parquet`'s frame (the history and the quarantine read every record); this source
gives the reduction its input without Spark's row-by-row scan: pyarrow reads a task's row groups as columns, the
task folds them, and Spark receives about one row per key and task plus the records kept whole.

Used in local mode (the tasks open the driver's files) for dumps of MIN_BYTES or more whose files are plain
Parquet with one schema, no partition folders, and a timestamp that is zoned or epoch milliseconds (a local
timestamp's meaning depends on Spark's session time zone: Spark reads it). Any other dump is reduced by Spark
alone, with the same result (jobs.reduce; tests/jobs/test_partial_reduce.py compares the two).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from pyspark.sql.types import StructType

from jobs.errors import BadInput
from jobs.hive import data_files
from jobs.sources.tasks import BATCH_FIELDS, RAW_FIELDS, task_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Compressed bytes of row groups per task, at most. Each task's output is about one row per key, so fewer,
# larger tasks send Spark fewer rows; a task's memory is bounded by its keys either way (FOLD_ROWS).
TASK_BYTES = 256 << 20
# A smaller dump is left to Spark's reduction: the tasks' fixed cost (Python workers importing pyarrow and
# numpy, the JVM's first Arrow conversion: seconds) is more than a scan of it costs. Measured: 1.15x slower on
# a 10 MB dump, about even on 70 MB (0.96x), 22% faster on 303 MB.
MIN_BYTES = 64 << 20
# The columns the reduction and the replay read, typed as a source task yields them (jobs.sources.tasks).
COLUMNS = ("key", "value", "partition", "offset", "timestamp", "producer_id", "producer_epoch", "is_control")
_TYPES = dict(RAW_FIELDS + BATCH_FIELDS)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class DumpPlan:
    columns: tuple[str, ...]  # the COLUMNS the dump has
    tasks: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]  # per task: (file, row groups)


def plan_dump(location: str, cores: int, task_bytes: int = TASK_BYTES, min_bytes: int = MIN_BYTES
              ) -> DumpPlan | None:
    """Row groups spread over tasks of at most `task_bytes` (compressed), as many as `cores` at least; None when
    the dump is not one this source reads (see the module) or is smaller than `min_bytes`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if "://" in location:
        return None
    root = Path(location)
    files = [(root, {})] if root.is_file() else list(data_files(root))
    if not files or any(values for _, values in files):
        return None
    if sum(path.stat().st_size for path, _ in files) < min_bytes:  # no footer can add up to more than its file
        return None
    groups: list[tuple[str, int, int]] = []  # (file, row group, compressed bytes)
    schema = None
    for path, _ in files:
        meta = pq.ParquetFile(path).metadata
        file_schema = meta.schema.to_arrow_schema()
        if schema is not None and not file_schema.equals(schema):
            return None
        schema = file_schema
        groups += [(str(path), i, max(_compressed(meta.row_group(i)), 1)) for i in range(meta.num_row_groups)]
    stamp = schema.field("timestamp").type
    if not ((pa.types.is_timestamp(stamp) and stamp.tz) or pa.types.is_integer(stamp)):
        return None
    total = sum(size for *_, size in groups)
    if total < min_bytes:
        return None
    count = max(cores, math.ceil(total / task_bytes / cores) * cores)
    per_task = total / count
    tasks: list[dict[str, list[int]]] = [{}]
    filled = 0.0
    for path, group, size in groups:
        if filled >= per_task and len(tasks) < count:
            tasks.append({})
            filled = 0.0
        tasks[-1].setdefault(path, []).append(group)
        filled += size
    columns = tuple(name for name in COLUMNS if name in schema.names)
    return DumpPlan(columns, tuple(tuple((p, tuple(g)) for p, g in t.items()) for t in tasks if t))


def _compressed(group: Any) -> int:
    return sum(group.column(c).total_compressed_size for c in range(group.num_columns))


@dataclass(frozen=True)
class DumpTasks:
    """What the tasks of a planned dump give: its reduced records, and the plain commits those stand for."""

    spark: SparkSession
    plan: DumpPlan

    def reduced(self, as_of: datetime | None) -> DataFrame:
        """plan.columns plus jobs.partial_reduce.PARTIAL_FIELDS, reduced per task (jobs.reduce.combine_partials)."""
        return self._read("reduce", as_of)

    def plain_commits(self, as_of: datetime | None) -> DataFrame:
        """Every record the reduction folds, decoded: jobs.partial_reduce.COMMIT_FIELDS (jobs.history)."""
        return self._read("commits", as_of)

    def _read(self, mode: str, as_of: datetime | None) -> DataFrame:
        """One Spark task per planned task: a one-row partition naming its row groups, mapped to what the task
        yields (mapInArrow: the batches reach the JVM as Arrow, and no Python process plans the read)."""
        as_of_us = None if as_of is None else (as_of - _EPOCH) // timedelta(microseconds=1)
        columns = list(self.plan.columns)
        tasks = [(json.dumps(task),) for task in self.plan.tasks]
        named = self.spark.createDataFrame(self.spark.sparkContext.parallelize(tasks, len(tasks)), "task string")

        def run(batches: Iterator[Any]) -> Iterator[Any]:
            for batch in batches:
                for task in batch.column("task").to_pylist():
                    yield from read_task(mode, json.loads(task), columns, as_of_us)

        return named.mapInArrow(run, _schema(mode, columns))


def _schema(mode: str, columns: list[str]) -> StructType:
    """The Spark schema of what a task yields in `mode`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(_arrow_schema(mode, columns))


def _arrow_schema(mode: str, columns: list[str]) -> Any:
    import pyarrow as pa

    from jobs.partial_reduce import COMMIT_FIELDS, PARTIAL_FIELDS

    if mode == "commits":
        return pa.schema(COMMIT_FIELDS)
    return pa.schema([(name, _TYPES[name]) for name in columns] + list(PARTIAL_FIELDS))


def read_task(mode: str, groups: tuple[tuple[str, tuple[int, ...]], ...], columns: list[str], as_of_us: int | None
              ) -> Iterator[Any]:
    """One task: its row groups read with pyarrow, typed as Spark would read them, then reduced (mode "reduce")
    or their plain commits decoded (mode "commits"); RecordBatches."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from jobs.partial_reduce import plain_commits, reduce_batches

    typed = _arrow_schema("reduce", columns)
    schema = _arrow_schema(mode, columns)

    def tables() -> Iterator[pa.Table]:
        for path, row_groups in groups:
            dump = None
            for group in row_groups:
                try:
                    dump = dump or pq.ParquetFile(path)
                    table = dump.read_row_group(group, columns=columns, use_threads=False)
                except (pa.ArrowException, OSError) as e:  # a damaged data page: the user's file, said in one line
                    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                    raise task_error(BadInput(f"--source parquet: {path}: cannot read row group {group} ({reason})")
                                     ) from None
                stamp = table.column("timestamp")
                if pa.types.is_integer(stamp.type):  # epoch milliseconds
                    stamp = pc.multiply(stamp.cast(pa.int64()), 1000)
                table = table.set_column(columns.index("timestamp"), "timestamp", stamp)
                yield table.cast(pa.schema([typed.field(n) for n in columns]), safe=False)

    steps = reduce_batches if mode == "reduce" else plain_commits
    for out in steps(tables(), as_of_us):
        yield from out.select(schema.names).cast(schema).to_batches()
