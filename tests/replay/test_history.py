"""The history of offset commits (jobs.replay.history) on small Arrow logs: offset_commits (each record where the
coordinator applied it, with its key's previous commit), and what group_status and consumer_lag read of it: the
last commits of each offset (commit_windows) and its consume rate (consume_rates), on hand-made rows."""
from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from reference_replay import LogEntry, replay_log

from jobs.base.arrow import TIMESTAMP
from jobs.base.tables import arrow_schema
from jobs.decode.check import check
from jobs.replay.applied import AppliedSequence, applied_sequence, running_max
from jobs.replay.history import commit_state, commit_windows, consume_rates, offset_commits
from jobs.replay.records import records
from jobs.replay.reduction import whole
from jobs.replay.transactions import fates, markers
from offsets_codec import decode_value, encode_key, encode_value
from offsets_codec.registry import OFFSET_COMMIT_TYPES

T0 = datetime(2026, 11, 20, 23, 59, 58, tzinfo=timezone.utc)  # three seconds later it is another day
T0_US = int(T0.timestamp() * 1_000_000)
COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"


def _key(group: str, version: int = 1, partition: int = 0) -> bytes:
    return encode_key(version, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int, version: int = 3, **fields) -> bytes:
    data = {"offset": offset, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5, **fields}
    if version < 3:
        data.pop("leaderEpoch")
    return encode_value(1, version, data)


def _log(rows: list[tuple]) -> pa.Table:
    """(key, value, record offset, seconds after T0 or None, producer id, is_control) as raw columns of coordinator
    partition 0, in the order given (not necessarily the log's)."""
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([None if r[3] is None else T0_US + r[3] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[4] for r in rows], pa.int64()), "is_control": pa.array([r[5] for r in rows]),
    })


def _offset_input(raw: pa.Table) -> tuple[pa.Table, AppliedSequence]:
    """(the valid offset records, their applied sequence) of one coordinator partition's raw log, as the replay
    hands them to the history."""
    valid = whole(check(records(raw)), None)
    valid = valid.filter(pc.is_null(valid.column("error")))
    offset_records = valid.filter(pc.is_in(valid.column("record_type"), pa.array(OFFSET_COMMIT_TYPES, pa.int16())))
    return offset_records, applied_sequence(offset_records, markers(valid))


def _history(rows: list[tuple]) -> pa.Table:
    return offset_commits(*_offset_input(_log(rows)))[0]


def test_each_commit_gets_its_keys_previous_one_in_log_order():
    commits = _history([
        (_key("a"), _commit(90), 30, 3, -1, False),  # out of log order in the input: placed by position, not row
        (_key("a", version=0), _commit(100), 10, 1, -1, False),  # a v0 key names the same offset as v1
        (_key("w"), _commit(5), 11, 1, -1, False),  # another key: its own chain
        (_key("a"), None, 20, None, -1, False),  # a tombstone without a timestamp
        (_key("a"), _commit(120), 40, 6, -1, False),
    ])
    assert commits.schema == arrow_schema("offset_commits")
    rows = {r["record_offset"]: r for r in commits.to_pylist()}
    assert sorted(rows) == [10, 11, 20, 30, 40]
    got = [(o, rows[o]["kind"], rows[o]["previous_offset"], rows[o]["offset_delta"], rows[o]["is_rewind"],
            rows[o]["seconds_since_previous"], rows[o]["earlier_records"]) for o in (10, 20, 30, 40)]
    assert got == [(10, "commit", None, None, False, None, 0),
                   (20, "delete", 100, None, False, None, 1),  # no timestamp: no time since
                   (30, "commit", None, None, False, None, 2),  # after a tombstone: nothing to compare with
                   (40, "commit", 90, 30, False, 3.0, 3)]
    assert rows[30]["group_id"] == "a" and rows[30]["commit_date"] == date(2026, 11, 21)
    assert rows[10]["commit_date"] == date(2026, 11, 20) and rows[20]["commit_date"] is None
    assert (rows[11]["group_id"], rows[11]["previous_offset"], rows[11]["earlier_records"]) == ("w", None, 0)
    assert [rows[o]["source_record_offset"] for o in (10, 11, 20, 30, 40)] == [10, 11, 20, 30, 40]


