"""The reduction (jobs.replay.reduction) on small Arrow logs: what it folds across a task's batches and what it
keeps whole, and what the run counts of the rows it gives (jobs.replay.counts)."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa

from jobs.decode.check import check
from jobs.replay.counts import count_rows, total
from jobs.replay.records import TIMESTAMP, records
from jobs.replay.reduction import combine, prefold
from offsets_codec import encode_key, encode_value

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0_US = int(T0.timestamp() * 1_000_000)
COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"


def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int) -> bytes:
    return encode_value(1, 3, {"offset": offset, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})


def _log(rows: list[tuple]) -> pa.Table:
    """(key, value, offset, seconds after T0, producer_id, is_control) as raw columns, coordinator partition 0."""
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([T0_US + r[3] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[4] for r in rows], pa.int64()), "is_control": pa.array([r[5] for r in rows]),
    })


def _checked(log: pa.Table, *cuts: int) -> list[pa.Table]:
    """The log checked in batches cut at `cuts`, as a task reads it."""
    bounds = [0, *cuts, log.num_rows]
    return [check(records(log.slice(a, b - a))) for a, b in zip(bounds, bounds[1:])]


def test_a_task_keeps_each_keys_newest_plain_commit_and_every_other_record_whole():
    a, b = _key("a"), _key("b")
    log = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, b"\x00\x03broken", 1, 1, -1, False),  # fails the check: kept whole, never folded into a's newest
        (a, _commit(3), 2, 2, -1, False),
        (b, _commit(1), 3, 3, 7, False),  # transactional: kept whole
        (COMMIT, None, 4, 4, 7, True),  # a COMMIT marker
        (b, None, 5, 5, -1, False),  # a tombstone: reducible
        (a, _commit(9), 6, 100, -1, False),  # after as_of: its own fold
    ])
    batches = _checked(log, 3)  # a key's records span batches: folded across them
    out = pa.concat_tables(prefold(batches, T0_US + 50_000_000)).sort_by("record_offset").to_pylist()
    got = [(r["record_offset"], r["records"], r["reduced"], r["after_as_of"]) for r in out]
    assert got == [(1, 1, False, False), (2, 2, True, False), (3, 1, False, False), (4, 1, False, False),
                   (5, 1, True, False), (6, 1, True, True)]
    assert out[1]["newest_timestamp"] == datetime.fromtimestamp(T0.timestamp() + 2, timezone.utc)
    assert out[0]["error"] is not None


def test_the_counts_of_a_reduced_log_are_the_records_it_stands_for():
    """What the run summary counts, from a log reduced in two batches and combined: a malformed control key (an
    error), a marker of an unknown type (transactional, not an error), a bad key's two records (each its own error:
    the check comes before the fold, so they are never folded), an undecodable group record, a record after as_of."""
    bad_key = b"\x00\x01\x00\x03ab"  # an offset-commit key cut short: its values look right
    log = _log([
        (_key("a"), _commit(1), 0, 0, -1, False),
        (_key("a"), _commit(2), 1, 1, -1, False),
        (_key("b"), _commit(1), 2, 2, 7, False),
        (COMMIT, None, 3, 3, 7, True),
        (b"\x80\x00\x00\x01", None, 4, 4, 7, True),  # malformed
        (b"\x00\x00\x00\x05", None, 5, 5, 7, True),  # an unknown marker type
        (bad_key, _commit(1), 6, 6, -1, False),
        (bad_key, _commit(2), 7, 7, -1, False),
        (encode_key(2, {"group": "g"}), b"\x00\x03junk", 8, 8, -1, False),  # undecodable group metadata
        (_key("a"), _commit(3), 9, 9, -1, False),
        (_key("a"), _commit(4), 10, 10, -1, False),  # after as_of
    ])
    as_of_us = T0_US + 9 * 1_000_000
    rows = combine([pa.concat_tables(prefold(_checked(log, 7), as_of_us))])
    folded = {r["record_offset"]: r["records"] for r in rows.to_pylist()}
    assert folded == {2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 3, 10: 1}
    summary = total(count_rows(rows, as_of_us))
    assert (summary["records_read"], summary["records_quarantined"], summary["records_after_as_of"]) == (11, 4, 1)
    assert summary["transactional_records"] == 4
    assert summary["records_by_type"] == {"OffsetCommit": 5, "TransactionMarker": 2}
