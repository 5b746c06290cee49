"""Inputs: the raw records a source yields (contract §Input), as both runners read them, and topic end offsets."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.base.errors import BadInput
from jobs.config import KafkaOptions, SourceSpec
from jobs.replay.records import records
from jobs.sources import check_source
from jobs.sources.end_offsets import load_end_offsets
from jobs.sources.plan import plan_source

STAMP = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)


def read_records(path) -> pa.Table:
    """What the local runner makes of a dump: every task's raw batches (plan.read), named as the replay names them."""
    plan = plan_source(SourceSpec("parquet", str(path)), KafkaOptions(), cores=2)
    return pa.concat_tables([records(batch) for task in plan.tasks for batch in plan.read(task)])


def test_epoch_millis_and_timestamps_are_both_accepted(spark, tmp_path):
    as_ms = pa.table({"key": [b"k"], "value": pa.array([None], pa.binary()), "partition": pa.array([3], pa.int32()),
                      "offset": pa.array([7], pa.int64()), "timestamp": pa.array([1700000000123], pa.int64()),
                      "junk": ["extra"]})
    pq.write_table(as_ms, tmp_path / "ms.parquet")
    as_ts = as_ms.drop_columns(["junk"]).set_column(4, "timestamp", pa.array([STAMP.replace(tzinfo=None)],
                                                                              pa.timestamp("us")))
    pq.write_table(as_ts, tmp_path / "ts.parquet")
    for name in ("ms.parquet", "ts.parquet"):
        # The local runner: the tasks' batches, as records.
        row = read_records(tmp_path / name).to_pylist()[0]
        assert (row["record_timestamp"], row["coordinator_partition"], row["record_offset"]) == (STAMP, 3, 7), name
        # The Spark runner: the plan's frame (naive UTC, as Spark shows a timestamp in this session).
        frame = plan_source(SourceSpec("parquet", str(tmp_path / name)), KafkaOptions(), cores=2).frame(spark)
        assert "junk" not in frame.columns
        first = frame.first()
        assert (first.timestamp, first.partition) == (STAMP.replace(tzinfo=None), 3), name
    assert "junk" not in plan_source(SourceSpec("parquet", str(tmp_path / "ms.parquet")), KafkaOptions(),
                                     cores=1).columns  # the local tasks never read it either


def test_missing_or_mistyped_columns_are_named(spark, tmp_path):
    pq.write_table(pa.table({"key": ["k"], "partition": pa.array([1], pa.int32())}), tmp_path / "few.parquet")
    pq.write_table(pa.table({"key": ["k"], "value": [b"v"], "partition": pa.array([1], pa.int32()),
                             "offset": pa.array([2], pa.int64()), "timestamp": pa.array([3], pa.int64())}),
                   tmp_path / "string-key.parquet")
    for name, message in (("few.parquet", r"missing required column\(s\) value, offset, timestamp"),
                          ("string-key.parquet", "column key has type string, expected binary")):
        spec = SourceSpec("parquet", str(tmp_path / name))
        with pytest.raises(BadInput, match=f"parquet:{re.escape(str(tmp_path / name))}: {message}"):
            check_source(spec)  # before either runner starts
        with pytest.raises(BadInput, match=message):
            plan_source(spec, KafkaOptions(), cores=1).frame(spark)  # the Spark runner's frame checks them too


@pytest.mark.parametrize("name, write", [
    ("ends.txt", lambda p: p.write_text("orders:0:100\n\nmy.topic-x:11:5\n")),
    ("ends.csv", lambda p: p.write_text("topic,partition,offset\norders,0,100\nmy.topic-x,11,5\n")),
    ("ends.parquet", lambda p: pq.write_table(pa.table({"topic": ["orders", "my.topic-x"], "partition": [0, 11],
                                                         "offset": [100, 5]}), p)),
])
def test_end_offsets_in_every_format(tmp_path, name, write):
    path = tmp_path / name
    write(path)
    got = sorted(tuple(r.values()) for r in load_end_offsets(str(path)).to_pylist())
    # No timestamp: at as_of; no log start offset: unknown.
    assert got == [("my.topic-x", 11, 5, None, None), ("orders", 0, 100, None, None)]


