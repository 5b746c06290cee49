"""Burrow's evaluation (jobs.derive.status) on hand-made commit sequences: every rule is one (group, topic,
partition) of one table, evaluated once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from jobs.base.arrow import epoch_us
from jobs.base.tables import arrow_schema
from jobs.derive.end_offsets import SCHEMA, Snapshots
from jobs.derive.status import DECISIONS, group_status
from jobs.replay.history import COMMIT_WINDOW_SCHEMA

T = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)  # as_of
MIN = timedelta(minutes=1)
WINDOW = 4  # Burrow's intervals, small enough to write the sequences out

STEADY = [(-60, 0), (0, 6000)]  # the log end grows 100 per minute: 5600 at -4 min ... 5900 at -1 min
# topic t's end-offset history per partition: (minutes from as_of, log end); topic "dark" has none
SNAPSHOTS = {
    **{p: STEADY for p in (1, 2, 4, 5, 6, 7, 8, 10)},
    3: [(-60, 1000), (0, 7000)],
    13: [(-60, 100), (-30, 400), (0, 1000)],
    14: [(-60, 100), (-30, 1000)],
    12: [(-60, 0), (-2, 5800), (1, 100_000)],  # the last is after as_of: never read
}
LAST4 = (-4, -3, -2, -1)
LONG_AGO = (-40, -39, -38, -37)  # 37 minutes since the newest commit, 3 minutes spanned

# (group, topic, partition, [(minutes, committed offset, or None for a tombstone)]), in log order
CASES = [
    ("calm", "t", 1, list(zip(LAST4, (5000, 5300, 5550, 5800)))),    # lag 600, 400, 250, 100: OK
    ("calm", "t", 7, list(zip(LAST4, (5600, 5650, 5700, 5750)))),    # lag 0, 50, 100, 150: was zero, OK
    ("calm", "t", 8, list(zip(LONG_AGO, (5000, 5500, 5800, 6000)))),  # stopped, at the log end: OK
    ("slow", "t", 2, list(zip(LAST4, (5000, 5050, 5100, 5150)))),    # lag 600, 650, 700, 750: WARN
    ("slow", "t", 6, list(zip(LAST4, (5000, 5400, 5100, 5500)))),    # rewind, recovered; lag fell: OK
    # the rewind is older than the window; lag 1500 at each commit: WARN
    ("slow", "t", 10, list(zip((-6, -5, *LAST4), (5000, 4000, 4100, 4200, 4300, 4400)))),
    ("stuck", "t", 4, list(zip(LAST4, (5000,) * 4))),               # same offset, lag growing: STALL
    ("stuck", "t", 12, [*zip(LAST4, (5000, 5200, 5400, 5600)), (1, 100)]),  # the rewind at +1 min is after as_of: OK
    ("gone", "t", 3, list(zip(LONG_AGO, (100, 200, 300, 400)))),     # stopped with lag: STOP
    ("vetoed", "t", 13, list(zip(LONG_AGO, (200, 250, 300, 400)))),  # stopped, but a recent log end was at 400: OK
    # stopped with lag: the log end at 100, before the newest commit, is no veto
    ("gone", "t", 14, list(zip(LONG_AGO, (200, 250, 300, 400)))),
    ("rewound", "t", 5, list(zip(LAST4, (5000, 5400, 5100, 5200)))), # rewind, not recovered: REWIND
    ("blind", "dark", 0, list(zip(LONG_AGO, (1, 2, 3, 4)))),         # no lag known; stopped: STOP
    ("blind", "dark", 1, list(zip(LAST4, (7,) * 4))),                # no lag known: STALL cannot be told: OK
    ("blind", "dark", 2, list(zip(LAST4, (10, 20, 5, 6)))),          # no lag known; rewind: REWIND
    ("reborn", "dark", 3, [(-5, 5000), (-4, None), (-3, 10), (-2, 20), (-1, 30)]),  # a new life after the tombstone
    ("reborn", "dark", 4, [(-3, 5), (-2, None)]),                    # deleted: no row
]

# (group, topic, partition) -> (status, group_status, words of the rule)
EXPECTED = {
    ("calm", "t", 1): ("OK", "OK", "lag decreased"),
    ("calm", "t", 7): ("OK", "OK", "within allowed-lag at a commit"),
    ("calm", "t", 8): ("OK", "OK", "lag at as_of is within allowed-lag"),
    ("slow", "t", 2): ("WARN", "WARN", "never decreased"),
    ("slow", "t", 6): ("OK", "WARN", "lag decreased"),
    ("slow", "t", 10): ("WARN", "WARN", "never decreased"),
    ("stuck", "t", 4): ("STALL", "ERR", "same offset"),
    ("stuck", "t", 12): ("OK", "ERR", "lag decreased"),
    ("gone", "t", 3): ("STOP", "ERR", "no commit for longer than the window spans"),
    ("gone", "t", 14): ("STOP", "ERR", "no commit for longer than the window spans"),
    ("vetoed", "t", 13): ("OK", "OK", "within allowed-lag at a commit"),
    ("rewound", "t", 5): ("REWIND", "ERR", "moved the offset back"),
    ("blind", "dark", 0): ("STOP", "ERR", "no commit for longer than the window spans"),
    ("blind", "dark", 1): ("OK", "ERR", "unknown"),
    ("blind", "dark", 2): ("REWIND", "ERR", "moved the offset back"),
    ("reborn", "dark", 3): ("OK", "OK", "unknown"),
}


def at(minutes: int) -> datetime:
    return T + minutes * MIN


def windows(window: int) -> pa.Table:
    """The commit windows the replay gives for CASES (jobs.replay.history.commit_windows, COMMIT_WINDOW_SCHEMA):
    per offset whose newest record up to as_of is a commit (the replay applies no record after as_of), its last
    `window` commits after its last tombstone, in log order."""
    rows, record_offset = [], 0
    for group, topic, partition, points in CASES:
        life: list[dict] = []
        for minutes, offset in points:
            record_offset += 1
            if at(minutes) > T:
                continue
            life = [] if offset is None else [*life, {
                "coordinator_partition": 0, "record_offset": record_offset, "committed_at": at(minutes),
                "committed_offset": offset}]
        if life:
            rows.append({"coordinator_partition": 0, "group_id": group, "topic": topic, "partition": partition,
                         "window": life[-window:]})
    return pa.Table.from_pylist(rows, schema=COMMIT_WINDOW_SCHEMA)


def snapshots() -> Snapshots:
    history = pa.Table.from_pylist([{"topic": "t", "partition": p, "log_end_offset": end, "observed_at": at(m)}
                                    for p, points in SNAPSHOTS.items() for m, end in points], schema=SCHEMA)
    return Snapshots.of(history, epoch_us(T))


@pytest.fixture(scope="module")
def result() -> pa.Table:
    return group_status(windows(WINDOW), snapshots(), T, WINDOW)


@pytest.fixture(scope="module")
def status(result) -> dict[tuple[str, str, int], dict]:
    return {(r["group_id"], r["topic"], r["partition"]): r for r in result.to_pylist()}


def test_every_rule_decides_in_burrows_order(status):
    got = {k: (r["status"], r["group_status"]) for k, r in status.items()}
    assert got == {k: v[:2] for k, v in EXPECTED.items()}  # ("reborn", "dark", 4) was deleted: no row
    for key, (_, _, words) in EXPECTED.items():
        assert words in status[key]["rule"], (key, status[key]["rule"])
    assert {r["rule"] for r in status.values()} <= {d.rule for d in DECISIONS}


def test_the_columns_are_the_contracts(result):
    assert result.schema == arrow_schema("group_status")


def test_lag_at_each_commit_is_interpolated_from_the_history(status):
    calm = status[("calm", "t", 1)]
    assert calm["window_lags"] == [600, 400, 250, 100] and calm["lag"] == 100 and calm["current_lag"] == 200
    assert status[("gone", "t", 3)]["window_lags"] == [2900] * 4
    # after the newest snapshot at or before as_of (-2 min) its log end holds; the one after as_of is not read
    assert status[("stuck", "t", 12)]["window_lags"] == [600, 500, 400, 200]
    assert status[("stuck", "t", 12)]["current_lag"] == 200
    assert status[("vetoed", "t", 13)]["window_lags"] == [100, 60, 20, 0]  # a commit past the log end: 0


def test_lag_is_null_where_no_snapshot_precedes_the_commit(status):
    blind = status[("blind", "dark", 0)]
    assert (blind["window_lags"], blind["lag"], blind["current_lag"]) == ([None] * 4, None, None)


def test_the_window_is_the_last_commits_up_to_as_of_after_the_last_tombstone(status):
    window = status[("slow", "t", 10)]
    assert (window["window_offsets"], window["window_commits"], window["complete"]) == (
        [4100, 4200, 4300, 4400], 4, 1.0)
    assert (window["window_start"], window["window_end"], window["as_of"]) == (at(-4), at(-1), T)
    assert status[("stuck", "t", 12)]["window_offsets"] == [5000, 5200, 5400, 5600]  # not the +1 min commit
    reborn = status[("reborn", "dark", 3)]
    assert (reborn["window_offsets"], reborn["window_commits"], reborn["complete"]) == ([10, 20, 30], 3, 0.75)


def test_allowed_lag_and_the_default_window_of_ten():
    got = {(r["group_id"], r["partition"]): (r["status"], r["window_commits"])
           for r in group_status(windows(10), snapshots(), T, allowed_lag=1000).to_pylist() if r["topic"] == "t"}
    assert got[("slow", 2)] == ("OK", 4)        # lag 850 at as_of is allowed
    assert got[("stuck", 4)] == ("OK", 4)       # 1000 too
    assert got[("gone", 3)] == ("STOP", 4)      # 6600 is not
    assert got[("slow", 10)] == ("REWIND", 6)   # ten commits hold the rewind from 5000 to 4000


def test_without_end_offsets_no_lag_is_known():
    rows = {(r["group_id"], r["partition"]): r for r in group_status(windows(WINDOW), None, T, WINDOW).to_pylist()}
    assert {r["current_lag"] for r in rows.values()} == {None}
    assert (rows[("calm", 1)]["status"], rows[("gone", 3)]["status"]) == ("OK", "STOP")


def test_end_offsets_read_at_another_moment_are_refused():
    with pytest.raises(ValueError):
        group_status(windows(WINDOW), Snapshots.of(pa.Table.from_pylist([], schema=SCHEMA), None), T, WINDOW)


def test_no_window_gives_an_empty_table():
    for windows_given in (COMMIT_WINDOW_SCHEMA.empty_table(),
                          pa.Table.from_pylist([{"group_id": "g", "topic": "t", "partition": 1, "window": []}],
                                               schema=COMMIT_WINDOW_SCHEMA)):
        empty = group_status(windows_given, snapshots(), T, WINDOW)
        assert empty.num_rows == 0 and empty.schema == arrow_schema("group_status")
