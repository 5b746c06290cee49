"""The end-offset history (jobs.derive.end_offsets) on small hand-made tables: the rows of a run, the merge across
runs, and what the rules read of a partition's snapshots (log_end_at, passed_at, rate)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa

from jobs.base.arrow import TIMESTAMP, epoch_us
from jobs.derive.end_offsets import SCHEMA, Snapshots, history_rows, merge_history

T = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)  # as_of
MIN = timedelta(minutes=1)
T_US = epoch_us(T)
S = 1_000_000  # µs


def history(rows: list[tuple]) -> pa.Table:
    """(topic, partition, log_end_offset, log_start_offset, observed_at, fetched_at) rows as SCHEMA."""
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def at(us: int) -> int:
    """µs after T, as the epoch µs the rules read."""
    return T_US + us


class Partition:
    """The rules over one partition's snapshots, one value at a time (they take arrays of rows)."""

    def __init__(self, snapshots: Snapshots, topic: str = "t", partition: int = 0):
        self.snapshots = snapshots
        self.where = snapshots.find(pa.table({"topic": [topic], "partition": pa.array([partition], pa.int32())}))

    @staticmethod
    def _one(result: tuple[np.ndarray, np.ndarray]):
        values, known = result
        return values[0].item() if known[0] else None

    def found(self) -> bool:
        return bool(self.where[0] >= 0)

    def newest_log_end(self) -> int | None:
        return self.snapshots.table.column("log_end_offset")[int(self.snapshots.newest(self.where)[0])].as_py()

    def log_end_at(self, at_us: int) -> int | None:
        return self._one(self.snapshots.log_end_at(self.where, np.array([at_us])))

    def passed_at(self, offset: int) -> float | None:
        return self._one(self.snapshots.passed_at(self.where, np.array([offset])))

    def rate(self, since: float, until: float) -> float | None:
        return self._one(self.snapshots.produce_rate(self.where, np.array([since]), np.array([until])))


def series(points: list[tuple[int | None, int | None]], as_of_us: int | None = None) -> Partition:
    """One partition's snapshots from (µs after T or None, log end) points."""
    rows = [("t", 0, end, None, None if us is None else T + timedelta(microseconds=us), None) for us, end in points]
    return Partition(Snapshots.of(history(rows), as_of_us))


def test_history_rows_are_observed_at_their_timestamp_fetch_time_or_as_of():
    ends = pa.table({"topic": ["t"] * 3, "partition": [0, 1, 2], "offset": [5, 6, 7],
                     "timestamp": pa.array([T - MIN, None, None], TIMESTAMP),
                     "fetched_at": pa.array([None, None, T + MIN], TIMESTAMP)})
    rows = history_rows(ends, T)
    assert rows.schema == SCHEMA
    got = {r["partition"]: (r["log_end_offset"], r["observed_at"], r["fetched_at"]) for r in rows.to_pylist()}
    assert got == {0: (5, T - MIN, None), 1: (6, T, None), 2: (7, T + MIN, T + MIN)}
    three_columns = history_rows(pa.table({"topic": ["t"], "partition": [0], "offset": [9]}), T).to_pylist()
    assert three_columns == [{"topic": "t", "partition": 0, "log_end_offset": 9, "log_start_offset": None,
                              "observed_at": T, "fetched_at": None}]


def test_merge_keeps_one_row_per_snapshot_and_the_new_run_wins():
    previous = history([("t", 0, 100, None, T - 2 * MIN, None), ("t", 0, 200, None, T - MIN, None)])
    new = history([("t", 0, 250, 7, T - MIN, None), ("t", 0, 300, None, T, None), ("t", 0, 290, None, T, None)])
    merged = merge_history(previous, new)
    assert merged.schema == SCHEMA

    def points(table: pa.Table) -> list[tuple]:
        return [(r["observed_at"], r["log_end_offset"], r["log_start_offset"]) for r in table.to_pylist()]

    # T - 1 min: the new run's 250 replaces 200; T: two rows of one run, the higher log end kept
    assert points(merged) == [(T - 2 * MIN, 100, None), (T - MIN, 250, 7), (T, 300, None)]
    assert points(merge_history(None, new)) == [(T - MIN, 250, 7), (T, 300, None)]
    assert points(Snapshots.of(merged, epoch_us(T - MIN)).latest()) == [(T - MIN, 250, 7)]


