"""The check (jobs.decode.check): `check` gives every record of a log the verdict the codec gives it one record at a
time (`check_record`), reading in bulk only what the bulk reader proves; markers are read from their keys."""
from __future__ import annotations

import random

import pyarrow as pa
from offset_corpus import commit_values, damaged_values
from offsets_log import T0, OffsetsLog, member

from jobs.base.arrow import TIMESTAMP
from jobs.decode.check import MALFORMED_CONTROL_KEY, check, check_record
from jobs.replay.records import records
from offsets_codec import encode_key, encode_value

KEY = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
VALUE = encode_value(1, 3, {"offset": 1, "leaderEpoch": -1, "metadata": "", "commitTimestamp": T0})


def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int) -> bytes:
    return encode_value(1, 3, {"offset": offset, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})


def _raw(rows: list[tuple]) -> pa.Table:
    """(key, value, is_control) as the contract's raw columns, on coordinator partition 0, one second apart."""
    n = len(rows)
    return pa.table({"key": pa.array([r[0] for r in rows], pa.binary()),
                     "value": pa.array([r[1] for r in rows], pa.binary()),
                     "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64()),
                     "timestamp": pa.array([T0 * 1000 + i * 1_000_000 for i in range(n)], TIMESTAMP),
                     "producer_id": pa.array([7 if r[2] else -1 for r in rows], pa.int64()),
                     "is_control": pa.array([r[2] for r in rows])})


def test_check_gives_each_row_the_codecs_verdict_and_reads_markers_from_their_keys():
    """Proven offset commits (both key types, a tombstone) are read in bulk; every other record but a control
    record gets the codec's verdict; a control record has no type or group, its marker read from its key, and an
    error only when Kafka could not read that key."""
    group = encode_key(2, {"group": "g"})
    rows = [
        (encode_key(0, {"group": "old", "topic": "t", "partition": 1}), _commit(1), False),
        (_key("a"), _commit(2), False),
        (_key("a"), None, False),  # a tombstone
        (_key("gr\u00fcn"), _commit(3), False),  # non-ASCII: the codec's
        (_key("a"), b"\x00\x03broken", False),  # a damaged value
        (b"\x00\x01\x00", _commit(4), False),  # a damaged key
        (group, None, False),  # a group tombstone
        (b"\x00\x2a\x00\x01g", b"x", False),  # an unknown record type
        (b"\x00\x00\x00\x01", None, True),  # a COMMIT marker
        (b"\x80", None, True),  # a malformed control key
    ]
    got = check(records(_raw(rows))).select(["record_type", "group_id", "transaction_marker", "error"]).to_pylist()
    want = [check_record(key, value) if not control else (None, None, None) for key, value, control in rows]
    want[-1] = (None, None, MALFORMED_CONTROL_KEY)
    assert [(r["record_type"], r["group_id"], r["error"]) for r in got] == want
    assert want[0][:2] == (0, "old") and want[3][1] == "gr\u00fcn" and all(w[2] for w in want[4:6] + want[7:8])
    assert [r["transaction_marker"] for r in got] == [None] * 8 + ["COMMIT", None]


def test_check_gives_every_row_of_a_mixed_log_the_codecs_verdict():
    """A log of every kind of record: commits of every version (valid, damaged, random bytes) under valid and
    damaged keys, both offset key types, tombstones, classic group metadata, modern group records; the bulk
    check's verdict of each row is check_record's."""
    rng = random.Random(12)
    values = commit_values(rng)
    values += damaged_values(rng, values)
    log = OffsetsLog()
    for i, value in enumerate(values):
        key = encode_key(i % 2, {"group": rng.choice(["g", "h", "gr\u00fcn", ""]), "topic": "t", "partition": i % 3})
        if i % 17 == 0:
            key = key[:-1]  # cut short
        log.raw(key, None if i % 11 == 0 else value, T0)
        if i % 40 == 0:
            log.group("g", T0, members=[member("m1", ["t"], {"t": [0]})])
            log.group("h", T0, members=[member("m2", ["t"], subscription=b"\x00")])  # member bytes are not checked
            log.delete_group("h", T0)
            log.record("ConsumerGroupMetadata", {"GroupId": "modern"}, {"Epoch": i}, T0)
            log.raw(encode_key(2, {"group": "g"}), b"\x00\x03junk", T0)
    table = log.table(batch_metadata=False)
    got = check(records(table)).select(["record_type", "group_id", "error"]).to_pylist()
    want = [check_record(k, v) for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist())]
    assert [(r["record_type"], r["group_id"], r["error"]) for r in got] == want
    kinds = {(t, error is None) for t, _, error in want}
    assert {(0, True), (1, True), (0, False), (1, False), (2, True), (2, False), (3, True)} <= kinds


def test_check_record_reports_type_group_and_error():
    assert check_record(KEY, VALUE) == (1, "g", None)
    assert check_record(KEY, None) == (1, "g", None)  # a tombstone is a valid record
    assert check_record(KEY, b"\x00\x09" + VALUE[2:]) == (1, None, "unknown value version 9 for record type 1")
    # the key cache must not leak one record's value error into the next record with the same key
    assert check_record(KEY, VALUE) == (1, "g", None)
    assert check_record(b"\x00\x2a\x00\x01g", VALUE) == (42, None, "unknown record type 42")
    assert check_record(b"\x00\x2a\x00\x01g", None) == (42, None, "unknown record type 42")  # cached too
    assert check_record(None, VALUE)[2] is not None and check_record(b"\x00", None)[0] is None
