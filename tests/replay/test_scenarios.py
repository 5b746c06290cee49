"""Scenario tests for replay (spec §7.2-§7.3), group identity, expiry (§8), members, quarantine and lag: whole
rebuilds by the local runner in this process (tests/runs.py), their tables compared as rows.

Each scenario is a log written with the project's encoder; expectations are worked out from the spec. One
scenario is also rebuilt by the Spark runner, whose tables must be the local runner's.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from offsets_log import DAY, HOUR, MINUTE, T0, WEEK, OffsetsLog, member
from runs import rebuild_tables, utc_ms as utc


def rows_by(rows: list[dict], *key: str) -> dict:
    return {tuple(r[k] for k in key) if len(key) > 1 else r[key[0]]: r for r in rows}


def select(rows: list[dict], *columns: str) -> list[tuple]:
    """The rows' `columns` as tuples, in a stable order (nulls allowed)."""
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def scenario(log: OffsetsLog, base, **options: Any) -> SimpleNamespace:
    """A log rebuilt once by the local runner, and its tables."""
    return SimpleNamespace(log=log, tables=rebuild_tables(log, base, **options))


# --- offsets: last write wins, tombstones, legacy type 0 -----------------------------------------


def offsets_log(coordinator: int = 0) -> OffsetsLog:
    log = OffsetsLog()
    log.commit("g1", "t", 0, offset=10, at=T0, coordinator=coordinator)  # 0
    log.commit("g1", "t", 0, offset=20, at=T0 + MINUTE, coordinator=coordinator)  # 1: newer commit wins
    log.commit("g1", "t", 1, offset=5, at=T0 + MINUTE, coordinator=coordinator)  # 2
    log.delete_offset("g1", "t", 1, at=T0 + 2 * MINUTE, coordinator=coordinator)  # 3: tombstone deletes t-1
    log.commit("g1", "t", 2, offset=7, at=T0 + 2 * MINUTE, record_type=0, version=0,
               coordinator=coordinator)  # 4: 0.8.2 legacy type
    log.commit("g1", "t", 2, offset=8, at=T0 + 3 * MINUTE, version=1, expire=T0 + 3 * WEEK,
               coordinator=coordinator)  # 5: type 1 wins
    log.commit("g1", "t", 3, offset=1, at=T0 + 3 * MINUTE, leader_epoch=4, metadata="m", coordinator=coordinator)  # 6
    log.commit("g1", "t", 3, offset=2, at=T0 + 4 * MINUTE, record_type=0, version=0,
               coordinator=coordinator)  # 7: legacy type wins
    log.commit("g2", "u", 0, offset=99, at=T0, coordinator=7, version=4, topic_id="AQIDBAUGBwgJCgsMDQ4PEA")
    return log


@pytest.fixture(scope="module")
def offsets_scenario(tmp_path_factory):
    return scenario(offsets_log(), tmp_path_factory.mktemp("offsets"), as_of_ms=T0 + 10 * MINUTE, retention_ms=WEEK)


def test_newest_offset_record_per_key_wins_and_tombstones_delete(offsets_scenario):
    got = select(offsets_scenario.tables["committed_offsets"], "group_id", "topic", "partition", "committed_offset",
                 "record_offset", "coordinator_partition")
    assert got == [("g1", "t", 0, 20, 1, 0), ("g1", "t", 2, 8, 5, 0), ("g1", "t", 3, 2, 7, 0), ("g2", "u", 0, 99, 0, 7)]


def test_offset_value_fields_follow_the_contract(offsets_scenario):
    rows = rows_by(offsets_scenario.tables["committed_offsets"], "topic", "partition")
    assert rows[("t", 2)]["expire_timestamp"] == utc(T0 + 3 * WEEK)  # v1 expireTimestamp
    assert rows[("t", 2)]["leader_epoch"] is None and rows[("t", 2)]["metadata"] == ""
    assert rows[("t", 0)]["expire_timestamp"] is None  # v3 has none
    assert rows[("t", 0)]["commit_timestamp"] == utc(T0 + MINUTE)
    assert rows[("u", 0)]["topic_id"] == "AQIDBAUGBwgJCgsMDQ4PEA" and rows[("u", 0)]["value_version"] == 4
    assert rows[("t", 0)]["as_of"] == utc(T0 + 10 * MINUTE)


