"""Where a `rebuild --archive --no-history` run starts: the replay state the newest complete run left
(DIR/_replay_state, jobs.replay.resume), or, when there is none it can use, the archive read back whole.

The state stands for the archive as that run left it, so only that run's own version counts: a run that did not
keep one (with the history, or without the archive) leaves none, and the archive is replayed. A run that failed
never advances it (the sink commits it with the run's other tables). Nothing else about the run matters: the state
is the log before the replay, so retention, the status and rate windows, and the order in which the new records
come do not change it, with one exception: a new record at an offset among the transactions the state folded
(`reaches_back`: a dump that missed it, given later) could be a marker that decides them otherwise. That, and an
as_of before the newest record it folded, make the run replay the archive.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from jobs.lake.storage import Location
from jobs.lake.tables import FOLD_STATE, REPLAY_STATE, arrow_schema
from jobs.replay.records import TIMESTAMP

log = logging.getLogger("offsetlake")


@dataclass(frozen=True)
class ReplayState:
    """The state run `run_id` left: the data files of its tables (`_replay_state`, and `_group_fold` when the run
    left it), its rows and their moments (MOMENT_SCHEMA: they count for the default as_of as the records they stand
    for), and per coordinator partition the highest offset of a transaction it folded."""

    run_id: str
    files: dict[str, tuple[Location, ...]]
    rows: int
    moments: pa.Table
    folded_transactions: dict[int, int]

    def reaches_back(self, spans: pa.Table) -> bool:
        """Some new record (`spans`: the source's, jobs.replay.duplicates.SPAN_SCHEMA) lies below a transaction
        the state folded in its coordinator partition."""
        return any(low < self.folded_transactions.get(p, -1) for p, low in
                   zip(spans.column("coordinator_partition").to_pylist(), spans.column("low").to_pylist()))

    @classmethod
    def open(cls, output: Location, cutoff_us: int, started: datetime) -> "ReplayState | None":
        """The state to start from under `output`, or None (logged: the archive is then read back): none was
        left by the newest complete run, or `cutoff_us` (this run's as_of, or the future) comes before the
        newest record it folded."""
        from jobs.lake.runs import delta_table, snapshot, version_files
        from jobs.replay.resume import folded_transactions, newest_folded, state_moments

        run = snapshot(output, []).run
        versions = {t["table"]: t["version"] for t in run["tables"]} if run else {}
        version = versions.get(REPLAY_STATE)
        if version is None:
            log.info("no replay state from the newest complete run: the archive is read back and replayed whole")
            return None
        where = output.child(REPLAY_STATE)
        table = delta_table(where, version)
        found = table.to_pyarrow_table(columns=["newest_timestamp", "reduced", "coordinator_partition",
                                                "record_offset", "producer_id", "topic"])
        newest = newest_folded(found)
        if newest is not None and pa.scalar(newest, TIMESTAMP).value > cutoff_us:
            log.info("as_of is before the newest record run %s's replay state folded (%s): the archive is read back "
                     "and replayed whole", run["run_id"], newest.isoformat())
            return None
        log.info("resuming from run %s's replay state (%d rows): the archive is not read back", run["run_id"],
                 found.num_rows)
        files = {REPLAY_STATE: tuple(f for f, _ in version_files(where, table))}
        if FOLD_STATE in versions:  # else (an older offsetlake's run) every group is folded again
            fold = output.child(FOLD_STATE)
            kept = delta_table(fold, versions[FOLD_STATE])
            if _layout(pa.schema(kept.schema().to_arrow())) == _layout(arrow_schema(FOLD_STATE)):
                files[FOLD_STATE] = tuple(f for f, _ in version_files(fold, kept))
            else:
                log.info("run %s's group fold has another layout (an older offsetlake's): every group is folded again",
                         run["run_id"])
        return cls(run["run_id"], files, found.num_rows, state_moments(found, started), folded_transactions(found))


def _layout(t: pa.Schema | pa.DataType) -> tuple | str:
    """The nested field names of a schema or type: a fold kept without a field this run's fold has would be read
    with nulls there, so its groups would not be the ones a new fold gives."""
    if isinstance(t, pa.Schema) or pa.types.is_struct(t):
        return tuple((f.name, _layout(f.type)) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list", _layout(t.value_type)
    return ""
