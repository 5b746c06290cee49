"""What the run summary counts of the records, and which record timestamps are implausible.

Counts are taken per coordinator partition, after duplicates are dropped, from rows that may stand for several
records each (jobs.replay.reduction: `records`), and summed by the runner (`total`).

A timestamp far in the future (a broker clock gone wrong, a corrupt batch) would move the default as_of by
years and hide the whole log behind it: records more than FUTURE_SLACK after the moment the run started are
kept out of the default as_of and reported. Records older than Kafka itself are reported too.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, epoch_us, mask, numbers
from offsets_codec import REGISTRY
from offsets_codec.layout import RecordType
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

FUTURE_SLACK = timedelta(days=1)
KAFKA_EPOCH = datetime(2011, 1, 1, tzinfo=timezone.utc)  # Kafka's first release: no record is older
COUNT_SCHEMA = pa.schema([("record_type", pa.int16()), ("ok", pa.bool_()), ("count", pa.int64()),
                          ("after", pa.int64()), ("transactional", pa.int64()), ("newest", TIMESTAMP)])
# The moments a chunk's records span (jobs.replay.chunk): the newest plausible one, and the implausible ones.
MOMENT_SCHEMA = pa.schema([("newest", TIMESTAMP), ("future", pa.int64()), ("past", pa.int64()),
                           ("earliest_implausible", TIMESTAMP), ("latest_implausible", TIMESTAMP)])


def count_rows(rows: pa.Table, as_of_us: int) -> pa.Table:
    """Per (record type, no error): records, those after as_of, transactional ones (commits in a transaction and
    markers), the newest timestamp (COUNT_SCHEMA). `rows`: checked rows with `records`."""
    weight = rows.column("records")
    stamp = rows.column("newest_timestamp")
    late = mask(pc.greater(rows.column("record_timestamp"), pa.scalar(as_of_us, TIMESTAMP)))
    transactional = mask(pc.not_equal(rows.column("producer_id"), NO_PRODUCER)) | \
        mask(pc.is_valid(rows.column("transaction_marker")))
    zero = pa.scalar(0, pa.int64())
    table = pa.table({
        "record_type": rows.column("record_type"), "ok": pc.is_null(rows.column("error")), "count": weight,
        "after": pc.if_else(pa.array(late), weight, zero),
        "transactional": pc.if_else(pa.array(transactional), weight, zero), "newest": stamp})
    totals = table.group_by(["record_type", "ok"], use_threads=False).aggregate(
        [("count", "sum"), ("after", "sum"), ("transactional", "sum"), ("newest", "max")])
    return totals.rename_columns([c.rsplit("_", 1)[0] if c.endswith(("_sum", "_max")) else c
                                  for c in totals.column_names]).select(COUNT_SCHEMA.names).cast(COUNT_SCHEMA)


def moments(records: pa.Table, started: datetime) -> pa.Table:
    """One row: the newest plausible timestamp of `records`, how many lie after `started` + FUTURE_SLACK or
    before KAFKA_EPOCH, and the span of those (MOMENT_SCHEMA)."""
    stamp = numbers(records.column("record_timestamp").cast(pa.int64()))
    known = mask(pc.is_valid(records.column("record_timestamp")))
    future = known & (stamp > epoch_us(started + FUTURE_SLACK))
    past = known & (stamp < epoch_us(KAFKA_EPOCH))
    plausible = known & ~future
    odd = stamp[future | past]

    def moment(values: np.ndarray, pick) -> list:
        return [int(pick(values))] if len(values) else [None]

    return pa.table({"newest": pa.array(moment(stamp[plausible], np.max), pa.int64()).cast(TIMESTAMP),
                     "future": [int(future.sum())], "past": [int(past.sum())],
                     "earliest_implausible": pa.array(moment(odd, np.min), pa.int64()).cast(TIMESTAMP),
                     "latest_implausible": pa.array(moment(odd, np.max), pa.int64()).cast(TIMESTAMP)},
                    schema=MOMENT_SCHEMA)


def future_cutoff(started: datetime) -> int:
    """The timestamp (epoch µs) after which a record is from the future for a run started at `started`."""
    return epoch_us(started + FUTURE_SLACK)


def total(counts: pa.Table, registry: Mapping[int, RecordType] = REGISTRY) -> dict[str, Any]:
    """The run summary's counts from every partition's COUNT_SCHEMA rows, their types named by `registry`."""
    by_type: dict[str, int] = {}
    read = decoded = after = transactional = 0
    for r in counts.to_pylist():
        read += r["count"]
        transactional += r["transactional"] or 0
        if r["ok"]:
            decoded += r["count"]
            name = (registry[r["record_type"]].name if r["record_type"] in registry
                    else "TransactionMarker" if r["record_type"] is None else str(r["record_type"]))
            by_type[name] = by_type.get(name, 0) + r["count"]
            after += r["after"] or 0
    modern = sum(n for name, n in by_type.items() if _family(name) in ("consumer", "share", "streams"))
    return {"records_read": read, "records_decoded": decoded, "records_quarantined": read - decoded,
            "records_after_as_of": after, "transactional_records": transactional,
            "records_by_type": dict(sorted(by_type.items())), "modern_group_records": modern}


def _family(name: str) -> str | None:
    return next((rt.group_family for rt in REGISTRY.values() if rt.name == name), None)
