"""Both runners against the sequential reference replay (tests/reference_replay.py) on random logs: offset
commits and tombstones, plain and transactional (committed, aborted, still open), tombstones from anyone,
classic group records, records of the modern families (which must not disturb offsets), several coordinator
partitions, and an as_of inside the log. The local runner is checked on many logs; Spark, the same rules in
Spark's tasks, on a few, and the two must agree table for table."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from offsets_log import MINUTE, T0, OffsetsLog, random_log
from reference_replay import LogEntry, replay_log
from runs import rebuild_tables

GROUPS = ("g0", "g1", "g2")
PRODUCERS = (201, 202, 203)
YEAR = 365 * 24 * 60 * MINUTE

operation = st.tuples(
    st.integers(0, 2),  # coordinator partition
    st.sampled_from(["commit", "commit", "commit", "tombstone", "marker", "group", "group_tombstone", "modern"]),
    st.sampled_from(GROUPS), st.sampled_from("ab"), st.integers(0, 1),
    st.sampled_from([-1, -1, *PRODUCERS]),  # producer: -1 plain
    st.sampled_from(["COMMIT", "COMMIT", "ABORT"]),
)


def reference(log: OffsetsLog, as_of_ms: int):
    entries = [LogEntry(r[3], r[4], r[7], {0: "ABORT", 1: "COMMIT"}[r[0][3]] if r[10] else None, r[0], r[1])
               for r in log.rows if r[5] <= as_of_ms]
    return replay_log(entries)


def observed(tables: dict) -> dict:
    """What the reference replay models, as the tables show it."""
    return {
        "committed": {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"]):
                      (r["committed_offset"], r["record_offset"]) for r in tables["committed_offsets"]},
        "pending": {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"], r["producer_id"]):
                    (r["offset"], r["record_offset"]) for r in tables["pending_transactions"]},
        "history": sorted((r["coordinator_partition"], r["record_offset"], (r["group_id"], r["topic"], r["partition"]),
                           r["committed_offset"], r["previous_offset"], r["producer_id"])
                          for r in tables["offset_commits"]),
        "classic": {(r["coordinator_partition"], r["group_id"]): (r["state"], r["generation"], r["protocol_type"])
                    for r in tables["consumer_groups"] if not r["group_id"].startswith("modern-")},
    }


def expected(want) -> dict:
    offsets_of = {(k[0], k[1]) for k in want.committed} | {(k[0], k[1]) for k in want.pending}
    return {
        "committed": {k: (v.offset, v.record_offset) for k, v in want.committed.items()},
        "pending": {k: (v.offset, v.record_offset) for k, v in want.pending.items()},
        "history": sorted(tuple(a) for a in want.history),
        # An Empty group without offsets is deleted by the coordinator's cleanup (retention does not matter); offsets
        # whose group a group tombstone removed are orphans, shown as the simple group the pre-4.0 coordinator
        # loaded them as (is_orphan), which the reference replay (4.0+) does not hold.
        "classic": {**{k: ("Empty", 0, None) for k in offsets_of if k not in want.groups},
                    **{k: (g.state, g.generation, g.protocol_type) for k, g in want.groups.items()
                       if g.state != "Empty" or k in offsets_of}},
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(operations=st.lists(operation, min_size=1, max_size=120), cut=st.floats(0.2, 1.0))
def test_the_local_runner_agrees_with_the_reference_replay(tmp_path_factory, operations, cut):
    log = random_log(operations)
    as_of_ms = T0 + int(len(operations) * cut) * MINUTE
    tables = rebuild_tables(log, tmp_path_factory.mktemp("run"), as_of_ms=as_of_ms, retention_ms=100 * YEAR)
    assert observed(tables) == expected(reference(log, as_of_ms))


@pytest.mark.parametrize("seed", [3, 11])
def test_the_spark_runner_agrees_with_the_local_runner_and_the_reference(spark, tmp_path, seed):
    import random

    rnd = random.Random(seed)
    kinds = ["commit"] * 4 + ["tombstone", "marker", "group", "group_tombstone", "modern"]
    operations = [(rnd.randrange(3), rnd.choice(kinds), rnd.choice(GROUPS), rnd.choice("ab"), rnd.randrange(2),
                   rnd.choice([-1, -1, *PRODUCERS]), rnd.choice(["COMMIT", "COMMIT", "ABORT"])) for _ in range(400)]
    log = random_log(operations)
    as_of_ms = T0 + 300 * MINUTE
    local = rebuild_tables(log, tmp_path, as_of_ms=as_of_ms, retention_ms=100 * YEAR)
    on_spark = rebuild_tables(log, tmp_path, engine="spark", spark=spark, as_of_ms=as_of_ms, retention_ms=100 * YEAR)
    assert observed(local) == expected(reference(log, as_of_ms))
    for table in local:
        if table != "summary":
            assert on_spark[table] == local[table], table
