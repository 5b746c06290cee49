"""Where a run's passes keep their outputs, in its staging area, whichever runner runs them: a contract table in
the sink's staging folder for it (jobs.lake.sink commits it from there), anything else under _state/<stage>/<name>.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from jobs.lake.tables import TABLES
from jobs.replay.records import numbers

NULL_GROUP = 0  # the group of records without a coordinator partition (all quarantined)
STATE = "_state"
ENVELOPE = "_envelope"  # the Spark runner's outputs of a pass, partitioned by kind (jobs.engine.spark)


@dataclass(frozen=True)
class Stages:
    """A run's outputs in its staging area: `schemas` gives each output's schema, `groups` how many groups of
    coordinator partitions the passes after the source's are split into."""

    staging: Path
    schemas: dict[str, pa.Schema]
    groups: int

    def is_table(self, name: str) -> bool:
        return name in TABLES

    def folder(self, stage: str, name: str) -> Path:
        return self.staging / name if self.is_table(name) else self.staging / STATE / stage / name

    def read(self, stage: str, name: str, columns: list[str] | None = None, filter: Any = None) -> pa.Table:
        """All of an output (on the driver: only what is small), or its `columns`, rows matching `filter`."""
        enveloped = self.enveloped(stage, name)
        if not self.folder(stage, name).exists() and enveloped.exists():
            struct = pads.dataset(enveloped, format="parquet").to_table(columns=[name]).column(name)
            schema = self.schemas[name]
            rows = pa.table([pc.struct_field(struct, f.name) for f in schema], schema=schema) if len(struct) \
                else schema.empty_table()
            rows = rows.filter(filter) if filter is not None else rows
            return rows.select(columns) if columns is not None else rows
        return _dataset(self.folder(stage, name), self.schemas[name]).to_table(columns=columns, filter=filter)

    def enveloped(self, stage: str, name: str) -> Path:
        """Where the Spark runner keeps output `name` of `stage` in its envelope."""
        return self.staging / STATE / stage / ENVELOPE / f"kind={name}"

    def clear(self, stage: str, outputs: dict[str, pa.Schema]) -> None:
        """Remove what `stage` wrote (to run it again)."""
        for name in outputs:
            shutil.rmtree(self.folder(stage, name), ignore_errors=True)

    def group_dataset(self, stage: str, name: str, group: int) -> pads.Dataset:
        """The rows of one group of coordinator partitions (the local runner's files of that group)."""
        folder = self.folder(stage, name)
        files = sorted((folder / f"g{group:05d}").glob("*.parquet")) if name == "log" else \
            sorted(folder.glob(f"g{group:05d}*.parquet"))
        return _dataset(files, self.schemas[name])


def _dataset(where: Path | list[Path], schema: pa.Schema) -> pads.Dataset:
    """Parquet files as a dataset of `schema` (an empty one where nothing was written)."""
    if isinstance(where, Path):
        if not where.exists():
            return pads.dataset(schema.empty_table())
        return pads.dataset(where, schema=schema, format="parquet", partitioning="hive")
    if not where:
        return pads.dataset(schema.empty_table())
    return pads.dataset([str(p) for p in where], schema=schema, format="parquet")


def group_of(partition: pa.ChunkedArray | pa.Array, groups: int) -> np.ndarray:
    """Per row: the group of its coordinator partition (NULL_GROUP for none)."""
    found = numbers(partition, -1)
    return np.where(found >= 0, found % groups, NULL_GROUP)


