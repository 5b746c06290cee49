"""Transactional offset commits (spec §7.2) in the kernel, on small Arrow logs: a commit's fate is its producer's
next marker (jobs.replay.transactions), and the replay of a partition (jobs.replay.partition) places commits by it,
against hand-worked cases and against the record-by-record reference replay (tests/reference_replay.py)."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from offsets_log import CONTROL_NAMES, DAY, MINUTE, T0, WEEK, OffsetsLog
from reference_replay import LogEntry, replay_log

from jobs.base.arrow import TIMESTAMP
from jobs.decode.arrow_reader import read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, check
from jobs.replay.applied import applied_sequence
from jobs.replay.offsets import offset_state
from jobs.replay.partition import ReplaySettings, replay_partition
from jobs.replay.records import records
from jobs.replay.reduction import combine, prefold, whole
from jobs.replay.transactions import fates, markers, next_markers
from offsets_codec import encode_key, encode_value
from offsets_codec.registry import OFFSET_COMMIT_TYPES

AS_OF = T0 + 30 * DAY
T0_US = T0 * 1000
COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"  # control record keys
TOPIC_ID = "AQIDBAUGBwgJCgsMDQ4PEA"


def _us(ms: int) -> int:
    return ms * 1000


def replay(log: OffsetsLog, as_of_ms: int = AS_OF, retention_ms: int = WEEK, *, history: bool = True,
           fold: bool = False) -> dict[str, pa.Table]:
    """Every output of the replay of each coordinator partition of `log`, whole or reduced, concatenated."""
    checked = check(records(log.table()))
    rows = pa.concat_tables(prefold([checked], _us(as_of_ms))) if fold else whole(checked, _us(as_of_ms))
    settings = ReplaySettings(datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc), retention_ms, history)
    found: dict[str, list[pa.Table]] = {}
    for partition in sorted(set(rows.column("coordinator_partition").to_pylist())):
        mine = rows.filter(pc.equal(rows.column("coordinator_partition"), partition))
        for name, table in replay_partition(mine, settings):
            found.setdefault(name, []).append(table)
    return {name: pa.concat_tables(tables) for name, tables in found.items()}


def oracle(log: OffsetsLog):
    return replay_log(LogEntry(r[3], r[4], r[7], CONTROL_NAMES[r[0][3]] if r[10] else None, r[0], r[1])
                      for r in log.rows)


def live(tables: dict) -> dict:
    """(coordinator partition, group, topic, partition) -> (offset, record offset), expired or not."""
    rows = tables["committed_offsets"].to_pylist() + tables["expired_offsets"].to_pylist()
    return {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"]):
            (r["committed_offset"], r["record_offset"]) for r in rows}


def pending(tables: dict) -> dict:
    rows = tables["pending_transactions"].to_pylist() if "pending_transactions" in tables else []
    return {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"], r["producer_id"]):
            (r["offset"], r["record_offset"]) for r in rows}


def committed_by_oracle(want) -> dict:
    return {k: (v.offset, v.record_offset) for k, v in want.committed.items()}


def pending_by_oracle(want) -> dict:
    return {k: (v.offset, v.record_offset) for k, v in want.pending.items()}


# --- hand-worked cases -----------------------------------------------------------------------------

def transactional_log() -> OffsetsLog:
    log, t = OffsetsLog(), T0 + DAY
    log.commit("committed", "t", 0, offset=5, at=t, producer_id=100)
    log.marker(100, "COMMIT", at=t)
    log.commit("aborted", "t", 0, offset=5, at=t)
    log.commit("aborted", "t", 0, offset=9, at=t, producer_id=101)
    log.marker(101, "ABORT", at=t)
    # A plain commit written between a transactional commit and its COMMIT marker is newer: it stays.
    log.commit("plain-wins", "t", 0, offset=10, at=t, producer_id=103)
    log.commit("plain-wins", "t", 0, offset=11, at=t)
    log.marker(103, "COMMIT", at=t)
    # A tombstone while the commit is pending removes it: the COMMIT brings nothing back.
    log.commit("tombstoned", "t", 0, offset=6, at=t, producer_id=104)
    log.delete_offset("tombstoned", "t", 0, at=t)
    log.marker(104, "COMMIT", at=t)
    # A tombstone inside a transaction applies at once, even though that transaction aborts.
    log.commit("tombstone-in-txn", "t", 0, offset=5, at=t)
    log.delete_offset("tombstone-in-txn", "t", 0, at=t, producer_id=105)
    log.commit("tombstone-in-txn", "t", 0, offset=9, at=t, producer_id=105)
    log.marker(105, "ABORT", at=t)
    # Interleaved producers on one key: positions of the commits decide, not the order of the markers.
    log.commit("interleaved", "t", 0, offset=20, at=t, producer_id=106, coordinator=3)
    log.commit("interleaved", "t", 0, offset=30, at=t, producer_id=107, coordinator=3)
    log.marker(107, "COMMIT", at=t, coordinator=3)
    log.marker(106, "COMMIT", at=t, coordinator=3)
    # One producer, three transactions: committed, aborted, still open.
    log.commit("three-txns", "t", 0, offset=1, at=t, producer_id=108)
    log.marker(108, "COMMIT", at=t)
    log.commit("three-txns", "t", 0, offset=2, at=t, producer_id=108)
    log.marker(108, "ABORT", at=t)
    log.commit("three-txns", "t", 0, offset=3, at=t, producer_id=108)
    log.marker(109, "COMMIT", at=t)  # a marker for a producer with nothing pending is ignored
    # Open transactions block expiry: the plain commit of t-0 is weeks old, t-1 is not blocked.
    log.commit("open", "t", 0, offset=3, at=T0)
    log.commit("open", "t", 1, offset=4, at=T0)
    log.commit("open", "t", 0, offset=7, at=t, producer_id=110)
    # A group with nothing but an open transaction exists (a simple group) and is not deleted.
    log.commit("only-open", "t", 0, offset=8, at=t, producer_id=111, coordinator=3)
    return log


@pytest.fixture(scope="module")
def txn_tables() -> dict[str, pa.Table]:
    return replay(transactional_log())


def test_committed_offsets_follow_the_markers(txn_tables):
    assert {k[1:]: v[0] for k, v in live(txn_tables).items()} == {
        ("committed", "t", 0): 5,
        ("aborted", "t", 0): 5,
        ("plain-wins", "t", 0): 11,
        ("interleaved", "t", 0): 30,
        ("three-txns", "t", 0): 1,
        ("open", "t", 0): 3,
        ("open", "t", 1): 4,
    }


def test_open_transactions_are_listed_and_not_committed(txn_tables):
    assert {k[1:]: v[0] for k, v in pending(txn_tables).items()} == {
        ("three-txns", "t", 0, 108): 3,
        ("open", "t", 0, 110): 7,
        ("only-open", "t", 0, 111): 8,
    }
    row = txn_tables["pending_transactions"].filter(
        pc.equal(txn_tables["pending_transactions"].column("group_id"), "only-open")).to_pylist()[0]
    assert row["coordinator_partition"] == 3 and row["commit_timestamp"] is not None


def test_an_open_transaction_blocks_expiry_of_its_partition_only(txn_tables):
    committed = {(r["group_id"], r["partition"]) for r in txn_tables["committed_offsets"].to_pylist()}
    expired = {(r["group_id"], r["partition"]) for r in txn_tables["expired_offsets"].to_pylist()}
    assert ("open", 0) in committed  # 30 days old, but its partition has an open transaction
    assert ("open", 1) in expired


def test_groups_with_only_an_open_transaction_survive(txn_tables):
    groups = {r["group_id"]: r for r in txn_tables["consumer_groups"].to_pylist()}
    assert groups["only-open"]["state"] == "Empty" and groups["only-open"]["offset_count"] == 0
    # Left with no offsets and no open transaction, Empty groups are deleted by the cleanup (spec §8.4).
    assert "tombstoned" not in groups and "tombstone-in-txn" not in groups


def test_markers_are_counted_not_quarantined(txn_tables):
    assert "quarantine" not in txn_tables
    counts = txn_tables["counts"].to_pylist()
    assert all(r["ok"] for r in counts)
    assert sum(r["count"] for r in counts if r["record_type"] is None) == 10  # the log's ten markers
    # ...and transactional: the markers and the 13 commits and tombstones written in transactions
    assert sum(r["transactional"] for r in counts) == 10 + 13


def test_committed_offsets_carry_their_producer(txn_tables):
    rows = txn_tables["committed_offsets"].to_pylist() + txn_tables["expired_offsets"].to_pylist()
    producers = {r["group_id"]: r["producer_id"] for r in rows}
    assert producers["committed"] == 100 and producers["plain-wins"] == -1 and producers["interleaved"] == 107


def test_the_hand_worked_log_agrees_with_the_reference_replay(txn_tables):
    want = oracle(transactional_log())
    assert live(txn_tables) == committed_by_oracle(want)
    assert pending(txn_tables) == pending_by_oracle(want)
    history = sorted((r["coordinator_partition"], r["record_offset"], (r["group_id"], r["topic"], r["partition"]),
                      r["committed_offset"], r["previous_offset"], r["producer_id"])
                     for r in txn_tables["offset_commits"].to_pylist())
    assert history == sorted(tuple(a) for a in want.history)


# --- a commit's fate ---------------------------------------------------------------------------------------

def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int, version: int = 3, metadata: str = "") -> bytes:
    data = {"offset": offset, "leaderEpoch": 1, "metadata": metadata, "commitTimestamp": 5}
    if version == 4:
        data["topicId"] = TOPIC_ID
    return encode_value(1, version, data)


def _log(rows: list[tuple]) -> pa.Table:
    """(key, value, offset, seconds after T0, producer_id, is_control, coordinator partition (default 0)) as raw
    columns."""
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([r[6] if len(r) > 6 else 0 for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([T0_US + r[3] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[4] for r in rows], pa.int64()),
        "producer_epoch": pa.array([0 if r[4] != -1 else -1 for r in rows], pa.int16()),
        "is_control": pa.array([r[5] for r in rows]),
    })


def _commits(checked: pa.Table) -> pa.Table:
    """The valid offset commits of checked rows."""
    return checked.filter(pc.and_(pc.is_in(checked.column("record_type"), pa.array(OFFSET_COMMIT_TYPES, pa.int16())),
                                  pc.is_null(checked.column("error"))))


def _settings(as_of_us: int, history: bool = True) -> ReplaySettings:
    """Retention long enough that nothing expires (these commits' commitTimestamp is 1970's)."""
    return ReplaySettings(datetime.fromtimestamp(as_of_us / 1e6, tz=timezone.utc), 100 * 365 * DAY, history)


def _outputs(rows: pa.Table, settings: ReplaySettings) -> dict[str, pa.Table]:
    return dict(replay_partition(rows, settings))


# One key's transactional commits of every fate, and the records that decide nothing.
FATES_LOG = [
    (_key("a"), _commit(1), 0, 0, 7, False),
    (_key("a"), _commit(2), 1, 1, 7, False),
    (_key("b"), _commit(1), 2, 2, 8, False),
    (COMMIT, None, 3, 3, 7, True),  # commits 7's a@0 and a@1
    (_key("a"), _commit(3), 4, 4, 7, False),
    (ABORT, None, 5, 5, 7, True),  # aborts a@4
    (_key("a"), _commit(4), 6, 6, 7, False),
    (b"\x80\x00\x00\x01", None, 7, 7, 8, True),  # a malformed control key: not 8's marker
    (_key("b"), _commit(5), 8, 8, 8, False),
    (COMMIT, None, 9, 9, 7, True),  # commits a@6
    (_key("b"), b"\x00\x03broken", 10, 10, 8, False),  # fails the check: no commit at all
    (COMMIT, None, 11, 100, 8, True),  # after as_of: b's commits stay open
]
FATES_AS_OF_US = T0_US + 50_000_000


def test_a_commits_fate_is_its_producers_next_marker():
    """Each transactional commit gets its producer's next marker in its coordinator partition: a malformed control
    key is no marker; without one after it, the transaction is still open."""
    checked = check(records(_log(FATES_LOG)))
    commits = _commits(checked)
    fate, at = next_markers(commits, markers(checked))
    got = dict(zip(commits.column("record_offset").to_pylist(), zip(fate.to_pylist(), at.to_pylist())))
    assert got == {0: ("COMMIT", 3), 1: ("COMMIT", 3), 2: ("COMMIT", 11), 4: ("ABORT", 5), 6: ("COMMIT", 9),
                   8: ("COMMIT", 11)}
    in_time = checked.filter(pc.less_equal(checked.column("record_timestamp"), pa.scalar(FATES_AS_OF_US, TIMESTAMP)))
    effective, still_open, position = fates(_commits(in_time), markers(in_time))
    assert _commits(in_time).column("record_offset").to_pylist() == [0, 1, 2, 4, 6, 8]
    assert (effective.tolist(), still_open.tolist(), position.tolist()) == (
        [True, True, False, False, True, False], [False, False, True, False, False, True], [3, 3, 2, 4, 9, 8])


def test_a_commits_fate_is_the_next_marker_not_a_later_one_nor_anothers():
    """Producer 7's ABORT between its commit and its COMMIT decides: the commit is aborted. Another producer's
    marker, or a marker of another coordinator partition, decides nothing: producer 9's commit in partition 1,
    whose producer's only marker is in partition 2, is still open."""
    log = _log([
        (_key("a"), _commit(1), 0, 0, 7, False),
        (COMMIT, None, 1, 1, 8, True),  # another producer's
        (COMMIT, None, 2, 2, 7, True, 1),  # another coordinator partition's
        (ABORT, None, 3, 3, 7, True),
        (COMMIT, None, 4, 4, 7, True),
        (_key("b"), _commit(1), 5, 5, 9, False, 1),
        (COMMIT, None, 6, 6, 9, True, 2),  # another coordinator partition's
    ])
    checked = check(records(log))
    fate, at = next_markers(_commits(checked), markers(checked))
    assert (fate.to_pylist(), at.to_pylist()) == (["ABORT", None], [3, None])


