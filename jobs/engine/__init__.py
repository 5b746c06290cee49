"""Who runs the kernel (jobs.replay, jobs.derive): a pool of local processes or Spark, chosen in one place
(`choose_runner`). The rules are the same functions either way; a runner only moves data between them, keeping
a run's outputs where jobs.engine.stages lays them out.
"""
from __future__ import annotations

import os
from typing import Any


def choose_runner(cfg: Any, spark: Any = None) -> Any:
    """The runner of a rebuild, decided here and nowhere else (--engine):
    * `local`: a pool of this machine's processes, no JVM; it reads local sources only;
    * `spark`: Spark's tasks, on whatever cluster the session runs (spark-submit, Databricks, a notebook);
    * `auto` (the default): Spark when a launcher started this process (spark-submit, Databricks, Spark
      Connect), when a session is handed over (`spark`), or when the source is on a remote filesystem; the
      local pool otherwise (a command line on a laptop, a CI box, a scheduler's container)."""
    engine = cfg.engine
    if engine == "auto":
        engine = "spark" if spark is not None or launched_by_spark() or not is_local(cfg.source) else "local"
    if engine == "local":
        if not is_local(cfg.source):
            from jobs.errors import BadInput

            raise BadInput(f"--engine local: --source {cfg.source} is not on this machine (use --engine spark)")
        from jobs.engine.local import LocalRunner

        workers = local_cores() if cfg.workers is None else cfg.workers
        return LocalRunner(max(workers, 1), processes=workers > 0)
    from jobs.engine.spark import SparkRunner

    return SparkRunner(spark, cfg)


def launched_by_spark() -> bool:
    """spark-submit (its JVM started this Python), Databricks or a Spark Connect client."""
    return any(k in os.environ for k in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "DATABRICKS_RUNTIME_VERSION"))


def is_local(source: Any) -> bool:
    """Every record of `source` can be read by a process of this machine."""
    return not (source.kind == "parquet" and "://" in source.location)


def local_cores() -> int:
    return len(os.sched_getaffinity(0))
