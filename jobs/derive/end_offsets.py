"""End-offset history (contract: end_offsets_history): every snapshot of a partition's log end offset seen,
kept across runs into the same output, and what lag and Burrow's rules read from it.

A snapshot is (topic, partition, log_end_offset, observed_at). Reading the history at a moment uses only
snapshots observed at or before it: nothing later was known then. Between two snapshots the log end is taken
to grow linearly, as kafka-lag-exporter's lookup table assumes. Times are epoch microseconds; where a rule
computes with them it does so in doubles, operation by operation as the Spark rules did, so that a result is
the same to the bit.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.lake.tables import TIMESTAMP, arrow_schema

SCHEMA = arrow_schema("end_offsets_history")
TOPIC_PARTITION = ["topic", "partition"]
KEY = [*TOPIC_PARTITION, "observed_at"]  # the table is unique on it
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NEVER = np.iinfo(np.int64).max  # a null log end, in Series' running minimum: it never "had not passed" an offset


def epoch_us(moment: datetime) -> int:
    """A moment as epoch microseconds, exactly (a naive one is UTC, the session time zone Spark ran in)."""
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(microseconds=1)


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
    return _conform(columns, ends.num_rows)


def merge_history(previous: pa.Table | None, new: pa.Table) -> pa.Table:
    """`previous` (the table as written by earlier runs, or None) plus this run's `new` rows, one row per
    (topic, partition, observed_at), sorted by it: on a repeated key this run's row wins, so rerunning over the
    same file changes nothing and a corrected file replaces its snapshot. Ties inside one frame keep the
    highest log end, then log start, then fetch time (nulls last): deterministic. fetched_at is null where
    `previous` has none."""
    frames = [(new, 1)] if previous is None else [(new, 1), (previous, 0)]
    both = pa.concat_tables([_conform({c: t.column(c) for c in t.column_names}, t.num_rows).append_column(
        "_newer", pa.array(np.full(t.num_rows, newer, np.int8))) for t, newer in frames])
    ranked = both.sort_by([*((c, "ascending", "at_end") for c in KEY), ("_newer", "descending", "at_end"),
                           *((c, "descending", "at_end") for c in ("log_end_offset", "log_start_offset", "fetched_at"))])
    first = np.ones(ranked.num_rows, bool)  # the first row of its key
    if ranked.num_rows:
        first[1:] = ~np.logical_and.reduce([_same_as_previous(ranked.column(c)) for c in KEY])
    return ranked.filter(pa.array(first)).select(SCHEMA.names)


def _conform(columns: dict, n: int) -> pa.Table:
    """SCHEMA's columns from `columns`, cast; a missing optional one null."""
    return pa.table([columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in SCHEMA],
                    schema=SCHEMA)


def _same_as_previous(column: pa.ChunkedArray) -> np.ndarray:
    """Per row from the second: equal to the row before it, two nulls being equal."""
    values = column.combine_chunks()
    after, before = values[1:], values[:-1]
    both_null = pc.and_(pc.is_null(after), pc.is_null(before))
    return np.asarray(pc.or_(pc.fill_null(pc.equal(after, before), False), both_null), dtype=bool)


class Series:
    """One partition's snapshots in the order Spark's sort_array gave them (observed_at, log_end_offset,
    log_start_offset, fetched_at; nulls first): what newest, log_end_at and passed_at read.

    Views of the Snapshots' arrays: row `start + i` of Snapshots.table is snapshot i. Only a history read
    without as_of can hold snapshots without observed_at: they sort first (the first `timed`), and no rule that
    compares times reads them."""

    __slots__ = ("start", "timed", "times", "times_f", "log_end", "known", "_floor")

    def __init__(self, start: int, observed: np.ndarray, observed_f: np.ndarray, timed: int, log_end: np.ndarray,
                 known: np.ndarray):
        self.start, self.timed = start, timed
        self.times, self.times_f = observed[timed:], observed_f[timed:]  # epoch µs: as integers, as doubles
        self.log_end, self.known = log_end, known  # known: log_end_offset is not null
        self._floor: np.ndarray | None = None

    def newest(self) -> int:
        """The row (in Snapshots.table) of the newest snapshot."""
        return self.start + len(self.log_end) - 1

    def newest_log_end(self) -> int | None:
        return self._end(len(self.log_end) - 1)

    def _end(self, i: int) -> int | None:
        return int(self.log_end[i]) if self.known[i] else None

    def log_end_at(self, at_us: int | None) -> int | None:
        """The log end offset at the moment `at_us`: linear between the snapshots before and after it (rounded
        down: a log end is a whole offset), the newest before it when none follows (what a live reader would
        hold then), null before the first snapshot."""
        if at_us is None:
            return None
        after = int(np.searchsorted(self.times, at_us, "right"))  # the first observed after `at`
        if after == 0:
            return None
        end0 = self._end(self.timed + after - 1)
        if after == len(self.times) or end0 is None:
            return end0
        end1 = self._end(self.timed + after)
        if end1 is None:
            return None
        t0, t1 = float(self.times_f[after - 1]), float(self.times_f[after])
        # Multiplied before divided: a log end that falls on a whole offset comes out exact, not a hair below it.
        grown = (float(at_us) - t0) * (end1 - end0)
        return math.floor(end0 + grown / (t1 - t0))

    def passed_at(self, offset: int | None) -> float | None:
        """When the log end reached `offset`, in epoch microseconds (a double), as kafka-lag-exporter's lookup
        table predicts it: on the line through the last snapshot whose log end had not passed the offset and the
        next snapshot that had. Null when the history does not bracket it (it starts after the log end passed,
        or the log end never passed it). Taking the *last* such snapshot follows the log end's newest climb past
        the offset, should it ever have fallen back (a recreated topic)."""
        if offset is None:
            return None
        if self._floor is None:  # the lowest log end from each snapshot on: non-decreasing, so searchable
            ends = np.where(self.known, self.log_end, _NEVER)
            self._floor = np.minimum.accumulate(ends[::-1])[::-1]
        below = int(np.searchsorted(self._floor, offset, "right")) - 1  # the last log end at or below offset
        if below < self.timed:  # none, or one without a time: nothing to draw the line from
            return None
        # Every later snapshot with a log end has passed the offset: the first one observed after `below`.
        above = self.timed + int(np.searchsorted(self.times, self.times[below - self.timed], "right"))
        while above < len(self.log_end) and not self.known[above]:
            above += 1
        if above == len(self.log_end):
            return None
        end0, end1 = int(self.log_end[below]), int(self.log_end[above])
        t0, t1 = float(self.times_f[below - self.timed]), float(self.times_f[above - self.timed])
        # log end is end0 at t0 and end1 > offset at t1: solve for the offset
        return t0 + (offset - end0) * (t1 - t0) / (end1 - end0)

    def rate(self, since: float, until: float) -> float | None:
        """Log-end offsets per second over (since, until] (epoch µs as doubles): the change between the first
        and the last snapshot in it over the time between them; null with fewer than two, or no time between."""
        first = int(np.searchsorted(self.times_f, since, "right"))
        last = int(np.searchsorted(self.times_f, until, "right")) - 1
        if last < first:
            return None
        return per_second(self._end(self.timed + first), self._end(self.timed + last), float(self.times_f[first]),
                          float(self.times_f[last]))

    def log_ends_since(self, since_us: int, count: int) -> list[int]:
        """The known log ends of the last `count` snapshots observed at or after `since_us`."""
        begin = max(int(np.searchsorted(self.times, since_us, "left")), len(self.times) - count)
        rows = range(self.timed + begin, len(self.log_end))
        return [int(self.log_end[i]) for i in rows if self.known[i]]


