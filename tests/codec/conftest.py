"""Fixtures for the codec tests: the shared test data, read in place (tests skip when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from codec_testdata import load_vectors, require_testdata


@pytest.fixture(scope="session")
def testdata() -> Path:
    """The ../shared/testdata folder; skips with the reason when it is not there."""
    return require_testdata()


@pytest.fixture(scope="session")
def vectors(testdata: Path):
    """``vectors("burrow.jsonl")`` -> the vectors of that file."""
    return load_vectors