def test_groups_with_only_offsets_are_simple_groups(offsets_scenario):
    got = select(offsets_scenario.tables["consumer_groups"], "group_id", "group_type", "protocol_type", "state",
                 "generation", "member_count", "offset_count", "coordinator_partition", "last_record_offset",
                 "last_record_timestamp")
    assert got == [("g1", "classic", None, "Empty", 0, 0, 3, 0, 7, utc(T0 + 4 * MINUTE)),
                   ("g2", "classic", None, "Empty", 0, 0, 1, 7, 0, utc(T0))]


# --- classic group identity -----------------------------------------------------------------------


def classic_log() -> OffsetsLog:
    log = OffsetsLog()
    two = [member("m1", ["t"], {"t": [0]}), member("m2", ["t"], {"t": [1]})]
    log.group("stable", T0, members=two, generation=3, protocol="range")
    log.group("empty", T0, members=two, generation=1)
    log.commit("empty", "t", 0, 1, T0 + MINUTE)
    log.group("empty", T0 + HOUR, members=[], generation=2)  # last member left
    log.group("deleted", T0, members=two)
    log.commit("deleted", "t", 0, 1, T0)
    log.delete_offset("deleted", "t", 0, T0 + MINUTE)
    log.delete_group("deleted", T0 + MINUTE)
    log.group("replaced", T0, members=two, generation=1, protocol="range")
    log.group("replaced", T0 + MINUTE, members=[member("m9", ["t"], {"t": [0, 1]})], generation=5,
              protocol="roundrobin")
    log.group("reborn", T0, members=two)
    log.commit("reborn", "t", 0, 1, T0)
    log.delete_group("reborn", T0 + MINUTE)
    log.commit("reborn", "t", 0, 2, T0 + 2 * MINUTE)  # a commit after the tombstone: a new simple group
    log.group("orphan", T0, members=two)
    log.commit("orphan", "t", 0, 1, T0)
    log.delete_group("orphan", T0 + MINUTE)  # no offset tombstones: the offsets are left behind
    log.group("empty-no-offsets", T0, members=[])
    log.group("brand-new", T0, members=[], protocol_type="", generation=0)  # new coordinator's first record
    log.commit("brand-new", "t", 0, 3, T0)
    return log


@pytest.fixture(scope="module")
def classic_scenario(tmp_path_factory):
    return scenario(classic_log(), tmp_path_factory.mktemp("classic"), as_of_ms=T0 + 2 * HOUR, retention_ms=WEEK)


def test_classic_group_state_comes_from_its_newest_type2_record(classic_scenario):
    got = select(classic_scenario.tables["consumer_groups"], "group_id", "protocol_type", "state", "generation",
                 "protocol", "leader_id", "member_count", "offset_count", "is_orphan")
    assert got == select([
        ("stable", "consumer", "Stable", 3, "range", "m1", 2, 0, False),
        ("empty", "consumer", "Empty", 2, None, None, 0, 1, False),
        ("replaced", "consumer", "Stable", 5, "roundrobin", "m9", 1, 0, False),
        ("reborn", None, "Empty", 0, None, None, 0, 1, False),
        ("orphan", None, "Empty", 0, None, None, 0, 1, True),
        ("brand-new", None, "Empty", 0, None, None, 0, 1, False),
    ], *range(9))


def test_state_timestamp_and_metadata_offset(classic_scenario):
    groups = rows_by(classic_scenario.tables["consumer_groups"], "group_id")
    assert groups["empty"]["current_state_timestamp"] == utc(T0 + HOUR)
    assert groups["orphan"]["current_state_timestamp"] is None
    assert groups["replaced"]["metadata_record_offset"] is not None
    assert groups["orphan"]["metadata_record_offset"] is None


def test_members_belong_only_to_existing_groups(classic_scenario):
    assert select(classic_scenario.tables["group_members"], "group_id", "member_id") == [
        ("replaced", "m9"), ("stable", "m1"), ("stable", "m2")]


# --- point in time --------------------------------------------------------------------------------


def test_as_of_replays_only_records_up_to_that_moment(tmp_path):
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0]})])
    log.commit("g", "t", 0, 1, T0)
    log.commit("g", "t", 0, 2, T0 + HOUR)
    log.delete_offset("g", "t", 0, T0 + 2 * HOUR)
    log.delete_group("g", T0 + 2 * HOUR)

    def at(name: str, as_of_ms: int) -> dict:
        return rebuild_tables(log, tmp_path / name, as_of_ms=as_of_ms, retention_ms=WEEK)

    early = at("early", T0 + 30 * MINUTE)
    assert select(early["committed_offsets"], "group_id", "committed_offset") == [("g", 1)]
    assert select(early["consumer_groups"], "group_id", "state", "last_record_offset") == [("g", "Stable", 1)]
    exact = at("exact", T0 + HOUR)  # a record at exactly as_of is included
    assert [r["committed_offset"] for r in exact["committed_offsets"]] == [2]
    late = at("late", T0 + 3 * HOUR)
    assert late["committed_offsets"] == [] and late["consumer_groups"] == []


