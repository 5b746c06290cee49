"""Small helpers over Arrow columns, written once: every room of the flow reads columns as numpy the same way."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's `timestamp`, and every record timestamp of the replay
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def mask(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean column as numpy, null as False."""
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), dtype=bool)


def numbers(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """An integer column as int64 numpy, `fill` where null."""
    return np.asarray(pc.fill_null(column, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def known(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Where a column is not null, as numpy."""
    return np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), bool)


def micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp column as epoch microseconds (int64 numpy), 0 where null."""
    return numbers(column.cast(pa.int64()))


def utc(moment: datetime | None) -> datetime | None:
    """A moment with its zone: a naive one is UTC (the pipeline's, and the session time zone Spark ran in)."""
    return moment if moment is None or moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def epoch_us(moment: datetime) -> int:
    """A moment as epoch microseconds, exactly, unlike float seconds (a naive one is UTC)."""
    return (utc(moment) - EPOCH) // timedelta(microseconds=1)


def from_epoch_us(us: int) -> datetime:
    """Epoch microseconds as a UTC moment."""
    return EPOCH + timedelta(microseconds=int(us))


def same_as_previous(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per row from the second: equal to the row before it, two nulls being equal."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    after, before = values[1:], values[:-1]
    both_null = pc.and_(pc.is_null(after), pc.is_null(before))
    return np.asarray(pc.or_(pc.fill_null(pc.equal(after, before), False), both_null), dtype=bool)


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal keys starts in `keys` (sorted, or grouped): the first position of each."""
    return np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else np.zeros(0, np.int64)


def ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The integers of every [start, stop), one range after the other (an empty one where stop <= start)."""
    sizes = np.maximum(stops - starts, 0)
    return np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(sizes.sum())
