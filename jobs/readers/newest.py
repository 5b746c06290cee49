"""The newest complete run's tables as Arrow, for the readers that show a whole output (groups, metrics, report).

A table the newest run did not write (a --no-history run skips the history tables) is read as the older run
left it; `written` tells which ones the run wrote, so that a reader can leave out, or label, what is older.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

import pyarrow as pa

from jobs.base.errors import BadInput
from jobs.base.storage import Location
from jobs.base.tables import arrow_schema, contract_table
from jobs.lake.runs import Snapshot, snapshot


@dataclass
class Newest:
    """Tables of one run (empty tables of their schema when absent), read once each."""

    tables: Snapshot
    _read: dict[str, pa.Table] = field(default_factory=dict)

    @property
    def run(self) -> dict[str, Any]:
        return self.tables.run or {}

    @property
    def as_of(self) -> datetime | None:
        return self.run.get("as_of")

    def written(self, table: str) -> bool:
        """The newest run wrote `table` (a run recorded before _runs existed: every table there counts)."""
        if not self.tables.run:
            return table in self.tables.versions
        return any(t["table"] == table for t in self.tables.run["tables"])

    def has(self, table: str) -> bool:
        return table in self.tables.versions

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The whole table (an empty one of the contract's schema when it is not there); times as UTC."""
        if table not in self._read:
            if table in self.tables.versions:
                self._read[table] = self.tables.open(table).to_pyarrow_table()
            else:
                self._read[table] = arrow_schema(contract_table(table)).empty_table()
        data = self._read[table]
        return data.select([c for c in columns if c in data.column_names]) if columns else data


def newest(output: Location, tables: Iterable[str], required: str = "consumer_groups") -> Newest:
    """`tables` of the newest complete run under `output`; BadInput when it holds no `required` table."""
    found = snapshot(output, tables)
    if required not in found.versions:
        raise BadInput(f"--output {output}: no {required} table there; run `offsetlake rebuild` first")
    return Newest(found)
