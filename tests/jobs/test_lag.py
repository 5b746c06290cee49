"""Lag in time and rates (jobs.lag) and the end-offset history they read (jobs.end_offsets_history), on small hand-made
frames: every case of consumer_lag is one (group, topic, partition) of one frame, evaluated once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jobs.end_offsets_history import end_offsets_history, latest_end_offsets, merge_history
from jobs.lag import consumer_lag

T = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)  # as_of
MIN = timedelta(minutes=1)
UTC_NAIVE = T.replace(tzinfo=None)  # Spark hands timestamps back naive, in the session's UTC

COMMITTED = "group_id string, topic string, partition int, committed_offset bigint, as_of timestamp"
HISTORY = "topic string, partition int, log_end_offset bigint, log_start_offset bigint, observed_at timestamp"
COMMITS = ("group_id string, topic string, partition int, kind string, committed_offset bigint, "
           "record_timestamp timestamp, coordinator_partition int, record_offset bigint")

# (partition, [(minutes from as_of, log end)]): the end-offset history of topic t
SNAPSHOTS = {
    0: [(-10, 1000), (-5, 2000), (0, 3000)],  # 1000 offsets / 5 min, i.e. 10/3 per second
    1: [(-10, 1000), (0, 3000)],
    2: [(-10, 1000), (0, 3000)],
    3: [(-10, 1000), (0, 3000)],              # the history starts after the log end passed 500
    4: [(0, 3000)],                           # one snapshot: nothing brackets, no rate
    5: [(-15, 0), (-10, 1000), (0, 1600)],    # the -15 snapshot sits on the window's open edge: not in it
    6: [(-5, 100), (5, 900)],                 # a snapshot after as_of is not known at as_of
    7: [(-10, 1000), (0, 3000)],
    8: [(-10, 1000), (0, 3000)],
}
# (group, partition, committed offset at as_of)
COMMITTED_ROWS = [
    ("g", 0, 1500), ("h", 0, 2000), ("g", 1, 3000), ("g", 2, 3100), ("g", 3, 500), ("g", 4, 100),
    ("g", 5, 1300), ("g", 6, 50), ("g", 7, 2900), ("g", 8, 2900),
    ("g", 9, 10),  # topic-partition without any end offset: no row
]
# (group, partition, kind, committed offset, minutes from as_of): offset_commits rows, log order = list order
COMMIT_ROWS = [
    ("g", 0, "commit", 0, -20),   # before the window
    ("g", 0, "commit", 500, -14),
    ("g", 0, "commit", 1200, -4),
    ("g", 0, "commit", 1500, -1),
    ("g", 1, "commit", 0, -10), ("g", 1, "commit", 3000, 0),
    ("g", 5, "commit", 0, -15),   # on the open edge: not in the window
    ("g", 5, "commit", 100, -10), ("g", 5, "commit", 1300, 0),
    ("g", 7, "commit", 2000, -30), ("g", 7, "commit", 2900, -2),  # one commit in the window
    ("g", 7, "delete", None, -1),                                   # tombstones are not commits
    ("x", 7, "commit", 0, -3), ("x", 7, "commit", 2000, -1),        # another group's commits
    ("g", 8, "commit", 2800, -2), ("g", 8, "commit", 2900, -2),     # no time between them
]


@pytest.fixture(scope="module")
def frames(spark):
    committed = spark.createDataFrame([(g, "t", p, c, T) for g, p, c in COMMITTED_ROWS], COMMITTED)
    history = spark.createDataFrame([("t", p, end, None, T + m * MIN) for p, points in SNAPSHOTS.items()
                                     for m, end in points], HISTORY)
    commits = spark.createDataFrame([(g, "t", p, kind, offset, T + m * MIN, 3, n)
                                     for n, (g, p, kind, offset, m) in enumerate(COMMIT_ROWS)], COMMITS)
    return committed, history, commits


@pytest.fixture(scope="module")
def lag(frames):
    committed, history, commits = frames
    rows = consumer_lag(committed, history, T, commits, rate_window_ms=15 * 60_000).collect()
    return {(r.group_id, r.partition): r for r in rows}


def test_the_columns_are_the_contracts_in_its_order(lag):
    from jobs.lake.tables import spark_schema

    assert list(lag[("g", 0)].asDict()) == spark_schema("consumer_lag").fieldNames()


def test_lag_is_against_the_newest_snapshot_at_or_before_as_of(lag):
    assert {k: (r.log_end_offset, r.lag) for k, r in lag.items() if k[1] in (0, 3, 6)} == {
        ("g", 0): (3000, 1500), ("h", 0): (3000, 1000), ("g", 3): (3000, 2500),
        ("g", 6): (100, 50),  # not the 900 observed after as_of
    }
    assert ("g", 9) not in lag and lag[("g", 2)].lag == -100


def test_lag_seconds_interpolates_between_the_snapshots_around_the_committed_offset(lag):
    # 1500 lies halfway from 1000 (-10 min) to 2000 (-5 min): the log end passed it at -7.5 min
    assert lag[("g", 0)].lag_seconds == pytest.approx(450.0)
    assert lag[("h", 0)].lag_seconds == pytest.approx(300.0)  # exactly on a snapshot: its time
    assert lag[("g", 5)].lag_seconds == pytest.approx(300.0)  # 1300 from 1000 (-10) to 1600 (0)


def test_lag_seconds_is_zero_at_or_past_the_log_end_and_null_when_unbracketed(lag):
    assert (lag[("g", 1)].lag_seconds, lag[("g", 2)].lag_seconds) == (0.0, 0.0)
    # the history starts after the log end passed 500; one snapshot brackets nothing; 50 predates the history
    assert [lag[("g", p)].lag_seconds for p in (3, 4, 6)] == [None, None, None]


def test_rates_are_net_offsets_per_second_over_the_window(lag):
    assert lag[("g", 0)].produce_rate == pytest.approx(2000 / 600)
    assert lag[("g", 0)].consume_rate == pytest.approx(1000 / (13 * 60))  # -14 to -1 min; -20 is outside
    assert lag[("g", 5)].produce_rate == pytest.approx(600 / 600)        # not from the -15 edge snapshot
    assert lag[("g", 5)].consume_rate == pytest.approx(1200 / 600)       # nor from the -15 edge commit


def test_rates_are_null_without_two_points_in_the_window(lag):
    assert lag[("g", 4)].produce_rate is None                          # one snapshot
    assert lag[("g", 6)].produce_rate is None                          # the other one is after as_of
    assert lag[("g", 7)].consume_rate is None                          # one commit in it (and a delete)
    assert lag[("g", 8)].consume_rate is None                          # two, at the same moment
    assert lag[("h", 0)].consume_rate is None                          # no commits at all


def test_catch_up_is_lag_over_the_consumers_gain(lag):
    assert lag[("g", 5)].catch_up_seconds == pytest.approx(300 / (2.0 - 1.0))
    assert lag[("g", 1)].catch_up_seconds == 0.0             # caught up, and gaining
    assert lag[("g", 0)].catch_up_seconds is None            # consuming slower than producing
    assert lag[("g", 7)].catch_up_seconds is None            # consume rate unknown


def test_without_commits_rates_of_consumption_are_null(frames):
    committed, history, _ = frames
    rows = {(r.group_id, r.partition): r for r in consumer_lag(committed, history, T).collect()}
    assert {r.consume_rate for r in rows.values()} == {None} and {r.catch_up_seconds for r in rows.values()} == {None}
    assert rows[("g", 0)].lag_seconds == pytest.approx(450.0)


def test_a_snapshot_as_read_this_run_is_current_without_as_of(spark):
    """Today's call (pipeline, live end offsets): one snapshot, fetched after the rebuild's as_of, is current."""
    committed = spark.createDataFrame([("g", "t", 0, 90, T), ("g", "t", 1, 120, T)], COMMITTED)
    fetched = T + 2 * MIN
    live = spark.createDataFrame([("t", 0, 100, 10, fetched), ("t", 1, 110, None, fetched)],
                                 "topic string, partition int, offset bigint, log_start_offset bigint, fetched_at timestamp")
    rows = {r.partition: r for r in consumer_lag(committed, live).collect()}
    assert (rows[0].lag, rows[0].end_offsets_fetched_at, rows[0].lag_seconds) == (10, fetched.replace(tzinfo=None), None)
    assert (rows[1].lag, rows[1].lag_seconds, rows[1].produce_rate) == (-10, 0.0, None)


# --- the history ---------------------------------------------------------------------------------------


def test_history_rows_are_observed_at_their_timestamp_fetch_time_or_as_of(spark):
    from pyspark.sql import functions as F

    ends = spark.createDataFrame([("t", 0, 5, T - MIN, None), ("t", 1, 6, None, None), ("t", 2, 7, None, T + MIN)],
                                 "topic string, partition int, offset bigint, timestamp timestamp, fetched_at timestamp")
    got = {r.partition: (r.log_end_offset, r.observed_at, r.fetched_at)
           for r in end_offsets_history(ends, F.lit(T).cast("timestamp")).collect()}
    naive = lambda t: t.replace(tzinfo=None)  # noqa: E731
    assert got == {0: (5, naive(T - MIN), None), 1: (6, UTC_NAIVE, None), 2: (7, naive(T + MIN), naive(T + MIN))}


def test_merge_keeps_one_row_per_snapshot_and_the_new_run_wins(spark):
    from pyspark.sql import functions as F

    previous = spark.createDataFrame([("t", 0, 100, None, T - 2 * MIN), ("t", 0, 200, None, T - MIN)], HISTORY)
    new = spark.createDataFrame([("t", 0, 250, 7, T - MIN), ("t", 0, 300, None, T), ("t", 0, 290, None, T)], HISTORY)
    merged = merge_history(previous, new)
    assert merged.columns == ["topic", "partition", "log_end_offset", "log_start_offset", "observed_at", "fetched_at"]
    cases = {"merged": merged, "first run": merge_history(None, new), "latest at -1 min": latest_end_offsets(merged, T - MIN)}
    together = [frame.select(F.lit(name).alias("case"), "observed_at", "log_end_offset", "log_start_offset")
                for name, frame in cases.items()]
    got: dict[str, list] = {name: [] for name in cases}
    for r in together[0].unionByName(together[1]).unionByName(together[2]).collect():  # one evaluation
        got[r.case].append((r.observed_at, r.log_end_offset, r.log_start_offset))
    naive = lambda m: (T + m * MIN).replace(tzinfo=None)  # noqa: E731
    # T - 1 min: the new run's 250 replaces 200; T: two rows of one run, the higher log end kept
    assert sorted(got["merged"]) == [(naive(-2), 100, None), (naive(-1), 250, 7), (naive(0), 300, None)]
    assert sorted(got["first run"]) == [(naive(-1), 250, 7), (naive(0), 300, None)]
    assert got["latest at -1 min"] == [(naive(-1), 250, 7)]
