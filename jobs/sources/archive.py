"""The archive (`rebuild --archive`): every raw record a run reads, kept in DIR/raw_records across runs, so that
the history tables still hold what the cluster has since compacted or deleted.

* Before the source is planned, the driver reads what the archive holds at the newest complete run's version
  (`Archive.open`): each partition's archived end, and for a dump every archived offset, from `_archive_offsets`
  (the archived offsets as ranges, which each run replaces with its new records' added: `ranges`, `merged`), not
  from raw_records itself.
* A live cluster's slices and a log dir's segments start after the archived end (jobs.sources.plan); a dump is
  read whole. Each source task keeps the records not archived yet (`archive_chunk`; for a dump an anti-join on
  the offset), stages them as raw_records rows of this run, and hands them on to the reduction.
* The archived records are read again by tasks of their own (`ArchivedFiles`; their rows carry first_seen_run),
  so the replay sees archive + new records, as a rebuild of every record ever seen would.
* The sink appends the staged rows in one Delta commit before the run is recorded: a run that fails appends
  nothing a reader sees, and the next run restores the table (jobs.lake.runs.restore_unfinished).

A record is keyed by (topic, partition, offset) and archived once: its first copy. Copies with other bytes at
one offset are quarantined by the replay (jobs.replay.duplicates) and archived by nobody (`unique`); a copy of an
archived record is dropped unseen, the archived one being the record the earlier run replayed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask, numbers, run_starts
from jobs.base.earlier import EarlierRun
from jobs.base.storage import Location, write_parquet
from jobs.base.tables import ARCHIVE, ARCHIVE_OFFSETS, arrow_schema, conform
from jobs.replay.duplicates import SPAN_SCHEMA, copies, spans
from jobs.replay.records import records

log = logging.getLogger("offsetlake")
OFFSETS_TOPIC = "__consumer_offsets"
FIRST_SEEN = "first_seen_run"
READ_SCHEMA = pa.schema([("read", pa.int64()), ("new", pa.int64())])
RANGE_SCHEMA = arrow_schema(ARCHIVE_OFFSETS)
# What a source task adds with the archive on: its new records as raw_records rows, their spans (records there
# twice in this run: `unique`) and offsets (as ranges), and how many records it read and found new.
OUTPUTS: dict[str, pa.Schema] = {ARCHIVE: arrow_schema(ARCHIVE), "archive_spans": SPAN_SCHEMA,
                                 "archive_ranges": RANGE_SCHEMA, "archive_reads": READ_SCHEMA}
# The raw columns an archived record is read back with (the contract's, its batch metadata and first_seen_run).
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "producer_id", "producer_epoch", "is_control",
           FIRST_SEEN)
# What makes two copies of a record the same record (as jobs.replay.duplicates compares them).
_CONTENTS = ("key", "value", "timestamp", "producer_id", "producer_epoch", "is_control")


@dataclass(frozen=True)
class ArchivedFiles:
    """A task reading archived records: row groups of raw_records' files (jobs.sources.parquet's task layout)."""

    groups: tuple


@dataclass(frozen=True)
class Archive:
    """DIR/raw_records as the newest complete run left it: `version` (None: nothing archived yet), its records,
    its offsets as ranges (`ranges`, RANGE_SCHEMA), each (topic, partition)'s highest archived offset (`ends`), and
    for a dump every archived offset of each (`offsets`: the first and last offset of each run of consecutive
    ones, which every task carries: few where the log was read whole). Two topics are archived:
    `__consumer_offsets` and the share coordinator's `__share_group_state`."""

    earlier: EarlierRun  # the run it is read from
    version: int | None = None
    records: int = 0
    ranges: pa.Table = field(default_factory=RANGE_SCHEMA.empty_table)
    ends: dict[tuple[str, int], int] | None = None
    offsets: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] | None = None
    runs: int = 0  # archive runs recorded so far (the version of `_archive_offsets`, which each replaces once)

    @classmethod
    def open(cls, earlier: EarlierRun, exact: bool) -> "Archive":
        """The archive the `earlier` run left (after the lock's recovery: an unfinished run's append is undone);
        `exact`: also every archived offset (a dump is read whole and anti-joined). Its offsets come from the
        `_archive_offsets` the same run left, or, from an output of a version that left none, from raw_records."""
        if ARCHIVE not in earlier.versions:
            return cls(earlier, ends={})
        recorded = earlier.recorded
        if ARCHIVE_OFFSETS in recorded and recorded.get(ARCHIVE) == earlier.versions[ARCHIVE]:
            ranges = earlier.open(ARCHIVE_OFFSETS, recorded[ARCHIVE_OFFSETS]).to_pyarrow_table()
        else:
            found = earlier.open(ARCHIVE).to_pyarrow_table(columns=["topic", "partition", "offset"])
            ranges = offset_ranges(found.column("topic"), found.column("partition"), found.column("offset"))
        ranges = merged([ranges])
        first, last = numbers(ranges.column("first_offset")), numbers(ranges.column("last_offset"))
        starts = _partition_starts(ranges)  # a compacted topic's archive: a range per gap, so no Python per range
        bounds = list(zip(starts, [*starts[1:], ranges.num_rows]))
        topic = ranges.column("topic").take(pa.array(starts, pa.int64())).to_pylist()
        partition = ranges.column("partition").take(pa.array(starts, pa.int64())).to_pylist()
        ends = {(t, p): int(last[b - 1]) for t, p, (_, b) in zip(topic, partition, bounds)}
        offsets = {(t, p): (first[a:b], last[a:b]) for t, p, (a, b) in zip(topic, partition, bounds)} if exact \
            else None
        records = int((last - first + 1).sum())
        log.info("the archive holds %d records of %d partitions (version %d)", records, len(ends),
                 earlier.versions[ARCHIVE])
        return cls(earlier, earlier.versions[ARCHIVE], records, ranges, ends, offsets,
                   recorded.get(ARCHIVE_OFFSETS, -1) + 1)

    def new(self, topic: pa.Array | pa.ChunkedArray, partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """Per record: not archived yet. A dump's by its offset (anti-join); a live cluster's and a log dir's are
        read in offset order, so what lies at or below a partition's archived end is archived."""
        fresh = np.ones(len(offset), bool)
        if not len(offset):
            return fresh
        encoded = pc.dictionary_encode(topic, null_encoding="encode")
        encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
        names, code = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
        key = code.astype(np.int64) << 32 | (partition.astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        starts = run_starts(ordered)
        for a, b in zip(starts, [*starts[1:], len(order)]):
            rows = order[a:b]
            at = (str(names[code[rows[0]]]), int(partition[rows[0]]))
            if self.offsets is not None:
                if at in self.offsets:
                    fresh[rows] = ~_within(offset[rows], *self.offsets[at])
            elif at in (self.ends or {}):
                fresh[rows] = offset[rows] > self.ends[at]
        return fresh

    def files(self) -> list[tuple[Location, dict[str, str]]]:
        """raw_records' data files at `version`, with their partition values (read only to read them back)."""
        return self.earlier.files(ARCHIVE, self.version) if self.version is not None else []

    def tasks(self, cores: int, task_bytes: int) -> tuple[ArchivedFiles, ...]:
        """The archived records as source tasks, spread as a dump's row groups are."""
        from jobs.sources.parquet import plan_row_groups

        files = self.files()
        if not files:
            return ()
        planned, _ = plan_row_groups(files, cores, task_bytes)
        return tuple(ArchivedFiles(groups) for groups in planned)


def offset_ranges(topic: pa.ChunkedArray | pa.Array, partition: pa.ChunkedArray | pa.Array,
                  offset: pa.ChunkedArray | pa.Array) -> pa.Table:
    """Records' (topic, partition, offset) as RANGE_SCHEMA rows: each run of consecutive offsets of a partition."""
    if not len(offset):
        return RANGE_SCHEMA.empty_table()
    topics = pc.dictionary_encode(topic.combine_chunks() if isinstance(topic, pa.ChunkedArray) else topic)
    code, p, o = numbers(topics.indices), numbers(partition), numbers(offset)
    order = np.lexsort((o, p, code))
    code, p, o = code[order], p[order], o[order]
    # A range ends where the partition changes or the next offset is not the next one (a copy continues it).
    breaks = np.flatnonzero((code[1:] != code[:-1]) | (p[1:] != p[:-1]) | (o[1:] - o[:-1] > 1)) + 1
    firsts, lasts = np.concatenate([[0], breaks]), np.concatenate([breaks - 1, [len(o) - 1]])
    return pa.table([topics.dictionary.take(pa.array(code[firsts])), pa.array(p[firsts], pa.int32()),
                     pa.array(o[firsts]), pa.array(o[lasts])], schema=RANGE_SCHEMA)


def merged(tables: list[pa.Table]) -> pa.Table:
    """Ranges (RANGE_SCHEMA) as the fewest ranges holding the same offsets, sorted: overlapping and adjacent
    ones joined."""
    ranges = pa.concat_tables([t.cast(RANGE_SCHEMA) for t in tables]).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("first_offset", "ascending")])
    if not ranges.num_rows:
        return ranges
    p, first, last = (numbers(ranges.column(c)) for c in ("partition", "first_offset", "last_offset"))
    starts = _partition_starts(ranges)
    same = np.ones(len(p), bool)
    same[starts] = False
    reach = last.copy()  # the highest offset of a partition's ranges so far
    for a, b in zip(starts, [*starts[1:], len(p)]):
        reach[a:b] = np.maximum.accumulate(last[a:b])
    heads = np.flatnonzero(~(same & (first <= np.concatenate([[0], reach[:-1]]) + 1)))
    return pa.table([ranges.column("topic").take(pa.array(heads)), pa.array(p[heads], pa.int32()),
                     pa.array(first[heads]), pa.array(np.maximum.reduceat(last, heads))], schema=RANGE_SCHEMA)


