"""How a JVM offsetlake starts compiles, by the input's size (jobs.runtime.session)."""
from __future__ import annotations

import re
import shutil
import subprocess

from jobs.runtime.session import QUICK_COMPILER_BYTES, SMALL_INPUT_BYTES, compile_settings, is_small

QUICK = ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"]


def test_a_small_input_gets_a_jvm_with_the_quick_compiler_only():
    assert is_small(0) and is_small(SMALL_INPUT_BYTES - 1)
    assert compile_settings(SMALL_INPUT_BYTES - 1) == (QUICK, {})


def test_a_medium_input_gets_the_quick_compiler_and_huge_methods():
    for size in (SMALL_INPUT_BYTES, QUICK_COMPILER_BYTES - 1):
        assert not is_small(size)
        assert compile_settings(size) == (["-XX:-DontCompileHugeMethods", *QUICK],
                                          {"spark.sql.codegen.hugeMethodLimit": "65535"})


def test_the_quick_compiler_keeps_the_tiered_code_cache():
    """C1 alone makes HotSpot size its code cache for a client (48 MB), which huge compiled methods filled (a
    rebuild died: "Out of space in CodeCache"): the JVM these flags start keeps 240 MB."""
    flags, _ = compile_settings(SMALL_INPUT_BYTES)
    java = shutil.which("java") or "java"
    out = subprocess.run([java, *flags, "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True,
                         check=True).stdout
    size = int(re.search(r"\bReservedCodeCacheSize\s*=\s*(\d+)", out).group(1))
    assert size == 240 << 20
    quick_only = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-XX:+PrintFlagsFinal", "-version"],
                                capture_output=True, text=True, check=True).stdout
    assert int(re.search(r"\bReservedCodeCacheSize\s*=\s*(\d+)", quick_only).group(1)) < size


def test_a_large_or_unknown_input_gets_a_jvm_that_compiles_huge_methods():
    for size in (QUICK_COMPILER_BYTES, 10 * QUICK_COMPILER_BYTES, None):  # None: a cluster or a remote dump
        assert not is_small(size)
        # Spark's own hugeMethodLimit again: the JVM compiles whole-stage methods of any size, with both compilers.
        flags, settings = compile_settings(size)
        assert flags == ["-XX:-DontCompileHugeMethods"] and settings == {"spark.sql.codegen.hugeMethodLimit": "65535"}


def test_the_cores_of_a_local_jvm_are_known_before_it_starts(monkeypatch):
    """A local dump's reduction starts before the JVM (jobs.sources.early_reduction) only when this process will
    start a local JVM of its own: it needs the master's cores, and no launcher or running JVM owns the work."""
    import os

    import jobs.runtime.session as session
    from pyspark import SparkContext

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    for master, cores in (("local[*]", len(os.sched_getaffinity(0))), ("local[3]", 3), ("local", 1),
                          ("local[2,4]", 2), ("spark://host:7077", None), ("yarn", None)):
        monkeypatch.setattr(session, "defaults", lambda master=master: {"spark": {"spark.master": master}})
        assert session.starts_local_jvm() == cores, master
    monkeypatch.setattr(session, "defaults", lambda: {"spark": {"spark.master": "local[*]"}})
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4040")  # spark-submit's JVM
    assert session.starts_local_jvm() is None
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    monkeypatch.setattr(SparkContext, "_gateway", object())  # a session this process already runs
    assert session.starts_local_jvm() is None


def test_a_dump_reduced_before_the_jvm_gets_the_quick_compiler_whatever_its_size():
    """Its tasks leave the JVM about a row per key (jobs.sources.early_reduction): C2 would only compile Spark."""
    for size in (QUICK_COMPILER_BYTES, 10 * QUICK_COMPILER_BYTES):
        assert compile_settings(size, reduced=True) == (["-XX:-DontCompileHugeMethods", *QUICK],
                                                        {"spark.sql.codegen.hugeMethodLimit": "65535"})