def test_merge_ties_keep_the_highest_log_start_then_fetch_time_nulls_last():
    new = history([("t", 0, 300, None, T, None), ("t", 0, 300, 5, T, None), ("t", 0, 300, 4, T, T),
                   ("t", 1, 300, 5, T, None), ("t", 1, 300, 5, T, T), ("t", 1, 300, 5, T, T - MIN)])
    got = {r["partition"]: (r["log_start_offset"], r["fetched_at"]) for r in merge_history(None, new).to_pylist()}
    assert got == {0: (5, None), 1: (5, T)}


def test_merge_keeps_fetched_at_null_where_the_previous_table_has_none():
    previous = pa.table({"topic": ["t"], "partition": pa.array([0], pa.int32()), "log_end_offset": [1],
                         "log_start_offset": pa.array([None], pa.int64()),
                         "observed_at": pa.array([T - MIN], TIMESTAMP)})
    merged = merge_history(previous, history([("t", 0, 2, None, T, T)]))
    assert [(r["log_end_offset"], r["fetched_at"]) for r in merged.to_pylist()] == [(1, None), (2, T)]


def test_snapshots_read_at_as_of_ignore_later_ones_and_a_partition_without_any_has_none():
    snapshots = Snapshots.of(history([("t", 0, 1, None, T, None), ("t", 0, 2, None, T + MIN, None),
                                      ("t", 1, 3, None, T + MIN, None)]), T_US)
    assert not Partition(snapshots, "t", 1).found() and not Partition(snapshots, "u", 0).found()
    assert Partition(snapshots).newest_log_end() == 1
    assert [r["log_end_offset"] for r in snapshots.latest().to_pylist()] == [1]


# --- log_end_at --------------------------------------------------------------------------------------------

LINE = [(0, 1000), (3 * S, 2000), (6 * S, 2000)]


def test_log_end_at_is_null_before_the_first_snapshot_and_the_newest_after_the_last():
    s = series(LINE)
    assert s.log_end_at(at(-1)) is None
    assert s.log_end_at(at(6 * S)) == 2000 and s.log_end_at(at(100 * S)) == 2000


def test_log_end_at_a_snapshot_is_its_log_end():
    assert [series(LINE).log_end_at(at(t)) for t in (0, 3 * S)] == [1000, 2000]


def test_log_end_between_two_snapshots_is_interpolated_and_rounded_down():
    s = series(LINE)
    assert s.log_end_at(at(S)) == 1333 and s.log_end_at(at(2 * S)) == 1666  # 1333.3, 1666.7
    assert s.log_end_at(at(4 * S)) == 2000


def test_log_end_is_multiplied_before_divided():
    # 7/10 * 90 is 62.99999999999999 in doubles; 7 * 90 / 10 is 63
    assert series([(0, 0), (10, 90)]).log_end_at(at(7)) == 63


def test_log_end_reads_the_order_spark_sorted_ties_in():
    # Two snapshots at 3 s (not a merged history): the one before `at` is the last of them, the one after the first.
    s = series([(0, 1000), (3 * S, 2000), (3 * S, 1900), (6 * S, 2300)])
    assert s.log_end_at(at(3 * S)) == 2000 and s.log_end_at(at(4 * S)) == 2100
    assert s.log_end_at(at(S)) == 1300  # toward 1900, the lower of the two at 3 s
    assert s.newest_log_end() == 2300


def test_log_end_is_null_toward_a_snapshot_without_one():
    s = series([(0, 1000), (3 * S, None), (6 * S, 2000)])
    assert (s.log_end_at(at(S)), s.log_end_at(at(3 * S)), s.log_end_at(at(4 * S))) == (None, None, None)
    assert series([(0, 1000), (3 * S, None)]).newest_log_end() is None


# --- passed_at ---------------------------------------------------------------------------------------------


def test_passed_at_is_null_unless_two_snapshots_bracket_the_offset():
    s = series(LINE)
    assert s.passed_at(500) is None  # the history starts after the log end passed it
    assert s.passed_at(2000) is None and s.passed_at(2500) is None  # the log end never passed it
    assert series([(0, 1000)]).passed_at(900) is None


