"""Burrow's consumer evaluation, offline (contract: group_status): each partition's window of recent commits
judged by Burrow's rules in Burrow's order (linkedin/Burrow core/internal/evaluator/caching.go,
calculatePartitionStatus), and each group by its worst partition.

A window is the last N commits of a (group, topic, partition) up to as_of (Burrow's storage `intervals`),
in log order, after the offset's last tombstone (jobs.replay.history.commit_windows). The lag at each commit
is the log end at the commit's time (Series.log_end_at: interpolated between the snapshots around it, else the
newest before it) minus the committed offset, never below zero (Burrow's storage clamps it too); unknown
before the history starts. Rules that need a lag are skipped where it is unknown; STOP and REWIND need only the
commits and as_of.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from jobs.derive.end_offsets import Series, Snapshots, epoch_us
from jobs.lake.tables import TIMESTAMP, arrow_schema

STATUS_WINDOW = 10  # Burrow's storage `intervals` default: commits kept per partition
ALLOWED_LAG = 0  # Burrow's evaluator `allowed-lag` default: a lag at or below it counts as none
# A partition's STOP, STALL or REWIND make its group ERR; the group is the worst of its partitions (Burrow's
# evaluateConsumerStatus: OK < WARN < ERR).
GROUP_STATUS = {"OK": "OK", "WARN": "WARN", "STOP": "ERR", "STALL": "ERR", "REWIND": "ERR"}
GROUP_LEVELS = ("OK", "WARN", "ERR")  # least to most severe


class Decision(NamedTuple):
    status: str
    rule: str


# calculatePartitionStatus's outcomes in its order; partition_status names the first whose test holds.
DECISIONS = (
    Decision("OK", "lag at as_of is within allowed-lag: never an error"),
    Decision("STOP", "no commit for longer than the window spans (as_of - newest commit > newest - oldest commit)"),
    Decision("REWIND", "a commit moved the offset back and no later commit came back to where it was"),
    Decision("OK", "lag at the window's commits unknown (no end-offset snapshot at or before them): "
                   "only STOP and REWIND checked"),
    Decision("OK", "lag was within allowed-lag at a commit in the window"),
    Decision("STALL", "lagging, and every commit in the window has the same offset"),
    Decision("WARN", "offsets advance but the lag never decreased across the window"),
    Decision("OK", "the lag decreased in the window"),  # none of the above
)


def group_status(windows: pa.Table, snapshots: Snapshots | None, as_of: datetime, window: int = STATUS_WINDOW,
                 allowed_lag: int = ALLOWED_LAG) -> pa.Table:
    """One row (group_status) per (group, topic, partition) of `windows` (COMMIT_WINDOW_SCHEMA: the offsets live
    at as_of, each with its last `window` commits in log order), judged at as_of. `snapshots` is the end-offset
    history read at as_of, or None: then no lag is known. `window` is Burrow's `intervals`, `allowed_lag` its
    evaluator's `allowed-lag`.

    Called once per coordinator partition: a group lives in exactly one, so the worst status among the rows
    given is the worst of all the group's partitions (group_status)."""
    at_us = epoch_us(as_of)
    if snapshots is not None and snapshots.as_of_us != at_us:
        raise ValueError(f"end offsets read at {snapshots.as_of_us} µs, judged at {at_us}")
    lists = windows.column("window").combine_chunks()
    sizes = pc.fill_null(lists.value_lengths(), 0).to_pylist()  # an offset without commits has no window
    points = lists.flatten()
    times = pc.struct_field(points, "committed_at").cast(TIMESTAMP).cast(pa.int64()).to_pylist()
    offsets = pc.struct_field(points, "committed_offset").to_pylist()
    keys = zip(*(windows.column(c).to_pylist() for c in ("group_id", "topic", "partition")))
    rows: dict[str, list] = {name: [] for name in arrow_schema("group_status").names}
    end = 0
    for (group, topic, partition), size in zip(keys, sizes):
        start, end = end, end + size
        if not size:
            continue
        series = snapshots.series(topic, partition) if snapshots is not None else None
        committed_at, committed = times[start:end], offsets[start:end]
        lags = [lag_at(series, t, o) for t, o in zip(committed_at, committed)]
        current_lag = current(series, committed[-1])
        decision = DECISIONS[partition_status(committed_at, committed, lags, series, current_lag, at_us, window,
                                              allowed_lag)]
        for name, value in (("group_id", group), ("topic", topic), ("partition", partition),
                            ("status", decision.status), ("rule", decision.rule), ("window_commits", size),
                            ("window_start", committed_at[0]), ("window_end", committed_at[-1]), ("lag", lags[-1]),
                            ("as_of", at_us), ("current_lag", current_lag),
                            ("complete", size / window),  # Burrow's Complete: how full the window is
                            ("window_offsets", committed), ("window_lags", lags)):
            rows[name].append(value)
    # The worst of the group's partitions: all of them are here (see the docstring).
    worst: dict[str, int] = {}
    for group, status in zip(rows["group_id"], rows["status"]):
        worst[group] = max(worst.get(group, 0), GROUP_LEVELS.index(GROUP_STATUS[status]))
    rows["group_status"] = [GROUP_LEVELS[worst[group]] for group in rows["group_id"]]
    schema = arrow_schema("group_status")
    return pa.table([pa.array(rows[f.name], pa.int64() if f.type == TIMESTAMP else f.type).cast(f.type)
                     for f in schema], schema=schema)