def test_a_commits_fate_agrees_with_a_sequential_walk_of_the_log():
    """next_markers on random interleavings of two producers' commits and markers in two coordinator partitions,
    against the fate a walk of the log in order gives each commit (its producer's pending commits end at its next
    marker)."""
    rng = random.Random(11)
    rows, want, waiting = [], {}, {}
    for offset in range(400):
        partition, producer = rng.choice((0, 1)), rng.choice((7, 8))
        kind = rng.choice(("commit", "commit", "commit", "COMMIT", "ABORT"))
        if kind == "commit":
            rows.append((_key("g"), _commit(offset), offset, 0, producer, False, partition))
            waiting.setdefault((partition, producer), []).append(offset)
            want[partition, offset] = (None, None)
        else:
            rows.append((COMMIT if kind == "COMMIT" else ABORT, None, offset, 0, producer, True, partition))
            for commit in waiting.pop((partition, producer), []):
                want[partition, commit] = (kind, offset)
    checked = check(records(_log(rows)))
    commits = _commits(checked)
    fate, at = next_markers(commits, markers(checked))
    got = dict(zip(zip(commits.column("coordinator_partition").to_pylist(),
                       commits.column("record_offset").to_pylist()), zip(fate.to_pylist(), at.to_pylist())))
    assert got == want and {"COMMIT", "ABORT", None} <= {f for f, _ in got.values()}