# --- expiry ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expiry_scenario(tmp_path_factory):
    """Retention of one day, as of T0 + 10 days."""
    log = OffsetsLog()
    # simple groups: commit time
    log.commit("s-old", "t", 0, 1, T0)
    log.commit("s-fresh", "t", 0, 1, T0 + 9 * DAY + 12 * HOUR)
    log.commit("s-boundary", "t", 0, 1, T0 + 9 * DAY)  # deadline == as_of: expired
    # explicit expireTimestamp (value v1) replaces the deadline
    log.commit("v1-early", "t", 0, 1, T0 + 9 * DAY + 20 * HOUR, version=1, expire=T0 + 9 * DAY + 22 * HOUR)
    log.commit("v1-late", "t", 0, 1, T0, version=1, expire=T0 + 20 * DAY)
    # Empty classic groups: from when the group became Empty
    log.commit("e-recent", "t", 0, 1, T0)
    log.group("e-recent", T0 + 9 * DAY + 12 * HOUR, members=[])
    log.commit("e-old", "t", 0, 1, T0 + DAY)
    log.commit("e-old", "t", 1, 1, T0 + DAY)
    log.group("e-old", T0 + 2 * DAY, members=[])
    log.commit("e-v1", "t", 0, 1, T0 + 9 * DAY + 12 * HOUR)
    log.commit("e-v1", "t", 1, 1, T0)
    log.group("e-v1", T0, members=[], version=1)  # no currentStateTimestamp: commit time
    # Stable consumer group: subscribed topics never expire, the rest by commit time
    log.commit("st-consumer", "sub", 0, 1, T0)
    log.commit("st-consumer", "unsub", 0, 1, T0)
    log.commit("st-consumer", "unsub2", 0, 1, T0 + 9 * DAY + 12 * HOUR)
    log.commit("st-consumer", "sub", 1, 1, T0, version=1, expire=T0 + DAY)
    log.group("st-consumer", T0, members=[member("m1", ["sub"], {"sub": [0, 1]})])
    # Stable non-consumer group: nothing expires
    log.commit("st-connect", "t", 0, 1, T0)
    log.group("st-connect", T0, protocol_type="connect", protocol="sessioned",
              members=[member("w1", [], subscription=b"\x00\x01opaque", assignment=b"\x00\x01")])
    # Stable consumer group whose subscription cannot be parsed: subscription unknown, nothing expires
    log.commit("st-unknown", "t", 0, 1, T0)
    log.group("st-unknown", T0, members=[member("m1", [], subscription=b"\xff", assignment=b"")])
    return scenario(log, tmp_path_factory.mktemp("expiry"), as_of_ms=T0 + 10 * DAY, retention_ms=DAY)


def test_expiry_splits_offsets_at_as_of(expiry_scenario):
    live = rows_by(expiry_scenario.tables["committed_offsets"], "group_id", "topic", "partition")
    expired = rows_by(expiry_scenario.tables["expired_offsets"], "group_id", "topic", "partition")
    assert {k: v["expires_at"] for k, v in live.items()} == {
        ("s-fresh", "t", 0): utc(T0 + 10 * DAY + 12 * HOUR),
        ("v1-late", "t", 0): utc(T0 + 20 * DAY),
        ("e-recent", "t", 0): utc(T0 + 10 * DAY + 12 * HOUR),
        ("e-v1", "t", 0): utc(T0 + 10 * DAY + 12 * HOUR),
        ("st-consumer", "sub", 0): None,
        ("st-consumer", "sub", 1): None,  # subscribed: its explicit expireTimestamp is never looked at
        ("st-consumer", "unsub2", 0): utc(T0 + 10 * DAY + 12 * HOUR),
        ("st-connect", "t", 0): None,
        ("st-unknown", "t", 0): None,
    }
    assert {k: v["expired_at"] for k, v in expired.items()} == {
        ("s-old", "t", 0): utc(T0 + DAY),
        ("s-boundary", "t", 0): utc(T0 + 10 * DAY),
        ("v1-early", "t", 0): utc(T0 + 9 * DAY + 22 * HOUR),
        ("e-old", "t", 0): utc(T0 + 3 * DAY),
        ("e-old", "t", 1): utc(T0 + 3 * DAY),
        ("e-v1", "t", 1): utc(T0 + DAY),
        ("st-consumer", "unsub", 0): utc(T0 + DAY),
    }
    assert all(v["expires_at"] == v["expired_at"] for v in expired.values())