SNAPSHOT_1 = datetime(2026, 11, 21, 8, 0, tzinfo=timezone.utc)
SNAPSHOT_2 = datetime(2026, 11, 21, 8, 5, 0, 250000, tzinfo=timezone.utc)


@pytest.mark.parametrize("name, write", [
    ("ends.txt", lambda p: p.write_text("orders:0:100:2026-11-21T08:00:00Z\norders:0:180:1795248300250\n"
                                        "orders:1:7\n")),
    ("ends.csv", lambda p: p.write_text("topic,partition,offset,timestamp\norders,0,100,2026-11-21T09:00:00+01:00\n"
                                        "orders,0,180,1795248300250\norders,1,7,\n")),
    ("ends.parquet", lambda p: pq.write_table(pa.table({
        "topic": ["orders"] * 3, "partition": [0, 0, 1], "offset": [100, 180, 7],
        "timestamp": pa.array([SNAPSHOT_1.replace(tzinfo=None), SNAPSHOT_2.replace(tzinfo=None), None],
                              pa.timestamp("ns"))}), p)),  # naive: UTC, as Spark writes it
    ("ms.parquet", lambda p: pq.write_table(pa.table({
        "topic": ["orders"] * 3, "partition": [0, 0, 1], "offset": [100, 180, 7],
        "timestamp": pa.array([1795248000000, 1795248300250, None], pa.int64())}), p)),
])
def test_end_offsets_with_a_timestamp_hold_many_snapshots(tmp_path, name, write):
    path = tmp_path / name
    write(path)
    got = sorted(load_end_offsets(str(path)).to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert [tuple(r.values())[:4] for r in got] == [("orders", 0, 100, SNAPSHOT_1), ("orders", 0, 180, SNAPSHOT_2),
                                                   ("orders", 1, 7, None)]


@pytest.mark.parametrize("name, write", [
    ("ends.csv", lambda p: p.write_text("topic,partition,offset,timestamp,log_start_offset\n"
                                        "orders,0,100,2026-11-21T08:00:00Z,40\norders,1,7,,\n")),
    ("ends.parquet", lambda p: pq.write_table(pa.table({
        "topic": ["orders"] * 2, "partition": [0, 1], "offset": [100, 7],
        "timestamp": pa.array([SNAPSHOT_1, None], pa.timestamp("us", tz="UTC")),
        "log_start_offset": pa.array([40, None], pa.int64())}), p)),
])
def test_a_fifth_column_carries_the_log_start_offset(tmp_path, name, write):
    path = tmp_path / name
    write(path)
    got = sorted(tuple(r.values()) for r in load_end_offsets(str(path)).to_pylist())
    assert got == [("orders", 0, 100, SNAPSHOT_1, 40), ("orders", 1, 7, None, None)]


def test_log_start_offsets_of_kafka_get_offsets_time_minus_2_join_by_moment(tmp_path):
    ends, starts = tmp_path / "ends.txt", tmp_path / "starts.txt"
    ends.write_text("orders:0:100:2026-11-21T08:00:00Z\norders:0:180:1795248300250\norders:1:7\n")
    # kafka-get-offsets.sh --time -2 at the same moments; one at a moment without end offsets is not read.
    starts.write_text("orders:0:40:2026-11-21T08:00:00Z\norders:1:3\norders:0:99:2026-11-22T00:00:00Z\n")
    got = sorted(tuple(r.values()) for r in load_end_offsets(str(ends), None, str(starts)).to_pylist())
    assert got == [("orders", 0, 100, SNAPSHOT_1, 40), ("orders", 0, 180, SNAPSHOT_2, None),
                   ("orders", 1, 7, None, 3)]
    starts.write_text("orders:x:40\n")
    with pytest.raises(BadInput, match=re.escape(f"--log-start-offsets {starts}: expected topic:partition:offset")):
        load_end_offsets(str(ends), None, str(starts))


@pytest.mark.parametrize("name, content, message", [
    ("e.txt", "t:0:5:yesterday\n", "line 1 has no valid timestamp 'yesterday' (expected ISO-8601"),
    ("e.txt", "t:0:5:2026-11-21T08:00:00Z:9\n", "line 1 has no valid timestamp '2026-11-21T08:00:00Z:9'"),
    ("e.txt", "t:0:5:99999999999999999999\n", "line 1 has no valid timestamp '99999999999999999999'"),
    ("e.txt", "a:b:0:5\n", "expected topic:partition:offset per line (or topic:partition:offset:timestamp)"),
    ("e.csv", "topic,partition,offset,timestamp\nt,0,5,2026-13-01\n", "line 2 has no valid timestamp '2026-13-01'"),
    ("e.txt", "t:0:5:1763712000000\nt:0:6:2025-11-21T08:00:00Z\n",
     "line 2 repeats t:0 at 2025-11-21T08:00:00+00:00, given on line 1"),
    ("e.txt", "t:0:5\nu:0:1\nt:0:6\n", "line 3 repeats t:0 at as_of (no timestamp), given on line 1"),
])
def test_end_offset_timestamps_are_checked_before_anything_runs(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(BadInput, match=re.escape(f"--end-offsets {path}: {message}")):
        load_end_offsets(str(path))


def test_a_parquet_timestamp_must_be_a_time_or_epoch_millis(tmp_path):
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"topic": ["t"], "partition": [0], "offset": [5], "timestamp": ["2026-11-21"]}), path)
    with pytest.raises(BadInput, match="column timestamp has type string, expected a timestamp or int64 epoch"):
        load_end_offsets(str(path))


