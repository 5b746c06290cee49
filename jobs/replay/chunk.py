"""What a source task does with its share of the log, whichever runner runs it: name the records in the
coordinator's terms, check them, and reduce them (or keep them whole, for the history or when records may be
there twice), noting what the run must know before the replay (their spans, their newest plausible moment).

A source that reads log segments gives the damage it found as rows with a `problem` (jobs.sources.segments):
those become segment_errors rows. Records of the share coordinator's topic (`topic` = `__share_group_state`)
go apart, whole, as `share_log` (jobs.replay.share_state): their partitions are not the offsets topic's.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import epoch_us
from jobs.base.tables import arrow_schema, conform
from jobs.decode.check import CHECK_FIELDS, check
from jobs.replay.counts import MOMENT_SCHEMA, future_cutoff, moments
from jobs.replay.duplicates import SPAN_SCHEMA, spans
from jobs.replay.records import RECORD_SCHEMA, records
from jobs.replay.reduction import REDUCED_FIELDS, prefold, whole
from offsets_codec.registry import OFFSETS_TOPIC, SHARE_STATE_TOPIC

LOG_SCHEMA = pa.schema([*RECORD_SCHEMA, *(pa.field(n, t) for n, t in CHECK_FIELDS + REDUCED_FIELDS)])
FOREIGN_SCHEMA = pa.schema([("topic", pa.string()), ("records", pa.int64())])
OUTPUTS: dict[str, pa.Schema] = {"log": LOG_SCHEMA, "share_log": RECORD_SCHEMA, "spans": SPAN_SCHEMA,
                                 "moments": MOMENT_SCHEMA, "segment_errors": arrow_schema("segment_errors"),
                                 "foreign_records": FOREIGN_SCHEMA}
OWN_TOPICS = pa.array([OFFSETS_TOPIC, SHARE_STATE_TOPIC])


def read_chunk(raw: Iterable[pa.Table | pa.RecordBatch], started: datetime, as_of: datetime | None, fold: bool,
               keep_late: bool = False) -> Iterator[tuple[str, pa.Table]]:
    """(output name, table) of a task's raw batches (the contract's columns). `started`: when the run started
    (what "the future" is measured from); `as_of`: the moment asked for (None: the newest plausible record's);
    `fold`: reduce the log (jobs.replay.reduction) rather than keep it whole; `keep_late`: but not the records
    after the cutoff (a run that keeps its reduced log: jobs.replay.resume)."""
    cutoff = cutoff_us(started, as_of)
    seen: list[tuple[str, pa.Table]] = []

    def checked() -> Iterator[pa.Table]:
        for batch in raw:
            batch = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            if "problem" in batch.column_names:
                problems = pc.is_valid(batch.column("problem"))
                if pc.any(problems).as_py():
                    seen.append(("segment_errors", _segment_errors(batch.filter(problems))))
                    batch = batch.filter(pc.invert(problems))
            if "topic" in batch.column_names:
                share = pc.fill_null(pc.equal(batch.column("topic"), SHARE_STATE_TOPIC), False)
                if pc.any(share).as_py():
                    shared = records(batch.filter(share))
                    seen.append(("share_log", shared))
                    seen.append(("moments", moments(shared, started)))
                    batch = batch.filter(pc.invert(share))
            found = records(batch)
            seen.append(("spans", spans(found)))
            seen.append(("moments", moments(found, started)))
            yield check(found)

    reduced = prefold(checked(), cutoff, keep_late) if fold else (whole(t, cutoff) for t in checked())
    for table in reduced:
        yield "log", table
        yield from seen
        seen.clear()
    yield from seen


def without_foreign(raw: Iterable[pa.Table | pa.RecordBatch], found: list[tuple[str, pa.Table]]
                    ) -> Iterator[pa.Table]:
    """A task's raw batches less the rows of any topic but the offsets topic and the share coordinator's (a dump
    of several topics, `__transaction_state` beside the offsets): their records mean something else under the
    same type numbers, so they are never decoded, replayed or archived, only counted per topic in `found`. A
    row without a topic is the offsets topic's (a dump of it alone)."""
    for batch in raw:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if "topic" in table.column_names:
            topic = table.column("topic")
            foreign = pc.and_(pc.is_valid(topic), pc.invert(pc.is_in(topic, OWN_TOPICS)))
            if pc.any(foreign).as_py():
                counts = pc.value_counts(topic.filter(foreign))
                found.append(("foreign_records", pa.table([counts.field("values"), counts.field("counts")],
                                                          schema=FOREIGN_SCHEMA)))
                table = table.filter(pc.invert(foreign))
        yield table


def foreign_records(counts: pa.Table) -> dict[str, int]:
    """Every task's `foreign_records`, per topic."""
    total: dict[str, int] = {}
    for topic, found in zip(counts.column("topic").to_pylist(), counts.column("records").to_pylist()):
        total[topic] = total.get(topic, 0) + found
    return dict(sorted(total.items()))


def _segment_errors(rows: pa.Table) -> pa.Table:
    problem = rows.column("problem").combine_chunks()
    columns = {"coordinator_partition": rows.column("partition"),
               **{f.name: pc.struct_field(problem, f.name) for f in problem.type}}
    return conform(columns, "segment_errors")


def cutoff_us(started: datetime, as_of: datetime | None) -> int:
    """The moment (epoch µs) after which a record is left out of the fold: as_of, or else the future."""
    return epoch_us(as_of) if as_of is not None else future_cutoff(started)


def newest_plausible(found: pa.Table) -> datetime | None:
    """The default as_of: the newest plausible record timestamp of every task's `moments`."""
    newest = pc.max(found.column("newest")).as_py() if found.num_rows else None
    return None if newest is None else newest.astimezone(timezone.utc)