def lag_at(series: Series | None, committed_at: int | None, offset: int | None) -> int | None:
    """A commit's lag: the log end at its time minus its offset, 0 when the consumer is ahead (Burrow's
    storage: its broker offsets are periodic, so a commit may pass them); null when the log end then is
    unknown. (0 too for a commit without an offset, as Spark's greatest skipped the null.)"""
    end = series.log_end_at(committed_at) if series is not None else None
    if end is None:
        return None
    return max(end - offset, 0) if offset is not None else 0


def current(series: Series | None, newest_offset: int | None) -> int | None:
    """Burrow's CurrentLag: the newest log end at as_of minus the newest commit, 0 when ahead; null unknown."""
    end = series.newest_log_end() if series is not None else None
    return None if end is None or newest_offset is None else max(end - newest_offset, 0)


def partition_status(committed_at: list[int | None], offsets: list[int | None], lags: list[int | None],
                     series: Series | None, current_lag: int | None, at_us: int, intervals: int,
                     allowed_lag: int) -> int:
    """The index in DECISIONS of one partition's verdict, from its window (the commits' times, offsets and
    lags, oldest first; at least one), its end-offset snapshots and current lag: calculatePartitionStatus's
    checks in its order, the first that holds decides. A test whose SQL value was null does not hold."""
    known = [lag for lag in lags if lag is not None]
    tests = (  # one per DECISIONS entry but the last, evaluated in order
        lambda: current_lag is not None and current_lag <= allowed_lag,
        lambda: stopped(committed_at, at_us) and not recent_lag_zero(series, committed_at[-1], offsets[-1], intervals),
        lambda: unrecovered_rewind(offsets),
        lambda: not known,
        lambda: any(lag <= allowed_lag for lag in known),
        lambda: len(set(offsets)) == 1,  # array_distinct: a null is one value too
        lambda: len(known) >= 2 and all(after >= before for before, after in zip(known, known[1:])),
    )
    return next((i for i, holds in enumerate(tests) if holds()), len(tests))


def stopped(committed_at: list[int | None], at_us: int) -> bool:
    """Rule 3 (checkIfOffsetsStopped): no commit for longer than the window spans, with "now" = as_of."""
    first, last = committed_at[0], committed_at[-1]
    if first is None or last is None:
        return False
    return (float(at_us) - float(last)) > (float(last) - float(first))


def recent_lag_zero(series: Series | None, last_at: int | None, last_offset: int | None, intervals: int) -> bool:
    """checkIfRecentLagZero, which vetoes a STOP: the log end sat at or below the newest commit in the recent
    snapshots (Burrow's ring of `intervals` broker offsets, all fetched since the consumer stopped: a snapshot
    older than the newest commit says nothing about whether the log moved on after it)."""
    if series is None or last_at is None or last_offset is None:
        return False
    return any(end <= last_offset for end in series.log_ends_since(last_at, intervals))


def unrecovered_rewind(offsets: list[int | None]) -> bool:
    """Rule 2 (checkIfOffsetsRewind, checkIfRewindRecovered): the first step back, not made good by a later
    commit reaching the offset it stepped back from (an unknown comparison: not shown unrecovered)."""
    rewind = next((i for i in range(1, len(offsets)) if offsets[i - 1] is not None and offsets[i] is not None
                   and offsets[i] < offsets[i - 1]), None)
    if rewind is None:
        return False
    later = offsets[rewind:]
    return None not in later and not any(o >= offsets[rewind - 1] for o in later)