def test_empty_groups_left_without_offsets_are_deleted(expiry_scenario):
    groups = rows_by(expiry_scenario.tables["consumer_groups"], "group_id")
    assert sorted(groups) == ["e-recent", "e-v1", "s-fresh", "st-connect", "st-consumer", "st-unknown", "v1-late"]
    assert groups["st-consumer"]["offset_count"] == 3 and groups["e-v1"]["offset_count"] == 1


def test_the_spark_runner_writes_the_tables_the_local_runner_writes(spark, tmp_path):
    """The classic identity scenario, with the offsets scenario's records on coordinator partitions of their own,
    rebuilt by both runners: the same tables, row for row."""
    log = classic_log()
    log.rows += offsets_log(coordinator=3).rows  # partitions 3 and 7: the classic scenario has only 0
    options = {"as_of_ms": T0 + 2 * HOUR, "retention_ms": WEEK}
    local = rebuild_tables(log, tmp_path, **options)
    on_spark = rebuild_tables(log, tmp_path, engine="spark", spark=spark, **options)
    assert {r["group_id"] for r in local["consumer_groups"]} >= {"g1", "g2", "stable", "orphan", "reborn"}
    assert set(on_spark) == set(local)
    for table in local:
        if table != "summary":
            assert on_spark[table] == local[table], table


# --- members --------------------------------------------------------------------------------------


def test_members_carry_decoded_subscriptions_and_assignments(tmp_path):
    kafka_go_v1 = bytearray(member("x", ["b", "c"], subscription_version=0)["subscription"])
    kafka_go_v1[1] = 1  # says version 1 but has no OwnedPartitions, as segmentio/kafka-go writes
    log = OffsetsLog()
    log.group("g", T0, members=[
        member("m0", ["a", "b"], {"a": [0, 1], "b": [2]}, subscription_version=0),
        member("m3", ["a"], {"a": [3]}, subscription_version=3, instance_id="static-1", host="/10.0.0.9"),
        member("mgo", ["b", "c"], {}, subscription=bytes(kafka_go_v1)),
    ])
    log.group("c", T0, protocol_type="connect", protocol="sessioned",
              members=[member("w", [], subscription=b"\x00\x01{}", assignment=b"\x00\x01")])
    tables = rebuild_tables(log, tmp_path, as_of_ms=T0, retention_ms=WEEK)
    got = rows_by(tables["group_members"], "member_id")
    assert got["m0"]["subscribed_topics"] == ["a", "b"]
    assert [(p["topic"], p["partition"], p["topic_id"]) for p in got["m0"]["assigned_partitions"]] == [
        ("a", 0, None), ("a", 1, None), ("b", 2, None)]
    assert got["m3"]["group_instance_id"] == "static-1" and got["m3"]["client_host"] == "/10.0.0.9"
    assert got["m3"]["subscription_version"] == 3
    assert got["mgo"]["subscribed_topics"] == ["b", "c"] and got["mgo"]["assigned_partitions"] == []
    assert got["w"]["subscribed_topics"] == [] and got["w"]["assigned_partitions"] == []
    assert got["w"]["member_payload_error"] is None
    assert got["m0"]["session_timeout_ms"] == 45_000 and got["m0"]["rebalance_timeout_ms"] == 300_000
    assert got["m0"]["member_epoch"] is None and got["m0"]["rack_id"] is None


# --- quarantine -----------------------------------------------------------------------------------


