"""A Parquet dump: a file or folder with the columns of Spark's Kafka source.

A dump, local or on any filesystem of jobs.base.storage, is checked before anything starts (`check_dump`, from
the footers, with pyarrow) and planned as tasks of row groups (`plan_dump`), which any worker reads with pyarrow
(`read_row_groups`); Spark reads it with its own Parquet reader, through Hadoop's filesystems (`read_parquet`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterator

from jobs.base.errors import BadInput
from jobs.base.hive import data_files, relative
from jobs.base.storage import Location, first_line, located
from jobs.sources.raw import OPTIONAL, REQUIRED, column_problem

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_INT32 = 1 << 31
BAD_FILES_NAMED = 20  # files named in check_dump's one line; the rest are counted


def check_dump(root: Location | str) -> str | None:
    """Every data file of a dump is Parquet and has the contract's columns (the rules of jobs.sources.raw).

    Every file is checked, so one error names all the files that are not usable, each with its reason
    (the first BAD_FILES_NAMED of them: the error stays one line). Returns the Spark schema (DDL) of the
    contract's columns when every file agrees on it, so Spark can open the dump without a job to infer it
    (None: files that differ)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = located(root)
    location = root.uri
    if not root.local:
        root.check_reachable("--source parquet:", location, folder=False)
    if not root.exists():
        raise BadInput(f"--source parquet:{location}: no such file or directory")
    files = dump_files(root)
    if not files:
        raise BadInput(f"--source parquet:{location}: no Parquet files in this folder")
    files = [(path, {name: _partition_value_type(value) for name, value in values.items()}) for path, values in files]
    seen = set()
    bad: list[str] = []
    for path, partition_columns in files:
        try:
            schema = pq.read_schema(path.path, filesystem=path.fs)
        except (pa.ArrowException, OSError) as e:  # ArrowInvalid: no Parquet magic bytes, a cut-off footer
            problem = f"cannot read Parquet: {first_line(e, 200)}"
        else:
            types = {**{f.name: spark_type(f.type) for f in schema}, **partition_columns}
            problem = column_problem(types)
            if problem is None:
                seen.add(tuple((name, types[name]) for name in (*REQUIRED, *OPTIONAL) if name in types))
                continue
        if path == root:
            raise BadInput(f"--source parquet:{location}: {problem}")
        bad.append(f"{relative(root, path)} ({problem[:300]})")
    if bad:
        named = "; ".join(bad[:BAD_FILES_NAMED]) + (f"; and {len(bad) - BAD_FILES_NAMED} more"
                                                      if len(bad) > BAD_FILES_NAMED else "")
        raise BadInput(f"--source parquet:{location}: {len(bad)} of {len(files)} files "
                       f"{'is' if len(bad) == 1 else 'are'} not usable: {named}")
    return ", ".join(f"`{name}` {dtype}" for name, dtype in seen.pop()) if len(seen) == 1 else None


# The columns the replay reads (the contract's, and the batch metadata a dump may carry).
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "producer_id", "producer_epoch", "is_control")


def dump_files(root: Location) -> list[tuple[Location, dict[str, str | None]]]:
    """A dump's data files with their partition folders' values (a dump may be a single file)."""
    return [(root, {})] if root.exists() and not root.is_dir() else list(data_files(root))


def plan_dump(root: Location | str, cores: int, task_bytes: int) -> tuple[tuple, int, tuple[str, ...]]:
    """(tasks, bytes, the COLUMNS the dump has): the dump's records cut into tasks of at most about `task_bytes`
    (compressed), as many as `cores` at least, each with as many records (a task's work is per record:
    compression varies with the keys)."""
    files = dump_files(located(root))
    planned, names = plan_row_groups(files, cores, task_bytes, SHARED_READ_BYTES)
    return planned, _bytes(files), tuple(c for c in COLUMNS if c in names)


