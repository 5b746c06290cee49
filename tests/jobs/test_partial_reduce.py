"""The reduction begun in a source's tasks (jobs.partial_reduce, jobs.arrow_check, jobs.sources.reduced_dump):
it proves no more than the codec accepts, folds what the Spark reduction folds, and the reduced log it gives
equals the one Spark's own reduction gives, record for record."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from offset_corpus import TEXTS, codec_accepts, commit_values, damaged_values

from jobs.arrow_check import proven
from jobs.partial_reduce import TIMESTAMP, reduce_batches
from offsets_codec import REGISTRY, encode_key, encode_value

VALUE = REGISTRY[1].value
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0_US = int(T0.timestamp() * 1_000_000)


def test_proven_values_are_ones_the_codec_reads():
    rng = random.Random(6)
    good = commit_values(rng)
    corpus = good + damaged_values(rng, good) + [None]
    verdict = proven(pa.array(corpus, pa.binary()), VALUE)
    assert [v for v, ok in zip(corpus, verdict) if ok and not codec_accepts(v)] == []
    # ...and it proves the shapes brokers write: ASCII text (with a one-byte compact length in v4).
    texts = [TEXTS[i % len(TEXTS)] for i in range(len(good))]  # commit_values writes each text per version
    common = [v for v, text in zip(good, texts) if text.isascii() and (v[:2] != b"\x00\x04" or len(text) < 127)]
    assert len(common) == 5 * 4 - 1 and all(proven(pa.array(common, pa.binary()), VALUE))


def test_proven_reads_sliced_and_large_binary_arrays():
    values = [encode_value(1, 3, {"offset": i, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})
              for i in range(6)] + [b"\x00\x03junk"]
    whole = pa.array(values, pa.binary())
    assert list(proven(whole.slice(3), VALUE)) == [True, True, True, False]
    assert list(proven(pa.array(values, pa.large_binary()), VALUE)) == [True] * 6 + [False]


def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int) -> bytes:
    return encode_value(1, 3, {"offset": offset, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})


def _log(rows: list[tuple]) -> pa.Table:
    """(key, value, offset, seconds after T0, producer_id, is_control) on coordinator partition 0."""
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([T0_US + r[3] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[4] for r in rows], pa.int64()), "is_control": pa.array([r[5] for r in rows]),
    })


def test_a_task_keeps_each_keys_newest_plain_commit_and_every_other_record_whole():
    a, b = _key("a"), _key("b")
    log = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, b"\x00\x03broken", 1, 1, -1, False),  # unproven: kept whole, never folded into a's newest
        (a, _commit(3), 2, 2, -1, False),
        (b, _commit(1), 3, 3, 7, False),  # transactional: kept whole
        (b"\x00\x00\x00\x01", None, 4, 4, 7, True),  # a COMMIT marker
        (b, None, 5, 5, -1, False),  # a tombstone: reducible
        (a, _commit(9), 6, 100, -1, False),  # after as_of: its own group
    ])
    batches = [log.slice(0, 3), log.slice(3)]  # a key's records span batches: folded across them
    out = pa.concat_tables(reduce_batches(batches, T0_US + 50_000_000)).sort_by("offset").to_pylist()
    got = [(r["offset"], r["records"], r["reduced"], r["after_as_of"]) for r in out]
    assert got == [(1, 1, False, False), (2, 2, True, False), (3, 1, False, False), (4, 1, False, False),
                   (5, 1, True, False), (6, 1, True, True)]
    assert out[1]["newest_timestamp"] == datetime.fromtimestamp(T0.timestamp() + 2, timezone.utc)


COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"


def test_a_task_folds_transactional_commits_by_the_fate_of_their_producers_next_marker():
    """Without the history a task folds each key's transactional commits per fate, from its producer's next
    marker it holds; a commit without one (still open, or its marker is after as_of) stays whole, and a marker
    after as_of, a malformed one or another producer's decides nothing."""
    a, b = _key("a"), _key("b")
    log = _log([
        (a, _commit(1), 0, 0, 7, False),
        (a, _commit(2), 1, 1, 7, False),
        (b, _commit(1), 2, 2, 8, False),
        (COMMIT, None, 3, 3, 7, True),  # commits 7's a@0 and a@1
        (a, _commit(3), 4, 4, 7, False),
        (ABORT, None, 5, 5, 7, True),  # aborts a@4
        (a, _commit(4), 6, 6, 7, False),
        (b"\x80\x00\x00\x01", None, 7, 7, 8, True),  # a malformed control key: not 8's marker
        (b, _commit(5), 8, 8, 8, False),
        (COMMIT, None, 9, 9, 7, True),  # commits a@6
        (b, b"\x00\x03broken", 10, 10, 8, False),  # unproven: whole
        (COMMIT, None, 11, 100, 8, True),  # after as_of: b's commits stay open
    ])
    spans: dict[int, list[int]] = {}
    batches = [log.slice(0, 4), log.slice(4)]
    out = pa.concat_tables(reduce_batches(batches, T0_US + 50_000_000, spans)).sort_by("offset").to_pylist()
    got = [(r["offset"], r["records"], r["reduced"], r["fate"]) for r in out]
    assert got == [(2, 1, False, None), (3, 1, False, None), (4, 1, True, "ABORT"), (5, 1, False, None),
                   (6, 3, True, "COMMIT"), (7, 1, False, None), (8, 1, False, None), (9, 1, False, None),
                   (10, 1, False, None), (11, 1, False, None)]
    assert spans == {0: [0, 9]}  # the commits held and the markers up to as_of
    # Without spans, nothing transactional is folded (the history needs every commit).
    whole = pa.concat_tables(reduce_batches(batches, T0_US + 50_000_000)).to_pylist()
    assert len(whole) == log.num_rows and not any(r["reduced"] for r in whole)


