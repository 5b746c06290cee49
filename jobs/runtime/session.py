"""The only place a SparkSession is built.

A plain local run starts its own JVM here, and the JVM's output (its banner, Spark's logging, the Python
workers' stderr) goes to a log file in the system temp folder: the command line promises one stderr line
for an error. The `offsetlake: ` lines of offsetlake's own source tasks still reach stderr, as progress.
The file is removed at exit, or kept and named when a run fails (jobs.cli). With `--debug` (the
`offsetlake` logger at DEBUG) everything passes through instead. Under spark-submit or Databricks the
JVM is theirs, and nothing here touches its output.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Protocol

from pyspark.sql import SparkSession

from jobs.config import CONF_DIR, defaults
from jobs.runtime.jvm_archive import archive_flags

log = logging.getLogger("offsetlake")
TASK_LINE = b"offsetlake: "  # how jobs.sources.tasks' executor logger starts a line
_spark_log: Path | None = None  # the local JVM's output, when this process started it
_keep_spark_log = False


class Catalog(Protocol):
    """A catalog the caller brings to a session this process builds (jobs.lake.catalog.LocalCatalog): the session
    knows nothing of the tables it will hold."""

    def settings(self, launcher_settings: set[str]) -> dict[str, str]:
        """The Spark settings that open it, given the keys the launcher set (none: the launcher chose a catalog)."""

    def opened(self, spark: SparkSession) -> None:
        """Called once the session is built with `settings`."""


def get_spark(catalog: Catalog | None = None) -> SparkSession:
    """Return the active session (spark-submit, Databricks) or start a local one from conf/.

    Settings already given by the launcher win over conf/offsetlake.toml: the builder only fills gaps.
    `catalog`: the caller's catalog (jobs.lake.catalog.LocalCatalog), whose settings this process adds when it
    builds the session.
    """
    from pyspark import SparkConf, SparkContext

    # Python workers must run the interpreter that has offsets_codec and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder
    launcher_conf: set[str] = set()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit: its JVM already holds the --conf values. (Reading SparkConf in a plain
        # Python run would start the JVM before spark.driver.memory could be applied.) SparkConf() reads the
        # JVM's settings only once this process is connected to it; before that it is an empty Python dict,
        # and conf/offsetlake.toml's local[*] would replace spark-submit's --master.
        SparkContext._ensure_initialized()  # noqa: SLF001 - connects to spark-submit's JVM, starts nothing
        launcher_conf = {k for k, _ in SparkConf().getAll()}
    starts_jvm = _starts_jvm()
    settings = dict(defaults()["spark"])
    log4j = CONF_DIR / "log4j2.properties"
    # Spark's classes from this machine's class-data archive (jobs.runtime.jvm_archive).
    jvm_flags = archive_flags(settings) if starts_jvm else []
    settings["spark.driver.extraJavaOptions"] = " ".join([f"-Dlog4j2.configurationFile=file:{log4j}", *jvm_flags])
    catalog_settings = catalog.settings(launcher_conf) if catalog is not None else {}
    settings.update(catalog_settings)
    options = {key: value for key, value in settings.items() if key not in launcher_conf}
    for key, value in options.items():
        builder = builder.config(key, value)
    if starts_jvm:
        _start_local_context(options)  # the builder below takes this context, with the same settings
    spark = builder.getOrCreate()
    if catalog_settings:
        catalog.opened(spark)
    # In the log file, or asked for with --debug, Spark's warnings help. On a launcher's console offsetlake
    # reports failures itself, on one line, and Spark's ERROR stack traces would repeat them.
    shown = _spark_log is not None or log.isEnabledFor(logging.DEBUG)
    spark.sparkContext.setLogLevel("WARN" if shown else "FATAL")
    return spark


def _starts_jvm() -> bool:
    """No JVM yet (pyspark keeps the one it started after a session stops), nor one of a launcher or of a Spark
    Connect server: a session built now starts its own."""
    from pyspark import SparkContext

    launcher = "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_REMOTE" in os.environ
    return not launcher and SparkContext._gateway is None  # noqa: SLF001


def _start_local_context(options: dict[str, str]) -> None:
    """Launch the JVM as pyspark would (spark-submit with these settings), its output going to a log file."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setAll(list(options.items()))  # no JVM yet: plain values, passed as --conf
    if log.isEnabledFor(logging.DEBUG):
        SparkContext(conf=conf, gateway=launch_gateway(conf))
        return
    read_end, write_end = os.pipe()
    copier = _copy_jvm_output(os.fdopen(read_end, "rb"), _open_spark_log())
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": write_end, "stderr": write_end})
    except BaseException:
        os.close(write_end)
        copier.join(timeout=10)  # the launcher has exited: its last words belong in the log
        raise
    os.close(write_end)  # the JVM holds its own copy
    SparkContext(conf=conf, gateway=gateway)


def _open_spark_log() -> IO[bytes]:
    global _spark_log
    fd, name = tempfile.mkstemp(prefix="offsetlake-spark-", suffix=".log")
    _spark_log = Path(name)
    atexit.register(_remove_spark_log)
    return os.fdopen(fd, "wb")


def _copy_jvm_output(pipe: IO[bytes], spark_log: IO[bytes]) -> threading.Thread:
    """Copy the JVM's output into the log from a daemon thread (a pipe nobody reads would stall the JVM);
    offsetlake's task lines also go to the `offsetlake` logger (at INFO: the line does not say its level)."""

    def copy() -> None:
        with pipe, spark_log:
            for line in pipe:
                spark_log.write(line)
                spark_log.flush()
                if line.startswith(TASK_LINE):
                    log.info("%s", line[len(TASK_LINE):].decode(errors="replace").rstrip())

    thread = threading.Thread(target=copy, name="spark-output", daemon=True)
    thread.start()
    return thread


def keep_spark_log() -> Path | None:
    """The local JVM's log file, now kept after exit (for a failure report); None if this process started none."""
    global _keep_spark_log
    _keep_spark_log = True
    return _spark_log


def _remove_spark_log() -> None:
    if _spark_log is not None and not _keep_spark_log:
        _spark_log.unlink(missing_ok=True)
