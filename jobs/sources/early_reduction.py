"""A local dump's reduction, started before Spark.

A dump's reducing tasks (jobs.sources.reduced_dump) need no Spark: pyarrow reads their row groups and numpy
folds them. So when this process is about to start a local JVM of its own (a plain `offsetlake rebuild` on a
laptop or a CI box), it forks their workers at once and they reduce the dump while the JVM and the session
start, each writing its rows as Parquet where the run pins the tasks' reduced log, and the spans of its
transactional records beside them. Spark reads those files when the run needs them (`reduced_log`), as it reads
any pinned state; it neither runs the tasks nor starts its Python workers for them.

With the history tables, the same workers then run the history's tasks (DumpTasks.offset_history) as soon as the
reduced log's keys are known (jobs.history.start_history_tasks), while Spark replays the groups on its own
threads: a rebuild's Spark jobs are small and leave much of two cores idle, and these tasks are its longest
work. They write offset_commits' files and the applied records of the keys Spark finishes, read when
offset_commits needs them.

Under spark-submit, on Databricks, or in a process whose session already runs, the tasks stay Spark's.
"""
from __future__ import annotations

import logging
import multiprocessing
import signal
from datetime import datetime
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from jobs.config import SourceSpec
from jobs.sink import new_staging, pinned
from jobs.sources.reduced_dump import (PARTIAL_LOG, TASK_SPANS, WHOLE_KEY_COMMITS, DumpPlan, history_task, micros,
                                       plan_dump, reduce_task, reduced_schema)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("offsetlake")


class EarlyReduction:
    """The reducing tasks of a planned dump, then its history's tasks, running in worker processes of this one."""

    def __init__(self, plan: DumpPlan, staging: Path, as_of: datetime | None, cores: int, history: bool) -> None:
        self.plan = plan
        self.staging = staging  # the run's staging area (jobs.sink.TableSink): the files are written there
        self.as_of = as_of
        self.history = history  # the workers stay for the history's tasks (`offset_history`)
        self.spans = pinned(staging, TASK_SPANS)
        self._out = pinned(staging, PARTIAL_LOG)
        # Forked before the JVM exists, so the workers inherit this process's imports and nothing of Spark's.
        self._pool = multiprocessing.get_context("fork").Pool(min(cores, len(plan.tasks)), _ignore_interrupts)
        columns = list(plan.columns)
        self._results: list[AsyncResult] = [
            self._pool.apply_async(_write_task, (index, groups, columns, micros(as_of), str(self._out),
                                                 str(self.spans)))
            for index, groups in enumerate(plan.tasks)]

    @classmethod
    def start(cls, source: SourceSpec, as_of: datetime | None, output: Path, cores: int | None,
              history: bool = False) -> EarlyReduction | None:
        """Start reducing `source` as of `as_of` for a run writing under `output` (`history`: with the history
        tables), when it is a dump the tasks read (jobs.sources.reduced_dump.plan_dump) and `cores` says a local
        JVM is about to start (jobs.session.starts_local_jvm); else None."""
        if cores is None or source.kind != "parquet":
            return None
        plan = plan_dump(source.location, cores)
        if plan is None:
            return None
        log.info("reducing %s in %d tasks while Spark starts", source.location, len(plan.tasks))
        return cls(plan, new_staging(output), as_of, cores, history)

    def reduced_log(self, spark: SparkSession, as_of: datetime | None, spans: Path) -> DataFrame:
        """The tasks' rows (DumpTasks.reduced's with `spans`), read by Spark once every task has written them;
        `as_of` and `spans` must be the ones the tasks were started with."""
        from pyspark.sql.pandas.types import from_arrow_schema

        if as_of != self.as_of or spans != self.spans:
            raise ValueError(f"the dump was reduced as of {self.as_of} with spans in {self.spans}")
        rows = self._finished(self._results, keep=self.history)
        log.info("the dump's tasks reduced it to %d rows", rows)
        return spark.read.schema(from_arrow_schema(reduced_schema(list(self.plan.columns)))).parquet(str(self._out))

    def offset_history(self, spark: SparkSession, count: int, groups: tuple[tuple[str, tuple[int, ...]], ...],
                       as_of_us: int | None, keys: Any, out: str, schema: Any, recent: int | None
                       ) -> Callable[[], DataFrame]:
        """The history's `count` tasks (DumpTasks.offset_history, whose arguments these are) started now on the
        same workers, while Spark replays the groups; the function returned gives their applied records of the
        keys Spark finishes, read once every task has written them."""
        import pyarrow as pa

        from jobs.partial_reduce import COMMIT_FIELDS

        whole = pinned(self.staging, WHOLE_KEY_COMMITS)
        columns = list(self.plan.columns)
        results = [self._pool.apply_async(_history_task, (index, count, groups, columns, as_of_us, keys, out, schema,
                                                           recent, str(whole)))
                   for index in range(count)]

        def finished() -> DataFrame:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._finished(results)
            return spark.read.schema(from_arrow_schema(pa.schema(COMMIT_FIELDS))).parquet(str(whole))

        return finished

    def _finished(self, results: list[AsyncResult], keep: bool = False) -> int:
        """The rows the tasks wrote, once all have finished (a task's failure raised here); the workers stop then,
        unless asked to `keep` them for more."""
        try:
            rows = sum(result.get() for result in results)
        except BaseException:
            self.close()
            raise
        if not keep:
            self.close()
        return rows

    def close(self) -> None:
        """Stop the workers: finished, or the run failed (they must not write into a staging area it removes)."""
        self._pool.terminate()
        self._pool.join()


def _ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group: the run stops its workers itself (`close`), without their
    tracebacks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _write_task(index: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str], as_of_us: int | None,
                out: str, spans: str) -> int:
    """Reducing task `index` (jobs.sources.reduced_dump.reduce_task), its rows written to OUT/part-NNNNN.parquet;
    returns how many."""
    return _write(reduce_task(index, groups, columns, as_of_us, spans), reduced_schema(columns), out, index)


def _history_task(index: int, count: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str],
                  as_of_us: int | None, keys: Any, out: str, schema: Any, recent: int | None, whole: str) -> int:
    """History task `index` (jobs.sources.reduced_dump.history_task), the applied records it gives written to
    WHOLE/part-NNNNN.parquet; returns how many."""
    import pyarrow as pa

    from jobs.partial_reduce import COMMIT_FIELDS

    tables = history_task(index, count, groups, columns, as_of_us, keys, out, schema, recent)
    return _write(tables, pa.schema(COMMIT_FIELDS), whole, index)


def _write(tables: Iterator[Any], schema: Any, folder: str, index: int) -> int:
    """A task's Arrow tables as FOLDER/part-INDEX.parquet, with `schema` (an empty file when there are none)."""
    import pyarrow.parquet as pq

    Path(folder).mkdir(parents=True, exist_ok=True)
    rows = 0
    with pq.ParquetWriter(Path(folder) / f"part-{index:05d}.parquet", schema) as writer:
        for table in tables:
            writer.write_table(table.select(schema.names).cast(schema))
            rows += table.num_rows
    return rows
