"""A rebuild's summary (the JSON line `offsetlake rebuild` prints last): the records read, decoded and
quarantined, the rows of the main tables, and what the run found worth saying (records read twice, implausible
timestamps, damaged segments, records of other topics), from what the passes staged and the sink wrote.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.storage import Location
from jobs.base.tables import ARCHIVE, HISTORY_TABLES, TABLES
from jobs.config import RebuildConfig
from jobs.engine.handoffs import CHUNKS, DERIVED, REPLAYED
from jobs.engine.stages import StagingLayout
from jobs.lake.runs import delta_table, table_rows
from jobs.lake.sink import TableSink
from jobs.replay.chunk import foreign_records
from jobs.replay.counts import total
from jobs.replay.resume import history_counts
from jobs.sources.archive import Archive
from offsets_codec import SHARE_STATE_REGISTRY

log = logging.getLogger("offsetlake")


def record_counts(layout: StagingLayout) -> dict[str, Any]:
    """The summary's counts of both topics' records: the share coordinator's by its own registry's names."""
    counts = total(layout.read(REPLAYED.counts))
    share = total(layout.read(REPLAYED.share_counts), SHARE_STATE_REGISTRY)
    for name in ("records_read", "records_decoded", "records_quarantined", "records_after_as_of"):
        counts[name] += share[name]
    counts["records_by_type"] = {**counts["records_by_type"], **share["records_by_type"]}
    return counts


def run_summary(cfg: RebuildConfig, layout: StagingLayout, sink: TableSink, counts: dict[str, Any],
                moments: pa.Table, as_of: datetime, archive: Archive | None) -> dict[str, Any]:
    """The run summary: counts, rows of the main tables, and what the run found worth saying."""
    rows = {t: sink.rows(t) for t in TABLES}
    duplicates = layout.read(REPLAYED.duplicates)
    copies = int(pc.sum(duplicates.column("duplicates")).as_py() or 0)
    conflicts = int(pc.sum(duplicates.column("conflicts")).as_py() or 0)
    groups = layout.read(REPLAYED.consumer_groups, columns=["group_id", "is_orphan"])
    violations = layout.read(REPLAYED.violations).sort_by("group_id").to_pylist()[:1000]
    foreign = foreign_records(layout.read(CHUNKS.foreign_records))
    summary = {
        "records_read": counts["records_read"] + copies,
        # With the archive, records_read is what the source gave; the replay also read the archived records.
        **(_archive_figures(layout, sink, archive, counts["records_read"] + copies) if archive is not None else {}),
        "records_decoded": counts["records_decoded"],
        "records_quarantined": counts["records_quarantined"],
        "duplicate_records": copies,
        "conflicting_records": conflicts,
        "groups": rows["consumer_groups"],
        "committed_offsets": rows["committed_offsets"],
        "expired_offsets": rows["expired_offsets"],
        "members": rows["group_members"],
        "share_partitions": rows["share_partition_state"],
        "consumer_lag": rows["consumer_lag"],
        "pending_transactions": rows["pending_transactions"],
        "segment_errors": rows["segment_errors"],
        **({t: rows[t] for t in HISTORY_TABLES} if cfg.history else {}),
        "end_offsets_history": rows["end_offsets_history"],
        "segment_damage": _segment_damage(sink),
        "as_of": as_of.isoformat().replace("+00:00", "Z"),
        "orphan_groups": sorted(g for g, o in zip(groups.column("group_id").to_pylist(),
                                                 groups.column("is_orphan").to_pylist()) if o),
        "replay_violations": violations,
        "unresolved_topic_ids": _unresolved_topic_ids(layout),
        **_implausible(moments),
        "records_after_as_of": counts["records_after_as_of"],
        "transactional_records": counts["transactional_records"],
        "records_by_type": counts["records_by_type"],
        "modern_group_records": counts["modern_group_records"],
        "retention_minutes": cfg.retention_minutes,
        "delta_engine": sink.engine,
        "output": cfg.output.uri,
        "cluster": cfg.cluster_name,
    }
    summary["foreign_records"] = foreign
    if foreign:
        log.warning("%d record(s) of other topics than __consumer_offsets and __share_group_state were left out "
                    "(never decoded or replayed): %s", sum(foreign.values()),
                    ", ".join(f"{t} {n}" for t, n in foreign.items()))
    if copies or conflicts:
        log.warning("%d records were read twice (replayed once) and %d conflicting copies were quarantined",
                    copies, conflicts)
    return summary


def resumed_figures(cfg: RebuildConfig, layout: StagingLayout, resumed_from: str | None,
                    whole_because: str | None) -> dict[str, Any]:
    """A run that keeps its log reduced (--archive): the run it resumed from, or why it replayed the archive whole;
    with the history, the history tables' rows from the state's counts (a resumed run stages only its new rows)."""
    return {"resumed_from_run": resumed_from, "whole_replay_reason": whole_because,
            **(history_counts(layout.read(REPLAYED.history_state, columns=["kind", "rows"])) if cfg.history else {})}


def committed_rows(output: Location, tables: tuple[str, ...]) -> dict[str, int]:
    """Each of `tables`' rows at its newest version (the run's, while it holds the output), from the Delta log's
    file statistics: where a run's staged rows or the history state's counts do not tell (rows removed by
    --history-days)."""
    return {table: table_rows(delta_table(output.child(table))) for table in tables}


def _archive_figures(layout: StagingLayout, sink: TableSink, archive: Archive, replayed: int) -> dict[str, Any]:
    """With the archive: the records read from the source (records_read), those the replay saw (archived and
    new), and the archive before and after this run."""
    reads = layout.read(CHUNKS.archive_reads)
    new = sink.rows(ARCHIVE)
    return {"records_read": int(pc.sum(reads.column("read")).as_py() or 0), "records_replayed": replayed,
            "records_archived_before": archive.records, "records_new": new,
            "records_archived_after": archive.records + new}


def _implausible(moments: pa.Table) -> dict[str, Any]:
    """Records with timestamps no broker writes: in the future of the run, or older than Kafka."""
    future = int(pc.sum(moments.column("future")).as_py() or 0)
    past = int(pc.sum(moments.column("past")).as_py() or 0)
    if not (future or past):
        return {}
    earliest = pc.min(moments.column("earliest_implausible")).as_py()
    latest = pc.max(moments.column("latest_implausible")).as_py()
    log.warning("%d record(s) have a timestamp in the future and %d one before 2011 (%s to %s): the default as_of "
                "leaves the future ones out", future, past, earliest, latest)
    return {"implausible_timestamps": {"future": future, "before_kafka": past,
                                       "earliest": earliest.isoformat() if earliest else None,
                                       "latest": latest.isoformat() if latest else None}}


def _segment_damage(sink: TableSink, most: int = 100) -> list[dict[str, Any]]:
    """The first damaged segments and ignored files (all of them are in the segment_errors table)."""
    rows = sink.head("segment_errors", most, ["file", "position", "action", "reason"])
    if len(rows) == most:
        log.warning("segment_errors has more rows than the summary lists (%d); see the table", most)
    return rows


def _unresolved_topic_ids(layout: StagingLayout) -> int:
    """Assigned partitions (current and target) whose topic id no mapping could name."""
    members = layout.read(DERIVED.group_members, columns=["assigned_partitions"])
    current = pc.list_flatten(members.column("assigned_partitions"))
    targets = layout.read(DERIVED.group_target_assignments, columns=["topic", "topic_id"])
    unnamed = 0
    for topic, topic_id in ((pc.struct_field(current, "topic"), pc.struct_field(current, "topic_id")),
                            (targets.column("topic"), targets.column("topic_id"))):
        unnamed += pc.sum(pc.and_(pc.is_null(topic), pc.is_valid(topic_id))).as_py() or 0
    return unnamed
