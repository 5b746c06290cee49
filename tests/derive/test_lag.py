"""Lag in time and rates (jobs.derive.lag) on small hand-made tables: every case of consumer_lag is one (group,
topic, partition) of one table, evaluated once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from jobs.base.arrow import TIMESTAMP, epoch_us
from jobs.base.tables import arrow_schema
from jobs.derive.end_offsets import SCHEMA, Snapshots, history_rows
from jobs.derive.lag import consumer_lag

T = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)  # as_of
MIN = timedelta(minutes=1)
WINDOW_MS = 15 * 60_000

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
# The consume rates the replay gives (jobs.replay.history.consume_rates: first to last commit in the 15 minutes
# up to as_of) for these offset_commits rows, (minutes from as_of, committed offset) in log order:
# g/0: (-20, 0) before the window, (-14, 500), (-4, 1200), (-1, 1500)
# g/1: (-10, 0), (0, 3000)
# g/5: (-15, 0) on the open edge, not in the window, (-10, 100), (0, 1300)
# g/7: (-30, 2000), (-2, 2900), a tombstone at -1: one commit in the window (tombstones are not commits)
# x/7: (-3, 0), (-1, 2000): another group's
# g/8: (-2, 2800), (-2, 2900): no time between them
CONSUME_RATES = [("g", 0, 1000 / (13 * 60)), ("g", 1, 3000 / 600), ("g", 5, 1200 / 600), ("g", 7, None),
                 ("x", 7, 2000 / 120), ("g", 8, None)]


def committed_table(rows: list[tuple[str, int, int]], as_of: datetime = T) -> pa.Table:
    return pa.table({"group_id": [g for g, _, _ in rows], "topic": ["t"] * len(rows),
                     "partition": pa.array([p for _, p, _ in rows], pa.int32()),
                     "committed_offset": pa.array([c for _, _, c in rows], pa.int64()),
                     "as_of": pa.array([as_of] * len(rows), TIMESTAMP)})


def history() -> pa.Table:
    return pa.Table.from_pylist([{"topic": "t", "partition": p, "log_end_offset": end, "observed_at": T + m * MIN}
                                 for p, points in SNAPSHOTS.items() for m, end in points], schema=SCHEMA)


def rates() -> pa.Table:
    """CONSUME_RATES as the replay gives them: CONSUME_RATE_SCHEMA, and the coordinator partition."""
    return pa.table({"group_id": [g for g, _, _ in CONSUME_RATES], "topic": ["t"] * len(CONSUME_RATES),
                     "partition": pa.array([p for _, p, _ in CONSUME_RATES], pa.int32()),
                     "consume_rate": pa.array([r for _, _, r in CONSUME_RATES], pa.float64()),
                     "coordinator_partition": pa.array([3] * len(CONSUME_RATES), pa.int32())})


def by_key(table: pa.Table) -> dict[tuple[str, int], dict]:
    return {(r["group_id"], r["partition"]): r for r in table.to_pylist()}


@pytest.fixture(scope="module")
def result() -> pa.Table:
    return consumer_lag(committed_table(COMMITTED_ROWS), Snapshots.of(history(), epoch_us(T)), T, rates(), WINDOW_MS)


@pytest.fixture(scope="module")
def lag(result) -> dict[tuple[str, int], dict]:
    return by_key(result)


def test_the_columns_are_the_contracts_in_its_order(result):
    assert result.schema == arrow_schema("consumer_lag")


def test_lag_is_against_the_newest_snapshot_at_or_before_as_of(lag):
    assert {k: (r["log_end_offset"], r["lag"]) for k, r in lag.items() if k[1] in (0, 3, 6)} == {
        ("g", 0): (3000, 1500), ("h", 0): (3000, 1000), ("g", 3): (3000, 2500),
        ("g", 6): (100, 50),  # not the 900 observed after as_of
    }
    assert ("g", 9) not in lag and lag[("g", 2)]["lag"] == -100


def test_lag_seconds_interpolates_between_the_snapshots_around_the_committed_offset(lag):
    # 1500 lies halfway from 1000 (-10 min) to 2000 (-5 min): the log end passed it at -7.5 min
    assert lag[("g", 0)]["lag_seconds"] == pytest.approx(450.0)
    assert lag[("h", 0)]["lag_seconds"] == pytest.approx(300.0)  # exactly on a snapshot: its time
    assert lag[("g", 5)]["lag_seconds"] == pytest.approx(300.0)  # 1300 from 1000 (-10) to 1600 (0)


def test_lag_seconds_is_zero_at_or_past_the_log_end_and_null_when_unbracketed(lag):
    assert (lag[("g", 1)]["lag_seconds"], lag[("g", 2)]["lag_seconds"]) == (0.0, 0.0)
    # the history starts after the log end passed 500; one snapshot brackets nothing; 50 predates the history
    assert [lag[("g", p)]["lag_seconds"] for p in (3, 4, 6)] == [None, None, None]


def test_rates_are_net_offsets_per_second_over_the_window(lag):
    assert lag[("g", 0)]["produce_rate"] == pytest.approx(2000 / 600)
    assert lag[("g", 0)]["consume_rate"] == pytest.approx(1000 / (13 * 60))  # -14 to -1 min; -20 is outside
    assert lag[("g", 5)]["produce_rate"] == pytest.approx(600 / 600)        # not from the -15 edge snapshot
    assert lag[("g", 5)]["consume_rate"] == pytest.approx(1200 / 600)       # nor from the -15 edge commit


def test_rates_are_null_without_two_points_in_the_window(lag):
    assert lag[("g", 4)]["produce_rate"] is None                          # one snapshot
    assert lag[("g", 6)]["produce_rate"] is None                          # the other one is after as_of
    assert lag[("g", 7)]["consume_rate"] is None                          # one commit in it (and a delete)
    assert lag[("g", 8)]["consume_rate"] is None                          # two, at the same moment
    assert lag[("h", 0)]["consume_rate"] is None                          # no commits at all


def test_catch_up_is_lag_over_the_consumers_gain(lag):
    assert lag[("g", 5)]["catch_up_seconds"] == pytest.approx(300 / (2.0 - 1.0))
    assert lag[("g", 1)]["catch_up_seconds"] == 0.0             # caught up, and gaining
    assert lag[("g", 0)]["catch_up_seconds"] is None            # consuming slower than producing
    assert lag[("g", 7)]["catch_up_seconds"] is None            # consume rate unknown


def test_without_commits_rates_of_consumption_are_null():
    rows = by_key(consumer_lag(committed_table(COMMITTED_ROWS), Snapshots.of(history(), epoch_us(T)), T, None,
                               WINDOW_MS))
    assert {r["consume_rate"] for r in rows.values()} == {None}
    assert {r["catch_up_seconds"] for r in rows.values()} == {None}
    assert rows[("g", 0)]["lag_seconds"] == pytest.approx(450.0)


def test_a_snapshot_as_read_this_run_is_current_without_as_of():
    """Today's call (pipeline, live end offsets): one snapshot, fetched after the rebuild's as_of, is current."""
    committed = committed_table([("g", 0, 90), ("g", 1, 120)])
    fetched = T + 2 * MIN
    live = pa.table({"topic": ["t", "t"], "partition": pa.array([0, 1], pa.int32()), "offset": [100, 110],
                     "log_start_offset": pa.array([10, None], pa.int64()),
                     "fetched_at": pa.array([fetched, fetched], TIMESTAMP)})
    # Without as_of, a snapshot without a time is taken at the committed rows' as_of.
    snapshots = Snapshots.of(history_rows(live, T), None)
    rows = {r["partition"]: r for r in consumer_lag(committed, snapshots, None, None, WINDOW_MS).to_pylist()}
    assert (rows[0]["lag"], rows[0]["end_offsets_fetched_at"], rows[0]["lag_seconds"]) == (10, fetched, None)
    assert (rows[1]["lag"], rows[1]["lag_seconds"], rows[1]["produce_rate"]) == (-10, 0.0, None)
    assert (rows[0]["log_start_offset"], rows[0]["below_log_start"]) == (10, False)
    assert (rows[1]["log_start_offset"], rows[1]["below_log_start"]) == (None, None)


def test_end_offsets_read_at_another_moment_are_refused():
    with pytest.raises(ValueError):
        consumer_lag(committed_table(COMMITTED_ROWS), Snapshots.of(history(), None), T, None, WINDOW_MS)


def test_no_partition_with_end_offsets_gives_an_empty_table():
    no_history = Snapshots.of(SCHEMA.empty_table(), epoch_us(T))
    for committed, snapshots in ((committed_table([("g", 9, 10)]), Snapshots.of(history(), epoch_us(T))),
                                 (committed_table([]), no_history), (committed_table(COMMITTED_ROWS), no_history)):
        empty = consumer_lag(committed, snapshots, T, rates(), WINDOW_MS)
        assert empty.num_rows == 0 and empty.schema == arrow_schema("consumer_lag")


def test_records_deleted_by_retention_are_lost_not_waiting():
    """A group that fell below the log start: records_lost counts what retention deleted before it read them, and
    lag_seconds is the age of the oldest record still there (at the log start), never of a deleted one. The log
    start comes from the newest snapshot that has one (the newest here, as a file's often do, has none)."""
    rows = [{"topic": "t", "partition": 0, "log_end_offset": end, "log_start_offset": start, "observed_at": T + m * MIN}
            for m, end, start in [(-20, 0, 0), (-10, 1000, 600), (0, 3000, None)]]
    rows += [{"topic": "t", "partition": 1, "log_end_offset": end, "log_start_offset": None, "observed_at": T + m * MIN}
             for m, end in [(-10, 1000), (0, 3000)]]
    snapshots = Snapshots.of(pa.Table.from_pylist(rows, schema=SCHEMA), epoch_us(T))
    committed = committed_table([("g", 0, 100), ("h", 0, 700), ("g", 1, 2000)])
    got = {(r["group_id"], r["partition"]): r for r in consumer_lag(committed, snapshots, T, None, WINDOW_MS).to_pylist()}
    lost = got[("g", 0)]
    assert (lost["lag"], lost["log_start_offset"], lost["below_log_start"], lost["records_lost"]) == (2900, 600, True, 500)
    # The log end passed 600 (not 100) 6 minutes after -20: 14 minutes before as_of.
    assert lost["lag_seconds"] == pytest.approx(14 * 60)
    ahead = got[("h", 0)]
    assert (ahead["records_lost"], ahead["below_log_start"]) == (0, False)
    assert ahead["lag_seconds"] == pytest.approx(13 * 60)  # the log end passed 700 at -13 minutes
    unknown = got[("g", 1)]
    assert (unknown["log_start_offset"], unknown["below_log_start"], unknown["records_lost"]) == (None, None, None)
    assert unknown["lag_seconds"] == pytest.approx(5 * 60)  # from offset 2000 itself
