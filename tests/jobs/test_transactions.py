"""Transactional offset commits (spec §7.2): the set-based replay against hand-worked cases and against
a record-by-record reference replay (tests/reference_replay.py) of random transactional logs."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest
from offsets_log import CONTROL_NAMES, DAY, MINUTE, T0, WEEK, OffsetsLog
from reference_replay import LogEntry, replay_log

from jobs.pipeline import check_records, rebuild
from jobs.sources.raw import normalise

AS_OF = T0 + 30 * DAY


def rebuild_log(spark, log: OffsetsLog, as_of_ms: int = AS_OF, retention_ms: int = WEEK) -> dict:
    checked = check_records(normalise(log.frame(spark), "test"))
    return rebuild(checked, datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc), retention_ms, None)


def oracle(log: OffsetsLog):
    return replay_log(LogEntry(r[3], r[4], r[7], CONTROL_NAMES[r[0][3]] if r[10] else None, r[0], r[1])
                      for r in log.rows)


def live(tables: dict) -> dict:
    """(coordinator partition, group, topic, partition) -> (offset, record offset), expired or not."""
    rows = tables["committed_offsets"].unionByName(tables["expired_offsets"].drop("expired_at", "expired_at_ms"),
                                                   allowMissingColumns=True).collect()
    return {(r.coordinator_partition, r.group_id, r.topic, r.partition): (r.committed_offset, r.record_offset)
            for r in rows}


def pending(tables: dict) -> dict:
    return {(r.coordinator_partition, r.group_id, r.topic, r.partition, r.producer_id): (r.offset, r.record_offset)
            for r in tables["pending_transactions"].collect()}


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
def txn_tables(spark):
    return rebuild_log(spark, transactional_log())


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
    row = txn_tables["pending_transactions"].where("group_id = 'only-open'").first()
    assert row.coordinator_partition == 3 and row.commit_timestamp is not None


def test_an_open_transaction_blocks_expiry_of_its_partition_only(txn_tables):
    committed = {(r.group_id, r.partition) for r in txn_tables["committed_offsets"].collect()}
    expired = {(r.group_id, r.partition) for r in txn_tables["expired_offsets"].collect()}
    assert ("open", 0) in committed  # 30 days old, but its partition has an open transaction
    assert ("open", 1) in expired


def test_groups_with_only_an_open_transaction_survive(txn_tables):
    groups = {r.group_id: r for r in txn_tables["consumer_groups"].collect()}
    assert groups["only-open"].state == "Empty" and groups["only-open"].offset_count == 0
    # Left with no offsets and no open transaction, Empty groups are deleted by the cleanup (spec §8.4).
    assert "tombstoned" not in groups and "tombstone-in-txn" not in groups


def test_markers_are_counted_not_quarantined(txn_tables):
    assert txn_tables["quarantine"].count() == 0


def test_committed_offsets_carry_their_producer(txn_tables):
    producers = {r.group_id: r.producer_id for r in txn_tables["committed_offsets"].unionByName(
        txn_tables["expired_offsets"], allowMissingColumns=True).collect()}
    assert producers["committed"] == 100 and producers["plain-wins"] == -1 and producers["interleaved"] == 107


def test_the_hand_worked_log_agrees_with_the_reference_replay(txn_tables):
    want = oracle(transactional_log())
    assert live(txn_tables) == {k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert pending(txn_tables) == {k: (v.offset, v.record_offset) for k, v in want.pending.items()}


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
def test_random_transactional_logs_agree_with_the_reference_replay(spark, seed):
    log = random_log(seed)
    tables = rebuild_log(spark, log, as_of_ms=T0 + 10 * 365 * DAY, retention_ms=100 * 365 * DAY)
    want = oracle(log)
    assert live(tables) == {k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert pending(tables) == {k: (v.offset, v.record_offset) for k, v in want.pending.items()}
    # Groups: every group with committed or pending offsets, and only those (Empty ones without are deleted).
    holders = {(k[0], k[1]) for k in want.committed} | {(k[0], k[1]) for k in want.pending}
    assert {(r.coordinator_partition, r.group_id) for r in tables["consumer_groups"].collect()} == holders
    assert len(want.pending) > 0 and len(want.committed) > 10  # the log exercised both
    assert history(tables) == reference_history(want)


def history(tables: dict) -> list:
    """offset_commits as (coordinator partition, position, key, offset, previous, producer), in order."""
    return sorted((r.coordinator_partition, r.record_offset, (r.group_id, r.topic, r.partition), r.committed_offset,
                   r.previous_offset, r.producer_id) for r in tables["offset_commits"].collect())


def reference_history(want) -> list:
    return sorted(tuple(a) for a in want.history)


def test_a_tombstone_folded_with_newer_commits_still_removes_open_transactional_commits(spark):
    """An open transactional commit, then a plain tombstone and a plain commit on its key: the tombstone removed the
    pending commit (the reference replay), so nothing is pending, though the reduction keeps only the key's newest
    plain records. Through the reduced log a run replays (jobs.reduce.reduce_log; the tasks fold the same way) and
    through the offsets the early reduction's worker computes from the tasks' rows (jobs.task_offsets). A key with
    no tombstone keeps its open commit."""
    import pyarrow as pa

    from jobs.partial_reduce import TIMESTAMP, combine, reduce_batches
    from jobs.records import log_records
    from jobs.reduce import reduce_log
    from jobs.task_offsets import offset_state

    log = OffsetsLog()
    for group in ("removed", "kept"):
        log.commit(group, "t", 0, 5, at=T0, producer_id=201)
        if group == "removed":
            log.delete_offset(group, "t", 0, at=T0 + MINUTE)
        log.commit(group, "t", 0, 9, at=T0 + 2 * MINUTE)
    want = oracle(log)
    assert [k[1] for k in want.pending] == ["kept"]
    reduced = reduce_log(log_records(normalise(log.frame(spark), "test")), None, lambda _name, df: df)
    tables = rebuild(reduced, datetime.fromtimestamp((T0 + DAY) / 1000, tz=timezone.utc), WEEK, None, history=False)
    assert live(tables) == {k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert pending(tables) == {k: (v.offset, v.record_offset) for k, v in want.pending.items()}

    names = ("key", "value", "partition", "offset", "timestamp", "producer_id", "producer_epoch", "is_control")
    raw = pa.table({name: [r[i] for r in log.rows] for i, name in zip((0, 1, 3, 4, 5, 7, 8, 10), names)})
    raw = raw.set_column(4, "timestamp", pa.array([r[5] * 1000 for r in log.rows], pa.int64()).cast(TIMESTAMP))
    state, _ = offset_state(combine([pa.concat_tables(reduce_batches([raw], None, {}))]))
    opened = state.filter(state.column("open")).column("record_offset").to_pylist()
    assert opened == [v.record_offset for v in want.pending.values()]