@pytest.mark.parametrize("unit, value", [("us", 2**62), ("ms", 2**62), ("s", -(2**52))])
def test_an_end_offsets_timestamp_beyond_the_years_is_one_line(tmp_path, unit, value):
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"topic": ["t"], "partition": [0], "offset": [5],
                             "timestamp": pa.array([value], pa.timestamp(unit, tz="UTC"))}), path)
    with pytest.raises(BadInput, match=f"--end-offsets {path}: a timestamp out of range"):
        load_end_offsets(str(path))


def test_end_offsets_errors(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_end_offsets(str(tmp_path / "nope.txt"))
    csv = tmp_path / "e.csv"
    csv.write_text("topic,partition\norders,0\n")
    with pytest.raises(BadInput, match=r"missing column\(s\) offset"):
        load_end_offsets(str(csv))
    csv.write_text("topic,partition,offset\norders,zero,5\n")
    with pytest.raises(BadInput, match="no valid topic, partition and offset"):
        load_end_offsets(str(csv))
    csv.write_text("topic,partition,offset,timestamp,log_start_offset\norders,0,5,,first\n")
    with pytest.raises(BadInput, match="line 2 has no valid log_start_offset 'first'"):
        load_end_offsets(str(csv))


def test_topic_ids_map_is_validated(tmp_path):
    from jobs.sources.topic_ids import read_topic_ids

    path = tmp_path / "ids.csv"
    path.write_text("topic_id,topic\nAQIDBAUGBwgJCgsMDQ4PEA,orders\n")
    assert read_topic_ids(path) == {"AQIDBAUGBwgJCgsMDQ4PEA": "orders"}
    path.write_text("not-an-id,orders\n")
    with pytest.raises(BadInput, match="line 1: expected topic_id,topic"):
        read_topic_ids(path)


def test_a_local_dump_is_checked_from_its_footers_as_spark_reads_them(tmp_path):
    from jobs.sources.parquet import check_dump

    rows = pa.table({"key": [b"k"], "value": [b"v"], "offset": pa.array([1], pa.int64()),
                     "timestamp": pa.array([1700000000123], pa.int64())})
    dump = tmp_path / "dump"
    (dump / "partition=3").mkdir(parents=True)  # a partition folder names a column, as in Spark's discovery
    pq.write_table(rows, dump / "partition=3" / "part-0.parquet")
    (dump / "_SUCCESS").touch()  # not data files, for Spark either
    (dump / "partition=3" / ".part-0.parquet.crc").write_bytes(b"crc")
    check_dump(str(dump))
    (dump / "partition=4").mkdir()
    pq.write_table(rows.drop_columns(["key"]), dump / "partition=4" / "part-0.parquet")
    with pytest.raises(BadInput, match=r": 1 of 2 files is not usable: partition=4/part-0.parquet "
                                        r"\(missing required column\(s\) key"):
        check_dump(str(dump))


def test_every_file_of_a_dump_that_is_not_usable_is_named_in_one_line(tmp_path):
    from jobs.sources import parquet
    from jobs.sources.parquet import check_dump

    rows = pa.table({"key": [b"k"], "value": [b"v"], "partition": pa.array([0], pa.int32()),
                     "offset": pa.array([1], pa.int64()), "timestamp": pa.array([1700000000123], pa.int64())})
    dump = tmp_path / "dump"
    (dump / "day=2").mkdir(parents=True)
    pq.write_table(rows, dump / "part-0.parquet")
    pq.write_table(rows, dump / "day=2" / "part-1.parquet")
    (dump / "notes.txt").write_text("not Parquet\n")
    (dump / "day=2" / "part-2.parquet").write_bytes((dump / "part-0.parquet").read_bytes()[:-20])  # cut off
    (dump / "_SUCCESS").write_text("hidden from Spark, and from the check\n")
    (dump / ".part-0.parquet.crc").write_bytes(b"crc")
    with pytest.raises(BadInput) as e:
        check_dump(str(dump))
    message = str(e.value)
    assert message.startswith(f"--source parquet:{dump}: 2 of 4 files are not usable: "), message
    assert "day=2/part-2.parquet (cannot read Parquet: " in message and "notes.txt (cannot read Parquet: " in message
    assert "_SUCCESS" not in message and ".crc" not in message and "\n" not in message
    # Many bad files: the first BAD_FILES_NAMED are named, the rest counted, still one line.
    for i in range(parquet.BAD_FILES_NAMED + 5):
        (dump / f"junk-{i:02d}.txt").write_text("not Parquet\n")
    with pytest.raises(BadInput) as e:
        check_dump(str(dump))
    message = str(e.value)
    total = parquet.BAD_FILES_NAMED + 7
    assert f": {total} of {total + 2} files are not usable: " in message and message.endswith("; and 7 more")
    assert message.count("(cannot read Parquet: ") == parquet.BAD_FILES_NAMED and "\n" not in message


def test_the_footer_check_names_types_as_spark_reads_them(spark, tmp_path):
    from jobs.sources.parquet import spark_type

    table = pa.table({
        "binary": pa.array([b"x"]), "large_binary": pa.array([b"x"], pa.large_binary()),
        "fixed": pa.array([b"xy"], pa.binary(2)), "string": pa.array(["x"]),
        "i8": pa.array([1], pa.int8()), "i16": pa.array([1], pa.int16()), "i32": pa.array([1], pa.int32()),
        "i64": pa.array([1], pa.int64()), "u8": pa.array([1], pa.uint8()), "u16": pa.array([1], pa.uint16()),
        "u32": pa.array([1], pa.uint32()), "utc": pa.array([1], pa.timestamp("ms", tz="UTC")),
        "local": pa.array([1], pa.timestamp("us")), "flag": pa.array([True]), "real": pa.array([1.5]),
    })
    pq.write_table(table, tmp_path / "types.parquet")
    by_spark = {f.name: f.dataType.simpleString() for f in spark.read.parquet(str(tmp_path / "types.parquet")).schema}
    by_footer = {f.name: spark_type(f.type) for f in pq.read_schema(tmp_path / "types.parquet")}
    assert by_footer == by_spark
