"""What the early reduction's worker computes beside the combine, against what Spark computes from the same reduced
log: the replay's offsets (jobs.task_offsets against jobs.replay), with jobs.arrow_check's reading of the tagged
topic id they decode, and the run's counts (jobs.partial_reduce.count_rows against jobs.pipeline.record_counts)."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from offset_corpus import commit_values, damaged_values

from jobs.arrow_check import read
from jobs.partial_reduce import TIMESTAMP, combine, reduce_batches
from jobs.task_offsets import offset_state
from offsets_codec import REGISTRY, decode_value, encode_key, encode_value
from offsets_codec.wire import ZERO_UUID

T0_US = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)
COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"
TOPIC_ID = "AQIDBAUGBwgJCgsMDQ4PEA"


def test_the_tagged_topic_id_is_read_as_the_codec_reads_it():
    """Every v4 value jobs.arrow_check proves: its topicId as the codec decodes it (the codec's ZERO_UUID where
    the tag is absent, where the reader gives null), among valid, damaged and random values."""
    rng = random.Random(4)
    good = commit_values(rng)
    corpus = good + damaged_values(rng, good)
    got = read(pa.array(corpus, pa.binary()), REGISTRY[1].value, ("topicId",))
    v4 = [(value, topic_id) for value, ok, topic_id in zip(corpus, got.ok, got.fields["topicId"].to_pylist())
          if ok and value[:2] == b"\x00\x04"]
    assert len(v4) > 10 and None in {t for _, t in v4} and len({t for _, t in v4}) > 3
    assert [t or ZERO_UUID for _, t in v4] == [decode_value(1, v).data["topicId"] for v, _ in v4]


def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int, version: int = 3, metadata: str = "") -> bytes:
    data = {"offset": offset, "leaderEpoch": 1, "metadata": metadata, "commitTimestamp": 5}
    if version == 4:
        data["topicId"] = TOPIC_ID
    return encode_value(1, version, data)


def _reduced(rows: list[tuple]) -> pa.Table:
    """(key, value, offset, producer_id, is_control) on coordinator partition 0, reduced and combined as the early
    reduction's worker holds them (the last record after as_of)."""
    log = pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([T0_US + r[2] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[3] for r in rows], pa.int64()),
        "producer_epoch": pa.array([0 if r[3] != -1 else -1 for r in rows], pa.int16()),
        "is_control": pa.array([r[4] for r in rows]),
    })
    as_of = T0_US + (log.num_rows - 2) * 1_000_000
    return combine([pa.concat_tables(reduce_batches([log.slice(0, 7), log.slice(7)], as_of, {}))])


