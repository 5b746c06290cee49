"""Inputs: the raw-record frame (contract §Input) and topic end offsets."""
from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.errors import BadInput
from jobs.raw import normalise
from jobs.sources.end_offsets import read_end_offsets


def test_epoch_millis_and_timestamps_are_both_accepted(spark):
    as_ms = spark.createDataFrame([(b"k", None, 3, 7, 1700000000123, "extra")],
                                  "key binary, value binary, partition int, offset bigint, timestamp bigint, junk string")
    row = normalise(as_ms, "t").first()
    assert row.timestamp == datetime(2023, 11, 14, 22, 13, 20, 123000) and row.partition == 3
    assert "junk" not in normalise(as_ms, "t").columns
    as_ts = spark.createDataFrame([(b"k", b"v", 3, 7, datetime(2023, 11, 14, 22, 13, 20, 123000))],
                                  "key binary, value binary, partition int, offset bigint, timestamp timestamp")
    assert normalise(as_ts, "t").first().timestamp == row.timestamp


def test_missing_or_mistyped_columns_are_named(spark):
    df = spark.createDataFrame([("k", 1)], "key string, partition int")
    with pytest.raises(BadInput, match=r"missing required column\(s\) value, offset, timestamp"):
        normalise(df, "parquet:x")
    df = spark.createDataFrame([("k", b"v", 1, 2, 3)], "key string, value binary, partition int, offset bigint, timestamp bigint")
    with pytest.raises(BadInput, match="column key has type string, expected binary"):
        normalise(df, "parquet:x")


@pytest.mark.parametrize("name, write", [
    ("ends.txt", lambda p: p.write_text("orders:0:100\n\nmy.topic-x:11:5\n")),
    ("ends.csv", lambda p: p.write_text("topic,partition,offset\norders,0,100\nmy.topic-x,11,5\n")),
    ("ends.parquet", lambda p: pq.write_table(pa.table({"topic": ["orders", "my.topic-x"], "partition": [0, 11],
                                                         "offset": [100, 5]}), p)),
])
def test_end_offsets_in_every_format(spark, tmp_path, name, write):
    path = tmp_path / name
    write(path)
    got = sorted(tuple(r) for r in read_end_offsets(spark, str(path)).collect())
    assert got == [("my.topic-x", 11, 5), ("orders", 0, 100)]


def test_end_offsets_errors(spark, tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        read_end_offsets(spark, str(tmp_path / "nope.txt"))
    csv = tmp_path / "e.csv"
    csv.write_text("topic,partition\norders,0\n")
    with pytest.raises(BadInput, match=r"missing column\(s\) offset"):
        read_end_offsets(spark, str(csv))
    csv.write_text("topic,partition,offset\norders,zero,5\n")
    with pytest.raises(BadInput, match="no valid topic, partition and offset"):
        read_end_offsets(spark, str(csv))


def test_topic_ids_map_is_validated(tmp_path):
    from jobs.sources.topic_ids import read_topic_ids

    path = tmp_path / "ids.csv"
    path.write_text("topic_id,topic\nAQIDBAUGBwgJCgsMDQ4PEA,orders\n")
    assert read_topic_ids(path) == {"AQIDBAUGBwgJCgsMDQ4PEA": "orders"}
    path.write_text("not-an-id,orders\n")
    with pytest.raises(BadInput, match="line 1: expected topic_id,topic"):
        read_topic_ids(path)