def test_the_reduction_keeps_transactional_commits_whole_and_the_replay_places_them_by_their_fate():
    """The reduction folds no transactional commit (it used to fold each key's commits per fate: no more), nor a
    marker; the replay as of a moment before the last marker: a's newest committed commit wins (a@6, at its COMMIT
    at 9), a@4 is aborted, and b's commits stay open (their marker comes after as_of; the newest, b@8, pending)."""
    batches = [check(records(b)) for b in (_log(FATES_LOG[:4]), _log(FATES_LOG[4:]))]
    rows = pa.concat_tables(prefold(batches, FATES_AS_OF_US))
    got = sorted(zip(rows.column("record_offset").to_pylist(), rows.column("records").to_pylist(),
                     rows.column("reduced").to_pylist()))
    assert got == [(offset, 1, False) for offset in range(12)]
    out = _outputs(rows, _settings(FATES_AS_OF_US))
    assert [(r["group_id"], r["committed_offset"], r["record_offset"], r["producer_id"])
            for r in out["committed_offsets"].to_pylist()] == [("a", 4, 6, 7)]
    assert [(r["group_id"], r["offset"], r["record_offset"], r["producer_id"])
            for r in out["pending_transactions"].to_pylist()] == [("b", 5, 8, 8)]
    history = sorted((r["record_offset"], r["source_record_offset"], r["committed_offset"], r["previous_offset"])
                     for r in out["offset_commits"].to_pylist())
    assert history == [(3, 1, 2, None), (9, 6, 4, 2)]  # a@0 replaced by a@1 in its transaction
    assert out["quarantine"].column("record_offset").to_pylist() == [7, 10]