def test_the_workers_offsets_are_the_ones_spark_replays_from_the_same_reduced_log(spark):
    """Winners (tombstones included) and open transactional commits, decoded, against jobs.replay's own pass over
    the same rows: plain and transactional commits of every fate, a tombstone that removes an open commit, one
    that comes before another and a key with none, a v4 commit with its topic id, and one with a non-ASCII metadata string that
    only Spark's readers prove (the row the worker leaves unproven, decoded by Spark)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from jobs.reduce import combine_partials
    from jobs.replay import _OFFSET_COLUMNS, fates_of, finished_offsets, offset_winners, pinned_offsets

    a, b, c, d, e, f = (_key(g) for g in "abcdef")
    rows = _reduced([
        (a, _commit(1), 0, -1, False),
        (a, _commit(2), 1, 7, False),  # committed below: a's winner
        (b, _commit(1), 2, 8, False),  # aborted below: b keeps its plain commit
        (b, _commit(0), 3, -1, False),
        (c, _commit(1), 4, 9, False),  # open, then removed by the tombstone
        (COMMIT, None, 5, 7, True),
        (ABORT, None, 6, 8, True),
        (c, None, 7, -1, False),
        (d, None, 8, -1, False),
        (d, _commit(3), 9, 9, False),  # open after the tombstone: pending
        (e, _commit(4, 4), 10, -1, False),
        (_key("é"), _commit(5, 4, "métadonnée"), 11, -1, False),  # unproven here
        (f, _commit(6), 12, 10, False),  # open, no tombstone on its key
        (a, _commit(9), 13, -1, False),  # after as_of
    ])
    state, unproven = offset_state(rows)
    assert unproven == 1

    records = combine_partials(spark.createDataFrame(rows.to_pandas(), from_arrow_schema(rows.schema)), True)
    valid = records.where(F.col("error").isNull() & ~F.col("after_as_of"))
    winners, still_open = offset_winners(valid, fates_of(valid))
    both = winners.select(*_OFFSET_COLUMNS, "key", "value", F.lit(False).alias("open")).unionByName(
        still_open.select(*_OFFSET_COLUMNS, "key", "value", F.lit(True).alias("open")))
    want = pinned_offsets(both, lambda _name, df: df, "offsets", ["open"]).collect()
    computed = spark.createDataFrame(state.to_pandas(), from_arrow_schema(state.schema))
    got = finished_offsets(computed.where("live"), unproven > 0, lambda _name, df: df, "offsets", ["open"]).collect()
    assert sorted(map(repr, got)) == sorted(map(repr, want))
    assert {(r.group_id, r.committed_offset, r.open) for r in got} == {
        ("a", 2, False), ("b", 0, False), ("d", 3, True), ("e", 4, False), ("é", 5, False), ("f", 6, True)}
    assert {r.topic_id for r in got if r.group_id in ("e", "é")} == {TOPIC_ID}
    # The tombstone winners are there too (the groups' newest records: jobs.replay.group_activity).
    key_of = {"coordinator_partition", "record_offset"}
    theirs = {tuple(r) for r in winners.select(*key_of).collect()}
    assert {tuple(r) for r in computed.where("not open").select(*key_of).collect()} == theirs
    assert pc.sum(pc.invert(state.column("live"))).as_py() == 2  # the tombstones of c and d


def test_the_workers_counts_are_the_ones_spark_aggregates_from_the_same_reduced_log(spark):
    """jobs.partial_reduce.count_rows against Spark's aggregation in jobs.pipeline.record_counts: a malformed
    control key (an error Spark adds), a marker of an unknown type (transactional, not an error), a bad key whose
    two records were folded before its check (scattered), an undecodable group record, a record after as_of."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from jobs.partial_reduce import count_rows
    from jobs.pipeline import record_counts
    from jobs.reduce import combine_partials

    bad_key = b"\x00\x01\x00\x03ab"  # an offset-commit key cut short: its values look right
    rows = _reduced([
        (_key("a"), _commit(1), 0, -1, False),
        (_key("a"), _commit(2), 1, -1, False),
        (_key("b"), _commit(1), 2, 7, False),
        (COMMIT, None, 3, 7, True),
        (b"\x80\x00\x00\x01", None, 4, 7, True),  # malformed
        (b"\x00\x00\x00\x05", None, 5, 7, True),  # an unknown marker type
        (bad_key, _commit(1), 6, -1, False),
        (bad_key, _commit(2), 7, -1, False),
        (encode_key(2, {"group": "g"}), b"\x00\x03junk", 8, -1, False),  # undecodable group metadata
        (_key("a"), _commit(3), 9, -1, False),
        (_key("a"), _commit(4), 10, -1, False),  # after as_of
    ])
    as_of = datetime.fromtimestamp((T0_US + 9 * 1_000_000) / 1e6, timezone.utc)
    frame = combine_partials(spark.createDataFrame(rows.to_pandas(), from_arrow_schema(rows.schema)), True)
    want = record_counts(frame, as_of)
    got = record_counts(frame.limit(0), as_of, count_rows(rows))
    assert got == want
    assert (want["records_read"], want["records_quarantined"], want["records_after_as_of"]) == (11, 4, 1)
    assert want["transactional_records"] == 4 and want["scattered_bad_keys"] == 1
