"""Broker log segments: `__consumer_offsets-N/*.log` files read straight from a log directory (spec §1), and the
share coordinator's `__share_group_state-N/*.log` beside them when there are any (jobs.replay.share_state).

The driver finds the partition folders and their segments (`plan_segments`); each coordinator partition is then
read in its own task, segment by segment in base-offset order, as a stream of batches (`offsets_codec.segments`),
so a segment larger than memory is fine. Records keep their batch metadata (producer id and epoch,
transactional and control flags): the replay needs it for transactions (spec §7.2).

Damage never fails the run. A task emits what it found (a bad CRC, a truncated tail, a batch it cannot
decompress) as a problem row beside the records; the driver adds the files and folders it ignored.
Both become the `segment_errors` table.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from typing import TYPE_CHECKING

import pyarrow as pa

from jobs.base.errors import BadInput
from jobs.config import log_dir
from jobs.sources.tasks import BATCH_FIELDS, RAW_FIELDS, RecordColumns, task_error, task_logger
from offsets_codec.registry import OFFSETS_TOPIC, SHARE_STATE_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("offsetlake")
TOPICS = (OFFSETS_TOPIC, SHARE_STATE_TOPIC)
# The raw-record columns, the batch metadata (for transactions, spec §7.2), and what went wrong where a
# row is not a record: one frame carries both, so the files are read once.
PROBLEM_TYPE = pa.struct([("file", pa.string()), ("position", pa.int64()), ("bytes_not_read", pa.int64()),
                          ("action", pa.string()), ("reason", pa.string())])
SEGMENT_FIELDS = RAW_FIELDS + BATCH_FIELDS + (("problem", PROBLEM_TYPE),)
_PARTITION_DIR = re.compile(rf"^({'|'.join(TOPICS)})-(\d+)$")
# A partition folder the broker is deleting, moving between log dirs, or found unreferenced.
_SIDE_DIR = re.compile(rf"^(?:{'|'.join(TOPICS)})-\d+\.[0-9a-f]+-(delete|future|stray)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
# Files a partition folder holds beside its segments, derived from them: never read.
_COMPANIONS = (".index", ".timeindex", ".txnindex", ".snapshot")
_COMPANION_NAMES = ("leader-epoch-checkpoint", "partition.metadata")
# Leftovers of deletion and compaction that look like segments: reported, never parsed as logs.
_STRAY = {
    ".deleted": "a segment the broker had scheduled for deletion (no longer part of the log)",
    ".cleaned": "a log cleaner output the broker discards on restart",
    ".swap": "a log cleaner swap file (the broker completes or discards the swap on restart)",
}
_SIDE_DIRS = {
    "delete": "a partition folder the broker was deleting",
    "future": "a replica being moved to another log dir (the current one is read)",
    "stray": "a stray partition folder the broker did not own",
}


@dataclass(frozen=True)
class PartitionLog:
    """One coordinator partition's segments, read by one Spark task."""

    partition: int
    directory: str
    segments: tuple[str, ...]  # file names, in base-offset order
    size: int  # bytes, for the plan's log line
    topic: str = OFFSETS_TOPIC

    def after(self, end: int) -> "PartitionLog":
        """The segments that may hold offsets after `end` (an archived end: jobs.sources.archive): a segment
        holds the offsets from its base up to the next one's base. Its size stays the whole log's."""
        bases = [int(_SEGMENT.match(name).group(1)) for name in self.segments]
        kept = [name for name, following in zip(self.segments, [*bases[1:], None])
                if following is None or following > end + 1]
        return replace(self, segments=tuple(kept))


@dataclass(frozen=True)
class Ignored:
    """A file or folder under DIR that is not read, and why."""

    partition: int | None
    path: str
    reason: str
    action: str = "file_ignored"


@dataclass(frozen=True)
class SegmentPlan:
    partitions: list[PartitionLog]
    ignored: list[Ignored]


def plan_segments(location: str) -> SegmentPlan:
    """Find the partition folders under `location` (a log dir, a folder of log dirs, or one partition folder)."""
    # Absolute: the tasks that read the segments may run in another working folder (a cluster's executors).
    root = Path(os.path.abspath(log_dir(location)))
    found: dict[tuple[str, int], Path] = {}
    ignored: list[Ignored] = []
    for folder in _partition_folders(root, ignored):
        topic, partition = _PARTITION_DIR.match(folder.name).groups()
        at = (topic, int(partition))
        if at in found:
            raise BadInput(f"--source segments:{location}: {topic} partition {partition} is in two folders, "
                           f"{found[at]} and {folder} (replicas, or two clusters?); give one log dir")
        found[at] = folder
    if not found:
        raise BadInput(f"--source segments:{location}: no {OFFSETS_TOPIC}-N folder found")
    partitions = [_partition_log(p, found[(t, p)], ignored, t) for t, p in sorted(found)]
    return SegmentPlan(partitions, ignored)


