"""End-offset history (contract: end_offsets_history): every snapshot of a partition's log end offset seen,
kept across runs into the same output, and what lag and Burrow's rules read from it.

A snapshot is (topic, partition, log_end_offset, observed_at). Reading the history at a moment uses only
snapshots observed at or before it: nothing later was known then. Between two snapshots the log end is taken
to grow linearly, as kafka-lag-exporter's lookup table assumes. Times are epoch microseconds; where a rule
computes with them it does so in doubles, operation by operation as the Spark rules did, so that a result is
the same to the bit.
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, epoch_us, known, mask, numbers, ranges, same_as_previous
from jobs.base.tables import arrow_schema, conform

SCHEMA = arrow_schema("end_offsets_history")
TOPIC_PARTITION = ["topic", "partition"]
KEY = [*TOPIC_PARTITION, "observed_at"]  # the table is unique on it
_NEVER = np.iinfo(np.int64).max  # a null log end, in Snapshots' running minimum: it never "had not passed" an offset


def history_rows(ends: pa.Table, as_of: datetime) -> pa.Table:
    """The history rows (SCHEMA) of end offsets as read this run: topic, partition, offset, and optionally
    timestamp (a file's), log_start_offset and fetched_at (a live fetch). observed_at is the file's timestamp,
    else the fetch time, else `as_of`: a snapshot without a time (a 3-column file) is the one taken for as_of."""
    def optional(name: str) -> pa.ChunkedArray | pa.Array:
        dtype = SCHEMA.field(name).type if name != "timestamp" else TIMESTAMP
        return ends.column(name).cast(dtype) if name in ends.column_names else pa.nulls(ends.num_rows, dtype)

    observed = pc.coalesce(optional("timestamp"), optional("fetched_at"), pa.scalar(epoch_us(as_of), TIMESTAMP))
    columns = {"topic": ends.column("topic"), "partition": ends.column("partition"),
               "log_end_offset": ends.column("offset"), "log_start_offset": optional("log_start_offset"),
               "observed_at": observed, "fetched_at": optional("fetched_at")}
    return conform(columns, SCHEMA, ends.num_rows)


def merge_history(previous: pa.Table | None, new: pa.Table) -> pa.Table:
    """`previous` (the table as written by earlier runs, or None) plus this run's `new` rows, one row per
    (topic, partition, observed_at), sorted by it: on a repeated key this run's row wins, so rerunning over the
    same file changes nothing and a corrected file replaces its snapshot. Ties inside one frame keep the
    highest log end, then log start, then fetch time (nulls last): deterministic. fetched_at is null where
    `previous` has none."""
    frames = [(new, 1)] if previous is None else [(new, 1), (previous, 0)]
    both = pa.concat_tables([conform(t, SCHEMA, t.num_rows).append_column(
        "_newer", pa.array(np.full(t.num_rows, newer, np.int8))) for t, newer in frames])
    ranked = both.sort_by([*((c, "ascending", "at_end") for c in KEY), ("_newer", "descending", "at_end"),
                           *((c, "descending", "at_end") for c in ("log_end_offset", "log_start_offset",
                                                                   "fetched_at"))])
    first = np.ones(ranked.num_rows, bool)  # the first row of its key
    if ranked.num_rows:
        first[1:] = ~np.logical_and.reduce([same_as_previous(ranked.column(c)) for c in KEY])
    return ranked.filter(pa.array(first)).select(SCHEMA.names)


def added_history(previous: pa.Table | None, new: pa.Table) -> tuple[pa.Table, bool]:
    """What `merge_history(previous, new)` has that `previous` lacks (this run's rows, less those `previous` holds
    already), and whether one of them replaces a row of `previous` (the same key, other values): a run appends
    the rows unless it does."""
    rows = merge_history(None, new)
    if previous is None or not previous.num_rows or not rows.num_rows:
        return rows, False
    before = conform(previous, SCHEMA, previous.num_rows).append_column(
        "_held", pa.array(np.ones(previous.num_rows, bool)))
    values = [c for c in SCHEMA.names if c not in KEY]
    joined = rows.join(before.select([*KEY, *values, "_held"]), KEY, join_type="left outer", right_suffix="_before",
                       use_threads=False)
    held = mask(joined.column("_held"))
    same = held.copy()
    for c in values:
        now, then = joined.column(c), joined.column(f"{c}_before")
        both_null = pc.and_(pc.is_null(now), pc.is_null(then))
        same &= mask(pc.or_(pc.fill_null(pc.equal(now, then), False), both_null))
    return joined.filter(pa.array(~same)).select(SCHEMA.names), bool((held & ~same).any())


class Snapshots:
    """Every partition's snapshots, from a history table (SCHEMA; log_start_offset and fetched_at may be absent)
    read at `as_of_us` (None: every snapshot), in the order Spark's sort_array gave each partition's
    (observed_at, log_end_offset, log_start_offset, fetched_at; nulls first). Built once.

    The rules (newest, log_end_at, passed_at, produce_rate, recent_log_end_at_most) take many rows at once:
    `where` is each row's partition (find), and each result a pair (values, known), known False where SQL had
    null. Only a history read without as_of can hold snapshots without observed_at: they sort first, and no
    rule that compares times reads them."""

    def __init__(self, table: pa.Table, as_of_us: int | None):
        self.table, self.as_of_us = table, as_of_us  # table: sorted, partition by partition
        n = table.num_rows
        new_partition = np.ones(n, bool)
        if n:
            new_partition[1:] = ~(same_as_previous(table.column("topic")) &
                                  same_as_previous(table.column("partition")))
        # Per partition (numbered in table order), its rows of `table`: [start, stop), those with a time from timed.
        self._start = np.flatnonzero(new_partition)
        self._stop = np.append(self._start, n)[1:]
        observed = table.column("observed_at")
        untimed = (~known(observed)).astype(np.int64)
        self._timed = self._start + (np.add.reduceat(untimed, self._start) if n else 0)
        topics = table.column("topic").take(pa.array(self._start)).to_pylist()
        partitions = table.column("partition").take(pa.array(self._start)).to_pylist()
        self._partitions = {key: i for i, key in enumerate(zip(topics, partitions))}
        self._observed = numbers(observed.cast(pa.int64()))
        self._observed_f = self._observed.astype(np.float64)  # Spark's micros(): a double
        log_end = table.column("log_end_offset")
        self._log_end, self._known = numbers(log_end), known(log_end)
        # From each row on, the first with a log end (n: none).
        rows_with_one = np.append(np.where(self._known, np.arange(n), n), n)
        self._next_log_end = np.minimum.accumulate(rows_with_one[::-1])[::-1]
        # From each snapshot on, the lowest log end of its partition: non-decreasing, so searchable (passed_at).
        stop_of = np.repeat(self._stop, self._stop - self._start)
        self._floor = _suffix_min(np.where(self._known, self._log_end, _NEVER), stop_of)
        # At each row, the newest row up to it that has a log start (-1: none yet).
        starts = table.column("log_start_offset")
        self._log_start, self._start_known = numbers(starts), known(starts)
        self._last_start = np.maximum.accumulate(np.where(self._start_known, np.arange(n), -1)) if n else \
            np.zeros(0, np.int64)

    @classmethod
    def of(cls, history: pa.Table, as_of_us: int | None = None) -> Snapshots:
        table = conform(history, SCHEMA, history.num_rows)
        keep = pc.and_(pc.is_valid(table.column("topic")), pc.is_valid(table.column("partition")))  # never joined
        if as_of_us is not None:  # a null observed_at is not at or before anything
            keep = pc.and_(keep, pc.less_equal(table.column("observed_at"), pa.scalar(as_of_us, TIMESTAMP)))
        return cls(table.filter(keep).sort_by([(c, "ascending", "at_start") for c in (
            "topic", "partition", "observed_at", "log_end_offset", "log_start_offset", "fetched_at")]), as_of_us)

    def find(self, rows: pa.Table) -> np.ndarray:
        """Each row's (topic, partition) partition, -1 for one without snapshots."""
        keys = zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist())
        return np.array([self._partitions.get(key, -1) for key in keys], np.int64)

    def latest(self) -> pa.Table:
        """Per partition, its newest snapshot (SCHEMA): the end offsets lag subtracts from."""
        return self.table.take(pa.array(self._stop - 1))

    def newest(self, where: np.ndarray) -> np.ndarray:
        """The row of `table` of each partition's newest snapshot."""
        return self._stop[where] - 1

    def log_start(self, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each partition's log start offset from its newest snapshot that has one (a file's snapshots may carry
        none while a live fetch's do), and whether there is one."""
        row = self._last_start[self._stop[where] - 1] if len(where) else np.zeros(0, np.int64)
        has = row >= self._start[where]
        return self._log_start[self._clip(row)], has

    def log_end_at(self, where: np.ndarray, at_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The log end offset at each moment (epoch µs): linear between the snapshots before and after it
        (rounded down: a log end is a whole offset), the newest before it when none follows (what a live reader
        would hold then), unknown before the first snapshot."""
        timed, stop = self._timed[where], self._stop[where]
        after = _search(self._observed, timed, stop, at_us)  # the first snapshot observed after the moment
        last = after == stop
        before, following = self._clip(after - 1), self._clip(after)
        end0, end1 = self._log_end[before], self._log_end[following]
        t0, t1 = self._observed_f[before], self._observed_f[following]
        with np.errstate(divide="ignore", invalid="ignore"):  # where not read
            # Multiplied before divided: a log end that falls on a whole offset comes out exact, not a hair below.
            grown = (at_us.astype(np.float64) - t0) * (end1 - end0).astype(np.float64)
            between = np.where(last, 0.0, np.floor(end0 + grown / (t1 - t0))).astype(np.int64)
        known_end = (after > timed) & self._known[before] & (last | self._known[following])
        return np.where(last, end0, between), known_end

    def passed_at(self, where: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """When the log end reached each offset, in epoch microseconds (doubles), as kafka-lag-exporter's lookup
        table predicts it: on the line through the last snapshot whose log end had not passed the offset and the
        next snapshot that had. Unknown when the history does not bracket it (it starts after the log end
        passed, or the log end never passed it). Taking the *last* such snapshot follows the log end's newest
        climb past the offset, should it ever have fallen back (a recreated topic)."""
        timed, stop = self._timed[where], self._stop[where]
        below = _search(self._floor, self._start[where], stop, offsets) - 1  # the last log end at or below it
        has_below = below >= timed  # one without a time gives no line
        below = self._clip(below)
        # Every later snapshot with a log end has passed the offset: the first one observed after `below`.
        above = self._next_log_end[_search(self._observed, timed, stop, self._observed[below])]
        has_above = above < stop
        above = self._clip(above)
        end0, end1 = self._log_end[below], self._log_end[above]
        t0, t1 = self._observed_f[below], self._observed_f[above]
        with np.errstate(divide="ignore", invalid="ignore"):  # where not known: not read
            # log end is end0 at t0 and end1 > offset at t1: solve for the offset
            passed = t0 + (offsets - end0).astype(np.float64) * (t1 - t0) / (end1 - end0).astype(np.float64)
        return passed, has_below & has_above

    def produce_rate(self, where: np.ndarray, since: np.ndarray, until: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-end offsets per second over each (since, until] (epoch µs as doubles): the change between the
        first and the last snapshot in it over the time between them; unknown with fewer than two, or no time
        between them (a net rate: a fall in the window lowers it)."""
        timed, stop = self._timed[where], self._stop[where]
        first = _search(self._observed_f, timed, stop, since)
        last = _search(self._observed_f, timed, stop, until) - 1
        some = last >= first
        first, last = self._clip(first), self._clip(last)
        seconds = (self._observed_f[last] - self._observed_f[first]) / 1e6
        delta = (self._log_end[last] - self._log_end[first]).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):  # where not known: not read
            return delta / seconds, some & self._known[first] & self._known[last] & (seconds > 0)

    def recent_log_end_at_most(self, where: np.ndarray, since_us: np.ndarray, offsets: np.ndarray, count: int
                               ) -> np.ndarray:
        """Whether a known log end among the last `count` snapshots observed at or after each `since_us` is at or
        below its offset."""
        stop = self._stop[where]
        begin = np.maximum(_search(self._observed, self._timed[where], stop, since_us, right=False), stop - count)
        lengths = np.maximum(stop - begin, 0)
        rows = ranges(begin, begin + lengths)
        hit = self._known[rows] & (self._log_end[rows] <= np.repeat(offsets, lengths))
        return np.bincount(np.repeat(np.arange(len(where)), lengths), weights=hit, minlength=len(where)) > 0

    def _clip(self, rows: np.ndarray) -> np.ndarray:
        """Rows made valid indices, for values that are then masked."""
        return np.clip(rows, 0, max(self.table.num_rows - 1, 0))


def _search(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray, right: bool = True) -> np.ndarray:
    """numpy's searchsorted of each x in its own sorted range values[lo:hi] (a binary search of all at once):
    the first index there whose value is above x (right) or at least x (left), else hi."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        value = values[np.where(active, mid, 0)]
        up = active & ((value <= x) if right else (value < x))
        lo, hi = np.where(up, mid + 1, lo), np.where(active & ~up, mid, hi)


def _suffix_min(values: np.ndarray, stop_of: np.ndarray) -> np.ndarray:
    """Per element, the minimum of it and those after it up to its stop (doubling the span each pass)."""
    low, step, index = values.copy(), 1, np.arange(len(values))
    while step < len(values):
        ahead = index + step
        inside = ahead < stop_of
        if not inside.any():
            break
        low = np.where(inside, np.minimum(low, low[np.where(inside, ahead, 0)]), low)
        step *= 2
    return low