def per_second(earlier: int | None, later: int | None, earlier_us: float, later_us: float) -> float | None:
    """(later - earlier) / seconds between the two moments (epoch µs, doubles); null when they are equal (never
    a division by zero) or a value is."""
    seconds = (later_us - earlier_us) / 1e6
    if earlier is None or later is None or not seconds > 0:
        return None
    return (later - earlier) / seconds


class Snapshots:
    """Every partition's Series, from a history table (SCHEMA; log_start_offset and fetched_at may be absent)
    read at `as_of_us` (None: every snapshot). Built once; a rule looks each partition up by name."""

    def __init__(self, table: pa.Table, spans: dict[tuple[str, int], tuple[int, int, int]], as_of_us: int | None):
        self.table, self.as_of_us = table, as_of_us  # table: sorted, partition by partition
        self._spans = spans  # (topic, partition) -> (start, first with observed_at, stop)
        observed = table.column("observed_at")
        self._observed = np.asarray(pc.fill_null(observed.cast(pa.int64()), 0).to_numpy(), np.int64)
        self._observed_f = self._observed.astype(np.float64)  # Spark's micros(): a double
        log_end = table.column("log_end_offset")
        self._log_end = np.asarray(pc.fill_null(log_end, 0).to_numpy(), np.int64)
        self._known = np.asarray(pc.is_valid(log_end).to_numpy(zero_copy_only=False), bool)
        self._series: dict[tuple[str, int], Series] = {}

    @classmethod
    def of(cls, history: pa.Table, as_of_us: int | None = None) -> Snapshots:
        table = _conform({c: history.column(c) for c in history.column_names}, history.num_rows)
        keep = pc.and_(pc.is_valid(table.column("topic")), pc.is_valid(table.column("partition")))  # never joined
        if as_of_us is not None:  # a null observed_at is not at or before anything
            keep = pc.and_(keep, pc.less_equal(table.column("observed_at"), pa.scalar(as_of_us, TIMESTAMP)))
        table = table.filter(keep).sort_by([(c, "ascending", "at_start") for c in (
            "topic", "partition", "observed_at", "log_end_offset", "log_start_offset", "fetched_at")])
        n = table.num_rows
        new_key = np.ones(n, bool)
        if n:
            new_key[1:] = ~(_same_as_previous(table.column("topic")) & _same_as_previous(table.column("partition")))
        starts = np.flatnonzero(new_key)
        stops = np.append(starts[1:], n)
        untimed = np.asarray(pc.is_null(table.column("observed_at")).to_numpy(zero_copy_only=False), np.int64)
        timed = starts + (np.add.reduceat(untimed, starts) if n else 0)  # nulls sort first in each partition
        topics = table.column("topic").take(pa.array(starts)).to_pylist()
        partitions = table.column("partition").take(pa.array(starts)).to_pylist()
        spans = {(t, p): (int(a), int(m), int(b)) for t, p, a, m, b in zip(topics, partitions, starts, timed, stops)}
        return cls(table, spans, as_of_us)

    def series(self, topic: str | None, partition: int | None) -> Series | None:
        """The partition's snapshots, None without any."""
        key = (topic, partition)
        found = self._series.get(key)
        if found is None and key in self._spans:
            start, timed, stop = self._spans[key]
            found = self._series[key] = Series(start, self._observed[start:stop], self._observed_f[start:stop],
                                               timed - start, self._log_end[start:stop], self._known[start:stop])
        return found

    def latest(self) -> pa.Table:
        """Per partition, its newest snapshot (SCHEMA): the end offsets lag subtracts from."""
        return self.table.take(pa.array([stop - 1 for _, _, stop in self._spans.values()], pa.int64()))
