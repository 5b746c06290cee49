"""A local Parquet dump read by pyarrow in Spark tasks: its reduction (jobs.partial_reduce) and its commit history.

The whole dump is still `read_parquet`'s frame (the quarantine reads every record); this source gives two passes
their input without Spark's row-by-row scan:
* the reduction: each task reads its row groups as columns and folds them, and Spark receives about one row per
  key and task plus the records kept whole (DumpTasks.reduced);
* the history (with offset_commits): each task holds the offset records it can read of its share of the offset
  keys, and every transaction marker, so it holds each of its keys' applied records whole, and writes most keys'
  offset_commits rows itself (DumpTasks.offset_history, jobs.task_history). As Spark's tasks, each reads every
  row group and keeps its share; after an early reduction (jobs.sources.early_reduction) the reducing tasks,
  which read the values anyway, have written each share's records apart (ShareFiles), and the dump is read once.

Used in local mode (the tasks open the driver's files) for dumps of MIN_BYTES or more whose files are plain
Parquet with one schema, no partition folders, and a timestamp that is zoned or epoch milliseconds (a local
timestamp's meaning depends on Spark's session time zone: Spark reads it). Any other dump is reduced by Spark
alone, with the same result (jobs.reduce; tests/jobs/test_partial_reduce.py compares the two).
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from jobs.errors import BadInput
from jobs.hive import data_files
from jobs.sources.tasks import BATCH_FIELDS, RAW_FIELDS, task_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.sources.early_reduction import EarlyReduction

# Compressed bytes of row groups per task, at most. Each task's output is about one row per key, so fewer,
# larger tasks send Spark fewer rows; a task's memory is bounded by its keys either way (FOLD_ROWS).
TASK_BYTES = 256 << 20
# A smaller dump is left to Spark's reduction: the tasks' fixed cost (Python workers importing pyarrow and
# numpy, the JVM's first Arrow conversion: seconds) is more than a scan of it costs. Measured through the tasks
# against Spark alone (farm-bench, 3 pairs each): a 295-record dump 1.09x without history; 1.4 MB (150k
# records) 0.83x with history; 10 MB (1M records) 0.76x with history, 0.86x without. (Before the tasks folded
# transactional commits and resolved them for the history, 10 MB was 1.15x and the threshold 64 MB.)
MIN_BYTES = 1 << 20
# Records per task of the history's pass (DumpTasks.offset_history), at most: such a task holds every plain
# commit of its keys at once (about 300 bytes each while it sorts them: jobs.task_history).
HISTORY_TASK_RECORDS = 10_000_000
# What the run pins the reducing tasks' rows and spans as (jobs.pipeline), in its staging area.
PARTIAL_LOG = "partial_log"
COMBINED_LOG = "partial_log_combined"  # the early reduction's rows, combined across its tasks
OFFSET_STATE = "offset_state"  # and the offsets of those rows (jobs.task_offsets)
TASK_SPANS = "task_spans"
WHOLE_KEY_COMMITS = "whole_key_commits"  # and the history tasks' applied records of the keys Spark finishes
HISTORY_SHARES = "history_shares"  # what reducing tasks write for the history's tasks (ShareFiles)
# The columns the reduction and the replay read, typed as a source task yields them (jobs.sources.tasks).
COLUMNS = ("key", "value", "partition", "offset", "timestamp", "producer_id", "producer_epoch", "is_control")
_TYPES = dict(RAW_FIELDS + BATCH_FIELDS)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
log = logging.getLogger("offsetlake")


@dataclass(frozen=True)
class DumpPlan:
    columns: tuple[str, ...]  # the COLUMNS the dump has
    tasks: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]  # per task: (file, row groups)
    history_tasks: int  # tasks of the history's pass, each holding a share of the keys (DumpTasks.offset_history)


def plan_dump(location: str, cores: int, task_bytes: int = TASK_BYTES, min_bytes: int | None = None
              ) -> DumpPlan | None:
    """Row groups spread over tasks of at most about `task_bytes` (compressed), as many as `cores` at least, each
    with about as many records (a task's work is per record: compression varies with the keys); None when
    the dump is not one this source reads (see the module) or is smaller than `min_bytes` (default MIN_BYTES)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if "://" in location:
        return None
    min_bytes = MIN_BYTES if min_bytes is None else min_bytes
    root = Path(location)
    files = [(root, {})] if root.is_file() else list(data_files(root))
    if not files or any(values for _, values in files):
        return None
    if sum(path.stat().st_size for path, _ in files) < min_bytes:  # no footer can add up to more than its file
        return None
    groups: list[tuple[str, int, int, int]] = []  # (file, row group, compressed bytes, records)
    schema = None
    records = 0
    for path, _ in files:
        meta = pq.ParquetFile(path).metadata
        file_schema = meta.schema.to_arrow_schema()
        if schema is not None and not file_schema.equals(schema):
            return None
        schema = file_schema
        records += meta.num_rows
        groups += [(str(path), i, max(_compressed(meta.row_group(i)), 1), meta.row_group(i).num_rows)
                   for i in range(meta.num_row_groups)]
    stamp = schema.field("timestamp").type
    if not ((pa.types.is_timestamp(stamp) and stamp.tz) or pa.types.is_integer(stamp)):
        return None
    total = sum(size for _, _, size, _ in groups)
    if total < min_bytes:
        return None
    count = max(cores, math.ceil(total / task_bytes / cores) * cores)
    per_task = records / count
    tasks: list[dict[str, list[int]]] = [{}]
    filled = 0.0
    for path, group, _, rows in groups:
        if filled >= per_task and len(tasks) < count:
            tasks.append({})
            filled = 0.0
        tasks[-1].setdefault(path, []).append(group)
        filled += rows
    columns = tuple(name for name in COLUMNS if name in schema.names)
    return DumpPlan(columns, tuple(tuple((p, tuple(g)) for p, g in t.items()) for t in tasks if t),
                    max(cores, math.ceil(records / HISTORY_TASK_RECORDS)))


def _compressed(group: Any) -> int:
    return sum(group.column(c).total_compressed_size for c in range(group.num_columns))


@dataclass(frozen=True)
class DumpTasks:
    """What the tasks of a planned dump give: its reduced records, and the history of its offset records."""

    spark: SparkSession
    plan: DumpPlan
    early: EarlyReduction | None = None  # the same tasks, started before Spark (jobs.sources.early_reduction)

    def reduced_log(self, as_of: datetime | None, pin: Callable[[str, DataFrame], DataFrame],
                    spans: Path | None = None) -> DataFrame:
        """The dump reduced and checked by its tasks (`reduced`), combined across tasks (jobs.reduce.combine_partials;
        the early reduction's come combined), pinned with `pin`. `spans`: a folder: the tasks fold
        transactional commits too, which holds when their spans are disjoint (`spans_disjoint`); when they are
        not, the dump is reduced again without."""
        from jobs.reduce import combine_partials

        if self.early is not None and spans is not None:
            partial, combined = self.early.reduced_log(self.spark, as_of, spans), True
        else:
            partial, combined = pin(PARTIAL_LOG, self.reduced(as_of, spans)), False
        if spans is not None and not spans_disjoint(spans):
            log.warning("a coordinator partition's records are spread over several tasks' row groups: the dump is "
                        "reduced again, its transactional commits kept whole")
            partial, combined = pin("partial_log_unfolded", self.reduced(as_of)), False
        # Pinned as the replay's input, unless it is the combined file already (then only named: no job).
        return combine_partials(partial, True) if combined else pin("reduced_log", combine_partials(partial))

    def group_fold(self, as_of: datetime, events: bool) -> Callable[[], DataFrame] | None:
        """The group fold of `reduced_log`'s valid records up to `as_of` (jobs.groups.replay_groups), when the
        early reduction's workers fold it (the function returned waits for them); None when Spark must."""
        early = self.early
        return None if early is None else lambda: early.group_fold(self.spark, as_of, events)

    def counted(self) -> list[dict] | None:
        """What jobs.pipeline.record_counts aggregates over `reduced_log` (jobs.partial_reduce.count_rows), when the
        early reduction's worker counted the rows it reads; None when Spark must."""
        early = self._early_rows()
        return None if early is None else early.counted()

    def offset_state(self, as_of: datetime) -> Callable[[], tuple[DataFrame, int]] | None:
        """The offsets of `reduced_log`'s valid records up to `as_of` (jobs.replay.replay's `offset_state`), when
        the early reduction's worker computed them from the rows the replay reads; None when Spark must."""
        early = self._early_rows()
        return None if early is None else lambda: early.offset_state(self.spark, as_of)

    def _early_rows(self) -> EarlyReduction | None:
        """The early reduction, when its combined rows are `reduced_log` (its tasks' spans are disjoint: otherwise
        the dump was reduced again)."""
        return self.early if self.early is not None and spans_disjoint(self.early.spans) else None

    def reduced(self, as_of: datetime | None, spans: Path | None = None) -> DataFrame:
        """plan.columns plus jobs.partial_reduce.PARTIAL_FIELDS and CHECK_FIELDS, reduced and checked per task
        (jobs.reduce.combine_partials). `spans`: a folder: each task also folds the transactional commits whose
        fate it sees, and writes there the span of offsets of its transactional records per coordinator
        partition (JSON)."""
        tasks = [json.dumps([index, task]) for index, task in enumerate(self.plan.tasks)]
        columns = list(self.plan.columns)
        as_of_us = micros(as_of)
        folder = None if spans is None else str(spans)

        def run(task: str) -> Iterator[Any]:
            index, groups = json.loads(task)
            return reduce_task(index, groups, columns, as_of_us, folder)

        return self._tasks(tasks, run, reduced_schema(columns))

    def offset_history(self, as_of: datetime | None, keys: DataFrame, out: Path,
                       pin: Callable[[str, DataFrame], DataFrame], recent: int | None = None
                       ) -> Callable[[], DataFrame | None]:
        """The history's pass (jobs.history.HistoryTasks): each task holds the readable offset records up to
        as_of of its share of the keys and every marker (history_task), writes the offset_commits rows of the
        keys that are not `whole` among `keys` (jobs.history.offset_keys) as files under `out`
        (jobs.task_history; `recent`: see write_history), and gives the applied records of the `whole` ones
        (jobs.partial_reduce.COMMIT_FIELDS) as WHOLE_KEY_COMMITS, pinned with `pin` (None when no key is whole).
        The tasks start now when they run outside Spark (`early`); Spark's run when the function returned is
        called, which must be once."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from jobs.partial_reduce import COMMIT_FIELDS
        from jobs.tables import arrow_schema
        from jobs.task_history import KEY_FIELDS

        named = keys.select([name for name, _ in KEY_FIELDS]).toArrow().cast(pa.schema(KEY_FIELDS))
        count = self.plan.history_tasks
        every = tuple((path, groups) for task in self.plan.tasks for path, groups in task)
        columns = list(self.plan.columns)
        as_of_us = micros(as_of)
        target, schema = str(out), arrow_schema("offset_commits")
        if self.early is not None and self.early.history:
            finished = self.early.offset_history(self.spark, count, every, as_of_us, named, target, schema, recent)
        else:
            shared = self.spark.sparkContext.broadcast(named)  # sent once per worker, pickled as Arrow IPC

            def run(task: str) -> Iterator[Any]:
                return history_task(int(task), count, every, columns, as_of_us, shared.value, target, schema,
                                    recent)

            frame = self._tasks([str(i) for i in range(count)], run, pa.schema(COMMIT_FIELDS))
            finished = lambda: pin(WHOLE_KEY_COMMITS, frame)  # noqa: E731
        whole = pc.any(named.column("whole")).as_py()  # some keys are Spark's to finish

        def whole_key_commits() -> DataFrame | None:
            commits = finished()  # once the tasks have written their files
            return commits if whole else None

        return whole_key_commits

    def _tasks(self, tasks: list[str], run: Any, schema: Any) -> DataFrame:
        """One Spark task per element of `tasks`: a one-row partition holding it, mapped to the Arrow tables
        `run(task)` yields (mapInArrow: the batches reach the JVM as Arrow, and no Python process plans a read)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        named = self.spark.createDataFrame(
            self.spark.sparkContext.parallelize([(t,) for t in tasks], len(tasks)), "task string")

        def each(batches: Iterator[Any]) -> Iterator[Any]:
            for batch in batches:
                for task in batch.column("task").to_pylist():
                    for table in run(task):
                        yield from table.select(schema.names).cast(schema).to_batches()

        return named.mapInArrow(each, from_arrow_schema(schema))


def reduce_task(index: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str], as_of_us: int | None,
                spans: str | None, shares: str | None = None, count: int = 0) -> Iterator[Any]:
    """Reducing task `index` (DumpTasks.reduced, jobs.sources.early_reduction): its row groups reduced, as Arrow
    tables (jobs.partial_reduce.reduce_batches); `spans`: a folder: it also folds transactional commits, and
    writes there the span of its transactional records per coordinator partition (`spans_disjoint`);
    `shares`: a folder: it also writes there what the `count` tasks of the history's pass read (`ShareFiles`)."""
    from jobs.partial_reduce import reduce_batches

    seen: dict[int, list[int]] | None = None if spans is None else {}
    files = None if shares is None else ShareFiles(shares, index, count)
    try:
        yield from reduce_batches(read_row_groups(groups, columns), as_of_us, seen, files)
    finally:
        if files is not None:
            files.close()
    if spans is not None:  # named by task: a retried task replaces its file
        Path(spans).mkdir(parents=True, exist_ok=True)
        (Path(spans) / f"task-{index:05d}.json").write_text(json.dumps(seen))


