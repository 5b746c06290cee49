"""A dump with a damaged data page: the failure is said in one line naming the file and the row group (moved from
the old tests of the tasks' reduction, whose other tests are ported to tests/decode and tests/replay)."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.base.errors import BadInput
from jobs.sources.tasks import task_errors
from offsets_codec import encode_key, encode_value

T0_US = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)


def _damaged_dump(path) -> None:
    """A dump whose second row group has a data page that does not decompress."""
    rows = 20_000
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    values = [encode_value(1, 3, {"offset": i, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})
              for i in range(rows)]
    table = pa.table({"key": pa.array([key] * rows, pa.binary()), "value": pa.array(values, pa.binary()),
                      "partition": pa.array([0] * rows, pa.int32()), "offset": pa.array(range(rows), pa.int64()),
                      "timestamp": pa.array([T0_US + i for i in range(rows)], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, path, row_group_size=rows // 2, compression="snappy")
    data = bytearray(path.read_bytes())
    middle = pq.ParquetFile(path).metadata.row_group(1).column(1).data_page_offset + 64  # inside group 1's values
    data[middle:middle + 512] = b"\xff" * 512
    path.write_bytes(bytes(data))


def test_a_damaged_row_group_ends_its_task_with_one_line(tmp_path):
    """A data page that does not decompress fails the task with the file and row group, which the CLI prints as
    its one-line error (jobs.sources.tasks.task_errors), not Spark's report."""
    from jobs.base.storage import Location
    from jobs.sources.parquet import COLUMNS, Rows, read_row_groups

    path = tmp_path / "dump.parquet"
    _damaged_dump(path)
    columns = [c for c in COLUMNS if c in pq.read_schema(path).names]
    with pytest.raises(BadInput, match=rf"^--source parquet: {path}: cannot read row group 1 \("):
        with task_errors():
            list(read_row_groups((Rows(Location.parse(str(path)), (0, 1), {}),), columns))


def test_a_damaged_page_spark_reads_is_named_in_one_line(spark, tmp_path):
    """The same damage in a dump Spark scans itself: Spark's FAILED_READ_FILE error becomes one line with the file
    and the first cause (task_errors), exit status 2, not an internal failure."""
    path = tmp_path / "dump.parquet"
    _damaged_dump(path)
    with pytest.raises(BadInput, match=rf"^cannot read {path} \(.*PageHeader"):
        with task_errors():
            spark.read.parquet(str(path)).selectExpr("sum(length(value))").collect()
