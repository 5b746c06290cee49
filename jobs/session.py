"""The only place a SparkSession is built."""
from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from jobs.config import REPO_ROOT, defaults

log = logging.getLogger("offsetlake")


def get_spark() -> SparkSession:
    """Return the active session (spark-submit, Databricks) or start a local one from conf/.

    Settings already given by the launcher win over conf/offsetlake.toml: the builder only fills gaps.
    """
    # Python workers must run the interpreter that has offsets_codec and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder
    launcher_conf: set[str] = set()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit: its JVM already holds the --conf values. (Reading SparkConf in a plain
        # Python run would start the JVM before spark.driver.memory could be applied.)
        from pyspark import SparkConf

        launcher_conf = {k for k, _ in SparkConf().getAll()}
    settings = dict(defaults()["spark"])
    log4j = REPO_ROOT / "conf" / "log4j2.properties"
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
    for key, value in settings.items():
        if key not in launcher_conf:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # offsetlake reports failures itself, on one line; Spark's ERROR lines would repeat them as stack traces.
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def has_jvm_class(spark: SparkSession, name: str) -> bool:
    """True when the JVM can load `name` (e.g. Delta or the Kafka source were put on the classpath)."""
    try:
        loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()  # noqa: SLF001
        spark._jvm.java.lang.Class.forName(name, False, loader)  # noqa: SLF001
        return True
    except Exception:  # py4j raises Py4JJavaError wrapping ClassNotFoundException
        return False
