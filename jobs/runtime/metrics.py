"""How much Spark work a rebuild takes: jobs, stages and tasks (a count is deterministic, a time is not),
and the driver's peak memory. Reported in the run summary and by `offsetlake bench`."""
from __future__ import annotations

import resource
import uuid
from pathlib import Path

from pyspark.sql import SparkSession


class SparkWork:
    """Tags every Spark job started from this thread with one job group, and counts them afterwards
    from Spark's status tracker (which keeps spark.ui.retainedJobs / retainedStages of them)."""

    def __init__(self, spark: SparkSession, description: str) -> None:
        self.spark = spark
        self.group = f"offsetlake-{uuid.uuid4().hex[:12]}"
        spark.sparkContext.setJobGroup(self.group, description)

    def counts(self) -> dict[str, int]:
        tracker = self.spark.sparkContext.statusTracker()
        jobs = tracker.getJobIdsForGroup(self.group)
        stages = tasks = 0
        for job_id in jobs:
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None and stage.numCompletedTasks > 0:  # skipped stages ran nothing
                    stages += 1
                    tasks += stage.numCompletedTasks
        return {"spark_jobs": len(jobs), "spark_stages": stages, "spark_tasks": tasks}


def peak_rss_mb(spark: SparkSession) -> dict[str, int]:
    """Peak resident memory of this Python driver process and, when it runs here (local mode), its JVM."""
    python = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    out = {"driver_python_peak_mb": python}
    try:
        pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # noqa: SLF001
        status = Path(f"/proc/{pid}/status").read_text()
        hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        out["driver_jvm_peak_mb"] = int(hwm.split()[1]) // 1024
    except (OSError, StopIteration, Exception):  # not local, or no /proc: only the Python figure
        pass
    return out