def test_undecodable_records_are_quarantined_and_never_replayed(tmp_path):
    from offsets_codec import encode_key, encode_value

    log = OffsetsLog()
    log.commit("g", "t", 0, offset=5, at=T0)  # 0: the last good commit
    good = encode_value(1, 3, {"offset": 6, "leaderEpoch": -1, "metadata": "", "commitTimestamp": T0})
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    log.raw(key, b"\x00\x09" + good[2:], T0)  # 1: unknown value version
    log.raw(key, good[:14], T0)  # 2: truncated
    log.raw(b"\x00\x2a\x00\x01g", None, T0)  # 3: unknown record type 42
    log.raw(b"\x00\x02\x00\x02\xff\xfe", None, T0)  # 4: group key with invalid UTF-8
    log.raw(None, good, T0)  # 5: no key at all
    tables = rebuild_tables(log, tmp_path, as_of_ms=T0, retention_ms=WEEK)
    assert select(tables["committed_offsets"], "committed_offset", "record_offset") == [(5, 0)]
    q = rows_by(tables["quarantine"], "record_offset")
    assert sorted(q) == [1, 2, 3, 4, 5]
    assert q[1]["error"] == "unknown value version 9 for record type 1"
    assert q[2]["error"].startswith("truncated at byte 14 reading")
    assert q[3]["error"] == "unknown record type 42"
    assert q[4]["error"] == "invalid UTF-8 in string group"
    assert "key" in q[5]["error"] and q[5]["key"] is None
    assert q[1]["value"] == b"\x00\x09" + good[2:] and q[1]["record_type"] == 1  # kept whole
    assert q[3]["record_type"] == 42 and q[1]["record_timestamp"] == utc(T0)


# --- lag ------------------------------------------------------------------------------------------


def test_lag_is_end_offset_minus_committed_and_may_be_negative(tmp_path):
    log = OffsetsLog()
    log.commit("g", "t", 0, 90, T0)
    log.commit("g", "t", 1, 120, T0)
    log.commit("g", "v", 0, 1, T0)  # no end offset known: no lag row
    ends = tmp_path / "ends.csv"
    ends.write_text("topic,partition,offset\nt,0,100\nt,1,110\nu,0,5\n")
    lag = rebuild_tables(log, tmp_path, as_of_ms=T0, retention_ms=WEEK, end_offsets=ends)["consumer_lag"]
    # File-based end offsets: no fetch time and no log start offset, so those extra columns are null. One
    # snapshot and no commits: no lag in time unless caught up, no rates.
    columns = ("group_id", "topic", "partition", "committed_offset", "log_end_offset", "lag", "as_of", "lag_seconds",
               "consume_rate", "produce_rate", "catch_up_seconds", "end_offsets_fetched_at", "log_start_offset",
               "below_log_start")
    assert select(lag, *columns) == [("g", "t", 0, 90, 100, 10, utc(T0), None, None, None, None, None, None, None),
                                     ("g", "t", 1, 120, 110, -10, utc(T0), 0.0, None, None, None, None, None, None)]


# --- values the codec reads whole ------------------------------------------------------------------


def test_corrupt_timestamps_become_nulls_not_failures(tmp_path):
    log = OffsetsLog()
    log.commit("g", "t", 0, 1, T0, commit_ts=2**63 - 1)  # an overflow on +retention
    log.commit("g", "t", 1, 1, T0, commit_ts=-(2**63))
    log.commit("g", "t", 2, 1, T0, version=1, expire=2**63 - 1)
    tables = rebuild_tables(log, tmp_path, as_of_ms=T0, retention_ms=WEEK)
    rows = rows_by(tables["committed_offsets"], "partition")
    assert rows[0]["commit_timestamp"] is None and rows[0]["expires_at"] is None  # deadline overflowed: never
    assert rows[1]["commit_timestamp"] is None and rows[2]["expire_timestamp"] is None
    assert sorted(rows) == [0, 1, 2] and tables["expired_offsets"] == []


def test_offset_values_the_bulk_reader_leaves_to_the_codec_are_read_alike(tmp_path):
    """A v3 value, a tombstone of a key never committed, and a v4 value whose 200-byte metadata takes a two-byte
    compact length (one the bulk reader of offset values does not prove, so the Python codec reads it)."""
    log = OffsetsLog()
    log.commit("g", "a", 0, 5, T0, metadata="m", leader_epoch=2)
    log.delete_offset("g", "b", 0, T0)
    log.commit("g", "c", 0, 7, T0, version=4, metadata="x" * 200, topic_id="AQIDBAUGBwgJCgsMDQ4PEA")
    tables = rebuild_tables(log, tmp_path, as_of_ms=T0, retention_ms=WEEK)
    assert select(tables["committed_offsets"], "topic", "committed_offset", "record_offset", "leader_epoch",
                  "metadata", "topic_id", "value_version", "commit_timestamp") == [
        ("a", 5, 0, 2, "m", None, 3, utc(T0)),
        ("c", 7, 2, None, "x" * 200, "AQIDBAUGBwgJCgsMDQ4PEA", 4, utc(T0))]
    assert tables["quarantine"] == []
