"""A local dump's reduction, started before Spark.

A dump's reducing tasks (jobs.sources.reduced_dump) need no Spark: pyarrow reads their row groups and numpy
folds them. So when this process is about to start a local JVM of its own (a plain `offsetlake rebuild` on a
laptop or a CI box), it forks their workers at once and they reduce the dump while the JVM and the session
start, each writing its rows as Parquet where the run pins the tasks' reduced log, and the spans of its
transactional records beside them; one of them then combines the tasks' rows (jobs.partial_reduce.combine), and
Spark reads that file when the run needs it (`reduced_log`), as it reads any pinned state: it neither runs the
tasks, nor combines their rows, nor starts its Python workers for them.

With the history tables, the reducing tasks also write each history task's share of the records they read
(reduced_dump.ShareFiles: the dump is read once), and the same workers then run the history's tasks
(DumpTasks.offset_history) as soon as the reduced log's keys are known (jobs.history.start_history_tasks), at a
lower priority, while Spark replays the groups and writes the other tables: the run waits for those first, and
the history takes the CPU Spark's small jobs leave. They write offset_commits' files and the applied records of
the keys Spark finishes, read when offset_commits needs them.

Under spark-submit, on Databricks, or in a process whose session already runs, the tasks stay Spark's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
from datetime import datetime
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from jobs.config import SourceSpec
from jobs.sink import new_staging, pinned
from jobs.sources.reduced_dump import (COMBINED_LOG, HISTORY_SHARES, OFFSET_STATE, PARTIAL_LOG, TASK_SPANS,
                                       WHOLE_KEY_COMMITS, DumpPlan, fold_groups, history_task, micros, plan_dump,
                                       reduce_task, reduced_schema)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("offsetlake")
# The history tasks' niceness (`_history_task`): 10, the default of nice(1).
HISTORY_NICENESS = 10


class EarlyReduction:
    """The reducing tasks of a planned dump, then its history's tasks, running in worker processes of this one."""

    def __init__(self, plan: DumpPlan, staging: Path, as_of: datetime | None, cores: int, history: bool) -> None:
        self.plan = plan
        self.staging = staging  # the run's staging area (jobs.sink.TableSink): the files are written there
        self.as_of = as_of
        self.history = history  # the workers stay for the history's tasks (`offset_history`)
        self.spans = pinned(staging, TASK_SPANS)
        self._out = pinned(staging, PARTIAL_LOG)
        # With history, the reducing tasks also write what the history's tasks read (reduced_dump.ShareFiles).
        self._shares = str(pinned(staging, HISTORY_SHARES)) if history else None
        # Forked before the JVM exists, so the workers inherit this process's imports and nothing of Spark's.
        self._workers = min(cores, len(plan.tasks))
        self._pool = multiprocessing.get_context("fork").Pool(self._workers, _start_worker)
        self._folds: list[AsyncResult] = []  # the group fold's tasks (`reduced_log`)
        self._unproven: int | None = None  # the offset state's live rows left unproven (`reduced_log`)
        self._counted: list[dict] | None = None  # the combined rows' counts (`reduced_log`)
        columns = list(plan.columns)
        self._results: list[AsyncResult] = [
            self._pool.apply_async(_write_task, (index, groups, columns, micros(as_of), str(self._out),
                                                 str(self.spans), self._shares, plan.history_tasks))
            for index, groups in enumerate(plan.tasks)]

    @classmethod
    def start(cls, source: SourceSpec, as_of: datetime | None, output: Path, cores: int | None,
              history: bool = False, run_id: str | None = None) -> EarlyReduction | None:
        """Start reducing `source` as of `as_of` for a run writing under `output` (`history`: with the history
        tables), when it is a dump the tasks read (jobs.sources.reduced_dump.plan_dump) and `cores` says a local
        JVM is about to start (jobs.session.starts_local_jvm); else None."""
        if cores is None or source.kind != "parquet":
            return None
        plan = plan_dump(source.location, cores)
        if plan is None:
            return None
        log.info("reducing %s in %d tasks while Spark starts", source.location, len(plan.tasks))
        return cls(plan, new_staging(output, run_id), as_of, cores, history)

    def reduced_log(self, spark: SparkSession, as_of: datetime | None, spans: Path) -> DataFrame:
        """The tasks' rows (DumpTasks.reduced's with `spans`), read by Spark once every task has written them;
        `as_of` and `spans` must be the ones the tasks were started with."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from jobs.groups import GROUP_FOLD

        if as_of != self.as_of or spans != self.spans:
            raise ValueError(f"the dump was reduced as of {self.as_of} with spans in {self.spans}")
        self._finished(self._results, keep=True)
        # Combined across tasks here (its jobs would cost Spark more than the fold costs Arrow), in a worker: the
        # driver's memory does not grow with the dump's keys.
        combined = pinned(self.staging, COMBINED_LOG)
        combine = self._pool.apply_async(_combine_task, (str(self._out), str(combined),
                                                         str(pinned(self.staging, OFFSET_STATE))))
        # The group fold reads only group records, which the tasks kept whole: it starts now, on every worker.
        self._folds = [self._pool.apply_async(_fold_task, (str(self._out), str(pinned(self.staging, GROUP_FOLD)),
                                                           share, self._workers, self.history))
                       for share in range(self._workers)]
        [(rows, self._unproven, self._counted)] = self._finished([combine], keep=True)
        log.info("the dump's tasks reduced it to %d rows", rows)
        return spark.read.schema(from_arrow_schema(reduced_schema(list(self.plan.columns)))).parquet(str(combined))

    def group_fold(self, spark: SparkSession, as_of: datetime, events: bool) -> DataFrame:
        """The group fold of the reduced log's valid records up to `as_of` (jobs.groups.replay_groups, with
        `events`), folded by the workers since `reduced_log`, read by Spark once they have written it."""
        from jobs.groups import GROUP_FOLD, OUTPUT_SCHEMA

        if (self.as_of is not None and self.as_of != as_of) or events != self.history:
            raise ValueError(f"the groups were folded as of {self.as_of}, events {self.history}")
        self._finished(self._folds, keep=self.history)
        return spark.read.schema(OUTPUT_SCHEMA).parquet(str(pinned(self.staging, GROUP_FOLD)))

    def counted(self) -> list[dict]:
        """The combined rows' counts (jobs.partial_reduce.count_rows), once `reduced_log` has run."""
        if self._counted is None:
            raise ValueError("the reduced log is not combined yet")
        return self._counted

    def offset_state(self, spark: SparkSession, as_of: datetime) -> tuple[DataFrame, int]:
        """(the offsets of the reduced log's valid records up to `as_of`, computed by the worker that combined it
        (jobs.task_offsets.offset_state, STATE_SCHEMA), how many live ones it left unproven), once `reduced_log`
        has run."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from jobs.task_offsets import STATE_SCHEMA

        if self.as_of is not None and self.as_of != as_of:
            raise ValueError(f"the dump was reduced as of {self.as_of}")
        if self._unproven is None:
            raise ValueError("the reduced log is not combined yet")
        frame = spark.read.schema(from_arrow_schema(STATE_SCHEMA)).parquet(str(pinned(self.staging, OFFSET_STATE)))
        return frame, self._unproven

    def offset_history(self, spark: SparkSession, count: int, groups: tuple[tuple[str, tuple[int, ...]], ...],
                       as_of_us: int | None, keys: Any, out: str, schema: Any, recent: int | None
                       ) -> Callable[[], DataFrame]:
        """The history's `count` tasks (DumpTasks.offset_history, whose arguments these are) started now on the
        same workers, while Spark replays the groups; the function returned gives their applied records of the
        keys Spark finishes, read once every task has written them."""
        import pyarrow as pa

        from jobs.partial_reduce import COMMIT_FIELDS

        # The reducing tasks read the shares up to their as_of: the history's, or none, when the history's is the
        # newest record's time (the default), at or after every record.
        if self.as_of is not None and micros(self.as_of) != as_of_us:
            raise ValueError(f"the dump was reduced as of {self.as_of}")
        whole = pinned(self.staging, WHOLE_KEY_COMMITS)
        columns = list(self.plan.columns)
        results = [self._pool.apply_async(_history_task, (index, count, groups, columns, as_of_us, keys, out, schema,
                                                           recent, str(whole), self._shares))
                   for index in range(count)]

        def finished() -> DataFrame:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._finished(results)
            return spark.read.schema(from_arrow_schema(pa.schema(COMMIT_FIELDS))).parquet(str(whole))

        return finished

    def _finished(self, results: list[AsyncResult], keep: bool = False) -> list[Any]:
        """What the tasks returned, once all have finished (a task's failure raised here); the workers stop then,
        unless asked to `keep` them for more."""
        try:
            rows = [result.get() for result in results]
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


def _start_worker() -> None:
    """Ctrl-C reaches the whole process group: the run stops its workers itself (`close`), without their
    tracebacks. And a worker keeps the memory it frees (`keep_freed_memory`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_freed_memory()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory this process frees for its next allocations.

    By default it unmaps every large block when freed and trims the top of its heap, so each numpy temporary of
    a batch (a few MB) is fresh memory again, paid for in page faults, which a virtual machine makes dear: a
    reducing task of the 20M sample spent 1.4 s of its 5 s in the kernel (268k faults); with large blocks from
    the heap and the heap kept, 0.4 s (46k faults), its peak memory the same (about 520 MB). Elsewhere than
    glibc this does nothing."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    for parameter, value in ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20)):
        mallopt(parameter, value)


def _write_task(index: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str], as_of_us: int | None,
                out: str, spans: str, shares: str | None, count: int) -> int:
    """Reducing task `index` (jobs.sources.reduced_dump.reduce_task), its rows written to OUT/part-NNNNN.parquet;
    returns how many."""
    return _write(reduce_task(index, groups, columns, as_of_us, spans, shares, count), reduced_schema(columns), out,
                  index)


def _combine_task(parts: str, out: str, state: str) -> tuple[int, int, list[dict]]:
    """The reducing tasks' rows in PARTS combined (jobs.partial_reduce.combine) into OUT/part-00000.parquet, and
    their offset state (jobs.task_offsets.offset_state) into STATE/part-00000.parquet; returns (how many rows,
    how many live offsets the state left unproven, their counts: jobs.partial_reduce.count_rows)."""
    import pyarrow.dataset as pads

    from jobs.partial_reduce import combine, count_rows
    from jobs.task_offsets import STATE_SCHEMA, offset_state

    rows = pads.dataset(parts, format="parquet").to_table()
    combined = combine([rows])
    offsets, unproven = offset_state(combined)
    _write(iter([offsets]), STATE_SCHEMA, state, 0)
    return _write(iter([combined]), rows.schema, out, 0), unproven, count_rows(combined)


def _fold_task(parts: str, out: str, share: int, count: int, events: bool) -> int:
    """Share `share` of `count` of the group fold over the reducing tasks' rows in PARTS
    (jobs.sources.reduced_dump.fold_groups), written to OUT/part-SHARE.parquet; returns how many rows."""
    from jobs.groups import fold_schema

    return _write(iter([fold_groups(parts, share, count, events)]), fold_schema(), out, share)


def _history_task(index: int, count: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str],
                  as_of_us: int | None, keys: Any, out: str, schema: Any, recent: int | None, whole: str,
                  shares: str | None) -> int:
    """History task `index` (jobs.sources.reduced_dump.history_task), the applied records it gives written to
    WHOLE/part-NNNNN.parquet; returns how many."""
    import pyarrow as pa

    from jobs.partial_reduce import COMMIT_FIELDS

    # Spark's replay runs meanwhile, and the run waits for it first: the history takes the CPU it leaves (these
    # workers have no more urgent work once the history's tasks start).
    os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), HISTORY_NICENESS))
    tables = history_task(index, count, groups, columns, as_of_us, keys, out, schema, recent, shares)
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
