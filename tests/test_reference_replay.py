"""Unit tests of the sequential reference replay (tests/reference_replay.py).

Scenarios marked "Kafka:" are ported from Kafka's own tests (trunk, group-coordinator/src/test/...):
OffsetMetadataManagerTest (OMMT), GroupCoordinatorShardTest (GCST) and GroupMetadataManagerTest (GMMT).
Going through bytes means a field absent from a value version reads as its default, where Kafka's tests
replay in-memory objects (noted where it matters).
"""
from __future__ import annotations

from reference_replay import GroupState, LogEntry, OffsetState, PendingState, ReplayResult, replay_log

from offsets_codec import encode_key, encode_value

T = 1_700_000_000_000


class Log:
    """Log entries in append order; offsets are assigned per coordinator partition."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._next: dict[int, int] = {}

    def add(self, key: bytes | None, value: bytes | None, *, pid: int = -1, control: str | None = None,
            coordinator: int = 0) -> int:
        offset = self._next.get(coordinator, 0)
        self._next[coordinator] = offset + 1
        self.entries.append(LogEntry(coordinator, offset, pid, control, key, value))
        return offset

    def commit(self, group: str, topic: str, partition: int, offset: int, *, pid: int = -1, leader_epoch: int = -1,
               metadata: str = "small", ts: int = T, version: int = 3, expire: int | None = None,
               record_type: int = 1, coordinator: int = 0) -> int:
        data = {"offset": offset, "leaderEpoch": leader_epoch, "metadata": metadata, "commitTimestamp": ts}
        if expire is not None:
            data["expireTimestamp"] = expire
        key = encode_key(record_type, {"group": group, "topic": topic, "partition": partition})
        return self.add(key, encode_value(record_type, version, data), pid=pid, coordinator=coordinator)

    def delete(self, group: str, topic: str, partition: int, *, pid: int = -1, record_type: int = 1,
               coordinator: int = 0) -> int:
        key = encode_key(record_type, {"group": group, "topic": topic, "partition": partition})
        return self.add(key, None, pid=pid, coordinator=coordinator)

    def marker(self, pid: int, result: str, *, coordinator: int = 0) -> int:
        return self.add(None, None, pid=pid, control=result, coordinator=coordinator)

    def group(self, group: str, *, members: tuple[str, ...] = (), protocol_type: str = "consumer",
              generation: int = 1, protocol: str | None = "range", leader: str | None = None,
              state_ts: int = T, version: int = 3, coordinator: int = 0) -> int:
        member_data = [{"memberId": m, "groupInstanceId": None, "clientId": "client", "clientHost": "/10.0.0.1",
                        "rebalanceTimeout": 9000, "sessionTimeout": 4000, "subscription": b"",
                        "assignment": b"\x02"} for m in members]
        data = {"protocolType": protocol_type, "generation": generation, "protocol": protocol, "leader": leader,
                "currentStateTimestamp": state_ts, "members": member_data}
        return self.add(encode_key(2, {"group": group}), encode_value(2, version, data), coordinator=coordinator)

    def delete_group(self, group: str, *, coordinator: int = 0) -> int:
        return self.add(encode_key(2, {"group": group}), None, coordinator=coordinator)

    def replay(self) -> ReplayResult:
        return replay_log(self.entries)


def off(offset: int, record_offset: int, *, leader_epoch: int | None = None, metadata: str = "small", ts: int = T,
        expire: int | None = None) -> OffsetState:
    return OffsetState(offset, leader_epoch, metadata, ts, expire, record_offset)


SIMPLE = GroupState(None, "Empty", 0, None, None, None, (), True)


# --- offsets, non-transactional -------------------------------------------------------------------------


def test_replay_last_commit_wins_per_key():
    # Kafka: OMMT.testReplay. Its last commit carries both an expire timestamp and a leader epoch; a v1
    # value (the only one with expireTimestamp) has no leaderEpoch field, so here the epoch reads as absent.
    log = Log()
    log.commit("foo", "bar", 0, 100)
    log.commit("foo", "bar", 0, 200, leader_epoch=10)
    log.commit("foo", "bar", 1, 200, leader_epoch=10)
    log.commit("foo", "bar", 1, 300, version=1, expire=12345)
    r = log.replay()
    assert r.committed == {
        (0, "foo", "bar", 0): off(200, 1, leader_epoch=10),
        (0, "foo", "bar", 1): off(300, 3, expire=12345),
    }
    assert r.pending == {}
    assert r.groups == {(0, "foo"): SIMPLE}
    assert r.skipped == 0


def test_legacy_type0_records_are_the_same_key_as_type1():
    # Kafka: GCST.testReplayOffsetCommit and testReplayOffsetCommitWithNullValue (type 0 is converted to
    # OffsetCommitKey/Value before OffsetMetadataManager.replay).
    log = Log()
    log.commit("goo", "foo", 0, 100, metadata="Metadata", ts=12345, version=0, record_type=0)
    r = log.replay()
    assert r.committed == {(0, "goo", "foo", 0): off(100, 0, metadata="Metadata", ts=12345)}
    log.commit("goo", "foo", 0, 100, metadata="Metadata", ts=12345, version=1, expire=6789)
    assert log.replay().committed == {(0, "goo", "foo", 0): off(100, 1, metadata="Metadata", ts=12345, expire=6789)}
    log.delete("goo", "foo", 0, record_type=0)  # a type-0 tombstone removes the offset written with type 1
    r = log.replay()
    assert r.committed == {}
    assert r.groups == {(0, "goo"): SIMPLE}  # tombstones never touch the group


def test_sentinels_become_none():
    log = Log()
    log.commit("g", "t", 0, 5, leader_epoch=-1, version=1, expire=-1, metadata="")
    assert log.replay().committed == {(0, "g", "t", 0): off(5, 0, metadata="")}


# --- offsets, transactional ------------------------------------------------------------------------------


def test_transactional_commits_stay_pending_without_marker():
    # Kafka: OMMT.testTransactionalReplay. Also: an open transaction at the end stays pending.
    log = Log()
    log.commit("foo", "bar", 0, 100, pid=5)
    log.commit("foo", "bar", 1, 101, pid=5)
    log.commit("bar", "zar", 0, 100, pid=5)
    log.commit("bar", "zar", 1, 101, pid=5)
    log.commit("foo", "bar", 2, 102, pid=6)
    log.commit("foo", "bar", 3, 102, pid=6)
    r = log.replay()
    assert r.committed == {}
    assert r.pending == {
        (0, "foo", "bar", 0, 5): PendingState(100, 0),
        (0, "foo", "bar", 1, 5): PendingState(101, 1),
        (0, "bar", "zar", 0, 5): PendingState(100, 2),
        (0, "bar", "zar", 1, 5): PendingState(101, 3),
        (0, "foo", "bar", 2, 6): PendingState(102, 4),
        (0, "foo", "bar", 3, 6): PendingState(102, 5),
    }
    assert r.groups == {(0, "foo"): SIMPLE, (0, "bar"): SIMPLE}


def test_open_transaction_does_not_hide_the_committed_offset():
    log = Log()
    log.commit("g", "t", 0, 50)
    log.commit("g", "t", 0, 60, pid=9)
    r = log.replay()
    assert r.committed == {(0, "g", "t", 0): off(50, 0)}
    assert r.pending == {(0, "g", "t", 0, 9): PendingState(60, 1)}


def test_tombstones_remove_committed_and_pending_offsets():
    # Kafka: OMMT.testReplayWithTombstoneAndPendingTransactionalOffsets, plus a COMMIT marker afterwards
    # that must not bring anything back.
    log = Log()
    log.commit("foo", "bar", 0, 100)
    log.commit("foo", "bar", 0, 100, pid=10)
    log.commit("foo", "bar", 1, 100, pid=10)
    log.delete("foo", "bar", 0)
    log.delete("foo", "bar", 1)
    r = log.replay()
    assert (r.committed, r.pending) == ({}, {})
    log.marker(10, "COMMIT")
    r = log.replay()
    assert (r.committed, r.pending) == ({}, {})
    assert r.groups == {(0, "foo"): SIMPLE}


def test_commit_and_abort_markers():
    # Kafka: OMMT.testReplayTransactionEndMarkerWithCommit (with GCST.testReplayEndTransactionMarker).
    log = Log()
    log.commit("foo", "bar", 0, 99)
    log.commit("foo", "bar", 0, 100, pid=5)
    log.commit("foo", "bar", 1, 200, pid=6)
    log.marker(1, "COMMIT")  # unknown producer id: ignored
    log.marker(5, "COMMIT")
    r = log.replay()
    assert r.committed == {(0, "foo", "bar", 0): off(100, 1)}
    assert r.pending == {(0, "foo", "bar", 1, 6): PendingState(200, 2)}
    log.marker(6, "ABORT")
    r = log.replay()
    assert r.committed == {(0, "foo", "bar", 0): off(100, 1)}
    assert r.pending == {}


def test_non_transactional_commit_between_record_and_marker_wins():
    # Kafka: OMMT.testReplayTransactionEndMarkerKeepsTheMostRecentCommittedOffset.
    log = Log()
    log.commit("foo", "bar", 0, 100, pid=5)
    log.commit("foo", "bar", 0, 101)
    log.marker(5, "COMMIT")
    r = log.replay()
    assert r.committed == {(0, "foo", "bar", 0): off(101, 1)}
    assert r.pending == {}


def test_interleaved_producers_on_the_same_key():
    # Kafka: OMMT.testOffsetCommitsNumberMetricWithTransactionalOffsets (markers in commit order), then the
    # same log with the markers reversed: the older record loses whichever marker comes last.
    def build(order):
        log = Log()
        log.commit("foo", "bar", 0, 100, pid=4)
        log.commit("foo", "bar", 0, 101, pid=5)
        log.commit("foo", "bar", 1, 200, pid=6)
        for pid in order:
            log.marker(pid, "COMMIT")
        return log.replay()

    expected = {(0, "foo", "bar", 0): off(101, 1), (0, "foo", "bar", 1): off(200, 2)}
    for order in ((4, 5, 6), (6, 5, 4)):
        r = build(order)
        assert r.committed == expected, order
        assert r.pending == {}


def test_interleaved_producers_one_aborts():
    log = Log()
    log.commit("g", "t", 0, 10, pid=1)
    log.commit("g", "t", 0, 20, pid=2)
    log.commit("g", "t", 0, 30, pid=1)  # same producer, same key: replaces its own pending entry
    log.marker(1, "ABORT")
    r = log.replay()
    assert r.committed == {}
    assert r.pending == {(0, "g", "t", 0, 2): PendingState(20, 1)}
    log.marker(2, "COMMIT")
    log.marker(2, "COMMIT")  # a second marker finds nothing pending
    r = log.replay()
    assert r.committed == {(0, "g", "t", 0): off(20, 1)}
    assert r.pending == {}


def test_transactional_tombstone_removes_committed_and_every_producers_pending():
    # A tombstone in a transactional batch (producer id 7 on a null value) is not itself pending: it removes
    # the committed offset and the key from every open transaction, whichever producer wrote it.
    log = Log()
    log.commit("g", "t", 0, 1)
    log.commit("g", "t", 0, 2, pid=7)
    log.commit("g", "t", 0, 3, pid=8)
    log.commit("g", "t", 1, 4, pid=8)
    log.delete("g", "t", 0, pid=7)
    r = log.replay()
    assert r.committed == {}
    assert r.pending == {(0, "g", "t", 1, 8): PendingState(4, 3)}
    log.marker(7, "COMMIT")
    log.marker(8, "COMMIT")
    r = log.replay()
    assert r.committed == {(0, "g", "t", 1): off(4, 3)}
    assert r.pending == {}


def test_tombstone_then_recommit_in_same_transaction():
    log = Log()
    log.commit("g", "t", 0, 1, pid=3)
    log.delete("g", "t", 0)
    log.commit("g", "t", 0, 2, pid=3)
    log.marker(3, "COMMIT")
    assert log.replay().committed == {(0, "g", "t", 0): off(2, 2)}


def test_coordinator_partitions_are_independent():
    log = Log()
    log.commit("g", "t", 0, 1, pid=5, coordinator=0)
    log.commit("g", "t", 0, 2, coordinator=1)
    log.marker(5, "COMMIT", coordinator=1)  # pid 5 has nothing pending on partition 1
    log.delete("g", "t", 0, coordinator=1)  # does not reach partition 0
    log.delete_group("g", coordinator=0)  # nor this partition 1
    r = log.replay()
    assert r.committed == {}
    assert r.pending == {(0, "g", "t", 0, 5): PendingState(1, 0)}
    assert r.groups == {(1, "g"): SIMPLE}
    log.marker(5, "COMMIT", coordinator=0)
    assert log.replay().committed == {(0, "g", "t", 0): off(1, 0)}


# --- groups ----------------------------------------------------------------------------------------------


def test_aborted_transactional_commit_still_created_the_simple_group():
    log = Log()
    log.commit("g", "t", 0, 1, pid=2)
    log.marker(2, "ABORT")
    r = log.replay()
    assert (r.committed, r.pending) == ({}, {})
    assert r.groups == {(0, "g"): SIMPLE}


def test_group_metadata_record():
    # Kafka: GMMT.testReplayGroupMetadataRecords.
    log = Log()
    log.group("group-id", members=("member-0", "member-1"), generation=1, leader="member-0", protocol="range")
    assert log.replay().groups == {
        (0, "group-id"): GroupState("consumer", "Stable", 1, "range", "member-0", T, ("member-0", "member-1"), False)
    }


def test_group_tombstone_removes_the_group_not_its_offsets():
    # Kafka: GCST.testReplayGroupMetadataWithNullValue (dispatch); spec §7.3 and §12 ("orphan" offsets).
    log = Log()
    log.group("g", members=("m1",), leader="m1")
    log.commit("g", "t", 0, 7)
    log.commit("g", "t", 1, 8, pid=4)
    log.delete_group("g")
    r = log.replay()
    assert r.groups == {}
    assert r.committed == {(0, "g", "t", 0): off(7, 1)}
    assert r.pending == {(0, "g", "t", 1, 4): PendingState(8, 2)}
    log.commit("g", "t", 0, 9)  # a later commit finds no group and creates a simple one
    assert log.replay().groups == {(0, "g"): SIMPLE}


def test_group_replaced_by_later_group_record():
    log = Log()
    log.group("g", members=("m1", "m2"), generation=3, leader="m1", state_ts=T)
    log.commit("g", "t", 0, 1)
    log.group("g", members=(), generation=4, protocol=None, leader=None, state_ts=T + 5)
    r = log.replay()
    assert r.groups == {(0, "g"): GroupState("consumer", "Empty", 4, None, None, T + 5, (), False)}
    assert r.committed == {(0, "g", "t", 0): off(1, 1)}


def test_group_record_replaces_a_simple_group_and_commits_do_not_replace_it_back():
    log = Log()
    log.commit("g", "t", 0, 1)
    log.group("g", members=("m1",), generation=1, leader="m1", protocol_type="connect", protocol="sessioned")
    log.commit("g", "t", 0, 2)
    assert log.replay().groups == {(0, "g"): GroupState("connect", "Stable", 1, "sessioned", "m1", T, ("m1",), False)}


def test_group_record_without_protocol_type_or_timestamp():
    # newEmptyGroupMetadataRecord (protocolType "", generation 0) loads as a simple-looking group; v0/v1
    # values have no currentStateTimestamp, and -1 means absent too.
    log = Log()
    log.group("a", protocol_type="", generation=0, protocol=None, version=3, state_ts=-1)
    log.group("b", protocol_type="", generation=0, protocol=None, version=0)
    log.group("c", members=("m",), protocol_type="", generation=2, leader="m", version=1)
    assert log.replay().groups == {
        (0, "a"): SIMPLE,
        (0, "b"): SIMPLE,
        (0, "c"): GroupState(None, "Stable", 2, "range", "m", None, ("m",), False),
    }


# --- what is skipped or ignored -------------------------------------------------------------------------


def test_undecodable_records_are_skipped_and_counted_other_types_ignored():
    log = Log()
    good_key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    log.add(None, b"\x00\x03")  # null key
    log.add(b"\x00", None)  # truncated key
    log.add(b"\x00\x63abc", None)  # unknown record type 99
    log.add(good_key, b"\x00\x09" + b"\x00" * 20)  # unknown value version
    log.add(good_key, b"")  # empty value
    log.add(encode_key(2, {"group": "g"}), b"\x00\x03\x00")  # truncated group value
    log.add(encode_key(3, {"GroupId": "g"}), b"\x00\x00garbage")  # type 3: not modelled, not decoded
    log.add(None, None, pid=5, control="UNKNOWN")  # other control types are ignored
    log.commit("g", "t", 0, 1)
    r = log.replay()
    assert r.skipped == 6
    assert r.committed == {(0, "g", "t", 0): off(1, 8)}
    assert r.groups == {(0, "g"): SIMPLE}


def test_fifteen_thousand_records():
    log = Log()
    for i in range(5000):
        g = f"g{i % 50}"
        log.commit(g, "t", i % 7, i, coordinator=i % 3)
        log.commit(g, "t", i % 7, i + 1, pid=100 + i % 4, coordinator=i % 3)
        log.marker(100 + i % 4, "COMMIT" if i % 2 else "ABORT", coordinator=i % 3)
    r = log.replay()
    assert len(log.entries) == 15000
    assert r.pending == {}
    assert r.groups == {(c, f"g{n}"): SIMPLE for c in range(3) for n in range(50)}
    assert r.skipped == 0
    # Every key's last record pair is (plain commit of i, transactional commit of i + 1); which one is committed
    # depends only on whether the transaction of that last pair committed.
    last = {}
    for i in range(5000):
        last[(i % 3, f"g{i % 50}", "t", i % 7)] = i
    assert {k: v.offset for k, v in r.committed.items()} == {k: i + 1 if i % 2 else i for k, i in last.items()}