def test_a_marker_in_another_task_between_a_commit_and_its_found_marker_makes_the_spans_overlap(tmp_path):
    """Task A holds a commit and a COMMIT marker of producer 7; task B, no commit at all, only the producer's
    ABORT marker between them (the commit's true fate). B's span counts its markers, so the spans overlap and
    the caller reduces the dump again without the fold (spans_disjoint)."""
    import json

    from jobs.sources.reduced_dump import spans_disjoint

    a = _key("a")
    task_a = _log([(a, _commit(1), 0, 0, 7, False), (COMMIT, None, 4, 4, 7, True)])
    task_b = _log([(ABORT, None, 2, 2, 7, True)])
    for index, task in enumerate((task_a, task_b)):
        spans: dict[int, list[int]] = {}
        list(reduce_batches([task], None, spans))
        (tmp_path / f"task-{index:05d}.json").write_text(json.dumps(spans))
    assert json.loads((tmp_path / "task-00001.json").read_text()) == {"0": [2, 2]}
    assert not spans_disjoint(tmp_path)
    (tmp_path / "task-00001.json").write_text(json.dumps({"0": [5, 9]}))  # after A's span: disjoint
    assert spans_disjoint(tmp_path)


def test_a_commits_fate_is_its_producers_next_marker_as_spark_resolves_it(spark):
    """next_markers against jobs.transactions.transaction_fates, on random interleavings of two producers'
    commits and markers in two coordinator partitions."""
    from jobs.partial_reduce import markers, next_markers
    from jobs.transactions import transaction_fates

    rng = random.Random(11)
    rows = []
    for offset in range(400):
        partition, producer = rng.choice((0, 1)), rng.choice((7, 8))
        kind = rng.choice(("commit", "commit", "commit", "COMMIT", "ABORT"))
        rows.append((partition, offset, producer, kind))
    table = pa.table({
        "key": pa.array([_key("g") if k == "commit" else (COMMIT if k == "COMMIT" else ABORT) for *_, k in rows],
                        pa.binary()),
        "partition": pa.array([r[0] for r in rows], pa.int32()), "offset": pa.array([r[1] for r in rows], pa.int64()),
        "producer_id": pa.array([r[2] for r in rows], pa.int64()),
        "is_control": pa.array([r[3] != "commit" for r in rows]),
    })
    commits = table.filter(pc.invert(table.column("is_control")))
    fates, positions = next_markers(commits, markers(table))
    ours = list(zip(fates.to_pylist(), positions.to_pylist()))
    frame = spark.createDataFrame(
        [(p, o, pid, b"v" if k == "commit" else None, k if k != "commit" else None) for p, o, pid, k in rows],
        "coordinator_partition int, record_offset bigint, producer_id bigint, value binary, transaction_marker string")
    frame = frame.withColumn("key", frame["value"])
    spark_fates = transaction_fates(frame.where("transaction_marker is null"),
                                    frame.where("transaction_marker is not null"))
    theirs = {(r["coordinator_partition"], r["record_offset"]): (r["fate"], r["marker_offset"])
              for r in spark_fates.collect()}
    want = [theirs[(p, o)] for p, o in zip(commits.column("partition").to_pylist(), commits.column("offset").to_pylist())]
    assert ours == want and {"COMMIT", "ABORT", None} <= {fate for fate, _ in ours}


