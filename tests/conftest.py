"""Shared fixtures. Spark is imported lazily so the codec tests never load it."""
from __future__ import annotations

import sys
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