def test_the_offsets_of_a_reduced_log_place_every_fate():
    """Winners (tombstones included) and open transactional commits, decoded, from a log reduced in two batches
    and combined: plain and transactional commits of every fate, a tombstone that removes an open commit, one that
    comes before another and a key with none, a v4 commit with its topic id, and one with a non-ASCII key and
    metadata the bulk reader leaves to the codec."""
    a, b, c, d, e, f, accented = (_key(g) for g in ("a", "b", "c", "d", "e", "f", "é"))
    log = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, _commit(2), 1, 1, 7, False),  # committed below: a's winner
        (b, _commit(1), 2, 2, 8, False),  # aborted below: b keeps its plain commit
        (b, _commit(0), 3, 3, -1, False),
        (c, _commit(1), 4, 4, 9, False),  # open, then removed by the tombstone
        (COMMIT, None, 5, 5, 7, True),
        (ABORT, None, 6, 6, 8, True),
        (c, None, 7, 7, -1, False),
        (d, None, 8, 8, -1, False),
        (d, _commit(3), 9, 9, 9, False),  # open after the tombstone: pending
        (e, _commit(4, 4), 10, 10, -1, False),
        (accented, _commit(5, 4, "métadonnée"), 11, 11, -1, False),  # left to the codec
        (f, _commit(6), 12, 12, 10, False),  # open, no tombstone on its key
        (a, _commit(9), 13, 13, -1, False),  # after as_of
    ])
    as_of_us = T0_US + 12 * 1_000_000
    batches = [check(records(log.slice(0, 7))), check(records(log.slice(7)))]
    rows = combine([pa.concat_tables(prefold(batches, as_of_us))])
    assert not read(pa.array([accented], pa.binary()), OFFSET_KEY, ("group",), heads=OFFSET_KEY_HEADS).ok[0]
    valid = rows.filter(pc.invert(rows.column("after_as_of")))
    commits = _commits(valid)
    state = offset_state(commits, applied_sequence(commits, markers(valid)))
    committed = {(r["group_id"], r["committed_offset"], r["topic_id"], r["metadata"])
                 for r in state.committed.to_pylist()}
    assert committed == {("a", 2, None, ""), ("b", 0, None, ""), ("e", 4, TOPIC_ID, ""),
                         ("é", 5, TOPIC_ID, "métadonnée")}
    assert {(r["group_id"], r["committed_offset"], r["producer_id"]) for r in state.pending.to_pylist()} == {
        ("d", 3, 9), ("f", 6, 10)}
    # The winners are the newest effective record of every key: the tombstones of c and d too.
    assert sorted(zip(state.winners.column("group_id").to_pylist(), state.winners.column("record_offset").to_pylist())
                  ) == [("a", 1), ("b", 3), ("c", 7), ("d", 8), ("e", 10), ("é", 11)]
    out = _outputs(rows, _settings(as_of_us, history=False))
    assert {(r["group_id"], r["committed_offset"]) for r in out["committed_offsets"].to_pylist()} == {
        ("a", 2), ("b", 0), ("e", 4), ("é", 5)}
    assert {(r["group_id"], r["offset"]) for r in out["pending_transactions"].to_pylist()} == {("d", 3), ("f", 6)}