def fold_groups(parts: str, share: int, count: int, events: bool) -> Any:
    """The group fold (jobs.groups.replay_partition) over the valid group records up to as_of among the reducing
    tasks' rows under `parts` (the tasks marked those after it: `after_as_of`), for share `share` of `count` of
    the coordinator partitions (balanced by their records): with every share, what Spark's fold of the reduced
    log gives (jobs.groups.replay_groups). The tasks keep group records whole, so their rows hold all of them; a
    partition's are folded in one share."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    from jobs.groups import GROUP_TYPES, fold_schema, replay_partition

    valid = pc.field("record_type").isin(GROUP_TYPES) & pc.field("error").is_null() & ~pc.field("after_as_of")
    columns = {"partition": "coordinator_partition", "offset": "record_offset", "timestamp": "record_timestamp",
               "record_type": "record_type", "group_id": "group_id", "key": "key", "value": "value"}
    records = pads.dataset(parts, format="parquet").to_table(columns=list(columns), filter=valid)
    records = records.rename_columns([columns[c] for c in records.column_names])
    sizes = records.group_by("coordinator_partition").aggregate([("coordinator_partition", "count")]).to_pylist()
    loads, mine = [0] * count, []
    for size in sorted(sizes, key=lambda s: (-s["coordinator_partition_count"], s["coordinator_partition"])):
        lightest = loads.index(min(loads))  # the same assignment in every share
        loads[lightest] += size["coordinator_partition_count"]
        if lightest == share:
            mine.append(size["coordinator_partition"])
    folded = [replay_partition(records.filter(pc.equal(records.column("coordinator_partition"), partition)), events)
              for partition in sorted(mine)]
    return pa.concat_tables(folded) if folded else fold_schema().empty_table()


class ShareFiles:
    """What a reducing task gives the history's `count` tasks, so that they do not read the dump again: its
    readable offset records up to as_of split by share of the offset keys (`share_of`), in FOLDER/share-NNNNN/,
    and its markers up to as_of in FOLDER/markers/, as Arrow IPC files (`shared_records` reads them)."""

    def __init__(self, folder: str, task: int, count: int) -> None:
        import pyarrow as pa

        from jobs.partial_reduce import MARKER_SCHEMA, PLAIN_FIELDS

        self.count = count
        paths = [Path(folder) / f"share-{share:05d}" / f"task-{task:05d}.arrow" for share in range(count)]
        paths.append(Path(folder) / "markers" / f"task-{task:05d}.arrow")
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
        schemas = [pa.schema(PLAIN_FIELDS)] * count + [MARKER_SCHEMA]
        self._writers = [pa.ipc.new_file(str(path), schema) for path, schema in zip(paths, schemas)]

    def __call__(self, records: Any, found: Any) -> None:
        import pyarrow as pa

        if records.num_rows:
            share = share_of(records.column("coordinator_partition"), records.column("key"), self.count)
            for index, writer in enumerate(self._writers[:-1]):
                writer.write_table(records.filter(pa.array(share == index)))
        if found.num_rows:
            self._writers[-1].write_table(found)

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


def shared_records(folder: str, share: int) -> tuple[list[Any], list[Any]]:
    """(share `share`'s readable offset records, every marker), as the reducing tasks wrote them (`ShareFiles`)."""
    import pyarrow as pa

    def tables(sub: str) -> list[Any]:
        return [pa.ipc.open_file(pa.memory_map(str(path))).read_all()
                for path in sorted((Path(folder) / sub).glob("task-*.arrow"))]

    return tables(f"share-{share:05d}"), tables("markers")


def share_of(partition: Any, key: Any, count: int) -> Any:
    """Per offset record: its key's share among `count` history tasks, its coordinator partition plus its last
    byte (the low byte of its topic partition) modulo `count`: every record of a key in one share (both key types
    end alike), and spread even when a dump has few coordinator partitions."""
    import numpy as np
    import pyarrow.compute as pc

    from jobs.arrow_check import last_bytes

    return (pc.fill_null(partition, 0).to_numpy().astype(np.int64) + last_bytes(key)) % count


def spans_disjoint(folder: Path) -> bool:
    """The tasks' spans (`DumpTasks.reduced`) of each coordinator partition do not overlap: every record of a
    coordinator partition between two of a task's records is that task's."""
    by_partition: dict[str, list[tuple[int, int]]] = {}
    for path in sorted(folder.glob("task-*.json")):
        for partition, (low, high) in json.loads(path.read_text()).items():
            by_partition.setdefault(partition, []).append((low, high))
    for spans in by_partition.values():
        spans.sort()
        if any(later[0] <= earlier[1] for earlier, later in zip(spans, spans[1:])):
            return False
    return True


def micros(moment: datetime | None) -> int | None:
    return None if moment is None else (moment - _EPOCH) // timedelta(microseconds=1)


def reduced_schema(columns: list[str]) -> Any:
    """What a reducing task yields: the dump's columns, typed as a source task yields them, then PARTIAL_FIELDS and
    CHECK_FIELDS."""
    import pyarrow as pa

    from jobs.partial_reduce import CHECK_FIELDS, PARTIAL_FIELDS

    return pa.schema([(name, _TYPES[name]) for name in columns] + list(PARTIAL_FIELDS) + list(CHECK_FIELDS))


def read_row_groups(groups: Iterable[tuple[str, Iterable[int]]], columns: list[str]) -> Iterator[Any]:
    """The row groups read with pyarrow, typed as Spark would read them; a damaged one ends the task with one line."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    typed = reduced_schema(columns)
    for path, row_groups in groups:
        dump = None
        for group in row_groups:
            try:
                dump = dump or pq.ParquetFile(path)
                table = dump.read_row_group(group, columns=columns, use_threads=False)
            except (pa.ArrowException, OSError) as e:  # a damaged data page: the user's file, said in one line
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise task_error(BadInput(f"--source parquet: {path}: cannot read row group {group} ({reason})")
                                 ) from None
            stamp = table.column("timestamp")
            if pa.types.is_integer(stamp.type):  # epoch milliseconds
                stamp = pc.multiply(stamp.cast(pa.int64()), 1000)
            table = table.set_column(columns.index("timestamp"), "timestamp", stamp)
            yield table.cast(pa.schema([typed.field(n) for n in columns]), safe=False)


def history_task(index: int, count: int, groups: Iterable[tuple[str, Iterable[int]]], columns: list[str],
                 as_of_us: int | None, keys: Any, out: str, schema: Any, recent: int | None = None,
                 shares: str | None = None) -> Iterator[Any]:
    """Task `index` of `count` of the history's pass (DumpTasks.offset_history): its share of the offset keys
    (`share_of`), read from the dump's row groups `groups`, or from `shares` when the reducing tasks wrote them
    there (`ShareFiles`, up to the same as_of); `keys`: the named keys (jobs.task_history.KEY_FIELDS, a pyarrow
    Table); `schema`: offset_commits' (Arrow); `recent`: jobs.task_history.write_history's."""
    import pyarrow as pa

    from jobs.partial_reduce import applied, at_or_before, markers, readable_records
    from jobs.task_history import split_keys, write_history

    if shares is not None:
        records, found = shared_records(shares, index)
    else:
        found = []  # every transaction marker up to as_of: the fates of the share's commits

        def mine() -> Iterator[pa.Table]:
            for table in read_row_groups(groups, columns):
                found.append(markers(table, at_or_before(table, as_of_us)))
                # null partition: not an offset record anyway
                yield table.filter(pa.array(share_of(table.column("partition"), table.column("key"), count) == index))

        records = list(readable_records(mine(), as_of_us))
    if not records or not sum(table.num_rows for table in records):
        return
    positioned, applies = applied(pa.concat_tables(records), pa.concat_tables(found))
    del records  # the batches read (`positioned` holds them until the rows are copied)
    finished, whole = split_keys(positioned, keys, schema, applies, recent)
    del positioned
    write_history(finished, Path(out), f"part-history-{index:05d}", recent)
    yield whole
