"""Consumer lag: committed offsets against topic end offsets (as kafka-consumer-groups.sh computes), and the same
lag in time, the produce rate and the time to catch up, from the end-offset history (contract: consumer_lag,
added columns). The consume rate comes from the replay (jobs.replay.history.consume_rates)."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, epoch_us, known, numbers
from jobs.base.tables import conform
from jobs.derive.end_offsets import Snapshots

# 15 minutes: 180 commits at the Java consumer's default auto.commit.interval.ms (5 s), so a rate is an average
# over many commits rather than the last two; three end-offset snapshots when rebuilds run every 5 minutes
# (kafka-lag-exporter's lookup table spans 30 minutes at its default 30 s polling); and short enough to be the
# rate of now, not of the day. --rate-window-minutes changes it.
RATE_WINDOW_MS = 15 * 60_000


def consumer_lag(committed: pa.Table, snapshots: Snapshots, as_of: datetime | None, rates: pa.Table | None,
                 rate_window_ms: int = RATE_WINDOW_MS, progress: str = "commit") -> pa.Table:
    """One row (consumer_lag) per committed offset whose topic-partition has a snapshot; lag may be negative.

    `committed` has group_id, topic, partition, committed_offset, as_of (committed_offsets). `snapshots` is the
    end-offset history read at `as_of` (Snapshots.of(history, as_of)); end offsets as read this run become
    history first (jobs.derive.end_offsets.history_rows). Without their live columns (a file)
    end_offsets_fetched_at, log_start_offset, below_log_start and records_lost are null (unknown) unless a
    snapshot up to it has a log start.

    With `as_of`, lag is measured there: the end offsets are the newest snapshot observed at or before it and
    nothing later is read. Without it (the call of a single snapshot, read with as_of None) the snapshot given
    is current whenever it was taken (a live fetch comes after the rebuild's as_of), and times are measured at
    each committed row's own as_of.

    `rates` has each offset's consume_rate (CONSUME_RATE_SCHEMA) over the rate window; None: unknown.
    `progress` says where committed_offset comes from: `commit`, or a share group's `share_start_offset`
    (jobs.replay.share_state.share_lag_rows), whose lag is end offset - start offset, less the records
    above it already delivered when the state counts them (`delivery_complete_count`).
    produce_rate is over the same window (as_of - rate_window_ms, as_of]; see lag_in_time and catch_up.
    """
    at_us = None if as_of is None else epoch_us(as_of)
    if snapshots.as_of_us != at_us:
        raise ValueError(f"end offsets read at {snapshots.as_of_us} µs, lag measured at {at_us}")
    where = snapshots.find(committed)
    rows = pa.array(np.flatnonzero(where >= 0))  # an inner join: no end offsets, no lag
    committed, where = committed.take(rows), where[where >= 0]
    offset, has_offset = numbers(committed.column("committed_offset")), known(committed.column("committed_offset"))
    measured = committed.column("as_of").cast(TIMESTAMP)
    if at_us is None:
        at, has_at = numbers(measured.cast(pa.int64())).astype(np.float64), known(measured)
    else:
        at, has_at = np.full(committed.num_rows, float(at_us)), np.ones(committed.num_rows, bool)
    current = snapshots.table.take(pa.array(snapshots.newest(where)))
    end, has_end = numbers(current.column("log_end_offset")), known(current.column("log_end_offset"))
    lag, has_lag = end - offset, has_end & has_offset
    if "delivery_complete_count" in committed.column_names:  # a share partition's (jobs.replay.share_state)
        # KIP-1226 (4.2+): records at or above the start offset whose delivery completed are not lag; a state
        # written before (-1, unknown) is measured from the start offset alone.
        lag = lag - np.maximum(numbers(committed.column("delivery_complete_count")), 0)
    start, has_start = snapshots.log_start(where)
    lost, has_lost = records_lost(offset, has_offset, start, has_start)
    # Records retention deleted are not waiting: the oldest one that is starts at the log start.
    passed, has_passed = snapshots.passed_at(where, offset + lost)
    seconds, has_seconds = lag_in_time(passed, has_passed & has_offset, lag - lost, has_lag, at, has_at)
    consume, has_consume = _consume_rates(committed, rates)
    produce, has_produce = snapshots.produce_rate(where, at - rate_window_ms * 1000.0, at)
    has_produce &= has_at
    catch, has_catch = catch_up(lag, has_lag, consume, has_consume, produce, has_produce)
    columns = {
        **{c: committed.column(c) for c in ("group_id", "topic", "partition", "committed_offset")},
        "log_end_offset": current.column("log_end_offset"),
        "lag": pa.array(lag, mask=~has_lag),
        "as_of": measured,
        "lag_seconds": pa.array(seconds, mask=~has_seconds),
        "consume_rate": pa.array(consume, mask=~has_consume),
        "produce_rate": pa.array(produce, mask=~has_produce),
        "catch_up_seconds": pa.array(catch, mask=~has_catch),
        "end_offsets_fetched_at": current.column("fetched_at"),
        "log_start_offset": pa.array(start, mask=~has_start),
        # Retention deleted what this offset points at: the consumer will reset (auto.offset.reset).
        "below_log_start": pa.array(offset < start, mask=~(has_start & has_offset)),
        "records_lost": pa.array(lost, mask=~has_lost),
        "progress": pa.repeat(pa.scalar(progress, pa.string()), committed.num_rows),
    }
    return conform(columns, "consumer_lag")


def _consume_rates(rows: pa.Table, rates: pa.Table | None) -> tuple[np.ndarray, np.ndarray]:
    """The consume rate of each row's offset (group_id, topic, partition): a left join on `rates`."""
    if rates is None:
        return np.zeros(rows.num_rows), np.zeros(rows.num_rows, bool)
    keys = ("group_id", "topic", "partition")
    rate_of = dict(zip(zip(*(rates.column(c).to_pylist() for c in keys)), rates.column("consume_rate").to_pylist()))
    found = pa.array([rate_of.get(k) if None not in k else None  # a null never joins
                      for k in zip(*(rows.column(c).to_pylist() for c in keys))], pa.float64())
    return pc.fill_null(found, 0.0).to_numpy(), known(found)


def records_lost(offset: np.ndarray, has_offset: np.ndarray, start: np.ndarray, has_start: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Records retention deleted before the group read them: log start - committed offset when positive, 0 when
    not (0 too where the log start is unknown, with known False: the caller's sums stay whole)."""
    has = has_offset & has_start
    return np.where(has, np.maximum(start - offset, 0), 0), has


def lag_in_time(passed: np.ndarray, has_passed: np.ndarray, lag: np.ndarray, has_lag: np.ndarray, at: np.ndarray,
                has_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds (with whether known) from when the log end passed the committed offset (Snapshots.passed_at) to
    `at` (epoch µs, doubles): how old the oldest unconsumed record is, interpolated from the snapshots as
    kafka-lag-exporter does. 0 when the consumer is at or past the log end; null, never NaN, when no two
    snapshots bracket the committed offset."""
    caught_up = has_lag & (lag <= 0)
    # The log end may have passed the offset only after `at` (a snapshot given without as_of): nothing unread
    # then. A row without as_of gets 0 too: Spark's greatest skipped the null.
    behind = np.where(has_at, np.maximum((at - passed) / 1e6, 0.0), 0.0)
    return np.where(caught_up, 0.0, behind), caught_up | has_passed


def catch_up(lag: np.ndarray, has_lag: np.ndarray, consume: np.ndarray, has_consume: np.ndarray, produce: np.ndarray,
             has_produce: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds until the consumer reaches the log end at today's rates: lag / (consume - produce) when the
    consumer gains on the producers, else null (it never catches up, or a rate is unknown). A consumer at or
    past the log end needs 0 (so does an unknown lag: Spark's greatest skipped the null)."""
    gain = consume - produce
    gains = has_consume & has_produce & (gain > 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # where it does not gain: not read
        return np.where(has_lag, np.maximum(lag, 0), 0).astype(np.float64) / gain, gains
