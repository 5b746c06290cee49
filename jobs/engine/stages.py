"""Where a run's passes keep their outputs, whichever runner runs them: a contract table in its own folder under
the run's name (`<table>/run-<run id>/`, which jobs.lake.sink commits where it is), anything else in the run's
staging area (`_offsetlake_staging/<run id>/_state/<stage>/<name>`). On any filesystem: paths are Locations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from jobs.lake.hive import data_files
from jobs.lake.output_lock import RUN_FOLDER, STAGING_DIR
from jobs.lake.storage import Location
from jobs.lake.tables import STAGED_TABLES
from jobs.replay.records import numbers

NULL_GROUP = 0  # the group of records without a coordinator partition (all quarantined)
STATE = "_state"
ENVELOPE = "_envelope"  # the Spark runner's outputs of a pass, partitioned by kind (jobs.engine.spark)


@dataclass(frozen=True)
class Stages:
    """Run `run_id`'s outputs under `output`: `schemas` gives each output's schema, `groups` how many groups of
    coordinator partitions the passes after the source's are split into."""

    output: Location
    run_id: str
    schemas: dict[str, pa.Schema]
    groups: int

    @property
    def state(self) -> Location:
        return self.output.child(STAGING_DIR, self.run_id, STATE)

    def is_table(self, name: str) -> bool:
        return name in STAGED_TABLES

    def folder(self, stage: str, name: str) -> Location:
        return self.output.child(name, RUN_FOLDER + self.run_id) if self.is_table(name) else \
            self.state.child(stage, name)

    def enveloped(self, stage: str, name: str) -> Location:
        """Where the Spark runner keeps output `name` of `stage` in its envelope."""
        return self.state.child(stage, ENVELOPE, f"kind={name}")

    def read(self, stage: str, name: str, columns: list[str] | None = None, filter: Any = None) -> pa.Table:
        """All of an output (on the driver: only what is small), or its `columns`, rows matching `filter`."""
        schema = self.schemas[name]
        enveloped = self.enveloped(stage, name)
        if not self.folder(stage, name).exists() and enveloped.exists():
            files = [f.path for f, _ in data_files(enveloped)]
            struct = pads.dataset(files, format="parquet", filesystem=enveloped.fs).to_table(columns=[name]).column(name)
            rows = pa.table([pc.struct_field(struct, f.name) for f in schema], schema=schema) if len(struct) \
                else schema.empty_table()
            rows = rows.filter(filter) if filter is not None else rows
            return rows.select(columns) if columns is not None else rows
        return self._dataset(self.folder(stage, name), schema).to_table(columns=columns, filter=filter)

    def clear(self, stage: str, outputs: dict[str, pa.Schema]) -> None:
        """Remove what `stage` wrote (to run it again)."""
        for name in outputs:
            self.folder(stage, name).remove()
        self.state.child(stage).remove()

    def group_dataset(self, stage: str, name: str, group: int) -> pads.Dataset:
        """The rows of one group of coordinator partitions (the local runner's files of that group)."""
        folder = self.folder(stage, name)
        if name == "log":
            files = [f for f, _ in data_files(folder.child(f"g{group:05d}"))]
        else:
            files = [f for f, _ in data_files(folder) if f.name.startswith(f"g{group:05d}")]
        return _files(files, self.schemas[name])

    def _dataset(self, folder: Location, schema: pa.Schema) -> pads.Dataset:
        """A folder's Parquet files (hive-style folders give their columns) as a dataset of `schema`."""
        found = list(data_files(folder))
        if not found:
            return pads.dataset(schema.empty_table())
        partitioning = pads.partitioning(pa.schema([schema.field(n) for n in found[0][1]]), flavor="hive") \
            if found[0][1] else None
        return pads.dataset([f.path for f, _ in found], schema=schema, format="parquet", filesystem=folder.fs,
                            partitioning=partitioning, partition_base_dir=folder.path)


def _files(files: list[Location], schema: pa.Schema) -> pads.Dataset:
    """Parquet files as a dataset of `schema` (an empty one where nothing was written)."""
    if not files:
        return pads.dataset(schema.empty_table())
    return pads.dataset([f.path for f in files], schema=schema, format="parquet", filesystem=files[0].fs)


def group_of(partition: pa.ChunkedArray | pa.Array, groups: int) -> np.ndarray:
    """Per row: the group of its coordinator partition (NULL_GROUP for none)."""
    found = numbers(partition, -1)
    return np.where(found >= 0, found % groups, NULL_GROUP)