def test_the_history_applies_a_transactional_commit_at_its_commit_marker():
    """readable_records then applied: plain records and tombstones (a transactional one too) where they are; a
    committed transactional commit at its marker, its own position as source_record_offset; an aborted or open
    one not at all; an unproven value is not readable (the reduced log has it)."""
    from jobs.partial_reduce import applied, markers, readable_records

    a = _key("a")
    log = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, _commit(2), 1, 1, 7, False),  # committed at 3
        (a, None, 2, 2, 8, False),  # a transactional tombstone: where it is
        (COMMIT, None, 3, 3, 7, True),
        (a, _commit(4), 4, 4, 7, False),  # aborted
        (ABORT, None, 5, 5, 7, True),
        (a, b"\x00\x03broken", 6, 6, 7, False),  # not readable
        (a, _commit(7), 7, 7, 8, False),  # open
    ])
    rows, applies = applied(pa.concat_tables(readable_records([log], None)), markers(log))
    rows = rows.filter(pa.array(applies)).to_pylist()
    got = sorted((r["record_offset"], r["source_record_offset"], r["producer_id"], r["committed_offset"]) for r in rows)
    assert got == [(0, 0, -1, 1), (2, 2, 8, None), (3, 1, 7, 2)]


def test_a_reducing_task_gives_the_history_tasks_their_shares_of_the_readable_records(tmp_path):
    """reduce_batches' `history` hook through ShareFiles: each history task's share (shared_records) holds the
    records readable_records gives of its keys, and every task gets every marker."""
    from jobs.partial_reduce import markers, readable_records
    from jobs.sources.reduced_dump import ShareFiles, share_of, shared_records

    keys = [_key(g, p) for g in "abc" for p in range(3)]
    log = _log([(k, _commit(i) if i % 5 else None, i, i, 7 if i % 4 == 0 else -1, False)
                for i, k in enumerate(keys * 3)]
               + [(COMMIT, None, 40, 40, 7, True), (_key("a"), b"\x00\x03no", 41, 41, -1, False)])
    files = ShareFiles(str(tmp_path), 0, 2)
    list(reduce_batches([log], None, {}, files))
    files.close()
    expected = pa.concat_tables(readable_records([log], None))
    for share in (0, 1):
        records, found = shared_records(str(tmp_path), share)
        mine = expected.filter(pa.array(share_of(expected.column("coordinator_partition"), expected.column("key"), 2)
                                        == share))
        assert pa.concat_tables(records).equals(mine) and mine.num_rows
        assert pa.concat_tables(found).equals(markers(log))


def test_readable_records_are_decoded_as_the_native_reader_names_them():
    """Kafka's sentinels as the tables show them: a leader epoch of -1 (or none, before v3) is null."""
    from jobs.partial_reduce import readable_records

    a = _key("a")
    values = [encode_value(1, 3, {"offset": 7, "leaderEpoch": -1, "metadata": "m", "commitTimestamp": 5}),
              encode_value(1, 1, {"offset": 8, "metadata": "", "commitTimestamp": 6, "expireTimestamp": 9}),
              encode_value(1, 4, {"offset": 9, "leaderEpoch": 4, "metadata": "", "commitTimestamp": 7,
                                  "topicId": "AQIDBAUGBwgJCgsMDQ4PEA"}),
              None, b"\x00\x03broken"]
    log = _log([(a, v, i, i, -1, False) for i, v in enumerate(values)])
    rows = pa.concat_tables(readable_records([log], None)).to_pylist()
    got = [(r["record_offset"], r["committed_offset"], r["leader_epoch"], r["metadata"], r["commit_timestamp_ms"])
           for r in rows]
    assert got == [(0, 7, None, "m", 5), (1, 8, None, "", 6), (2, 9, 4, "", 7), (3, None, None, None, None)]
    assert {r["key"] for r in rows} == {a}