def _partition_folders(root: Path, ignored: list[Ignored]) -> Iterator[Path]:
    if _PARTITION_DIR.match(root.name):
        yield root
        return
    for path, dirs, _files in os.walk(root):
        keep = []
        for name in sorted(dirs):
            side = _SIDE_DIR.match(name)
            if _PARTITION_DIR.match(name):
                yield Path(path) / name
            elif side:
                ignored.append(Ignored(None, str(Path(path) / name), _SIDE_DIRS[side.group(1)], "folder_ignored"))
            else:
                keep.append(name)  # any other folder may hold log dirs (other topics' folders are just listed)
        dirs[:] = keep


def _partition_log(partition: int, folder: Path, ignored: list[Ignored], topic: str) -> PartitionLog:
    segments: list[tuple[int, str]] = []
    size = 0
    for entry in sorted(folder.iterdir()):
        name = entry.name
        match = _SEGMENT.match(name)
        if match and entry.is_file():
            segments.append((int(match.group(1)), name))
            size += entry.stat().st_size
        elif name.endswith(_COMPANIONS) or name in _COMPANION_NAMES:
            continue
        else:
            reason = next((why for suffix, why in _STRAY.items() if name.endswith(suffix)), "not a log segment")
            ignored.append(Ignored(partition, str(entry), reason))
    if not segments:  # nothing to read (no records), but a partition the broker has should not vanish silently
        ignored.append(Ignored(partition, str(folder), "a partition folder with no log segment (.log)",
                               "folder_ignored"))
    return PartitionLog(partition, str(folder), tuple(name for _, name in sorted(segments)), size, topic)


def read_partitions(spark: SparkSession, partitions: list[PartitionLog]) -> DataFrame:
    """SEGMENT_FIELDS of `partitions`, one Spark task each: a one-row partition naming it, mapped to its Arrow
    batches. No Python process plans the read, as a Python data source's planning would (two Python workers
    on the driver's side: about 2 s of a small log dir's run)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(pa.schema(SEGMENT_FIELDS))
    if not partitions:
        return spark.createDataFrame([], schema)
    named = spark.createDataFrame(spark.sparkContext.parallelize(
        [(json.dumps(asdict(p)),) for p in partitions], len(partitions)), "partition_log string")

    def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for text in batch.column("partition_log").to_pylist():
                fields = json.loads(text)
                yield from read_partition(PartitionLog(**{**fields, "segments": tuple(fields["segments"])}))

    return named.mapInArrow(each, schema)


def read_partition(part: PartitionLog) -> Iterator[Any]:
    """pyarrow RecordBatches (SEGMENT_FIELDS) of one coordinator partition's segments, problems included."""
    from offsets_codec.segments import Batch, read_segment_file

    worker_log = task_logger()
    started = time.monotonic()
    rows = _SegmentColumns(part.partition, part.topic)
    records = problems = 0
    for name in part.segments:
        path = os.path.join(part.directory, name)
        try:
            for item in read_segment_file(path):
                if isinstance(item, Batch):
                    rows.add_batch(item)
                    records += len(item.records)
                else:
                    rows.add_problem(path, item)
                    problems += 1
                    worker_log.warning("%s at byte %d: %s", path, item.position, item.reason)
                if rows.full:
                    yield rows.batch()
        except OSError as e:
            raise task_error(BadInput(f"--source segments: cannot read {path}: {e.strerror or e}")) from None
    if len(rows):
        yield rows.batch()
    # One line per partition only with --debug: a log dir has 50 or more (the driver shows one progress line).
    worker_log.debug("read %s-%d: %d segments, %d records, %d problems in %.1fs", part.topic, part.partition,
                    len(part.segments), records, problems, time.monotonic() - started)


class _SegmentColumns(RecordColumns):
    """Column buffers in SEGMENT_FIELDS' layout: records with their batch's metadata, and problem rows."""

    def __init__(self, partition: int, topic: str = OFFSETS_TOPIC) -> None:
        super().__init__(SEGMENT_FIELDS, topic, partition)

    def add_batch(self, batch: Any) -> None:
        for r in batch.records:
            # Kafka writes -1 for "no timestamp"; magic-0 messages have none at all.
            timestamp = r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None
            self.add(r.key, r.value, r.offset, timestamp, r.timestamp_type)
        c, n = self.columns, len(batch.records)
        c["producer_id"] += [batch.producer_id] * n
        c["producer_epoch"] += [batch.producer_epoch] * n
        c["is_transactional"] += [batch.is_transactional] * n
        c["is_control"] += [batch.is_control] * n
        c["problem"] += [None] * n

    def add_problem(self, path: str, damage: Any) -> None:
        for column in self.columns.values():
            column.append(None)
        self.columns["offset"][-1] = -1  # no record here; the problem column says what happened
        self.columns["problem"][-1] = {"file": path, "position": damage.position,
                                       "bytes_not_read": damage.bytes_skipped,
                                       "action": "segment_truncated" if damage.fatal else "batch_skipped",
                                       "reason": damage.reason}
