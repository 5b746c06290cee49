"""Who runs the kernel (jobs.replay, jobs.derive): a pool of local processes or Spark, chosen in one place
(`choose_runner`). The rules are the same functions either way; a runner only moves data between them, keeping
a run's outputs where jobs.engine.stages lays them out.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from jobs.engine.handoffs import Staged
    from jobs.engine.stages import ChunkKernel, PartitionKernel, StagingLayout
    from jobs.sources.plan import SourcePlan


class Runner(Protocol):
    """What a runner offers the pipeline: three passes of the kernel over a run's staging layout."""

    name: str  # local or spark, in the summary
    cores: int  # how many tasks run at once: the source's plan cuts about as many
    spark: "SparkSession | None"  # the session the sink's Delta writer may use (None: delta-rs)

    def groups(self, plan: "SourcePlan") -> int:
        """How many groups of coordinator partitions passes 2 and 3 split into (a task each)."""

    def attach(self, layout: "StagingLayout") -> None:
        """Get ready (start workers) for a run whose outputs `layout` lays out."""

    def delta_engine(self) -> str:
        """Who commits the tables: delta-rs, or Spark's Delta writer (jobs.lake.sink.delta_engine)."""

    def read_source(self, plan: "SourcePlan", kernel: "ChunkKernel", outputs: "dict[str, pa.Schema]") -> None:
        """Pass 1: every task of `plan` through `kernel`, its `outputs` written as stage chunks'."""

    def by_partition(self, stage: str, inputs: "tuple[Staged, ...]", kernel: "PartitionKernel",
                     outputs: "dict[str, pa.Schema]") -> None:
        """Pass 2 or 3: each group's rows of `inputs` through `kernel`, its `outputs` written as `stage`'s."""

    def close(self) -> None:
        """Stop what `attach` started (the run is over, or failed)."""

    def work(self) -> dict[str, int]:
        """The summary's figures of the work done (Spark jobs and tasks, peak memory)."""


def choose_runner(engine: str, workers: int | None, label: str, spark: "SparkSession | None" = None) -> Runner:
    """The runner of a rebuild, decided here and nowhere else (--engine):
    * `local`: a pool of this machine's processes, no JVM (a dump on an object store is read with pyarrow);
      `workers` of them (None: one per core; 0: this process);
    * `spark`: Spark's tasks, on whatever cluster the session runs (spark-submit, Databricks, a notebook), its
      jobs described as `label`;
    * `auto` (the default): Spark when a launcher started this process (spark-submit, Databricks, Spark
      Connect) or a session is handed over (`spark`); the local pool otherwise (a command line on a laptop,
      a CI box, a scheduler's container)."""
    if runner_name(engine, spark) == "local":
        from jobs.engine.local import LocalRunner

        workers = local_cores() if workers is None else workers
        return LocalRunner(max(workers, 1), processes=workers > 0)
    from jobs.engine.spark import SparkRunner

    return SparkRunner(spark, label)


def runner_name(engine: str, spark: "SparkSession | None" = None) -> str:
    """`local` or `spark`: which runner `choose_runner` gives."""
    if engine == "auto":
        return "spark" if spark is not None or launched_by_spark() else "local"
    return engine


class _NoPandas:
    """An import finder that says pandas is not installed (`without_pandas`)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r} (a local run does without it)", name=name)


def without_pandas() -> None:
    """Make this process do without pandas: pyarrow imports it at its first conversion of Python objects (to
    tell pandas objects apart), which is half a second of each run's start, and a run the local runner runs
    hands it none; nothing else of a local run needs it (pyspark's Arrow path does: Spark runs never call this).
    Called before anything converts; a process that has imported pandas keeps it."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def launched_by_spark() -> bool:
    """spark-submit (its JVM started this Python), Databricks or a Spark Connect client."""
    return any(k in os.environ for k in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "DATABRICKS_RUNTIME_VERSION"))


def local_cores() -> int:
    return len(os.sched_getaffinity(0))
