"""Consumer lag: committed offsets against topic end offsets (as kafka-consumer-groups.sh computes), and the same
lag in time, the produce rate and the time to catch up, from the end-offset history (contract: consumer_lag,
added columns). The consume rate comes from the replay (jobs.replay.history.consume_rates)."""
from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from jobs.derive.end_offsets import Series, Snapshots, epoch_us
from jobs.lake.tables import TIMESTAMP, arrow_schema

# 15 minutes: 180 commits at the Java consumer's default auto.commit.interval.ms (5 s), so a rate is an average
# over many commits rather than the last two; three end-offset snapshots when rebuilds run every 5 minutes
# (kafka-lag-exporter's lookup table spans 30 minutes at its default 30 s polling); and short enough to be the
# rate of now, not of the day. --rate-window-minutes changes it.
RATE_WINDOW_MS = 15 * 60_000


def consumer_lag(committed: pa.Table, snapshots: Snapshots, as_of: datetime | None, rates: pa.Table | None,
                 rate_window_ms: int = RATE_WINDOW_MS) -> pa.Table:
    """One row (consumer_lag) per committed offset whose topic-partition has a snapshot; lag may be negative.

    `committed` has group_id, topic, partition, committed_offset, as_of (committed_offsets). `snapshots` is the
    end-offset history read at `as_of` (Snapshots.of(history, as_of)); end offsets as read this run become
    history first (jobs.derive.end_offsets.history_rows). Without their live columns (a file)
    end_offsets_fetched_at and below_log_start are null (unknown).

    With `as_of`, lag is measured there: the end offsets are the newest snapshot observed at or before it and
    nothing later is read. Without it (the call of a single snapshot, read with as_of None) the snapshot given
    is current whenever it was taken (a live fetch comes after the rebuild's as_of), and times are measured at
    each committed row's own as_of.

    `rates` has each offset's consume_rate (CONSUME_RATE_SCHEMA) over the rate window; None: unknown.
    produce_rate is over the same window (as_of - rate_window_ms, as_of]; see lag_in_time and catch_up.
    """
    at_us = None if as_of is None else epoch_us(as_of)
    if snapshots.as_of_us != at_us:
        raise ValueError(f"end offsets read at {snapshots.as_of_us} µs, lag measured at {at_us}")
    consumed = {} if rates is None else {
        key: rate for key, rate in zip(zip(*(rates.column(c).to_pylist() for c in ("group_id", "topic", "partition"))),
                                        rates.column("consume_rate").to_pylist())}
    groups, topics, partitions, offsets = (committed.column(c).to_pylist() for c in (
        "group_id", "topic", "partition", "committed_offset"))
    measured = committed.column("as_of").cast(TIMESTAMP)
    measured_us = measured.cast(pa.int64()).to_pylist() if at_us is None else [at_us] * committed.num_rows
    joined, newest, series = [], [], []
    for i, (topic, partition) in enumerate(zip(topics, partitions)):
        found = snapshots.series(topic, partition)
        if found is not None:  # an inner join: a partition without end offsets has no lag
            joined.append(i)
            newest.append(found.newest())
            series.append(found)
    schema = arrow_schema("consumer_lag")
    if not joined:
        return schema.empty_table()
    current = snapshots.table.take(pa.array(newest, pa.int64()))
    ends = current.column("log_end_offset").to_pylist()
    starts = current.column("log_start_offset").to_pylist()
    columns: dict[str, list] = {name: [] for name in (
        "committed_offset", "lag", "lag_seconds", "consume_rate", "produce_rate", "catch_up_seconds",
        "below_log_start")}
    for i, found, end, start in zip(joined, series, ends, starts):
        offset, at = offsets[i], measured_us[i]
        lag = None if end is None or offset is None else end - offset
        consume = consumed.get((groups[i], topics[i], partitions[i]))
        produce = None if at is None else found.rate(float(at) - rate_window_ms * 1000.0, float(at))
        columns["committed_offset"].append(offset)
        columns["lag"].append(lag)
        columns["lag_seconds"].append(lag_in_time(found, offset, lag, at))
        columns["consume_rate"].append(consume)
        columns["produce_rate"].append(produce)
        columns["catch_up_seconds"].append(catch_up(lag, consume, produce))
        # Retention deleted what this offset points at: the consumer will reset (auto.offset.reset).
        columns["below_log_start"].append(None if offset is None or start is None else offset < start)
    rows = pa.array(joined, pa.int64())
    out = {**{c: committed.column(c).take(rows) for c in ("group_id", "topic", "partition")},
           "as_of": measured.take(rows), "log_end_offset": current.column("log_end_offset"),
           "end_offsets_fetched_at": current.column("fetched_at"), "log_start_offset": current.column("log_start_offset"),
           **columns}
    return pa.table([pa.array(out[f.name], f.type) if isinstance(out[f.name], list) else out[f.name].cast(f.type)
                     for f in schema], schema=schema)


def lag_in_time(series: Series, offset: int | None, lag: int | None, at_us: int | None) -> float | None:
    """Seconds from when the log end passed the committed offset to `at_us`: how old the oldest unconsumed
    record is, interpolated from the snapshots as kafka-lag-exporter does (Series.passed_at). 0 when the
    consumer is at or past the log end; null, never NaN, when no two snapshots bracket the committed offset."""
    if lag is not None and lag <= 0:
        return 0.0
    passed = series.passed_at(offset)
    if passed is None or at_us is None:
        return None
    # The log end may have passed the offset only after `at` (a snapshot given without as_of): nothing unread then.
    return max((float(at_us) - passed) / 1e6, 0.0)


def catch_up(lag: int | None, consume_rate: float | None, produce_rate: float | None) -> float | None:
    """Seconds until the consumer reaches the log end at today's rates: lag / (consume - produce) when the
    consumer gains on the producers, else null (it never catches up, or a rate is unknown). A consumer at or
    past the log end needs 0 (so does an unknown lag: Spark's greatest skipped the null)."""
    if consume_rate is None or produce_rate is None:
        return None
    gain = consume_rate - produce_rate
    return float(max(lag, 0) if lag is not None else 0) / gain if gain > 0 else None