def plan_row_groups(files: list[tuple[Location, dict]], cores: int, task_bytes: int, shared_below: int = 0
                    ) -> tuple[tuple, set[str]]:
    """(tasks, the column names found): `files`' records spread over tasks as `plan_dump` does (the archive's
    files are planned so too: jobs.sources.archive). The records, in file and row-group order, are cut into
    tasks of the same count: a row group at a cut is read by both tasks, each keeping its rows of it (a small
    dump of one large row group still keeps every core busy). A task is a tuple of `Rows`.

    Records below `shared_below` bytes (a dump's: SHARED_READ_BYTES, a daily run's) are read whole by each of
    `cores` tasks instead, each keeping its share of the partitions: raw_records (partitioned by partition) then
    gains one file a folder a run, not one per task, and those small files are what later runs compact
    (jobs.lake.upkeep)."""
    import math

    import pyarrow.parquet as pq

    groups: list[tuple[Location, int, int, int, dict]] = []  # (file, row group, compressed bytes, records, values)
    names: set[str] = set()
    records = 0
    for path, values in files:
        meta = pq.read_metadata(path.path, filesystem=path.fs)
        names |= set(meta.schema.to_arrow_schema().names) | set(values)
        records += meta.num_rows
        groups += [(path, i, max(_compressed(meta.row_group(i)), 1), meta.row_group(i).num_rows, values)
                   for i in range(meta.num_row_groups) if meta.row_group(i).num_rows]
    total = sum(size for _, _, size, _, _ in groups)
    if 1 < cores and total < shared_below:
        whole: dict[Location, Rows] = {}
        for path, group, _, _, values in groups:
            rows = whole.get(path)
            whole[path] = Rows(path, (*rows.groups, group) if rows else (group,), values)
        return tuple(tuple(replace(r, share=(i, cores)) for r in whole.values()) for i in range(cores)), names
    count = max(cores, math.ceil(total / task_bytes / cores) * cores)
    per_task = max(1, math.ceil(records / count))
    tasks: list[list[Rows]] = [[]]
    filled = 0
    for path, group, _, rows, values in groups:
        start = 0
        while start < rows:
            if filled == per_task:
                tasks.append([])
                filled = 0
            stop = min(rows, start + per_task - filled)
            end = None if stop == rows else stop
            task = tasks[-1]
            if task and task[-1].path == path and task[-1].stop is None and start == 0:  # the file's next group
                task[-1] = Rows(path, (*task[-1].groups, group), values, task[-1].start, end)
            else:
                task.append(Rows(path, (group,), values, start, end))
            filled += stop - start
            start = stop
    return tuple(tuple(t) for t in tasks if t), names


@dataclass(frozen=True)
class Rows:
    """Rows of one file in a task: its row groups `groups` in order, less the first `start` rows of the first,
    up to row `stop` of the last (None: all of it)."""

    path: Location
    groups: tuple[int, ...]
    values: dict  # the values of the file's partition folders
    start: int = 0
    stop: int | None = None
    share: tuple[int, int] | None = None  # (i, n): only the records of partitions p with p % n == i (null: i == 0)


# A dump below this (compressed) is read whole by every task, each keeping its share of partitions (plan_row_groups).
SHARED_READ_BYTES = 32 << 20


def _compressed(group: Any) -> int:
    return sum(group.column(c).total_compressed_size for c in range(group.num_columns))


