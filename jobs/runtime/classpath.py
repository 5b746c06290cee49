"""What the JVM of a session can load: Delta's writer, Spark's Kafka source."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def has_jvm_class(spark: SparkSession, name: str) -> bool:
    """True when the JVM can load `name` (e.g. Delta or the Kafka source were put on the classpath)."""
    try:
        loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()  # noqa: SLF001
        spark._jvm.java.lang.Class.forName(name, False, loader)  # noqa: SLF001
        return True
    except Exception:  # py4j raises Py4JJavaError wrapping ClassNotFoundException
        return False
