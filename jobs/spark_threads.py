"""Threads that submit Spark jobs beside the run's own: a rebuild's jobs are small, and planning and scheduling
each is one driver thread's work, so independent ones (the group fold beside the offsets, the tables) run at
once and keep a second core busy."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from pyspark.sql import SparkSession

T = TypeVar("T")
JOB_GROUP = "spark.jobGroup.id"


class SparkThreads(ThreadPoolExecutor):
    """A thread pool whose tasks run with the submitting thread's Spark job group (jobs.metrics.SparkWork counts
    a run's jobs by it; a new thread has none)."""

    def __init__(self, spark: SparkSession, threads: int, name: str) -> None:
        super().__init__(threads, thread_name_prefix=name)
        self.context = spark.sparkContext

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        group = self.context.getLocalProperty(JOB_GROUP)

        def run() -> T:
            self.context.setLocalProperty(JOB_GROUP, group)
            return fn(*args, **kwargs)

        return super().submit(run)