def test_transactional_commits_apply_at_their_marker_unless_replaced_or_older():
    """A transactional commit applies at its COMMIT marker (record_offset: where applied, source_record_offset:
    where written); a transaction's earlier commit on the key is replaced by its later one; a transactional commit
    applies only if no earlier applied record is newer than it."""
    a = _key("a")
    commits = _history([
        (a, _commit(1), 5, 0, -1, False),  # plain: at their own positions
        (a, _commit(10), 10, 1, 7, False),
        (a, _commit(12), 12, 1, 7, False),
        (a, _commit(14), 14, 1, 7, False),
        (a, _commit(3), 15, 1, -1, False),
        (COMMIT, None, 20, 2, 7, True),
        (a, _commit(25), 25, 2, 7, False),
        (COMMIT, None, 30, 2, 7, True),
    ])
    got = [(r["record_offset"], r["source_record_offset"], r["committed_offset"], r["previous_offset"])
           for r in sorted(commits.to_pylist(), key=lambda r: r["record_offset"])]
    # (20, 10) and (20, 12) are replaced by (20, 14), their transaction's last commit on the key, which is older
    # than the plain commit at 15 and does not apply; (30, 25) applies.
    assert got == [(5, 5, 1, None), (15, 15, 3, 1), (30, 25, 25, 3)]
    assert commits.column("producer_id").to_pylist()[-1] == 7


def test_a_transactional_commit_is_placed_at_its_commit_marker_and_applies_unless_a_newer_record_came_first():
    """Plain records and tombstones (a transactional one too) apply where they are; a committed transactional
    commit at its marker, its own position as source_record_offset; an aborted or open one not at all; a value
    that fails the check is no offset record. Here the transactional tombstone at 2 came between the commit at 1
    and its marker at 3: it removed the pending commit, so the history has no row at 3 (the reference replay)."""
    a = _key("a")
    raw = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, _commit(2), 1, 1, 7, False),  # committed at 3
        (a, None, 2, 2, 8, False),  # a transactional tombstone: where it is
        (COMMIT, None, 3, 3, 7, True),
        (a, _commit(4), 4, 4, 7, False),  # aborted
        (ABORT, None, 5, 5, 7, True),
        (a, b"\x00\x03broken", 6, 6, 7, False),  # fails the check
        (a, _commit(7), 7, 7, 8, False),  # open
    ])
    offset_records, sequence = _offset_input(raw)
    found = markers(whole(check(records(raw)), None))
    effective, still_open, position = fates(offset_records, found)
    source = offset_records.column("record_offset").to_pylist()
    placed = sorted((int(p), s, r["producer_id"], r["committed"]) for p, s, r, e in zip(
        position, source, _committed_offsets(offset_records), effective) if e)
    assert placed == [(0, 0, -1, 1), (2, 2, 8, None), (3, 1, 7, 2)]
    assert [s for s, o in zip(source, still_open) if o] == [7]
    got = sorted((r["record_offset"], r["source_record_offset"], r["producer_id"], r["committed_offset"])
                 for r in offset_commits(offset_records, sequence)[0].to_pylist())
    assert got == [(0, 0, -1, 1), (2, 2, 8, None)]
    reference = replay_log(LogEntry(0, r["offset"], r["producer_id"], {COMMIT: "COMMIT", ABORT: "ABORT"}.get(r["key"])
                                    if r["is_control"] else None, r["key"], r["value"]) for r in raw.to_pylist())
    assert sorted((h.position, h.producer_id, h.offset) for h in reference.history) == [(0, -1, 1), (2, 8, None)]


def _committed_offsets(offset_records: pa.Table) -> list[dict]:
    """Each record's producer and committed offset (None: a tombstone), by the codec."""
    producers, values = offset_records.column("producer_id").to_pylist(), offset_records.column("value").to_pylist()
    return [{"producer_id": p, "committed": None if v is None else decode_value(1, v).data["offset"]}
            for p, v in zip(producers, values)]


def test_a_rewind_is_a_commit_below_the_previous_one():
    commits = _history([(_key("a"), _commit(50), 1, 0, -1, False), (_key("a"), _commit(20), 2, 1, -1, False)])
    assert commits.column("is_rewind").to_pylist() == [False, True]
    assert commits.column("offset_delta").to_pylist() == [None, -30]


def test_commits_are_decoded_with_kafkas_sentinels():
    """A leader epoch of -1 (or none, before v3) is null; a tombstone has no value columns; a commit timestamp is
    a timestamp."""
    a = _key("a")
    values = [encode_value(1, 3, {"offset": 7, "leaderEpoch": -1, "metadata": "m", "commitTimestamp": 5}),
              encode_value(1, 1, {"offset": 8, "metadata": "", "commitTimestamp": 6, "expireTimestamp": 9}),
              encode_value(1, 4, {"offset": 9, "leaderEpoch": 4, "metadata": "", "commitTimestamp": 7,
                                  "topicId": "AQIDBAUGBwgJCgsMDQ4PEA"}),
              None, b"\x00\x03broken",
              encode_value(1, 3, {"offset": 10, "leaderEpoch": 2, "metadata": "m\u00e9ta", "commitTimestamp": 8})]
    rows = _history([(a, v, i, i, -1, False) for i, v in enumerate(values)]).to_pylist()
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    got = [(r["record_offset"], r["committed_offset"], r["leader_epoch"], r["metadata"], r["commit_timestamp"])
           for r in rows]
    assert got == [(0, 7, None, "m", epoch + timedelta(milliseconds=5)),
                   (1, 8, None, "", epoch + timedelta(milliseconds=6)),
                   (2, 9, 4, "", epoch + timedelta(milliseconds=7)), (3, None, None, None, None),
                   (5, 10, 2, "m\u00e9ta", epoch + timedelta(milliseconds=8))]  # not ASCII: valid UTF-8 all the same (the check proved it)
    assert {(r["group_id"], r["topic"], r["partition"]) for r in rows} == {("a", "t", 0)}


