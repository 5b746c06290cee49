"""Where the shared test data lives: ../shared/testdata beside the checkout (never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TESTDATA = Path(__file__).resolve().parents[2].parent / "shared" / "testdata"
MISSING = f"../shared/testdata not found: expected the shared test data at {TESTDATA}"


def require_testdata() -> Path:
    if not TESTDATA.is_dir():
        pytest.skip(MISSING)
    return TESTDATA


def load_vectors(name: str) -> list[dict]:
    path = require_testdata() / "vectors" / name
    if not path.is_file():
        pytest.skip(f"../shared/testdata not found: missing {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def vector_indexes(name: str) -> list[int]:
    """Indexes to parametrize over; [0] when the data is absent, so the test runs and skips with the reason."""
    path = TESTDATA / "vectors" / name
    if not path.is_file():
        return [0]
    return list(range(sum(1 for line in path.read_text().splitlines() if line.strip())))
