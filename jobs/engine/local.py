"""The local runner: the kernel run by worker processes of this one, without a JVM.

Workers are forked at the start, so they inherit this process's imports and nothing else. A run is three
passes of jobs.engine.stages's tasks over files in the run's staging area:
1. each source task (jobs.sources.plan) read, checked and reduced (jobs.replay.chunk); its log rows are written
   by group of coordinator partitions, the group being the partition modulo the run's `groups`;
2. each group's log replayed, its partitions at once or one by one (jobs.engine.stages.partition_task);
3. each group's replayed state derived (jobs.derive.stage).
A group is one task of passes 2 and 3, so a partition's rows meet in one process. The Spark runner runs the same
tasks on Spark's executors.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import multiprocessing
import signal
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from jobs.engine.handoffs import Staged
from jobs.engine.stages import ChunkKernel, PartitionKernel, StagingLayout, chunk_task, partition_task

if TYPE_CHECKING:
    from jobs.sources.plan import SourcePlan

log = logging.getLogger("offsetlake")


class LocalRunner:
    """Runs the kernel's passes on a pool of `cores` worker processes."""

    name = "local"
    spark = None

    def __init__(self, cores: int, processes: bool = True) -> None:
        self.cores = cores
        self.processes = processes  # False: the tasks run in this process, one after another (tests, debugging)
        self.layout: StagingLayout | None = None
        self._pool: _Workers | _InProcess | None = None

    def groups(self, plan: SourcePlan) -> int:
        """Groups of coordinator partitions: a few per worker, so a large partition does not leave the others
        idle, and few enough that a table is a few files."""
        return 2 * self.cores

    def attach(self, layout: StagingLayout) -> None:
        """Start the workers, for a run whose outputs `layout` lays out."""
        self.layout = layout
        self._pool = _Workers(self.cores) if self.processes else _InProcess()

    def delta_engine(self) -> str:
        return "delta-rs"

    def work(self) -> dict[str, int]:
        """The peak memory of this process and of its largest worker."""
        import resource

        return {"driver_python_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}

    def read_source(self, plan: SourcePlan, kernel: ChunkKernel, outputs: dict[str, pa.Schema]) -> None:
        """Pass 1: every task of `plan` through `kernel`."""
        self._all([(chunk_task, (plan, task, index, kernel, outputs, self.layout))
                   for index, task in enumerate(plan.reads)], "reading the source (tasks)")

    def by_partition(self, stage: str, inputs: tuple[Staged, ...], kernel: PartitionKernel,
                     outputs: dict[str, pa.Schema]) -> None:
        """Pass 2 or 3: each group's rows of `inputs`, partition by partition, through `kernel`; its outputs
        written as stage `stage`'s."""
        self._all([(partition_task, (stage, group, inputs, kernel, outputs, self.layout))
                   for group in range(self.layout.groups)], f"{stage} (groups of partitions)")

    def _all(self, tasks: list[tuple[Callable, tuple]], label: str) -> None:
        """Run `tasks` (their progress on a terminal, as `label`); the first failure is raised. A worker that dies
        (killed by the system when memory runs out) fails the run with one line, where a process pool that
        replaces it would wait forever."""
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        from jobs.runtime.progress import Progress

        try:
            with Progress(label, len(tasks)) as progress:
                for future in as_completed([self._pool.submit(fn, *args) for fn, args in tasks]):
                    future.result()
                    progress.step()
        except BrokenProcessPool:
            raise RuntimeError("a worker process died (out of memory? see the system log); "
                               "try --workers 1, or --engine spark on a cluster") from None

    def close(self) -> None:
        """Stop the workers (finished, or the run failed: they must not write into a staging area it removes)."""
        if self._pool is not None:
            self._pool.stop()
            self._pool = None


class _Workers:
    """`cores` forked worker processes that never collect this process's garbage: a worker's garbage collector
    would finalise what this process left in reference cycles, and some objects must not be finalised in a copy
    (a Kafka client's handle, whose threads the fork did not copy: the worker crashes). So the garbage is
    collected here first, and what is left is frozen (gc.freeze: never examined by a collection, in the
    workers' copies either) while they fork, all at once."""

    def __init__(self, cores: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self._executor = ProcessPoolExecutor(cores, multiprocessing.get_context("fork"), initializer=_start_worker)
        gc.collect()
        gc.freeze()
        try:
            self._executor.submit(int).result()  # forks every worker now, the garbage frozen
        finally:
            gc.unfreeze()

    def submit(self, fn: Callable, *args: Any) -> Any:
        return self._executor.submit(fn, *args)

    def stop(self) -> None:
        """End the workers at once, whatever they are doing."""
        processes = list(getattr(self._executor, "_processes", {}).values())  # the executor's own list
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()


class _InProcess:
    """The workers' `submit`, run at once in this process."""

    def submit(self, fn: Callable, *args: Any) -> Any:
        from concurrent.futures import Future

        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # raised by result(), as a worker's would be
            done.set_exception(e)
        return done

    def stop(self) -> None:
        pass


def _start_worker() -> None:
    """Ctrl-C reaches the whole process group: the run stops its workers itself (`close`), without their
    tracebacks. And a worker keeps the memory it frees (`keep_freed_memory`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_freed_memory()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory this process frees for its next allocations: by default it unmaps
    every large block when freed, so each numpy temporary of a batch is fresh memory again, paid for in page
    faults (docs/performance.md). Elsewhere than glibc this does nothing."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    for parameter, value in ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20)):
        mallopt(parameter, value)
