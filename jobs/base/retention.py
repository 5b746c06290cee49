"""`rebuild --history-days N`: the history tables keep what happened in the N days before as_of, so that an output
a daily run writes into stops growing forever (docs/performance.md, "Bounding what grows forever").

The one rule, for every place it applies: which rows a cutoff keeps, as an Arrow filter (rows left out before they
are written: a rebuild's, or a resumed run's new rows) and as the Delta predicate of the rows to delete (those an
earlier run wrote, removed by the run that passes them). offset_commits goes by whole `commit_date` folders, its
partition column, so the delete removes files without reading or rewriting them; group_events and
end_offsets_history go by the moment. A row without its time is kept: nothing says it is old.

Nothing a later run writes reads the rows removed: a resumed run goes on from `_history_state` (each key's last row
and counts, jobs.replay.resume), and lag in seconds reads the kept end-offset history in every run alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import utc

# The tables a cutoff applies to, and the column their rows are cut by.
CUT_BY = {"offset_commits": "commit_date", "group_events": "event_timestamp", "end_offsets_history": "observed_at"}


@dataclass(frozen=True)
class HistoryCutoff:
    """as_of − N days: the history before it is not kept."""

    moment: datetime  # aware UTC

    @classmethod
    def of(cls, as_of: datetime, days: int | None) -> HistoryCutoff | None:
        """The cutoff of a run at `as_of` with --history-days `days` (None: the history is kept whole)."""
        if days is None:
            return None
        return cls(utc(as_of).astimezone(timezone.utc) - timedelta(days=days))

    def first_kept(self, table: str) -> date | datetime:
        """The first value of the table's CUT_BY column that is kept: the cutoff's date for offset_commits (whole
        folders), else the cutoff."""
        return self.moment.date() if CUT_BY[table] == "commit_date" else self.moment

    def kept(self, table: str, rows: pa.Table) -> pa.Table:
        """The `rows` of `table` the cutoff keeps (in their order)."""
        column = rows.column(CUT_BY[table])
        before = pc.less(column, pa.scalar(self.first_kept(table), column.type))
        return rows.filter(pc.invert(pc.fill_null(before, False)))

    def removed(self, table: str) -> str:
        """The predicate (delta-rs's SQL) of the rows of `table` the cutoff does not keep: those `kept` leaves
        out. A timestamp is compared with an ISO-8601 string, as delta-rs takes it (jobs.lake.sink.as_of_predicate)."""
        first = self.first_kept(table)
        text = first.isoformat() if not isinstance(first, datetime) else \
            first.isoformat(timespec="microseconds").replace("+00:00", "Z")
        return f"{CUT_BY[table]} < '{text}'"


def kept_rows(cutoff: HistoryCutoff | None, table: str, rows: pa.Table) -> pa.Table:
    """The rows of a history table a run writes: those its `cutoff` keeps (every one without a cutoff)."""
    return rows if cutoff is None else cutoff.kept(table, rows)


def history_from(cutoff: HistoryCutoff | None, earlier: datetime | None) -> datetime | None:
    """From when the output's history is whole after a run with `cutoff`, when the run before it said `earlier`
    (its _runs row's history_from): the later of the two, as what a cutoff removed never comes back (the
    end-offset history is carried from run to run, and a resumed run appends to what is there)."""
    found = [m for m in (cutoff.moment if cutoff is not None else None, utc(earlier)) if m is not None]
    return max(found) if found else None
