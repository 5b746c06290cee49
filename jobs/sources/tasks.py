"""What source tasks share: a logger on the executor, one-line errors that survive Spark's error text, and
the column buffers a task fills and yields as Arrow RecordBatches.

A failure inside a Spark task reaches the driver wrapped in Spark's long Java/Python error report. The
task raises its one-line message between markers; `task_errors` finds it there and raises it again as
the BadInput the CLI prints (exit status 2).
"""
from __future__ import annotations

import logging
import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import pyarrow as pa

from jobs.base.arrow import TIMESTAMP
from jobs.base.errors import BadInput
from jobs.replay.records import record_timestamps

_TASK_ERROR = re.compile(r"<<offsetlake-task: (.*?)>>")
# Spark's error when a scan cannot read an input file (error class FAILED_READ_FILE), and the first cause below.
_UNREADABLE_FILE = re.compile(r"\[FAILED_READ_FILE[A-Z_.]*\] Encountered error while reading file (\S+?)\.?\s")
_CAUSE = re.compile(r"Caused by: [\w.$]+: (.+)")
BATCH_ROWS = 10_000
# Group metadata values can approach a megabyte each: a row count alone would not bound a task's memory.
BATCH_BYTES = 32 << 20
# The contract's raw-record columns (Spark's Kafka source), as a source task yields them.
RAW_FIELDS = (
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", TIMESTAMP), ("timestampType", pa.int32()),
)
# The batch metadata a source with record batches adds (jobs.sources.raw.OPTIONAL): what transactional replay reads.
BATCH_FIELDS = (("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("is_transactional", pa.bool_()),
                ("is_control", pa.bool_()))


def task_logger() -> logging.Logger:
    """The executor's `offsetlake` logger (stderr), set up once per Python worker."""
    worker = logging.getLogger("offsetlake.task")
    if not worker.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("offsetlake: %(message)s"))
        worker.addHandler(handler)
        # --debug in the driver (inherited by a forked worker) shows the per-task lines logged at debug level.
        worker.setLevel(logging.DEBUG if logging.getLogger("offsetlake").isEnabledFor(logging.DEBUG) else logging.INFO)
        worker.propagate = False
    return worker


def task_error(e: BadInput) -> RuntimeError:
    """The exception a task raises for a user-facing failure."""
    return RuntimeError(f"<<offsetlake-task: {e}>>")


@contextmanager
def task_errors() -> Iterator[None]:
    """Turn a failed source task (which Spark reports as a long error) back into its one-line BadInput; and
    Spark's own failure to read an input file (a damaged Parquet page), naming the file and the first cause."""
    try:
        yield
    except BadInput:
        raise
    except Exception as e:
        text = str(e)
        match = _TASK_ERROR.search(text)
        if match is not None:
            raise BadInput(match.group(1)) from None
        unread = _UNREADABLE_FILE.search(text)
        if unread is None:
            raise
        cause = _CAUSE.search(text, unread.end())
        reason = cause.group(1).strip()[:200] if cause else "unreadable"
        raise BadInput(f"cannot read {unread.group(1).removeprefix('file://')} ({reason})") from None


class RecordColumns:
    """Column buffers for the Arrow RecordBatches a source task yields, all rows of one topic partition.

    `full` after BATCH_ROWS records or BATCH_BYTES of keys and values, whichever comes first, so a task
    holds a bounded amount of a partition however large its log.
    """

    def __init__(self, fields: tuple[tuple[str, pa.DataType], ...], topic: str, partition: int) -> None:
        self.schema = pa.schema(fields)
        self.constants = {"topic": topic, "partition": partition}
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, list[Any]] = {f.name: [] for f in self.schema if f.name not in self.constants}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.columns["offset"])

    @property
    def full(self) -> bool:
        return len(self) >= BATCH_ROWS or self.bytes >= BATCH_BYTES

    def add(self, key: bytes | None, value: bytes | None, offset: int, timestamp_ms: int | None,
            timestamp_type: int | None) -> None:
        """One record's contract columns; a source with more columns appends to `columns` itself."""
        c = self.columns
        c["key"].append(key)
        c["value"].append(value)
        c["offset"].append(offset)
        c["timestamp"].append(timestamp_ms)  # epoch ms, within the years a timestamp holds once a batch (`batch`)
        c["timestampType"].append(timestamp_type)
        self.bytes += (len(key) if key else 0) + (len(value) if value else 0)

    def batch(self) -> pa.RecordBatch:
        """The buffered rows as one RecordBatch; the buffer starts empty again."""
        n = len(self)
        arrays = [pa.array([self.constants[f.name]] * n, f.type) if f.name in self.constants
                  else record_timestamps(pa.array(self.columns[f.name], pa.int64())).cast(f.type)
                  if f.name == "timestamp" else pa.array(self.columns[f.name], f.type) for f in self.schema]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
