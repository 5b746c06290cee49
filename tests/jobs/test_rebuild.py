"""Scenario tests for replay (spec §7.2-§7.3), group identity, expiry (§8), members, quarantine and lag.

Each scenario is a log written with the project's encoder; expectations are worked out from the spec.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from chispa import assert_df_equality
from offsets_log import DAY, HOUR, MINUTE, T0, WEEK, OffsetsLog, member, utc

from jobs.pipeline import check_records, rebuild
from jobs.sources.raw import normalise


def rebuild_log(spark, log: OffsetsLog, as_of_ms: int, retention_ms: int = WEEK, end_offsets=None) -> dict:
    checked = check_records(normalise(log.frame(spark), "test"))
    as_of = datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc)
    return rebuild(checked, as_of, retention_ms, end_offsets)


def rows_by(df, *key: str) -> dict:
    return {tuple(r[k] for k in key) if len(key) > 1 else r[key[0]]: r.asDict() for r in df.collect()}


# --- offsets: last write wins, tombstones, legacy type 0 -----------------------------------------


@pytest.fixture(scope="module")
def offsets_scenario(spark):
    log = OffsetsLog()
    log.commit("g1", "t", 0, offset=10, at=T0)  # 0
    log.commit("g1", "t", 0, offset=20, at=T0 + MINUTE)  # 1: newer commit wins
    log.commit("g1", "t", 1, offset=5, at=T0 + MINUTE)  # 2
    log.delete_offset("g1", "t", 1, at=T0 + 2 * MINUTE)  # 3: tombstone deletes t-1
    log.commit("g1", "t", 2, offset=7, at=T0 + 2 * MINUTE, record_type=0, version=0)  # 4: 0.8.2 legacy type
    log.commit("g1", "t", 2, offset=8, at=T0 + 3 * MINUTE, version=1, expire=T0 + 3 * WEEK)  # 5: type 1 wins
    log.commit("g1", "t", 3, offset=1, at=T0 + 3 * MINUTE, leader_epoch=4, metadata="m")  # 6
    log.commit("g1", "t", 3, offset=2, at=T0 + 4 * MINUTE, record_type=0, version=0)  # 7: legacy type wins
    log.commit("g2", "u", 0, offset=99, at=T0, coordinator=7, version=4, topic_id="AQIDBAUGBwgJCgsMDQ4PEA")
    return rebuild_log(spark, log, as_of_ms=T0 + 10 * MINUTE)


def test_newest_offset_record_per_key_wins_and_tombstones_delete(spark, offsets_scenario):
    got = offsets_scenario["committed_offsets"].select(
        "group_id", "topic", "partition", "committed_offset", "record_offset", "coordinator_partition")
    want = spark.createDataFrame(
        [("g1", "t", 0, 20, 1, 0), ("g1", "t", 2, 8, 5, 0), ("g1", "t", 3, 2, 7, 0), ("g2", "u", 0, 99, 0, 7)],
        "group_id string, topic string, partition int, committed_offset bigint, record_offset bigint, "
        "coordinator_partition int")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_offset_value_fields_follow_the_contract(offsets_scenario):
    rows = rows_by(offsets_scenario["committed_offsets"], "topic", "partition")
    assert rows[("t", 2)]["expire_timestamp"] == utc(T0 + 3 * WEEK)  # v1 expireTimestamp
    assert rows[("t", 2)]["leader_epoch"] is None and rows[("t", 2)]["metadata"] == ""
    assert rows[("t", 0)]["expire_timestamp"] is None  # v3 has none
    assert rows[("t", 0)]["commit_timestamp"] == utc(T0 + MINUTE)
    assert rows[("u", 0)]["topic_id"] == "AQIDBAUGBwgJCgsMDQ4PEA" and rows[("u", 0)]["value_version"] == 4
    assert rows[("t", 0)]["as_of"] == utc(T0 + 10 * MINUTE)


def test_groups_with_only_offsets_are_simple_groups(spark, offsets_scenario):
    got = offsets_scenario["consumer_groups"].select(
        "group_id", "group_type", "protocol_type", "state", "generation", "member_count", "offset_count",
        "coordinator_partition", "last_record_offset", "last_record_timestamp")
    want = spark.createDataFrame(
        [("g1", "classic", None, "Empty", 0, 0, 3, 0, 7, utc(T0 + 4 * MINUTE)),
         ("g2", "classic", None, "Empty", 0, 0, 1, 7, 0, utc(T0))],
        "group_id string, group_type string, protocol_type string, state string, generation int, member_count int, "
        "offset_count int, coordinator_partition int, last_record_offset bigint, last_record_timestamp timestamp")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


# --- classic group identity -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def classic_scenario(spark):
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
    return rebuild_log(spark, log, as_of_ms=T0 + 2 * HOUR)


def test_classic_group_state_comes_from_its_newest_type2_record(spark, classic_scenario):
    got = classic_scenario["consumer_groups"].select(
        "group_id", "protocol_type", "state", "generation", "protocol", "leader_id", "member_count", "offset_count",
        "is_orphan")
    want = spark.createDataFrame([
        ("stable", "consumer", "Stable", 3, "range", "m1", 2, 0, False),
        ("empty", "consumer", "Empty", 2, None, None, 0, 1, False),
        ("replaced", "consumer", "Stable", 5, "roundrobin", "m9", 1, 0, False),
        ("reborn", None, "Empty", 0, None, None, 0, 1, False),
        ("orphan", None, "Empty", 0, None, None, 0, 1, True),
        ("brand-new", None, "Empty", 0, None, None, 0, 1, False),
    ], "group_id string, protocol_type string, state string, generation int, protocol string, leader_id string, "
       "member_count int, offset_count int, is_orphan boolean")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_state_timestamp_and_metadata_offset(classic_scenario):
    groups = rows_by(classic_scenario["consumer_groups"], "group_id")
    assert groups["empty"]["current_state_timestamp"] == utc(T0 + HOUR)
    assert groups["orphan"]["current_state_timestamp"] is None
    assert groups["replaced"]["metadata_record_offset"] is not None
    assert groups["orphan"]["metadata_record_offset"] is None


def test_members_belong_only_to_existing_groups(classic_scenario):
    members = classic_scenario["group_members"].select("group_id", "member_id").collect()
    assert sorted((r.group_id, r.member_id) for r in members) == [
        ("replaced", "m9"), ("stable", "m1"), ("stable", "m2")]


# --- point in time --------------------------------------------------------------------------------


def test_as_of_replays_only_records_up_to_that_moment(spark):
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0]})])
    log.commit("g", "t", 0, 1, T0)
    log.commit("g", "t", 0, 2, T0 + HOUR)
    log.delete_offset("g", "t", 0, T0 + 2 * HOUR)
    log.delete_group("g", T0 + 2 * HOUR)
    early = rebuild_log(spark, log, as_of_ms=T0 + 30 * MINUTE)
    assert [(r.group_id, r.committed_offset) for r in early["committed_offsets"].collect()] == [("g", 1)]
    assert [(r.group_id, r.state, r.last_record_offset) for r in early["consumer_groups"].collect()] == [("g", "Stable", 1)]
    exact = rebuild_log(spark, log, as_of_ms=T0 + HOUR)  # a record at exactly as_of is included
    assert [r.committed_offset for r in exact["committed_offsets"].collect()] == [2]
    late = rebuild_log(spark, log, as_of_ms=T0 + 3 * HOUR)
    assert late["committed_offsets"].count() == 0 and late["consumer_groups"].count() == 0


# --- expiry ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expiry_scenario(spark):
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
    return rebuild_log(spark, log, as_of_ms=T0 + 10 * DAY, retention_ms=DAY)


def test_expiry_splits_offsets_at_as_of(expiry_scenario):
    live = rows_by(expiry_scenario["committed_offsets"], "group_id", "topic", "partition")
    expired = rows_by(expiry_scenario["expired_offsets"], "group_id", "topic", "partition")
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
    groups = rows_by(expiry_scenario["consumer_groups"], "group_id")
    assert sorted(groups) == ["e-recent", "e-v1", "s-fresh", "st-connect", "st-consumer", "st-unknown", "v1-late"]
    assert groups["st-consumer"]["offset_count"] == 3 and groups["e-v1"]["offset_count"] == 1


# --- members --------------------------------------------------------------------------------------


def test_members_carry_decoded_subscriptions_and_assignments(spark):
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
    tables = rebuild_log(spark, log, as_of_ms=T0)
    got = rows_by(tables["group_members"], "member_id")
    assert got["m0"]["subscribed_topics"] == ["a", "b"]
    assert [(p.topic, p.partition, p.topic_id) for p in got["m0"]["assigned_partitions"]] == [
        ("a", 0, None), ("a", 1, None), ("b", 2, None)]
    assert got["m3"]["group_instance_id"] == "static-1" and got["m3"]["client_host"] == "/10.0.0.9"
    assert got["m3"]["subscription_version"] == 3
    assert got["mgo"]["subscribed_topics"] == ["b", "c"] and got["mgo"]["assigned_partitions"] == []
    assert got["w"]["subscribed_topics"] == [] and got["w"]["assigned_partitions"] == []
    assert got["w"]["member_payload_error"] is None
    assert got["m0"]["session_timeout_ms"] == 45_000 and got["m0"]["rebalance_timeout_ms"] == 300_000
    assert got["m0"]["member_epoch"] is None and got["m0"]["rack_id"] is None


# --- quarantine -----------------------------------------------------------------------------------


def test_undecodable_records_are_quarantined_and_never_replayed(spark):
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
    tables = rebuild_log(spark, log, as_of_ms=T0)
    assert [(r.committed_offset, r.record_offset) for r in tables["committed_offsets"].collect()] == [(5, 0)]
    q = {r.record_offset: r for r in tables["quarantine"].collect()}
    assert sorted(q) == [1, 2, 3, 4, 5]
    assert q[1].error == "unknown value version 9 for record type 1"
    assert q[2].error.startswith("truncated at byte 14 reading")
    assert q[3].error == "unknown record type 42"
    assert q[4].error == "invalid UTF-8 in string group"
    assert "key" in q[5].error and q[5].key is None
    assert q[1].value == b"\x00\x09" + good[2:] and q[1].record_type == 1  # kept whole
    assert q[3].record_type == 42 and q[1].record_timestamp == utc(T0)


# --- lag ------------------------------------------------------------------------------------------


def test_lag_is_end_offset_minus_committed_and_may_be_negative(spark):
    log = OffsetsLog()
    log.commit("g", "t", 0, 90, T0)
    log.commit("g", "t", 1, 120, T0)
    log.commit("g", "v", 0, 1, T0)  # no end offset known: no lag row
    ends = spark.createDataFrame([("t", 0, 100), ("t", 1, 110), ("u", 0, 5)], "topic string, partition int, offset bigint")
    got = rebuild_log(spark, log, as_of_ms=T0, end_offsets=ends)["consumer_lag"]
    # File-based end offsets: no fetch time and no log start offset, so those extra columns are null. One
    # snapshot and no commits: no lag in time unless caught up, no rates.
    want = spark.createDataFrame([("g", "t", 0, 90, 100, 10, utc(T0), None, None, None, None, None, None, None),
                                  ("g", "t", 1, 120, 110, -10, utc(T0), 0.0, None, None, None, None, None, None)],
                                 "group_id string, topic string, partition int, committed_offset bigint, "
                                 "log_end_offset bigint, lag bigint, as_of timestamp, lag_seconds double, "
                                 "consume_rate double, produce_rate double, catch_up_seconds double, "
                                 "end_offsets_fetched_at timestamp, log_start_offset bigint, below_log_start boolean")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_corrupt_timestamps_become_nulls_not_failures(spark):
    log = OffsetsLog()
    log.commit("g", "t", 0, 1, T0, commit_ts=2**63 - 1)  # Spark's ANSI mode would overflow on +retention
    log.commit("g", "t", 1, 1, T0, commit_ts=-(2**63))
    log.commit("g", "t", 2, 1, T0, version=1, expire=2**63 - 1)
    tables = rebuild_log(spark, log, as_of_ms=T0)
    rows = rows_by(tables["committed_offsets"], "partition")
    assert rows[0]["commit_timestamp"] is None and rows[0]["expires_at"] is None  # deadline overflowed: never
    assert rows[1]["commit_timestamp"] is None and rows[2]["expire_timestamp"] is None
    assert sorted(rows) == [0, 1, 2] and tables["expired_offsets"].count() == 0


def test_pinned_offsets_run_the_python_codec_only_for_records_native_code_cannot_prove(spark, tmp_path):
    """jobs.replay.pinned_offsets gives committed_offsets' rows, and pins a second, Python pass only when the
    native reader left a record unproven (a compact metadata string of 200 bytes: a two-byte length)."""
    from offsets_codec import encode_key, encode_value
    from jobs.replay import committed_offsets, pinned_offsets

    def pinned(name, df):
        pins.append(name)
        path = str(tmp_path / f"{len(want_pins)}-{name}")
        df.write.parquet(path)
        return spark.read.schema(df.schema).parquet(path)

    def record(offset: int, topic: str, value: bytes | None) -> tuple:
        key = encode_key(1, {"group": "g", "topic": topic, "partition": 0})
        return 0, "g", offset, utc(T0), -1, None, key, value

    schema = ("coordinator_partition int, group_id string, record_offset bigint, record_timestamp timestamp, "
              "producer_id bigint, producer_epoch smallint, key binary, value binary")
    short = encode_value(1, 3, {"offset": 5, "metadata": "m", "commitTimestamp": T0, "leaderEpoch": 2})
    long = encode_value(1, 4, {"offset": 7, "metadata": "x" * 200, "commitTimestamp": T0,
                               "topicId": "AQIDBAUGBwgJCgsMDQ4PEA"})
    for rows, want_pins in (([record(1, "a", short), record(2, "b", None)], ["offsets"]),
                            ([record(1, "a", short), record(3, "c", long)], ["offsets", "offsets_decoded"])):
        pins = []
        winners = spark.createDataFrame(rows, schema)
        got = pinned_offsets(winners, pinned, "offsets")
        assert pins == want_pins
        assert sorted(got.collect()) == sorted(committed_offsets(winners).collect())
        assert {r.metadata for r in got.collect()} == {"m"} | ({"x" * 200} if len(want_pins) == 2 else set())
