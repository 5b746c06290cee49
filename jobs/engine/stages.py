"""The kernel's tasks, whichever runner runs them (forked workers or Spark's executors), and where they keep their
outputs: a contract table in its own folder under the run's name (`<table>/run-<run id>/`, which jobs.lake.sink
commits where it is), anything else in the run's staging area (`_offsetlake_staging/<run id>/_state/<stage>/
<name>`), as StagingLayout lays them out. On any filesystem: paths are Locations. What each pass writes and
the next reads is named in jobs.engine.handoffs.

* `chunk_task`: one task of the source's plan, read by the task itself, through the source kernel;
* `partition_task`: one group of coordinator partitions, at once or one by one, through the replay's or the
  derivation's kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from jobs.base.arrow import numbers, run_starts, same_as_previous
from jobs.base.hive import NULL_PARTITION, data_files
from jobs.base.storage import Location, close_parquet
from jobs.base.tables import STAGED_TABLES, conform, partition_columns
from jobs.engine.handoffs import CHUNKS, Staged
from jobs.kill_points import kill_point
from jobs.lake.output_lock import RUN_FOLDER, STAGING_DIR

if TYPE_CHECKING:
    from jobs.sources.plan import SourcePlan

NULL_GROUP = 0  # the group of records without a coordinator partition (all quarantined)
STATE = "_state"
# The log rows a task holds before it writes them, a row group per coordinator partition.
LOG_ROWS = 1 << 20
OUTPUT_ROWS = 1 << 16  # an output's rows a task holds before it writes them
PARTITIONED_ROWS = 1 << 18  # the same, of a table partitioned by folders: each write is a file per folder
# The kernels the runners run: pass 1's over a source task's raw batches, passes 2 and 3's over a group's inputs
# by name; each gives (output name, rows) pairs.
ChunkKernel = Callable[[Iterable[pa.Table]], Iterator[tuple[str, pa.Table]]]
PartitionKernel = Callable[[dict[str, pa.Table]], Iterator[tuple[str, pa.Table]]]
LOGS = ("log", "share_log")  # the records a source task leaves, written in a folder per group of partitions
EARLIER = "earlier"  # the stage of what an earlier run left for this one to read (StagingLayout.earlier: its files)


@dataclass(frozen=True)
class StagingLayout:
    """Where run `run_id`'s passes keep their outputs under `output`; `groups`: how many groups of coordinator
    partitions the passes after the source's are split into; `earlier`: the files of the outputs an earlier run
    left for this one, by name, each with the coordinator partitions it holds (`earlier_files`), read as stage
    EARLIER (jobs.replay.resume)."""

    output: Location
    run_id: str
    groups: int
    earlier: dict[str, tuple[tuple[Location, frozenset[int]], ...]] = field(default_factory=dict)

    @property
    def state(self) -> Location:
        return self.output.child(STAGING_DIR, self.run_id, STATE)

    def is_table(self, name: str) -> bool:
        return name in STAGED_TABLES

    def folder(self, stage: str, name: str) -> Location:
        return self.output.child(name, RUN_FOLDER + self.run_id) if self.is_table(name) else \
            self.state.child(stage, name)

    def read(self, output: Staged, columns: list[str] | None = None, filter: pc.Expression | None = None
             ) -> pa.Table:
        """All of an output (on the driver: only what is small), or its `columns`, rows matching `filter`."""
        return self._dataset(self.folder(output.stage, output.name), output.schema).to_table(columns=columns,
                                                                                             filter=filter)

    def clear(self, stage: str, outputs: dict[str, pa.Schema]) -> None:
        """Remove what `stage` wrote (to run it again)."""
        for name in outputs:
            self.folder(stage, name).remove()
        self.state.child(stage).remove()

    def group_dataset(self, output: Staged, group: int) -> pads.Dataset:
        """The rows of one group of coordinator partitions (the local runner's files of that group)."""
        name = output.name
        if output.stage == EARLIER:  # laid out by an earlier run, maybe in other groups: this group's rows, from
            # the files that hold some (a reduced log, a share of which a task holds well)
            partition = pc.field("coordinator_partition")
            mine = pc.equal(pc.subtract(partition, pc.multiply(pc.divide(partition, self.groups), self.groups)), group)
            files = [f for f, partitions in self.earlier[name] if any(p % self.groups == group for p in partitions)]
            return pads.dataset(_files(files, output.schema).to_table(filter=mine))
        folder = self.folder(output.stage, name)
        if name in LOGS:
            files = [f for f, _ in data_files(folder.child(f"g{group:05d}"))]
        else:
            files = [f for f, _ in data_files(folder) if f.name.startswith(f"g{group:05d}")]
        return _files(files, output.schema)

    def _dataset(self, folder: Location, schema: pa.Schema) -> pads.Dataset:
        """A folder's Parquet files (hive-style folders give their columns) as a dataset of `schema`."""
        found = list(data_files(folder))
        if not found:
            return pads.dataset(schema.empty_table())
        partitioning = pads.partitioning(pa.schema([schema.field(n) for n in found[0][1]]), flavor="hive") \
            if found[0][1] else None
        return pads.dataset([f.path for f, _ in found], schema=schema, format="parquet", filesystem=folder.fs,
                            partitioning=partitioning, partition_base_dir=folder.path)


def earlier_files(files: tuple[Location, ...]) -> tuple[tuple[Location, frozenset[int]], ...]:
    """An earlier run's files of an output (rows with a coordinator partition), each with the partitions it holds:
    a task reads only the files that hold some of its group's."""
    import pyarrow.parquet as pq

    return tuple((f, frozenset(pc.unique(pq.read_table(f.path, columns=["coordinator_partition"], filesystem=f.fs)
                                         .column(0)).drop_null().to_pylist())) for f in files)


def _files(files: list[Location], schema: pa.Schema) -> pads.Dataset:
    """Parquet files as a dataset of `schema` (an empty one where nothing was written)."""
    if not files:
        return pads.dataset(schema.empty_table())
    return pads.dataset([f.path for f in files], schema=schema, format="parquet", filesystem=files[0].fs)


def group_of(partition: pa.ChunkedArray | pa.Array, groups: int) -> np.ndarray:
    """Per row: the group of its coordinator partition (NULL_GROUP for none)."""
    found = numbers(partition, -1)
    return np.where(found >= 0, found % groups, NULL_GROUP)


class TaskOutputs:
    """A task's outputs, by either runner: a table in the table's layout, in its run folder (file names are the
    task's `part`, so a task run again replaces what it wrote), the log by group of coordinator partitions, in row
    groups of one partition each (a large group's replay reads one partition at a time), held until the task holds
    LOG_ROWS, so that a partition's rows take few row groups. The other outputs are held too, up to OUTPUT_ROWS (a
    row group per partition costs more than its rows; PARTITIONED_ROWS for a table partitioned by folders, each of
    whose writes is a file per folder); a large group's partition task gives them in partition order, so a row
    group holds a run of partitions, and a later pass's read of one partition skips the others."""

    def __init__(self, layout: StagingLayout, stage: str, part: str, outputs: dict[str, pa.Schema]) -> None:
        self.layout, self.stage, self.part, self.outputs = layout, stage, part, outputs
        self._open: dict[str, Any] = {}
        self._held: dict[tuple[str, int], list[pa.Table]] = {}  # a log's rows by (log, partition) (-1: none)
        self._held_rows: dict[tuple[str, int], int] = {}
        self._pending: dict[str, list[pa.Table]] = {}  # the other outputs' rows not written yet, by name

    def write(self, name: str, table: pa.Table) -> None:
        if not table.num_rows:
            return
        schema = self.outputs[name]
        table = conform(table, schema)
        if name in LOGS:
            for partition, rows in _by_partition(table).items():
                p = (name, -1 if partition is None else partition)
                self._held.setdefault(p, []).append(rows)
                self._held_rows[p] = self._held_rows.get(p, 0) + rows.num_rows
            if sum(self._held_rows.values()) >= LOG_ROWS:  # a task's memory: bounded, whatever its partitions
                for p in list(self._held):
                    self._flush(p)
        else:
            self._pending.setdefault(name, []).append(table)
            held = sum(t.num_rows for t in self._pending[name])
            if held >= (PARTITIONED_ROWS if self._partitioned(name) else OUTPUT_ROWS):
                self._write_pending(name)

    def _partitioned(self, name: str) -> bool:
        """A table partitioned by folders (raw_records, offset_commits): a write is a file per folder."""
        return self.layout.is_table(name) and bool(partition_columns(name))

    def _write_pending(self, name: str) -> None:
        rows = pa.concat_tables(self._pending.pop(name))
        if self._partitioned(name):
            self._write_folders(name, rows)
        else:
            self._file(name, self.outputs[name]).write_table(rows)

    def _write_folders(self, name: str, rows: pa.Table) -> None:
        """A table partitioned by a folder column (raw_records, offset_commits): each folder's rows appended to the
        task's one file there (a file per folder and task, whatever the rows held and written between)."""
        column = partition_columns(name)[0]
        values = rows.column(column).combine_chunks()
        runs = _runs(values)
        if len(runs) != len(pc.unique(values)):  # a value in two runs: sorted by it (a copy); offset_commits
            # comes by commit_date already (jobs.replay.history)
            rows = rows.take(pc.sort_indices(values))
            values = rows.column(column).combine_chunks()
            runs = _runs(values)
        data = rows.drop_columns([column])
        for a, b in runs:
            value = values[a].as_py()
            folder = f"{column}={NULL_PARTITION if value is None else quote(str(value), safe='')}"
            self._file(f"{name}/{folder}", data.schema).write_table(data.slice(a, b - a))

    def _flush(self, held: tuple[str, int]) -> None:
        name, partition = held
        group = group_of(pa.array([partition if partition >= 0 else None], pa.int32()), self.layout.groups)[0]
        self._file(f"{name}/g{group:05d}", self.outputs[name]).write_table(pa.concat_tables(self._held.pop(held)),
                                                                           row_group_size=1 << 30)
        self._held_rows.pop(held)

    def _file(self, name: str, schema: pa.Schema) -> Any:
        """The task's open file of output `name` (`<output>/<folder>`: in that folder of it)."""
        import pyarrow.parquet as pq

        if name not in self._open:
            kind, _, sub = name.partition("/")
            folder = self.layout.folder(self.stage, kind)
            folder = folder.child(sub) if sub else folder
            folder.mkdir()
            self._open[name] = pq.ParquetWriter(folder.child(f"{self.part}.parquet").path, schema,
                                                filesystem=folder.fs, **write_options(schema, kind in LOGS))
        return self._open[name]

    def close(self) -> None:
        """Write what is held, and close every file even when a write fails."""
        try:
            for partition in list(self._held):
                self._flush(partition)
            for name in list(self._pending):
                self._write_pending(name)
        finally:
            writers, self._open = list(self._open.values()), {}
            close_parquet(*writers)


# Records' positions in their log: distinct in any file, where a dictionary only adds its indices.
LOG_POSITIONS = ("offset", "record_offset", "source_record_offset")


def write_options(schema: pa.Schema, log: bool = False) -> dict[str, list[str]]:
    """Parquet options of the files tasks write: statistics for numbers and times (a read of one partition skips
    the others' row groups); dictionaries for every column of a table but LOG_POSITIONS (ids and names repeat,
    and so do most numbers: producer ids, epochs, partitions, timestamps of a partition's batch), but only for
    the strings of a staged `log`, read once and removed, whose other columns are mostly distinct. Neither for
    the records' bytes, whose dictionaries and minima cost the write and serve no reader, nor statistics for
    strings (group ids come in no order in a row group: their minima skip nothing, and cost a tenth of
    offset_commits' write)."""
    bytes_ = [f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_nested(f.type)]
    flat = [f.name for f in schema if f.name not in bytes_ and not pa.types.is_string(f.type)]
    coded = [f.name for f in schema if pa.types.is_string(f.type)] if log else \
        [f.name for f in schema if f.name not in bytes_ and f.name not in LOG_POSITIONS]
    return {"use_dictionary": coded, "write_statistics": flat}


def _runs(values: pa.Array) -> list[tuple[int, int]]:
    """The [start, stop) of each run of equal values (nulls equal) of `values`."""
    n = len(values)
    if n < 2:
        return [(0, n)] if n else []
    starts = [0, *(np.flatnonzero(~same_as_previous(values)) + 1).tolist()]
    return list(zip(starts, [*starts[1:], n]))


def chunk_task(plan: SourcePlan, task: Any, index: int, kernel: ChunkKernel, outputs: dict[str, pa.Schema],
               layout: StagingLayout) -> None:
    """Task `index` of the source's plan: its raw batches through `kernel`, its outputs written as pass 1's."""
    writers = TaskOutputs(layout, CHUNKS.stage, f"t{index:05d}", outputs)
    kill_point("worker")
    try:
        for name, table in kernel(plan.read(task)):
            writers.write(name, table)
    finally:
        writers.close()


def partition_task(stage: str, group: int, inputs: tuple[Staged, ...], kernel: PartitionKernel,
                   outputs: dict[str, pa.Schema], layout: StagingLayout) -> None:
    """One group's coordinator partitions. When the group's rows are few (LOG_ROWS at most), they are read once and
    go to the kernel at once (which replays or derives several partitions as it would each alone: a call costs
    about as much for a few rows as for many); else the task holds one partition's rows at a time, each read with
    a filter."""
    datasets = {output.name: layout.group_dataset(output, group) for output in inputs}
    writers = TaskOutputs(layout, stage, f"g{group:05d}", outputs)
    try:
        if sum(data.count_rows() for data in datasets.values()) <= LOG_ROWS:
            for name, table in kernel({name: data.to_table() for name, data in datasets.items()}):
                writers.write(name, table)
            return
        for partition in _partitions(datasets):
            found = pc.field("coordinator_partition")
            rows = found.is_null() if partition is None else found == partition
            for name, table in kernel({name: data.to_table(filter=rows) for name, data in datasets.items()}):
                writers.write(name, table)
    finally:
        writers.close()


def _by_partition(table: pa.Table) -> dict[int | None, pa.Table]:
    """A table's rows by coordinator partition (None: rows without one)."""
    partition = numbers(table.column("coordinator_partition"), -1)
    order = np.argsort(partition, kind="stable")
    table, partition = table.take(pa.array(order)), partition[order]
    starts = run_starts(partition)
    return {(int(partition[a]) if partition[a] >= 0 else None): table.slice(a, b - a)
            for a, b in zip(starts, [*starts[1:], len(partition)])}


def _in_order(partition: int | None) -> tuple[bool, int]:
    """Coordinator partitions in order, rows without one last."""
    return partition is None, partition if partition is not None else 0


def _partitions(datasets: dict[str, pads.Dataset]) -> list[int | None]:
    """The coordinator partitions the datasets hold rows of (None: rows without one), in order."""
    found: set = set()
    for data in datasets.values():
        found |= set(pc.unique(data.to_table(columns=["coordinator_partition"]).column(0)).to_pylist())
    return sorted(found, key=_in_order)
