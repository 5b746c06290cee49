"""Who runs the kernel (jobs.replay, jobs.derive): a pool of local processes or Spark, chosen in one place
(`choose_runner`). The rules are the same functions either way; a runner only moves data between them, keeping
a run's outputs where jobs.engine.stages lays them out.
"""
from __future__ import annotations

import os
from typing import Any


def choose_runner(cfg: Any, spark: Any = None) -> Any:
    """The runner of a rebuild, decided here and nowhere else (--engine):
    * `local`: a pool of this machine's processes, no JVM (a dump on an object store is read with pyarrow);
    * `spark`: Spark's tasks, on whatever cluster the session runs (spark-submit, Databricks, a notebook);
    * `auto` (the default): Spark when a launcher started this process (spark-submit, Databricks, Spark
      Connect) or a session is handed over (`spark`); the local pool otherwise (a command line on a laptop,
      a CI box, a scheduler's container)."""
    engine = cfg.engine
    if engine == "auto":
        engine = "spark" if spark is not None or launched_by_spark() else "local"
    if engine == "local":
        from jobs.engine.local import LocalRunner

        workers = local_cores() if cfg.workers is None else cfg.workers
        return LocalRunner(max(workers, 1), processes=workers > 0)
    from jobs.engine.spark import SparkRunner

    return SparkRunner(spark, cfg)


def launched_by_spark() -> bool:
    """spark-submit (its JVM started this Python), Databricks or a Spark Connect client."""
    return any(k in os.environ for k in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "DATABRICKS_RUNTIME_VERSION"))


def local_cores() -> int:
    return len(os.sched_getaffinity(0))
