"""Where a `rebuild --archive` run starts: the replay state the newest complete run left (DIR/_replay_state,
jobs.replay.resume), or, when there is none it can use, the archive read back whole; the summary says which
(`resumed_from_run`) and why not (`whole_replay_reason`).

The state stands for the archive as that run left it, so only that run's own version counts: a run that did not
keep one (without the archive) leaves none, and the archive is replayed. A run that failed never advances it (the
sink commits it with the run's other tables). Without the history nothing else about the run matters: the state
is the log before the replay, so retention, the status and rate windows, and the order in which the new records
come do not change it, with one exception: a new record at an offset among the transactions the state folded (a
dump that missed it, given later) could be a marker that decides them otherwise. That, and an as_of before the
newest record it folded, make the run replay the archive (`ReplayState.refusal`).

With the history, a run appends the rows of what is new to the rows the previous run wrote, which must stay as
they are: so it needs that run's history state (`_history_state`, kept for status and rate windows at least as
wide as this run's), an as_of no earlier than that run's, and every record it replays that the previous run did
not (new, or left after that run's as_of) after every record that run replayed in its coordinator partition
(`replayed_through`); else it replays the archive whole.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, known, mask, numbers, utc
from jobs.base.earlier import EarlierRun
from jobs.base.storage import Location
from jobs.base.tables import FOLD_STATE, HISTORY_STATE, REPLAY_STATE, arrow_schema
from offsets_codec.registry import OFFSETS_TOPIC

log = logging.getLogger("offsetlake")


@dataclass(frozen=True)
class ReplayState:
    """The state run `run_id` left: the data files of its tables (`_replay_state`, `_group_fold` when the run left
    it, `_history_state` for a run with the history), its rows and their moments (MOMENT_SCHEMA: they count for
    the default as_of as the records they stand for), and per coordinator partition the highest offset of a
    transaction it folded. With the history: that run's as_of, per coordinator partition the highest offset of a
    record it replayed (`replayed_through`: an estimate from above), and the earliest time of a record it left for
    later (after its as_of) below that."""

    run_id: str
    files: dict[str, tuple[Location, ...]]
    rows: int
    moments: pa.Table
    folded_transactions: dict[int, int]
    as_of: datetime | None = None
    replayed_through: dict[int, int] | None = None
    deferred: datetime | None = None

    def refusal(self, spans: pa.Table, as_of: datetime) -> str | None:
        """Why this run cannot start from the state, once the source is read (`spans`: the new records',
        jobs.replay.duplicates.SPAN_SCHEMA) and its as_of known; None when it can. Without the history: a new
        record lies below a transaction the state folded in its coordinator partition (it could be the marker
        that decides it). With it, the rows the previous run wrote must stay as they are, so every record this
        run replays that it did not must come after every record it did, in its coordinator partition."""
        partitions, lows = spans.column("coordinator_partition").to_pylist(), spans.column("low").to_pylist()
        if self.replayed_through is None:
            if any(low < self.folded_transactions.get(p, -1) for p, low in zip(partitions, lows)):
                return "new records lie among the transactions the replay state folded"
            return None
        if self.as_of is not None and as_of < self.as_of:
            return "as_of is before the previous run's"
        if any(low <= self.replayed_through.get(p, -1) for p, low in zip(partitions, lows)):
            return "new records lie among those the previous run replayed"
        if self.deferred is not None and as_of >= self.deferred:
            return "records after the previous run's as_of lie among those it replayed"
        return None

    @classmethod
    def open(cls, earlier: EarlierRun, cutoff_us: int, started: datetime, history: bool = False,
             windows: tuple[int, int] = (0, 0)) -> "tuple[ReplayState | None, str | None]":
        """The state to start from that the `earlier` run left, or None and why (logged: the archive is then read back):
        none was left by the newest complete run (with the history: none with its history state, or kept for
        `windows` narrower than this run's status and rate windows), or `cutoff_us` (this run's as_of, or the
        future) comes before the newest record it folded."""
        from jobs.replay.resume import newest_folded, state_moments
        from jobs.replay.transactions import folded_transactions

        run = earlier.run
        versions = earlier.recorded
        version = versions.get(REPLAY_STATE)
        reason = None
        if version is None:
            reason = "no replay state from the newest complete run"
        elif history and HISTORY_STATE not in versions:
            reason = "the newest complete run kept no history state"

        def whole(reason: str) -> tuple[None, str]:
            log.info("%s: the archive is read back and replayed whole", reason)
            return None, reason

        if reason is not None:
            return whole(reason)

        def files(name: str, opened: Any = None) -> tuple[Location, ...]:
            return tuple(f for f, _ in earlier.files(name, versions[name], opened))

        history_files = files(HISTORY_STATE) if history else ()
        if history:
            found = _history_windows(history_files)
            if found is not None and (windows[0] > found[0] or windows[1] > found[1]):
                return whole("the status or rate window is wider than the previous run kept")
        table = earlier.open(REPLAY_STATE, version)
        found = table.to_pyarrow_table(columns=["newest_timestamp", "reduced", "records", "coordinator_partition",
                                                "record_offset", "producer_id", "topic", "record_timestamp", "error"])
        newest = newest_folded(found)
        if newest is not None and pa.scalar(newest, TIMESTAMP).value > cutoff_us:
            reason = "as_of is before the newest record the replay state folded"
            log.info("as_of is before the newest record run %s's replay state folded (%s): the archive is read back "
                     "and replayed whole", run["run_id"], newest.isoformat())
            return None, reason
        kept = {REPLAY_STATE: files(REPLAY_STATE, table)}
        if FOLD_STATE in versions:  # else (an older offsetlake's run) every group is folded again
            kept_fold = earlier.open(FOLD_STATE, versions[FOLD_STATE])
            if _layout(pa.schema(kept_fold.schema().to_arrow())) == _layout(arrow_schema(FOLD_STATE)):
                kept[FOLD_STATE] = files(FOLD_STATE, kept_fold)
            else:
                log.info("run %s's group fold has another layout (an older offsetlake's): every group is folded again",
                         run["run_id"])
        as_of = utc(run.get("as_of"))
        through, deferred = None, None
        if history:
            if FOLD_STATE not in kept:  # the groups' last events are in it
                return whole("the newest complete run kept no group fold of this layout")
            kept[HISTORY_STATE] = history_files
            through, deferred = replayed(found, as_of)
        log.info("resuming from run %s's replay state (%d rows): the archive is not read back", run["run_id"],
                 found.num_rows)
        return cls(run["run_id"], kept, found.num_rows, state_moments(found, started), folded_transactions(found),
                   as_of, through, deferred), None


def _layout(t: pa.Schema | pa.DataType) -> tuple | str:
    """The nested field names of a schema or type: a fold kept without a field this run's fold has would be read
    with nulls there, so its groups would not be the ones a new fold gives."""
    if isinstance(t, pa.Schema) or pa.types.is_struct(t):
        return tuple((f.name, _layout(f.type)) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list", _layout(t.value_type)
    return ""


def replayed(state: pa.Table, as_of: datetime | None) -> tuple[dict[int, int], datetime | None]:
    """Of a replay state (its offsets topic's rows) and the as_of of the run that left it: per coordinator
    partition the highest offset of a row that run replayed, or might have (every row but those kept whole with a
    time after as_of: from above), and the earliest time of a checked row it left for later below that."""
    rows = state.filter(pc.equal(state.column("topic"), OFFSETS_TOPIC))
    later = np.zeros(rows.num_rows, bool)
    if as_of is not None:
        later = ~mask(rows.column("reduced")) & \
            mask(pc.greater(rows.column("record_timestamp"), pa.scalar(as_of, TIMESTAMP)))
    done = rows.filter(pa.array(~later)).group_by("coordinator_partition").aggregate([("record_offset", "max")])
    through = dict(zip(done.column("coordinator_partition").to_pylist(), done.column("record_offset_max").to_pylist()))
    left = rows.filter(pa.array(later & ~known(rows.column("error"))))
    below = [t for p, o, t in zip(left.column("coordinator_partition").to_pylist(),
                                  numbers(left.column("record_offset")).tolist(),
                                  left.column("record_timestamp").to_pylist()) if o <= through.get(p, -1)]
    return through, min(below) if below else None


def _history_windows(files: tuple[Location, ...]) -> tuple[int, int] | None:
    """The status and rate windows a history state was kept for (from its first row), None when it is empty."""
    import pyarrow.parquet as pq

    for f in files:
        first = pq.ParquetFile(f.path, filesystem=f.fs).read_row_group(0, columns=["status_window", "rate_window_ms"])
        if first.num_rows:
            return first.column(0)[0].as_py(), first.column(1)[0].as_py()
    return None