def test_a_task_checks_each_row_as_the_codec_does():
    """Proven offset commits (both key types, a tombstone) are read in Arrow; every other record but a control
    record gets the Python codec's verdict; a control record's columns are left to Spark (null)."""
    from jobs.partial_reduce import checked
    from jobs.record_check import check_record

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
    log = _log([(key, value, i, i, -1, control) for i, (key, value, control) in enumerate(rows)])
    got = checked(log).select(["record_type", "group_id", "error"]).to_pylist()
    want = [check_record(key, value) if not control else (None, None, None) for key, value, control in rows]
    assert [(r["record_type"], r["group_id"], r["error"]) for r in got] == want
    assert want[0][:2] == (0, "old") and want[3][1] == "gr\u00fcn" and all(w[2] for w in want[4:6] + want[7:8])


@pytest.mark.parametrize("columns", ["with_batch_metadata", "spark_kafka_source"])
def test_the_reduced_log_and_the_commit_history_are_the_same_whichever_reduces_it(spark, tmp_path, columns):
    """The sample (every record type, transactions, two corrupt records) reduced by Spark alone and by the
    dump's tasks, as of its newest record and as of a moment in its middle; and offset_commits built on each,
    from the log's plain commits as Spark decodes them and as the tasks do. `spark_kafka_source`: the dump has
    only the columns of Spark's Kafka source (no batch metadata) and its timestamps are epoch milliseconds."""
    from pyspark.sql import functions as F

    from jobs.history import offset_commits, start_history_tasks
    from jobs.sources.raw import normalise
    from jobs.records import log_records
    from jobs.reduce import reduce_log
    from jobs.tools.sample import write_sample
    from jobs.sources.reduced_dump import DumpTasks, plan_dump
    from jobs.lake.tables import conform, spark_schema

    write_sample(tmp_path / "dump", 6000, seed=3)
    table = _with_a_whole_key(pq.read_table(tmp_path / "dump"))
    if columns == "spark_kafka_source":
        table = table.select(["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])
        table = table.set_column(5, "timestamp", table.column("timestamp").cast(pa.int64()))
    pq.write_table(table, tmp_path / "dump" / "part-00000.parquet", row_group_size=1500)  # several tasks
    location = str(tmp_path / "dump")
    plan = plan_dump(location, cores=2, task_bytes=1, min_bytes=0)
    assert plan is not None and len(plan.tasks) >= 2
    records = log_records(normalise(spark.read.parquet(location), "test"))
    stamps = sorted(table.column("timestamp").cast(pa.timestamp("ms", tz="UTC"), safe=False).to_pylist())
    tasks = DumpTasks(spark, plan)
    middle = stamps[len(stamps) // 2]
    def pin(_name, df):
        return df.cache()

    for as_of in (None, middle) if columns == "with_batch_metadata" else (middle,):
        by_spark = reduce_log(records, as_of, pin)
        by_tasks = reduce_log(records, as_of, pin, lambda moment: tasks.reduced_log(moment, pin))
        columns = by_spark.columns
        assert by_tasks.columns == columns
        # `readable` says which records the history's tasks read themselves: never when Spark reduced the log.
        want, got = by_spark.drop("readable").collect(), by_tasks.drop("readable").collect()
        assert sorted(map(repr, got)) == sorted(map(repr, want))
        assert sum(r["records"] for r in got) == table.num_rows
        assert any(r["reduced"] and r["records"] > 1 for r in got)
        assert any(r["error"] is not None for r in got)

        # offset_commits from Spark's reduced log alone, and from the tasks', which fold transactional commits
        # too: most keys finished by the tasks (files, read back as the table's staging folder is), the rest
        # by Spark.
        spans = tmp_path / f"spans-{as_of is None}"
        folded = reduce_log(records, as_of, pin, lambda moment: tasks.reduced_log(moment, pin, spans))
        if columns == "with_batch_metadata":
            assert folded.count() < len(got)
        moment = as_of or stamps[-1]
        window = F.col("error").isNull() & (F.col("record_timestamp") <= moment)
        want = conform(offset_commits(by_spark.where(window), moment, True, records), "offset_commits").collect()
        out = tmp_path / f"history-{moment.timestamp()}"
        cache = lambda _name, df: df.cache()  # noqa: E731
        started = start_history_tasks(folded.where(window), lambda keys: tasks.offset_history(as_of, keys, out, cache),
                                      cache)
        rest = offset_commits(folded.where(window), moment, True, records, tasks=started)
        rest = conform(rest, "offset_commits").collect()
        finished = spark.read.schema(spark_schema("offset_commits")).parquet(str(out)).collect()
        assert len(want) > 1000 and 0 < len(rest) < len(finished)
        assert sorted(map(_by_name, finished + rest)) == sorted(map(_by_name, want))


def test_a_run_through_the_tasks_writes_the_tables_spark_alone_writes(spark, tmp_path, monkeypatch):
    """The whole run (jobs.pipeline.run) on the sample and its end offsets, its dump reduced by Spark, then by
    its tasks, which also write most of offset_commits straight into the table's staging folder, started before
    the run as the command line starts them, on workers that then run the history's tasks while Spark replays
    (jobs.sources.early_reduction): the history, the lag (its rates read offset_commits) and the state the
    same."""
    from deltalake import DeltaTable

    import jobs.sources.reduced_dump as reduced_dump
    from jobs.config import RebuildConfig
    from jobs.pipeline import run
    from jobs.tools.sample import write_sample
    from jobs.sources.early_reduction import EarlyReduction

    write_sample(tmp_path / "dump", 3000, seed=5, end_offsets=tmp_path / "ends.txt")
    pq.write_table(pq.read_table(tmp_path / "dump"), tmp_path / "dump" / "part-00000.parquet", row_group_size=500)
    summaries, tables = [], []
    for name, min_bytes in (("by_spark", reduced_dump.MIN_BYTES), ("by_tasks", 0)):
        monkeypatch.setattr(reduced_dump, "MIN_BYTES", min_bytes)
        cfg = RebuildConfig.build(f"parquet:{tmp_path / 'dump'}", str(tmp_path / name),
                                  end_offsets=str(tmp_path / "ends.txt"))
        early = EarlyReduction.start(cfg.source, cfg.as_of, cfg.output, 2, history=True)
        assert (early is None) == (name == "by_spark")
        summaries.append(run(spark, cfg, early=early))
        tables.append({t: sorted(map(repr, DeltaTable(str(tmp_path / name / t)).to_pyarrow_table().to_pylist()))
                       for t in ("offset_commits", "group_status", "consumer_lag", "committed_offsets",
                                 "group_events")})
    assert tables[1] == tables[0] and len(tables[0]["offset_commits"]) > 1000 and tables[0]["consumer_lag"]
    assert summaries[1]["offset_commits"] == summaries[0]["offset_commits"]
    written = [DeltaTable(str(tmp_path / name / "offset_commits")).file_uris() for name in ("by_spark", "by_tasks")]
    assert not any("part-history" in f for f in written[0]) and any("part-history" in f for f in written[1])


def test_without_history_the_tasks_fold_transactions_and_the_state_is_spark_alones(spark, tmp_path, monkeypatch,
                                                                                   caplog):
    """A run without the history: its dump reduced by Spark; by its tasks, which fold transactional commits,
    started before the run as the command line starts them (jobs.sources.early_reduction); and, its rows
    shuffled (a coordinator partition's markers in every task), by its tasks again, which then find their spans
    overlapping, so Spark's tasks reduce it again without folding. The state, the quarantine and the counts the
    same each time."""
    from deltalake import DeltaTable

    import jobs.sources.reduced_dump as reduced_dump
    from jobs.config import RebuildConfig
    from jobs.pipeline import run
    from jobs.tools.sample import write_sample
    from jobs.sources.early_reduction import EarlyReduction

    write_sample(tmp_path / "dump", 3000, seed=5)
    table = pq.read_table(tmp_path / "dump")
    pq.write_table(table, tmp_path / "dump" / "part-00000.parquet", row_group_size=500)
    (tmp_path / "shuffled").mkdir()
    shuffled = table.take(random.Random(2).sample(range(table.num_rows), table.num_rows))
    pq.write_table(shuffled, tmp_path / "shuffled" / "part-00000.parquet", row_group_size=500)
    names = ("committed_offsets", "expired_offsets", "pending_transactions", "consumer_groups", "group_members",
             "group_target_assignments", "streams_topologies", "quarantine")
    folded = []  # per run through the tasks: (rows, records) of the folded transactional commits it reduced to
    reduced_log = reduced_dump.DumpTasks.reduced_log

    def counting(tasks, *args):
        partial = reduced_log(tasks, *args)
        row = partial.where("reduced and producer_id != -1").selectExpr("count(*)", "sum(records)").first()
        folded.append((row[0], row[1] or 0))
        return partial

    monkeypatch.setattr(reduced_dump.DumpTasks, "reduced_log", counting)
    counts, tables, warned = [], [], []
    for name, dump, min_bytes in (("by_spark", "dump", reduced_dump.MIN_BYTES), ("by_tasks", "dump", 0),
                                  ("shuffled", "shuffled", 0)):
        monkeypatch.setattr(reduced_dump, "MIN_BYTES", min_bytes)
        caplog.clear()
        cfg = RebuildConfig.build(f"parquet:{tmp_path / dump}", str(tmp_path / name), no_history=True)
        early = EarlyReduction.start(cfg.source, cfg.as_of, cfg.output, 2)
        assert (early is None) == (name == "by_spark")
        summary = run(spark, cfg, early=early)
        warned.append("reduced again" in caplog.text)
        counts.append({k: summary[k] for k in ("records_read", "records_quarantined", "transactional_records",
                                                "records_by_type", "pending_transactions", "committed_offsets")})
        tables.append({t: sorted(map(repr, DeltaTable(str(tmp_path / name / t)).to_pyarrow_table().to_pylist()))
                       for t in names})
    assert counts[0]["transactional_records"] > 100 and counts[0]["pending_transactions"] > 0
    assert counts[1] == counts[0] and counts[2] == counts[0]
    assert tables[1] == tables[0] and tables[2] == tables[0]
    # (the sample's few groups have no streams group: tests/jobs/test_modern.py compares topologies)
    assert [t for t in names if not tables[0][t]] == ["streams_topologies"]
    assert warned == [False, False, True]
    assert folded[0][1] > 2 * folded[0][0] > 0 and folded[1] == (0, 0)


def test_the_workers_fold_the_groups_as_spark_folds_the_reduced_log(spark, tmp_path, monkeypatch):
    """The early reduction's workers fold the groups (jobs.sources.reduced_dump.fold_groups, in two shares of the
    coordinator partitions) from the tasks' rows, up to an as_of that leaves group records out, with the group
    events: Spark's fold of the same reduced log (jobs.replay.groups.replay_groups) gives the same rows. (Without the
    events, and as of the newest record, the runs through the tasks above compare the tables.)"""
    from pyspark.sql import functions as F

    import jobs.sources.reduced_dump as reduced_dump
    from jobs.config import SourceSpec
    from jobs.replay.groups import GROUP_TYPES, replay_groups
    from jobs.tools.sample import write_sample
    from jobs.lake.sink import pinned
    from jobs.sources.early_reduction import EarlyReduction
    from jobs.sources.reduced_dump import TASK_SPANS, DumpTasks

    monkeypatch.setattr(reduced_dump, "MIN_BYTES", 0)
    write_sample(tmp_path / "dump", 3000, seed=5)
    table = pq.read_table(tmp_path / "dump")
    pq.write_table(table, tmp_path / "dump" / "part-00000.parquet", row_group_size=500)
    times = sorted(table.column("timestamp").to_pylist())
    as_of = times[len(times) * 2 // 3].replace(tzinfo=timezone.utc)
    early = EarlyReduction.start(SourceSpec("parquet", str(tmp_path / "dump")), as_of, tmp_path / "out", 2, True)
    try:
        tasks = DumpTasks(spark, early.plan, early)
        reduced = tasks.reduced_log(as_of, lambda _name, df: df, pinned(early.staging, TASK_SPANS))
        in_window = F.col("record_timestamp").isNull() | (F.col("record_timestamp") <= F.lit(as_of))
        want = replay_groups(reduced.where(F.col("error").isNull() & in_window), True).collect()
        got = tasks.group_fold(as_of, True)().collect()
        later = reduced.where(F.col("record_type").isin(GROUP_TYPES) & ~in_window).count()
    finally:
        early.close()
    assert later > 0 and len(want) > 100 and any(r.kind == "event" for r in want)
    assert sorted(map(repr, got)) == sorted(map(repr, want))


def _with_a_whole_key(table: pa.Table) -> pa.Table:
    """The sample plus, on the key of its first transactional commit, a plain v4 commit with a metadata string
    too long for the native readers' one-byte compact length (only the Python codec proves it): a key whose
    history Spark finishes, from the tasks' records and its own."""
    rows = table.to_pylist()
    first = next(r for r in rows if r["producer_id"] not in (None, -1) and not r["is_control"] and r["value"])
    offset = 1 + max(r["offset"] for r in rows if r["partition"] == first["partition"])
    value = encode_value(1, 4, {"offset": 5, "leaderEpoch": 1, "metadata": "m" * 200, "commitTimestamp": 5})
    extra = {**first, "value": value, "offset": offset, "producer_id": -1, "producer_epoch": -1,
             "is_transactional": False}
    return pa.concat_tables([table, pa.Table.from_pylist([extra], schema=table.schema)])


def _by_name(row) -> str:
    return repr(sorted(row.asDict().items()))


@pytest.mark.parametrize("layout", ["partition_folders", "local_timestamps", "small"])
def test_dumps_this_source_leaves_to_spark(tmp_path, layout):
    from jobs.sources.reduced_dump import plan_dump

    rows = {"key": [b"\x00\x01"], "value": [b""], "partition": [0], "offset": [0]}
    if layout == "partition_folders":
        (tmp_path / "partition=0").mkdir()
        pq.write_table(pa.table({**rows, "timestamp": pa.array([0], TIMESTAMP)}),
                       tmp_path / "partition=0" / "a.parquet")
    elif layout == "local_timestamps":
        pq.write_table(pa.table({**rows, "timestamp": pa.array([0], pa.timestamp("us"))}), tmp_path / "a.parquet")
    else:
        pq.write_table(pa.table({**rows, "timestamp": pa.array([0], TIMESTAMP)}), tmp_path / "a.parquet")
        assert plan_dump(str(tmp_path), cores=2, min_bytes=0) is not None  # read by tasks when it is not small
    assert plan_dump(str(tmp_path), cores=2) is None


def _damaged_dump(path) -> None:
    """A dump whose second row group has a data page that does not decompress."""
    rows = 20_000
    pq.write_table(_log([(_key("g"), _commit(i), i, i, -1, False) for i in range(rows)]), path,
                   row_group_size=rows // 2, compression="snappy")
    data = bytearray(path.read_bytes())
    middle = pq.ParquetFile(path).metadata.row_group(1).column(1).data_page_offset + 64  # inside group 1's values
    data[middle:middle + 512] = b"\xff" * 512
    path.write_bytes(bytes(data))


def test_a_damaged_row_group_is_named_in_one_line(tmp_path, monkeypatch):
    """A data page that does not decompress fails the task with the file and row group, which the CLI prints
    as its one-line error (jobs.sources.tasks.task_errors), not Spark's report; also when the task ran in a
    worker started before Spark (jobs.sources.early_reduction)."""
    import jobs.sources.reduced_dump as reduced_dump
    from jobs.config import SourceSpec
    from jobs.errors import BadInput
    from jobs.sources.early_reduction import EarlyReduction
    from jobs.sources.tasks import task_errors

    path = tmp_path / "dump.parquet"
    _damaged_dump(path)
    columns = [c for c in reduced_dump.COLUMNS if c in pq.read_schema(path).names]
    with pytest.raises(BadInput, match=rf"{path}: cannot read row group 1 \("):
        with task_errors():
            list(reduced_dump.read_row_groups(((str(path), (0, 1)),), columns))
    monkeypatch.setattr(reduced_dump, "MIN_BYTES", 0)
    early = EarlyReduction.start(SourceSpec("parquet", str(path)), None, tmp_path / "out", 2)
    with pytest.raises(BadInput, match=rf"^--source parquet: {path}: cannot read row group 1 \("):
        with task_errors():
            early.reduced_log(None, None, early.spans)  # the task's failure, before Spark is asked for anything


def test_a_damaged_page_spark_reads_is_named_in_one_line(spark, tmp_path):
    """The same damage in a dump Spark scans itself (a small one): Spark's FAILED_READ_FILE error becomes one
    line with the file and the first cause (task_errors), exit status 2, not an internal failure."""
    from jobs.errors import BadInput
    from jobs.sources.tasks import task_errors

    path = tmp_path / "dump.parquet"
    _damaged_dump(path)
    with pytest.raises(BadInput, match=rf"^cannot read {path} \(.*PageHeader"):
        with task_errors():
            spark.read.parquet(str(path)).selectExpr("sum(length(value))").collect()