def test_passed_at_a_snapshots_log_end_is_its_time_and_between_two_on_their_line():
    s = series(LINE)
    assert s.passed_at(1000) == float(T_US)
    assert s.passed_at(1500) == T_US + 1.5 * S
    assert s.passed_at(1999) == T_US + (999 * (3 * S) / 1000)


def test_passed_at_follows_the_newest_climb_after_the_log_end_fell_back():
    s = series([(0, 1000), (10 * S, 2000), (20 * S, 100), (30 * S, 1100)])  # the topic recreated at 20 s
    assert s.passed_at(1050) == T_US + 29.5 * S  # from 100 at 20 s to 1100 at 30 s, not 1000 -> 2000
    assert s.passed_at(1500) is None  # since the fall, the log end has not passed 1500
    assert s.passed_at(50) is None  # nor was any log end at or below 50


def test_passed_at_skips_snapshots_at_the_same_time_and_without_a_log_end():
    s = series([(0, 1000), (0, 1100), (S, None), (2 * S, 2100)])
    # from 1000 at 0 to 2100 at 2 s: not from 1100 at the same time, nor toward the snapshot without a log end
    assert s.passed_at(1050) == T_US + 50 * (2.0 * S) / 1100
    assert s.passed_at(1100) == float(T_US)  # the last log end at or below it is 1100 at 0


def test_snapshots_without_a_time_sort_first_and_bracket_nothing():
    # Only a history read without as_of holds them (as_of filters them out).
    s = series([(None, 500), (0, 1000), (S, 2000)])
    assert s.passed_at(700) is None and s.passed_at(1500) == T_US + 0.5 * S
    assert s.log_end_at(at(-1)) is None and s.newest_log_end() == 2000
    assert series([(None, 500), (0, 1000)], T_US).log_end_at(at(-1)) is None
    assert not Partition(Snapshots.of(history([("t", 0, 5, None, None, None)]), T_US)).found()


# --- rate --------------------------------------------------------------------------------------------------


def test_rate_is_over_the_first_and_last_snapshot_in_the_window():
    s = series([(-15 * S, 0), (-10 * S, 1000), (-5 * S, 1500), (0, 2000), (S, 9000)])
    until = float(T_US)
    assert s.rate(until - 15 * S, until) == 1000 / 10  # not from the -15 s snapshot on the open edge
    assert s.rate(until - 4 * S, until) is None  # one snapshot
    assert s.rate(until - 100 * S, until - 90 * S) is None  # none
    assert series([(0, 1), (0, 5)]).rate(until - S, until) is None  # no time between them
    assert series([(0, 1), (S, 5)]).rate(until + 2 * S, until + 3 * S) is None  # all before the window


# --- many rows at once -------------------------------------------------------------------------------------


def test_each_row_reads_its_own_partitions_snapshots():
    lines = {0: [(0, 1000), (10 * S, 2000)], 1: [(0, 0)], 2: [(5 * S, 100), (15 * S, 300), (20 * S, 350)]}
    snapshots = Snapshots.of(history([("t", p, end, None, T + timedelta(microseconds=us), None)
                                      for p, points in lines.items() for us, end in points]), T_US + 30 * S)
    partitions = [2, 0, 1, 0, 2, 2, 1]
    moments = [at(10 * S), at(5 * S), at(5 * S), at(-S), at(25 * S), at(4 * S), at(-S)]
    offsets = [200, 1500, 0, 2000, 40, 100, 5]
    rows = pa.table({"topic": ["t"] * len(partitions), "partition": pa.array(partitions, pa.int32())})
    where = snapshots.find(rows)
    ends, known_ends = snapshots.log_end_at(where, np.array(moments))
    assert [int(e) if k else None for e, k in zip(ends, known_ends)] == [200, 1500, 0, None, 350, None, None]
    passed, known_passed = snapshots.passed_at(where, np.array(offsets))
    assert [float(p) if k else None for p, k in zip(passed, known_passed)] == [
        T_US + 10.0 * S, T_US + 5.0 * S, None, None, None, T_US + 5.0 * S, None]