def test_earlier_records_count_the_keys_records_before_each_one():
    rows = _history([(_key(g), _commit(i), i, i, -1, False) for i, g in enumerate("abaabca")]).to_pylist()
    assert [(r["group_id"], r["earlier_records"]) for r in rows] == [
        ("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1), ("c", 0), ("a", 3)]


@pytest.mark.parametrize("top", [500_000, 1 << 61], ids=["small_offsets", "huge_offsets"])
def test_rows_follow_key_and_position_whatever_their_ranges(top):
    """Each row's previous commit and earlier records are its key's in position order, whether keys x positions fit
    one int64 sort key or not (transactional commits included, whose placing takes a running maximum per key)."""
    rng = random.Random(top % 1000)
    offsets = sorted(rng.sample(range(top), 600))
    keys = [_key(f"g{rng.randrange(40)}") for _ in offsets]
    rows = []
    for i, (offset, key) in enumerate(zip(offsets, keys)):
        producer = rng.choice([-1, -1, 7])
        if i % 10 == 9:
            rows.append((COMMIT, None, offset, 0, 7, True))
            continue
        rows.append((key, _commit(i) if i % 13 else None, offset, 0, producer, False))
    rng.shuffle(rows)
    raw = _log(rows)
    found = offset_commits(*_offset_input(raw))[0].to_pylist()
    got = {(r["record_offset"], r["group_id"]): (r["previous_offset"], r["earlier_records"]) for r in found}
    reference = replay_log(LogEntry(0, r["offset"], r["producer_id"], "COMMIT" if r["is_control"] else None,
                                    r["key"], r["value"]) for r in sorted(raw.to_pylist(), key=lambda r: r["offset"]))
    by_key: dict = {}
    for h in reference.history:
        by_key.setdefault(h.key, []).append(h)
    want = {}
    for chain in by_key.values():
        for i, h in enumerate(chain):
            want[h.position, h.key[0]] = (h.previous, i)
    assert got == want
    assert len(want) > 400 and any(r["record_offset"] != r["source_record_offset"] for r in found)


@pytest.mark.parametrize("span", [1 << 10, 1 << 62], ids=["one_pass", "per_run"])
def test_the_running_maximum_restarts_at_each_key(span):
    rng = np.random.default_rng(7)
    values = rng.integers(-span // 2, span // 2, 3000, dtype=np.int64)
    continues = rng.random(3000) < 0.9
    continues[0] = False
    want, high = [], None
    for v, c in zip(values.tolist(), continues.tolist()):
        high = v if not c else max(high, v)
        want.append(high)
    assert running_max(values, continues).tolist() == want


# --- what group_status and consumer_lag read --------------------------------------------------------------

MINUTE_US = 60_000_000
AS_OF_US = T0_US + 60 * MINUTE_US


def _commits(rows: list[tuple]) -> pa.Table:
    """offset_commits rows from (coordinator partition, group, record offset, kind, committed offset, record time
    in minutes after T0, commit time in minutes after T0 or None, later records); topic "t", partition 0."""
    schema = arrow_schema("offset_commits")
    columns = {f.name: pa.nulls(len(rows), f.type) for f in schema}

    def moment(minutes):
        return None if minutes is None else T0_US + int(minutes * MINUTE_US)

    columns.update({
        "coordinator_partition": pa.array([r[0] for r in rows], pa.int32()),
        "group_id": pa.array([r[1] for r in rows]), "topic": pa.array(["t"] * len(rows)),
        "partition": pa.array([0] * len(rows), pa.int32()),
        "record_offset": pa.array([r[2] for r in rows], pa.int64()), "kind": pa.array([r[3] for r in rows]),
        "committed_offset": pa.array([r[4] for r in rows], pa.int64()),
        "record_timestamp": pa.array([moment(r[5]) for r in rows], TIMESTAMP),
        "commit_timestamp": pa.array([moment(r[6]) for r in rows], TIMESTAMP),
        # Each key's rows before the row: all of its rows are given, with the count after each.
        "earlier_records": pa.array([sum(1 for o in rows if o[:2] == r[:2]) - 1 - r[7] for r in rows], pa.int64()),
    })
    return pa.table([columns[f.name] for f in schema], schema=schema)


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_commit_window_holds_an_offsets_last_commits_after_its_last_tombstone():
    commits = _commits([
        # "many": five commits, the window holds the last three, in log order whatever the rows' order
        (0, "many", 14, "commit", 140, 14, 14.5, 0),
        (0, "many", 10, "commit", 100, 10, 10.5, 4),
        (0, "many", 12, "commit", 120, 12, 12.5, 2),
        (0, "many", 11, "commit", 110, 11, 11.5, 3),
        (0, "many", 13, "commit", 130, 13, 13.5, 1),
        # "again": deleted, then committed again: only the commit after the tombstone
        (0, "again", 20, "commit", 5, 20, 20, 2),
        (0, "again", 21, "delete", None, 21, None, 1),
        (0, "again", 22, "commit", 7, 22, None, 0),  # no commit timestamp: the record's
        # "gone": its newest record is a tombstone: no row
        (0, "gone", 30, "commit", 1, 30, 30, 2),
        (0, "gone", 31, "commit", 2, 31, 31, 1),
        (0, "gone", 32, "delete", None, 32, None, 0),
        # "many" of another coordinator partition: its own window
        (1, "many", 3, "commit", 9, 40, 40, 0),
    ])
    windows = {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"]): r["window"]
               for r in commit_windows(commit_state(commits, 3, AS_OF_US)).to_pylist()}
    point = lambda p, o, at, c: {"coordinator_partition": p, "record_offset": o, "committed_at": _at(at),  # noqa: E731
                                 "committed_offset": c}
    assert windows == {
        (0, "many", "t", 0): [point(0, 12, 12.5, 120), point(0, 13, 13.5, 130), point(0, 14, 14.5, 140)],
        (0, "again", "t", 0): [point(0, 22, 22, 7)],
        (1, "many", "t", 0): [point(1, 3, 40, 9)],
    }
    gone = commits.filter(pc.equal(commits.column("group_id"), "gone"))
    assert commit_windows(commit_state(gone, 3, AS_OF_US)).num_rows == 0


def test_a_consume_rate_is_the_movement_from_the_first_to_the_last_commit_in_the_window_per_second():
    """Commits in (as_of - 15 minutes, as_of], ordered by time then log order: first to last; null with fewer than
    two commits or no time between them; no row for an offset without a commit in the window."""
    end = 60  # as_of, in minutes after T0
    commits = _commits([
        # "steady": one commit before the window, one at its very end (inside): 900 offsets in 600 seconds
        (0, "steady", 1, "commit", 10, end - 20, None, 3),
        (0, "steady", 2, "commit", 100, end - 10, None, 2),
        (0, "steady", 3, "commit", 400, end - 5, None, 1),
        (0, "steady", 4, "commit", 1000, end, None, 0),
        # "ties": at one moment, log order decides: first ro 3 (40), last ro 9 (300), 100 seconds apart
        (0, "ties", 7, "commit", 50, end - 10, None, 3),
        (0, "ties", 3, "commit", 40, end - 10, None, 4),
        (0, "ties", 9, "commit", 300, end - 10 + 100 / 60, None, 0),
        (0, "ties", 8, "commit", 250, end - 10 + 100 / 60, None, 1),
        # "time_first": time decides before log order: 100 at ro 30 is first, 500 at ro 2 last, 200 s apart
        (0, "time_first", 30, "commit", 100, end - 10, None, 1),
        (0, "time_first", 2, "commit", 500, end - 10 + 200 / 60, None, 0),
        # "single": one commit inside (and a tombstone, which is no commit): no rate
        (0, "single", 40, "commit", 5, end - 20, None, 2),
        (0, "single", 41, "commit", 6, end - 1, None, 1),
        (0, "single", 42, "delete", None, end - 0.5, None, 0),
        # "instant": two commits at one moment: no time between them
        (0, "instant", 50, "commit", 5, end - 2, None, 1),
        (0, "instant", 51, "commit", 9, end - 2, None, 0),
        # "old": nothing in the window, and "later": after as_of: no row
        (0, "old", 60, "commit", 5, end - 16, None, 1),
        (0, "old", 61, "commit", 9, end - 15, None, 0),
        (0, "later", 70, "commit", 5, end + 1, None, 1),
        (0, "later", 71, "commit", 9, end + 2, None, 0),
    ])
    rates = {r["group_id"]: r["consume_rate"] for r in
             consume_rates(commit_state(commits, 3, AS_OF_US - 15 * MINUTE_US), AS_OF_US, 15 * MINUTE_US).to_pylist()}
    assert rates == {"steady": pytest.approx(1.5), "ties": pytest.approx(2.6), "time_first": pytest.approx(2.0),
                     "single": None, "instant": None}