def test_a_tombstone_folded_with_newer_commits_still_removes_open_transactional_commits():
    """An open transactional commit, then a plain tombstone and a plain commit on its key: the tombstone removed the
    pending commit (the reference replay), so nothing is pending, though the reduction keeps only the key's newest
    plain records (the tombstone and the commit, apart). Through the reduced log and through the whole log. A key
    with no tombstone keeps its open commit."""
    log = OffsetsLog()
    for group in ("removed", "kept"):
        log.commit(group, "t", 0, 1, at=T0 - MINUTE)  # folded into the key's newest plain commit
        log.commit(group, "t", 0, 5, at=T0, producer_id=201)
        if group == "removed":
            log.delete_offset(group, "t", 0, at=T0 + MINUTE)
        log.commit(group, "t", 0, 9, at=T0 + 2 * MINUTE)
    want = oracle(log)
    assert [k[1] for k in want.pending] == ["kept"]
    for fold in (True, False):
        tables = replay(log, T0 + DAY, history=False, fold=fold)
        assert live(tables) == committed_by_oracle(want), fold
        assert pending(tables) == pending_by_oracle(want), fold
    checked = check(records(log.table()))
    folded = pa.concat_tables(prefold([checked], None))
    kept = sorted(zip(folded.column("record_offset").to_pylist(), folded.column("records").to_pylist()))
    assert kept == [(1, 1), (2, 1), (3, 2), (5, 1), (6, 2)]  # removed's tombstone (2) kept beside its commit (3)
    commits = _commits(folded)
    state = offset_state(commits, applied_sequence(commits, markers(folded)))
    assert state.pending.column("record_offset").to_pylist() == [v.record_offset for v in want.pending.values()]


