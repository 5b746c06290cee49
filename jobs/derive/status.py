"""Burrow's consumer evaluation, offline (contract: group_status): each partition's window of recent commits
judged by Burrow's rules in Burrow's order (linkedin/Burrow core/internal/evaluator/caching.go,
calculatePartitionStatus), and each group by its worst partition.

A window is the last N commits of a (group, topic, partition) up to as_of (Burrow's storage `intervals`), in
log order, after the offset's last tombstone (jobs.replay.history.commit_windows). The lag at each commit is
the log end at the commit's time (Snapshots.log_end_at: interpolated between the snapshots around it, else the
newest before it) minus the committed offset, never below zero (Burrow's storage clamps it too); unknown before
the history starts. Rules that need a lag are skipped where it is unknown; STOP and REWIND need only the
commits and as_of.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, epoch_us, known, numbers, ranges
from jobs.base.tables import conform
from jobs.derive.end_offsets import Snapshots

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
    given is the worst of all the group's partitions (Spark took it over all the group's rows)."""
    at_us = epoch_us(as_of)
    if snapshots is not None and snapshots.as_of_us != at_us:
        raise ValueError(f"end offsets read at {snapshots.as_of_us} µs, judged at {at_us}")
    # An offset without commits has no window (commit_windows gives none).
    windows = windows.filter(pc.fill_null(pc.greater(pc.list_value_length(windows.column("window")), 0), False))
    lists = windows.column("window").combine_chunks()
    sizes = numbers(lists.value_lengths())
    stops = np.cumsum(sizes)
    starts = stops - sizes
    points = lists.flatten()
    committed_at = pc.struct_field(points, "committed_at").cast(TIMESTAMP)
    offsets = pc.struct_field(points, "committed_offset")
    at, offset = numbers(committed_at.cast(pa.int64())), numbers(offsets)
    has_at, has_offset = known(committed_at), known(offsets)
    first, last = starts, stops - 1  # each window's oldest and newest commit
    where = snapshots.find(windows) if snapshots is not None else np.full(windows.num_rows, -1)
    has_series = where >= 0
    # Each commit's lag: the log end then minus its offset, 0 when the consumer is ahead (Burrow's storage: its
    # broker offsets are periodic, so a commit may pass them; 0 too without an offset, as Spark's greatest
    # skipped the null); null when the log end then is unknown.
    end, has_end = np.zeros(len(at), np.int64), np.zeros(len(at), bool)
    if has_series.any():
        commits = ranges(starts[has_series], stops[has_series])
        end[commits], has_end[commits] = snapshots.log_end_at(np.repeat(where[has_series], sizes[has_series]),
                                                              at[commits])
    lags = pa.array(np.where(has_offset, np.maximum(end - offset, 0), 0), mask=~(has_end & has_at))
    # Burrow's CurrentLag: the newest log end at as_of minus the newest commit, 0 when ahead; null when unknown.
    newest = np.zeros(windows.num_rows, np.int64)
    has_newest = np.zeros(windows.num_rows, bool)
    if has_series.any():
        newest_end = snapshots.table.column("log_end_offset").take(pa.array(snapshots.newest(where[has_series])))
        newest[has_series], has_newest[has_series] = numbers(newest_end), known(newest_end)
    current_lag = pa.array(np.maximum(newest - offset[last], 0), mask=~(has_newest & has_offset[last]))
    # Rule 3 (checkIfOffsetsStopped): no commit for longer than the window spans, with "now" = as_of ...
    first_f, last_f = at[first].astype(np.float64), at[last].astype(np.float64)
    stopped = has_at[first] & has_at[last] & ((float(at_us) - last_f) > (last_f - first_f))
    # ... unless the log end sat at or below the newest commit in the recent snapshots (checkIfRecentLagZero:
    # Burrow's ring of `intervals` broker offsets, all fetched since the consumer stopped: a snapshot older than
    # the newest commit says nothing about whether the log moved on after it).
    vetoed = np.zeros(windows.num_rows, bool)
    asked = has_series & has_at[last] & has_offset[last]
    if asked.any():
        vetoed[asked] = snapshots.recent_log_end_at_most(where[asked], at[last][asked], offset[last][asked], window)
    committed, lag_values = offsets.to_pylist(), lags.to_pylist()
    verdicts = [partition_status(committed[a:b], lag_values[a:b], current, stop, allowed_lag)
                for a, b, current, stop in zip(starts.tolist(), stops.tolist(), current_lag.to_pylist(),
                                                (stopped & ~vetoed).tolist())]
    status = [DECISIONS[v].status for v in verdicts]
    # The worst of the group's partitions: all of them are here (see the docstring).
    groups = windows.column("group_id").to_pylist()
    worst: dict[str, int] = {}
    for group, verdict in zip(groups, status):
        worst[group] = max(worst.get(group, 0), GROUP_LEVELS.index(GROUP_STATUS[verdict]))
    list_offsets = pa.array(np.append(starts, stops[-1] if len(stops) else 0), pa.int32())
    columns = {
        **{c: windows.column(c) for c in ("group_id", "topic", "partition")},
        "status": pa.array(status, pa.string()),
        "group_status": pa.array([GROUP_LEVELS[worst[g]] for g in groups], pa.string()),
        "rule": pa.array([DECISIONS[v].rule for v in verdicts], pa.string()),
        "window_commits": pa.array(sizes),
        "window_start": committed_at.take(pa.array(first)),
        "window_end": committed_at.take(pa.array(last)),
        "lag": lags.take(pa.array(last)),
        "as_of": pa.array(np.full(windows.num_rows, at_us)),
        "current_lag": current_lag,
        "complete": pa.array(sizes / window),  # Burrow's Complete: how full the window is
        "window_offsets": pa.ListArray.from_arrays(list_offsets, offsets),
        "window_lags": pa.ListArray.from_arrays(list_offsets, lags),
    }
    return conform(columns, "group_status")


def partition_status(offsets: list[int | None], lags: list[int | None], current_lag: int | None, stop: bool,
                     allowed_lag: int) -> int:
    """The index in DECISIONS of one partition's verdict, from its window (the commits' offsets and lags, oldest
    first; at least one), its current lag and whether it stopped (rule 3, vetoes included):
    calculatePartitionStatus's checks in its order, the first that holds decides. A test whose SQL value was
    null does not hold."""
    known_lags = [lag for lag in lags if lag is not None]
    if current_lag is not None and current_lag <= allowed_lag:
        return 0
    if stop:
        return 1
    if unrecovered_rewind(offsets):
        return 2
    if not known_lags:  # the rules after this one read lags
        return 3
    if any(lag <= allowed_lag for lag in known_lags):  # rule 1 (isLagAlwaysNotZero), over the lags known
        return 4
    if len(set(offsets)) == 1:  # rule 4 (checkIfOffsetsStalled); array_distinct: a null is one value too
        return 5
    if len(known_lags) >= 2 and all(after >= before for before, after in zip(known_lags, known_lags[1:])):
        return 6  # rule 5 (checkIfLagNotDecreasing)
    return 7


def unrecovered_rewind(offsets: list[int | None]) -> bool:
    """Rule 2 (checkIfOffsetsRewind, checkIfRewindRecovered): the first step back, not made good by a later
    commit reaching the offset it stepped back from (an unknown comparison: not shown unrecovered)."""
    rewind = next((i for i in range(1, len(offsets)) if offsets[i - 1] is not None and offsets[i] is not None
                   and offsets[i] < offsets[i - 1]), None)
    if rewind is None:
        return False
    later = offsets[rewind:]
    return None not in later and not any(o >= offsets[rewind - 1] for o in later)
