"""Small helpers over Arrow columns, written once: every room of the flow reads columns as numpy the same way."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's `timestamp`, and every record timestamp of the replay


def mask(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean column as numpy, null as False."""
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)


def numbers(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """An integer column as int64 numpy, `fill` where null."""
    return np.asarray(pc.fill_null(column, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp column as epoch microseconds (int64 numpy), 0 where null."""
    return numbers(column.cast(pa.int64()))
