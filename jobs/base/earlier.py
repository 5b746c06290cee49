"""An earlier run, as a rebuild reads it back: the sources (the archive, the replay state) are handed one, built
by the run record (jobs.lake.runs.snapshot), rather than importing the sink's package to find it."""
from __future__ import annotations

from typing import Any, Protocol

from jobs.base.storage import Location


class EarlierRun(Protocol):
    """The newest complete run under an output, and the versions of the tables asked for that readers see."""

    output: Location
    versions: dict[str, int]  # per table asked for (and there): the version readers see
    run: dict[str, Any] | None  # the run's _runs row (run_id, as_of, tables); None when no run was recorded

    @property
    def recorded(self) -> dict[str, int]:
        """The tables the run recorded, with their versions (none when no run was recorded)."""

    def path(self, table: str) -> Location:
        """Where `table` is under the output."""

    def open(self, table: str, version: int | None = None) -> Any:
        """The table (a deltalake.DeltaTable) at `version`, default the one readers see."""

    def files(self, table: str, version: int | None = None, opened: Any = None
              ) -> list[tuple[Location, dict[str, str]]]:
        """The data files of the table at `version` (default the one readers see), with their partition values;
        `opened`: the table as `open` gave it at that version, not opened again."""
