"""How a JVM offsetlake starts compiles, by the input's size (jobs.session)."""
from __future__ import annotations

from jobs.session import QUICK_COMPILER_BYTES, SMALL_INPUT_BYTES, compile_settings, is_small


def test_a_small_input_gets_a_jvm_with_the_quick_compiler_only():
    assert is_small(0) and is_small(SMALL_INPUT_BYTES - 1)
    assert compile_settings(SMALL_INPUT_BYTES - 1) == (["-XX:TieredStopAtLevel=1"], {})


def test_a_medium_input_gets_the_quick_compiler_and_huge_methods():
    for size in (SMALL_INPUT_BYTES, QUICK_COMPILER_BYTES - 1):
        assert not is_small(size)
        assert compile_settings(size) == (["-XX:-DontCompileHugeMethods", "-XX:TieredStopAtLevel=1"],
                                          {"spark.sql.codegen.hugeMethodLimit": "65535"})


def test_a_large_or_unknown_input_gets_a_jvm_that_compiles_huge_methods():
    for size in (QUICK_COMPILER_BYTES, 10 * QUICK_COMPILER_BYTES, None):  # None: a cluster or a remote dump
        assert not is_small(size)
        # Spark's own hugeMethodLimit again: the JVM compiles whole-stage methods of any size, with both compilers.
        flags, settings = compile_settings(size)
        assert flags == ["-XX:-DontCompileHugeMethods"] and settings == {"spark.sql.codegen.hugeMethodLimit": "65535"}
