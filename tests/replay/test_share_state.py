"""The share coordinator's replay of `__share_group_state` (jobs.replay.share_state), on small logs made with the
project's encoder, against a reference written here: each record expanded to one (delivery count, delivery state)
per offset, applied offset by offset, and coalesced again at the end."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st
from offsets_log import MINUTE, T0, OffsetsLog

from jobs.replay.records import records
from jobs.replay.share_state import combine_state_batches, replay_share_state

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
AS_OF = datetime(2026, 11, 2, tzinfo=timezone.utc)
AS_OF_US = int(AS_OF.timestamp() * 1_000_000)


def replay(log: OffsetsLog, as_of_us: int = AS_OF_US) -> dict[str, pa.Table]:
    found: dict[str, list[pa.Table]] = {}
    for name, table in replay_share_state(records(log.table()), as_of_us, AS_OF):
        found.setdefault(name, []).append(table)
    return {name: pa.concat_tables(tables) for name, tables in found.items()}


def state_of(log: OffsetsLog, as_of_us: int = AS_OF_US) -> list[dict]:
    return replay(log, as_of_us)["share_state"].to_pylist()


def batches(row: dict) -> list[tuple]:
    names = {"Available": 0, "Acknowledged": 2, "Archived": 4}
    return [(b["first_offset"], b["last_offset"], names[b["delivery_state"]], b["delivery_count"])
            for b in row["in_flight"]]


# --- the reference: one state per offset ------------------------------------------------------


def reference(ops: list[tuple]) -> dict | None:
    """ops: ("snapshot", start, batches) | ("update", start, batches) | ("delete",), in log order."""
    state: dict | None = None
    for op in ops:
        if op[0] == "delete":
            state = None
            continue
        kind, start, new = op
        if kind == "snapshot" or state is None:
            state = {"start": start, "offsets": {}, "updates": 0 if kind == "snapshot" else 1}
        else:
            state["start"] = start if start != -1 else state["start"]
            state["updates"] += 1
        for first, last, delivery_state, count in new:
            for o in range(first, last + 1):
                state["offsets"][o] = max(state["offsets"].get(o, (-1, -1)), (count, delivery_state))
        if state["start"] != -1:
            state["offsets"] = {o: v for o, v in state["offsets"].items() if o >= state["start"]}
    if state is None:
        return None
    coalesced: list[list[int]] = []
    for o in sorted(state["offsets"]):
        count, delivery_state = state["offsets"][o]
        if coalesced and coalesced[-1][1] == o - 1 and coalesced[-1][2:] == [delivery_state, count]:
            coalesced[-1][1] = o
        else:
            coalesced.append([o, o, delivery_state, count])
    return {"start": state["start"], "batches": [tuple(b) for b in coalesced], "updates": state["updates"]}


def write(log: OffsetsLog, ops: list[tuple], at: int = T0) -> None:
    for i, op in enumerate(ops):
        if op[0] == "delete":
            log.delete_share_state("g", TOPIC_ID, 0, at + i)
        elif op[0] == "snapshot":
            log.share_snapshot("g", TOPIC_ID, 0, at + i, start=op[1], batches=op[2])
        else:
            log.share_update("g", TOPIC_ID, 0, at + i, start=op[1], batches=op[2])


# --- the rules -------------------------------------------------------------------------------


def test_a_snapshot_replaces_the_state():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=10, batches=[(10, 19, ARCHIVED, 1)], state_epoch=1, leader_epoch=2)
    log.share_update("g", TOPIC_ID, 0, T0 + 1, batches=[(20, 25, ACKNOWLEDGED, 1)])
    log.share_snapshot("g", TOPIC_ID, 0, T0 + 2, start=30, batches=[(30, 31, AVAILABLE, 2)], snapshot_epoch=1,
                       state_epoch=3, leader_epoch=4, delivery_complete_count=0)
    [row] = state_of(log)
    assert (row["start_offset"], row["state_epoch"], row["leader_epoch"], row["snapshot_epoch"]) == (30, 3, 4, 1)
    assert batches(row) == [(30, 31, AVAILABLE, 2)]
    assert (row["updates_since_snapshot"], row["record_offset"], row["delivery_complete_count"]) == (0, 2, 0)
    assert row["topic_id"] == TOPIC_ID and row["topic"] is None and row["coordinator_partition"] == 0


def test_an_update_merges_higher_wins_and_splits_the_overlap():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=0, batches=[(0, 9, AVAILABLE, 1)], leader_epoch=3)
    # Offsets 3-5 delivered again (count 2) and acknowledged: they win inside the older range, which splits.
    log.share_update("g", TOPIC_ID, 0, T0 + 1, batches=[(3, 5, ACKNOWLEDGED, 2)])
    [row] = state_of(log)
    assert batches(row) == [(0, 2, AVAILABLE, 1), (3, 5, ACKNOWLEDGED, 2), (6, 9, AVAILABLE, 1)]
    assert (row["start_offset"], row["leader_epoch"], row["updates_since_snapshot"]) == (0, 3, 1)


def test_the_lower_count_loses_whatever_its_state():
    """Delivery count first, then state: a later record with a lower count does not win."""
    assert combine_state_batches([(0, 9, AVAILABLE, 3)], [(2, 4, ARCHIVED, 1)], -1) == [(0, 9, AVAILABLE, 3)]
    assert combine_state_batches([(0, 9, AVAILABLE, 1)], [(2, 4, ARCHIVED, 1)], -1) == \
        [(0, 1, AVAILABLE, 1), (2, 4, ARCHIVED, 1), (5, 9, AVAILABLE, 1)]


def test_a_new_start_offset_prunes_the_batches_below_it():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=0, batches=[(0, 4, ACKNOWLEDGED, 1), (5, 9, AVAILABLE, 1)])
    log.share_update("g", TOPIC_ID, 0, T0 + 1, start=7, leader_epoch=5)
    [row] = state_of(log)
    assert (row["start_offset"], row["leader_epoch"]) == (7, 5)
    assert batches(row) == [(7, 9, AVAILABLE, 1)]


def test_contiguous_batches_alike_coalesce():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=0, batches=[(0, 4, ACKNOWLEDGED, 1)])
    log.share_update("g", TOPIC_ID, 0, T0 + 1, batches=[(5, 9, ACKNOWLEDGED, 1), (12, 14, ACKNOWLEDGED, 1)])
    [row] = state_of(log)
    assert batches(row) == [(0, 9, ACKNOWLEDGED, 1), (12, 14, ACKNOWLEDGED, 1)]  # a gap stays a gap


def test_a_tombstone_deletes_the_key_and_a_later_snapshot_starts_again():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5, batches=[(5, 6, AVAILABLE, 1)])
    log.share_snapshot("h", TOPIC_ID, 0, T0, start=1)
    log.delete_share_state("g", TOPIC_ID, 0, T0 + 1)
    assert [r["group_id"] for r in state_of(log)] == ["h"]
    log.share_update("g", TOPIC_ID, 0, T0 + 2, start=8, leader_epoch=1)
    rows = {r["group_id"]: r for r in state_of(log)}
    assert (rows["g"]["start_offset"], rows["g"]["state_epoch"], rows["g"]["updates_since_snapshot"]) == (8, -1, 1)


def test_records_after_as_of_do_not_count():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5)
    log.share_update("g", TOPIC_ID, 0, T0 + 2 * MINUTE, start=9)
    as_of_us = (T0 + MINUTE) * 1000
    [row] = state_of(log, as_of_us)
    assert (row["start_offset"], row["record_offset"]) == (5, 0)
    assert state_of(log)[0]["start_offset"] == 9


def test_undecodable_records_are_quarantined_with_the_topic_named():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5)
    log.raw(log.rows[0][0], b"\x00\x07junk", T0 + 1, 0, topic="__share_group_state")
    out = replay(log)
    [bad] = out["quarantine"].to_pylist()
    assert bad["record_offset"] == 1 and bad["error"].startswith("__share_group_state: unknown value version 7")
    assert out["share_state"].num_rows == 1
    counts = {r["ok"]: r["count"] for r in out["share_counts"].to_pylist()}
    assert counts == {True: 1, False: 1}


@pytest.mark.parametrize("written", [2**62, 2**63 - 1, -(2**62)])
def test_a_snapshot_written_at_an_absurd_time_has_no_time_and_stops_nothing(written):
    """Times beyond the years a timestamp can hold (a corrupt record) are null, as none (-1) is; the state stays."""
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5, written=written)
    log.share_snapshot("g", TOPIC_ID, 1, T0, start=7)
    rows = state_of(log)
    assert [(r["partition"], r["start_offset"]) for r in rows] == [(0, 5), (1, 7)]
    assert (rows[0]["create_timestamp"], rows[0]["write_timestamp"]) == (None, None)
    at = datetime.fromtimestamp(T0 / 1000, tz=timezone.utc)
    assert (rows[1]["create_timestamp"], rows[1]["write_timestamp"]) == (at, at)


def test_partitions_of_the_topic_keep_their_own_keys():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5, coordinator=0)
    log.share_snapshot("g", TOPIC_ID, 1, T0, start=7, coordinator=3)
    rows = state_of(log)
    assert [(r["partition"], r["coordinator_partition"], r["start_offset"]) for r in rows] == [(0, 0, 5), (1, 3, 7)]


# --- against the reference -------------------------------------------------------------------

_batch = st.tuples(st.integers(0, 30), st.integers(0, 6), st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
                   st.integers(1, 3)).map(lambda b: (b[0], b[0] + b[1], b[2], b[3]))
_op = st.one_of(
    st.tuples(st.just("snapshot"), st.integers(0, 20), st.lists(_batch, max_size=4)),
    st.tuples(st.just("update"), st.one_of(st.just(-1), st.integers(0, 25)), st.lists(_batch, max_size=4)),
    st.tuples(st.just("delete")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, min_size=1, max_size=8))
def test_the_replay_matches_the_per_offset_reference(ops):
    log = OffsetsLog()
    write(log, ops)
    want = reference(ops)
    rows = state_of(log)
    if want is None:
        assert rows == []
        return
    [row] = rows
    assert (row["start_offset"], batches(row), row["updates_since_snapshot"]) == \
        (want["start"], want["batches"], want["updates"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_batch, max_size=6), st.lists(_batch, max_size=6), st.one_of(st.just(-1), st.integers(0, 30)))
def test_combining_matches_the_per_offset_reference(so_far, new, start):
    want = reference([("snapshot", -1, so_far), ("update", start, new)])
    assert combine_state_batches(so_far, new, start) == want["batches"]


def test_a_record_read_twice_is_replayed_once_and_counted():
    log = OffsetsLog()
    log.share_snapshot("g", TOPIC_ID, 0, T0, start=5)
    log.share_update("g", TOPIC_ID, 0, T0 + 1, start=6)
    log.rows.append(log.rows[1])  # an overlapping export
    out = replay(log)
    assert out["duplicates"].to_pylist() == [{"duplicates": 1, "conflicts": 0}]
    [row] = out["share_state"].to_pylist()
    assert (row["start_offset"], row["updates_since_snapshot"]) == (6, 1)