# --- random logs against the reference replay -------------------------------------------------------

def random_log(seed: int, records: int = 3000, partitions: int = 3) -> OffsetsLog:
    """Commits, tombstones and markers of 5 producers over a few coordinator partitions, few keys: collisions."""
    rnd, log = random.Random(seed), OffsetsLog()
    for i in range(records):
        at = T0 + i * MINUTE
        coordinator = rnd.randrange(partitions)
        group, topic, partition = f"g{rnd.randrange(4)}", rnd.choice("ab"), rnd.randrange(2)
        producer = rnd.choice([-1, -1, 201, 202, 203, 204, 205])
        kind = rnd.random()
        if kind < 0.55:
            log.commit(group, topic, partition, offset=i, at=at, producer_id=producer, coordinator=coordinator)
        elif kind < 0.65:
            log.delete_offset(group, topic, partition, at=at, producer_id=producer, coordinator=coordinator)
        elif producer != -1:
            log.marker(producer, rnd.choice(["COMMIT", "COMMIT", "ABORT"]), at=at, coordinator=coordinator)
    return log


@pytest.mark.parametrize("seed", [1, 2])
def test_random_transactional_logs_agree_with_the_reference_replay(seed):
    log = random_log(seed)
    tables = replay(log, as_of_ms=T0 + 10 * 365 * DAY, retention_ms=100 * 365 * DAY)
    want = oracle(log)
    assert live(tables) == committed_by_oracle(want)
    assert pending(tables) == pending_by_oracle(want)
    # Groups: every group with committed or pending offsets, and only those (Empty ones without are deleted).
    holders = {(k[0], k[1]) for k in want.committed} | {(k[0], k[1]) for k in want.pending}
    assert {(r["coordinator_partition"], r["group_id"]) for r in tables["consumer_groups"].to_pylist()} == holders
    assert len(want.pending) > 0 and len(want.committed) > 10  # the log exercised both
    history = sorted((r["coordinator_partition"], r["record_offset"], (r["group_id"], r["topic"], r["partition"]),
                      r["committed_offset"], r["previous_offset"], r["producer_id"])
                     for r in tables["offset_commits"].to_pylist())
    assert history == sorted(tuple(a) for a in want.history)
