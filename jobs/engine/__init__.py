"""Who runs the kernel (jobs.replay, jobs.derive): a pool of local processes or Spark, chosen in one place
(`choose_runner`). The rules are the same functions either way; a runner only moves data between them, keeping
a run's outputs where jobs.engine.stages lays them out.
"""
from __future__ import annotations

import os
import sys
from typing import Any


def choose_runner(cfg: Any, spark: Any = None) -> Any:
    """The runner of a rebuild, decided here and nowhere else (--engine):
    * `local`: a pool of this machine's processes, no JVM (a dump on an object store is read with pyarrow);
    * `spark`: Spark's tasks, on whatever cluster the session runs (spark-submit, Databricks, a notebook);
    * `auto` (the default): Spark when a launcher started this process (spark-submit, Databricks, Spark
      Connect) or a session is handed over (`spark`); the local pool otherwise (a command line on a laptop,
      a CI box, a scheduler's container)."""
    if runner_name(cfg, spark) == "local":
        from jobs.engine.local import LocalRunner

        workers = local_cores() if cfg.workers is None else cfg.workers
        return LocalRunner(max(workers, 1), processes=workers > 0)
    from jobs.engine.spark import SparkRunner

    return SparkRunner(spark, cfg)


def runner_name(cfg: Any, spark: Any = None) -> str:
    """`local` or `spark`: which runner `choose_runner` gives."""
    if cfg.engine == "auto":
        return "spark" if spark is not None or launched_by_spark() else "local"
    return cfg.engine


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