def read_row_groups(task: Any, columns: list[str]) -> Iterator[Any]:
    """A task's row groups (`plan_dump`) read with pyarrow, with the values of their partition folders; a damaged
    one ends the task with one line. Small row groups (a streaming writer's) are read together, up to BATCH_ROWS
    records: each batch costs the steps after the read more than its records do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.sources.tasks import task_error

    for path, row_groups, values, start, stop, share in ((r.path, r.groups, r.values, r.start, r.stop, r.share)
                                                         for r in task):
        present = [c for c in columns if c not in values]
        try:
            dump = pq.ParquetFile(path.path, filesystem=path.fs)
        except (pa.ArrowException, OSError) as e:
            raise task_error(BadInput(f"--source parquet: {path.uri}: cannot read it ({first_line(e, 200)})")) from None
        read = [c for c in present if c in dump.schema_arrow.names]
        sizes = [dump.metadata.row_group(g).num_rows for g in row_groups]
        first, last = row_groups[0], row_groups[-1]
        for groups in _batches(row_groups, sizes):
            try:
                table = dump.read_row_groups(groups, columns=read, use_threads=False)
            except (pa.ArrowException, OSError) as e:  # a damaged data page: the user's file, said in one line
                damaged = _damaged(dump, groups, read)
                raise task_error(BadInput(f"--source parquet: {path.uri}: cannot read row group {damaged} "
                                          f"({first_line(e, 200)})")) from None
            if stop is not None and groups[-1] == last:  # the task's share of a row group cut between tasks
                table = table.slice(0, table.num_rows - sizes[-1] + stop)
            if start and groups[0] == first:
                table = table.slice(start)
            for name, value in values.items():
                if name in columns:
                    table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()).cast(
                        pa.int64() if value is not None and re.fullmatch(r"-?\d+", value) else pa.string()))
            yield table if share is None else table.filter(_in_share(table.column("partition"), *share))


def _in_share(partition: Any, i: int, n: int) -> Any:
    """Whether each record's partition is of share `i` of `n` (a record without one, or a partition that is not a
    number, which the check refuses: of the first share)."""
    import pyarrow as pa

    from jobs.base.arrow import numbers

    if not pa.types.is_integer(partition.type):
        return pa.array([i == 0] * len(partition))
    return pa.array(numbers(partition) % n == i)


BATCH_ROWS = 1 << 16  # row groups smaller than this are read together (read_row_groups)


def _batches(row_groups: list[int], rows: list[int]) -> Iterator[list[int]]:
    """`row_groups` in order, in runs of at most BATCH_ROWS records (a larger row group alone)."""
    run: list[int] = []
    held = 0
    for group, n in zip(row_groups, rows):
        if run and held + n > BATCH_ROWS:
            yield run
            run, held = [], 0
        run.append(group)
        held += n
    if run:
        yield run


def _damaged(dump: Any, groups: list[int], columns: list[str]) -> int:
    """The first of `groups` that cannot be read (the first of them, if each can alone)."""
    for group in groups:
        try:
            dump.read_row_group(group, columns=columns, use_threads=False)
        except Exception:  # noqa: BLE001 - whatever failed the run of them
            return group
    return groups[0]


def dump_bytes(root: Location) -> int:
    """The size of a dump's data files."""
    return _bytes(dump_files(root))


def _bytes(files: list[tuple[Location, dict]]) -> int:
    if not files:
        return 0
    fs = files[0][0].fs
    return sum(info.size or 0 for info in fs.get_file_info([f.path for f, _ in files]))


def _partition_value_type(value: str | None) -> str:
    """The type Spark infers for a partition folder's value (whole numbers: int or bigint; else string)."""
    if value is not None and re.fullmatch(r"-?\d+", value):
        return "int" if -_INT32 <= int(value) < _INT32 else "bigint"
    return "string"


def spark_type(arrow: pa.DataType) -> str:
    """The Spark type name Spark's Parquet reader gives a column pyarrow reads as `arrow`."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(arrow):
        return spark_type(arrow.value_type)
    if t.is_binary(arrow) or t.is_large_binary(arrow) or t.is_fixed_size_binary(arrow):
        return "binary"
    if t.is_string(arrow) or t.is_large_string(arrow):
        return "string"
    if t.is_timestamp(arrow):  # adjusted to UTC: timestamp; a local time: timestamp_ntz
        return "timestamp" if arrow.tz else "timestamp_ntz"
    names = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
             pa.uint8(): "smallint", pa.uint16(): "int", pa.uint32(): "bigint", pa.uint64(): "decimal(20,0)",
             pa.bool_(): "boolean", pa.float32(): "float", pa.float64(): "double"}
    return names.get(arrow, str(arrow))


def read_parquet(spark: SparkSession, root: Location) -> DataFrame:
    """Open the dump lazily; a missing or unreadable path is the user's error, not a traceback."""
    schema = check_dump(root)  # the footers, read again: milliseconds, and no Spark job
    try:
        return spark.read.schema(schema).parquet(root.hadoop_uri) if schema is not None else \
            spark.read.parquet(root.hadoop_uri)  # inference reads the footers now: a bad file fails here
    except Exception as e:  # AnalysisException, or a Py4JJavaError from the footer reader
        raise BadInput(f"--source parquet:{root.uri}: cannot read Parquet ({root_cause(e)})") from None


def root_cause(e: Exception) -> str:
    """The innermost Java cause of a Spark error (the useful part), else the first line of the message."""
    cause = getattr(e, "java_exception", None)
    while cause is not None and cause.getCause() is not None:
        cause = cause.getCause()
    text = cause.toString() if cause is not None else (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:300]
