"""How a JVM offsetlake starts compiles, by the input's size (jobs.session)."""
from __future__ import annotations

from pathlib import Path

from jobs.session import SMALL_INPUT_BYTES, is_small, local_jvm_settings

LOG4J = Path("/conf/log4j2.properties")
LOGGING = "-Dlog4j2.configurationFile=file:/conf/log4j2.properties"


def test_a_small_input_gets_a_jvm_with_the_quick_compiler_only():
    assert is_small(0) and is_small(SMALL_INPUT_BYTES - 1)
    settings = local_jvm_settings(LOG4J, SMALL_INPUT_BYTES - 1)
    assert settings == {"spark.driver.extraJavaOptions": f"{LOGGING} -XX:TieredStopAtLevel=1"}


def test_a_large_or_unknown_input_gets_a_jvm_that_compiles_huge_methods():
    for size in (SMALL_INPUT_BYTES, 10 * SMALL_INPUT_BYTES, None):  # None: a cluster or a remote dump
        assert not is_small(size)
        settings = local_jvm_settings(LOG4J, size)
        assert settings["spark.driver.extraJavaOptions"] == f"{LOGGING} -XX:-DontCompileHugeMethods"
        # Spark's own default again: the JVM compiles whole-stage methods of any size.
        assert settings["spark.sql.codegen.hugeMethodLimit"] == "65535"
