"""Shared fixtures. Spark is imported lazily so the codec tests never load it."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

SHARED_TESTDATA = Path(__file__).resolve().parents[1].parent / "shared" / "testdata"


@pytest.fixture(scope="session")
def spark():
    from jobs.runtime.session import get_spark

    session = get_spark()
    session.conf.set("spark.sql.shuffle.partitions", "2")  # tiny inputs: fewer tasks, faster tests
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _release_cached_frames(request):
    """rebuild() caches its winners; pipeline.run releases them, tests that call rebuild() directly do not.

    Released per module, not per test: a module's shared scenario frames have plans that use those caches.
    """
    yield
    if "pyspark" in sys.modules:  # never import Spark for the codec tests
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.catalog.clearCache()


@pytest.fixture(scope="session")
def shared_testdata() -> Path:
    if not SHARED_TESTDATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_TESTDATA} (it sits beside the checkout in CI)")
    return SHARED_TESTDATA


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory):
    """The wheel and a fresh virtualenv holding it alone (tests/wheel_env.py): built once per test run, shared
    by the tests that run the installed package, across xdist workers too."""
    pytest.importorskip("build", reason="`build` is a test extra: pip install -e '.[test]'")
    from wheel_env import wheel_env

    return wheel_env(tmp_path_factory)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone master and two workers on 127.0.0.1, from pyspark's jars (tests/cluster.py), shared by
    the tests that need it and stopped at the end of the session; a failing test shows its logs."""
    from cluster import MASTER_PORT, StandaloneCluster, java_missing, port_missing

    reason = java_missing() or port_missing()
    if reason:
        pytest.skip(f"no Spark standalone cluster: {reason}")
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    if cluster.port != MASTER_PORT:
        warnings.warn(f"the test cluster's {cluster.note}", stacklevel=1)
    yield cluster
    cluster.stop()
    print(f"\nspark standalone cluster: started in {cluster.started_s:.1f}s; {cluster.memory_report()}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that uses the Spark cluster shows the tail of its master's, workers' and executors' logs."""
    report = yield
    if report.failed and "spark_cluster" in getattr(item, "fixturenames", ()):
        from cluster import RUNNING

        for cluster in RUNNING:
            report.sections.append(("Spark standalone cluster logs", cluster.logs()))
    return report


# The modules that take long, longest first (a standalone cluster, a wheel built and spark-submitted, an S3
# server, then those of half a minute or more): with `--dist loadfile` each xdist worker then ends the run on
# short modules instead of one worker finishing a long one alone (pyproject: --no-loadscope-reorder, or xdist
# would order the modules by their number of tests).
LONG_MODULES = ("tests/cli/test_cluster.py", "tests/cli/test_wheel.py", "tests/lake/test_object_store.py",
                "tests/lake/test_resume.py", "tests/cli/test_kafka.py", "tests/tools/test_sample.py",
                "tests/replay/test_reference_runs.py", "tests/cli/test_whole_process.py",
                "tests/lake/test_archive.py", "tests/sources/test_segments_source.py",
                "tests/cli/test_consistent_runs.py", "tests/cli/test_snapshots_catalog.py",
                "tests/replay/test_reduction.py", "tests/tools/test_bench.py", "tests/replay/test_scenarios.py",
                "tests/replay/test_modern_groups.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        module = item.nodeid.split("::")[0]
        return next((i for i, name in enumerate(LONG_MODULES) if module.endswith(name)), len(LONG_MODULES))

    items.sort(key=rank)