def _partition_starts(ranges: pa.Table) -> np.ndarray:
    """The rows of sorted ranges where a (topic, partition) starts."""
    if not ranges.num_rows:  # an archive of no record (a first run of an empty dump)
        return np.zeros(0, np.int64)
    topic = ranges.column("topic").to_numpy(zero_copy_only=False)
    p = numbers(ranges.column("partition"))
    return np.flatnonzero(np.concatenate([[True], (topic[1:] != topic[:-1]) | (p[1:] != p[:-1])]))


def _within(offset: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
    """Per offset: inside one of the ranges [firsts[i], lasts[i]]."""
    i = np.searchsorted(firsts, offset, side="right") - 1
    return (i >= 0) & (offset <= lasts[np.maximum(i, 0)])


def read_archived(task: ArchivedFiles) -> Iterator[pa.Table]:
    """An archive task's raw batches (with first_seen_run: the chunk kernel replays them, never archives them)."""
    from jobs.sources.parquet import read_row_groups

    return read_row_groups(task.groups, list(COLUMNS))


def archive_chunk(raw: Iterable[pa.Table | pa.RecordBatch], kernel: Callable[[Iterable[pa.Table]], Iterator],
                  archive: Archive, run_id: str) -> Iterator[tuple[str, pa.Table]]:
    """A source task with the archive on: archived rows (first_seen_run set) go to `kernel` (the chunk kernel)
    as they are; of the source's rows, those already archived are dropped, and the new records are staged as
    raw_records rows of run `run_id` and go to `kernel` too. Yields the kernel's outputs and OUTPUTS."""
    found: list[tuple[str, pa.Table]] = []

    def split() -> Iterator[pa.Table]:
        for batch in raw:
            table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            archived = mask(pc.is_valid(table.column(FIRST_SEEN))) if FIRST_SEEN in table.column_names else \
                np.zeros(table.num_rows, bool)
            # A damage row of a log dir, or a record without a place (quarantined), is never archived.
            problem = mask(pc.is_valid(table.column("problem"))) if "problem" in table.column_names else \
                np.zeros(table.num_rows, bool)
            partition, offset = table.column("partition"), table.column("offset")
            placed = mask(pc.and_(pc.is_valid(partition), pc.is_valid(offset))) & (numbers(offset) >= 0) & ~problem
            source = ~archived & placed
            new = source.copy()
            topic = table.column("topic") if "topic" in table.column_names else \
                pa.array([OFFSETS_TOPIC] * table.num_rows, pa.string())
            new[source] = archive.new(topic.filter(pa.array(source)), numbers(partition)[source],
                                      numbers(offset)[source])
            fresh = table.filter(pa.array(new))
            staged = raw_records(fresh, run_id)
            found.append((ARCHIVE, staged))
            found.append(("archive_spans", spans(records(fresh))))
            found.append(("archive_ranges", offset_ranges(staged.column("topic"), staged.column("partition"),
                                                          staged.column("offset"))))
            found.append(("archive_reads", pa.table({"read": [int((~archived & ~problem).sum())],
                                                     "new": [int(new.sum())]}, schema=READ_SCHEMA)))
            yield table.filter(pa.array(archived | new | (~archived & ~placed)))

    for item in kernel(split()):
        yield item
        yield from found
        found.clear()
    yield from found


def raw_records(raw: pa.Table, run_id: str) -> pa.Table:
    """A source's raw rows as raw_records rows first seen by run `run_id` (batch metadata: null where the
    source has none)."""
    n = raw.num_rows
    given = {
        **{name: raw.column(name) for name in raw.column_names},
        "timestamp": records(raw).column("record_timestamp") if n else pa.nulls(0, TIMESTAMP),
        FIRST_SEEN: pa.array([run_id] * n, pa.string()),
    }
    given.setdefault("topic", pa.array([OFFSETS_TOPIC] * n, pa.string()))
    return conform(given, ARCHIVE, n)


def unique(staged: Location) -> int:
    """Keep one copy of each record a run staged more than once in raw_records (a dump that holds a record
    twice): the first of identical copies; none of copies that differ (the replay quarantines them all).
    Returns the copies removed. Runs on the driver, one partition at a time, only when some may be there."""
    import pyarrow.parquet as pq

    from jobs.base.hive import data_files

    by_partition: dict[str, list[Location]] = {}
    for file, values in data_files(staged):
        by_partition.setdefault(values.get("partition") or "", []).append(file)
    removed = 0
    for files in by_partition.values():
        rows = pa.concat_tables([pq.read_table(f.path, filesystem=f.fs) for f in files])
        # By topic, then offset: the two topics' records of one partition number are different records.
        rows = rows.sort_by([("topic", "ascending"), ("offset", "ascending")])
        keep = np.ones(rows.num_rows, bool)
        topic = rows.column("topic").to_numpy(zero_copy_only=False)
        for t in np.unique(topic):
            at = np.flatnonzero(topic == t)
            first, in_conflict = copies(rows.take(pa.array(at)), numbers(rows.column("offset"))[at], _CONTENTS)
            keep[at] = first & ~in_conflict
        if keep.all():
            continue
        removed += int((~keep).sum())
        write_parquet(rows.filter(pa.array(keep)), files[0].parent.child("unique.parquet"))
        for f in files:
            f.remove()
    return removed
