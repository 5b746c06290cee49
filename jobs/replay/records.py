"""Offsets-topic records in the coordinator's terms: the one vocabulary of the replay.

Every source gives the contract's raw columns (key, value, partition, offset, timestamp, batch metadata when it
has them); `records` names them as the coordinator speaks of them (coordinator partition, record offset) and
fills what a source without batch metadata lacks: then no record is transactional and none is a marker.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

# The years a timestamp can hold (1-9999: Delta's, Python's), in epoch milliseconds.
MIN_MS, MAX_MS = -62135596800000, 253402300799999
RECORD_SCHEMA = pa.schema([
    ("coordinator_partition", pa.int32()),
    ("record_offset", pa.int64()),
    ("record_timestamp", TIMESTAMP),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("producer_id", pa.int64()),  # NO_PRODUCER (-1): not transactional
    ("producer_epoch", pa.int16()),
    ("is_control", pa.bool_()),  # a transaction marker (COMMIT/ABORT), or a malformed control record
])
# The raw columns each record column comes from (the contract's input schema).
_RAW = {"coordinator_partition": "partition", "record_offset": "offset", "record_timestamp": "timestamp"}


def records(raw: pa.Table | pa.RecordBatch) -> pa.Table:
    """The contract's raw columns as RECORD_SCHEMA. A timestamp may be a timestamp (a naive one is UTC) or
    epoch milliseconds; batch metadata a source lacks is filled in as "not transactional, not a marker"."""
    raw = raw if isinstance(raw, pa.Table) else pa.Table.from_batches([raw])
    n = raw.num_rows
    columns = []
    for field in RECORD_SCHEMA:
        name = _RAW.get(field.name, field.name)
        column = raw.column(name) if name in raw.column_names else None
        if field.name == "record_timestamp":
            column = record_timestamps(column)
        elif field.name == "producer_id":
            column = pa.array(np.full(n, NO_PRODUCER, np.int64)) if column is None else pc.fill_null(
                column.cast(pa.int64()), NO_PRODUCER)
        elif field.name == "is_control":
            column = pa.array(np.zeros(n, bool)) if column is None else pc.fill_null(column, False)
        elif column is None:
            column = pa.nulls(n, field.type)
        columns.append(column.cast(field.type))
    return pa.table(columns, schema=RECORD_SCHEMA)


def record_timestamps(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch milliseconds or timestamps of any unit (a naive one is UTC) as TIMESTAMP. One beyond the years a
    timestamp can hold (a producer's broken clock, a corrupt batch) is the first or last moment of them: it stays
    in the past or the future of every as_of, and every reader can read it."""
    unit = "ms" if pa.types.is_integer(column.type) else column.type.unit
    values = column.cast(pa.int64())
    if unit == "ns":  # always within the years; microseconds are what a timestamp keeps
        return pc.divide(values, 1000).cast(TIMESTAMP)
    per = {"s": 1_000_000, "ms": 1000, "us": 1}[unit]  # microseconds per unit
    low, high = MIN_MS * 1000 // per, (MAX_MS * 1000 + 999) // per
    clamped = pc.min_element_wise(pc.max_element_wise(values, low, skip_nulls=False), high, skip_nulls=False)
    return pc.multiply(clamped, per).cast(TIMESTAMP)
