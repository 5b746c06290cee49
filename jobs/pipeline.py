"""A rebuild: plan the source -> read, check and reduce it -> replay each coordinator partition -> derive what
needs every partition (topic names, end offsets) -> commit the tables, whichever runner runs the kernel.

`run` is the whole run (its lock on the output, its staging area, its summary); the steps' rules live in
jobs.replay and jobs.derive, and the runner that moves data between them in jobs.engine.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from functools import partial
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.errors import LockLost
from jobs.base.tables import ARCHIVE, ARCHIVE_OFFSETS, FOLD_STATE, HISTORY_STATE, REPLAY_STATE, TABLES, arrow_schema
from jobs.config import RebuildConfig
from jobs.derive.end_offsets import Snapshots, added_history, history_rows, merge_history
from jobs.derive.members import topic_names
from jobs.derive.stage import INPUTS as DERIVE_INPUTS, OUTPUTS as DERIVE_OUTPUTS, DeriveSettings, derive_partition
from jobs.engine import choose_runner
from jobs.engine.stages import EARLIER, Stages, earlier_files
from jobs.kill_points import kill_point
from jobs.lake.output_lock import OutputLock
from jobs.lake.runs import keep_runs, new_run_id, snapshot
from jobs.lake.sink import TableSink
from jobs.lake.upkeep import upkeep
from jobs.replay.chunk import (OUTPUTS as CHUNK_OUTPUTS, cutoff_us, foreign_records, newest_plausible, read_chunk,
                               without_foreign)
from jobs.replay.counts import total
from jobs.replay.duplicates import overlapping
from jobs.replay.partition import OUTPUTS as REPLAY_OUTPUTS, ReplaySettings, replay_partition, together
from jobs.replay.resume import COUNTED as HISTORY_APPENDS, from_state, history_counts
from jobs.replay.share_state import OUTPUTS as SHARE_OUTPUTS, replay_share_state
from jobs.sources.archive import (OUTPUTS as ARCHIVE_OUTPUTS, Archive, archive_chunk, merged, offset_ranges,
                                  unique)
from jobs.sources import check_inputs
from jobs.sources.end_offsets import is_live, live_cluster, load_end_offsets
from jobs.sources.plan import plan_source
from jobs.sources.replay_state import ReplayState
from jobs.sources.topic_ids import read_topic_ids
from offsets_codec import SHARE_STATE_REGISTRY

log = logging.getLogger("offsetlake")


def run(cfg: RebuildConfig, lock: OutputLock | None = None, spark: Any = None) -> dict[str, Any]:
    """Read, replay and write every table; returns the run summary (the CLI prints it as JSON). `lock`: the run's
    hold on the output when the caller took it, having checked the inputs (else both are done here); `spark`: a
    session to use when the Spark runner runs (jobs.engine.choose_runner)."""
    if lock is not None:
        return _run(cfg, lock, spark)
    check_inputs(cfg)  # before the output is touched
    with OutputLock.acquire(cfg.output, new_run_id(), cfg.lock_lease_seconds) as own:
        return _run(cfg, own, spark)


def _run(cfg: RebuildConfig, lock: OutputLock, spark: Any) -> dict[str, Any]:
    run_id = lock.run_id
    started_at = datetime.now(timezone.utc)
    started = time.monotonic()
    live_ends = live_cluster(cfg.end_offsets, cfg.source, cfg.kafka) if cfg.end_offsets and is_live(cfg.end_offsets) \
        else None
    topic_ids = read_topic_ids(cfg.topic_ids, dict(cfg.storage)) if cfg.topic_ids else {}
    runner = choose_runner(cfg, spark)
    # Read once the lock's recovery has undone what an unfinished run appended.
    newest_run = snapshot(cfg.output, [ARCHIVE]) if cfg.archive else None  # read back through one interface
    archive = Archive.open(newest_run, exact=cfg.source.kind == "parquet") if newest_run is not None else None
    # The archive is kept reduced too, and the next run starts from that (jobs.replay.resume).
    keep_log = archive is not None
    cutoff = cutoff_us(started_at, cfg.as_of)
    resumed, whole_because = ReplayState.open(newest_run, cutoff, started_at, cfg.history,
                                              (cfg.status_window, cfg.rate_window_ms)) if keep_log else (None, None)
    plan = plan_source(cfg.source, cfg.kafka, runner.cores, archive, read_back=resumed is None)
    chunk_outputs = {**CHUNK_OUTPUTS, **(ARCHIVE_OUTPUTS if archive is not None else {})}
    replay_outputs = {**REPLAY_OUTPUTS, **SHARE_OUTPUTS}
    earlier = {name: earlier_files(files) for name, files in resumed.files.items()} if resumed is not None else {}
    stages = Stages(cfg.output, run_id, {**chunk_outputs, **replay_outputs, **DERIVE_OUTPUTS}, runner.groups(plan),
                    earlier)
    runner.attach(stages)
    sink = TableSink(cfg.output, run_id, runner.delta_engine(), cfg.snapshot, runner.spark, guard=lock.check)
    try:
        log.info("reading %s (%s runner)", cfg.source, runner.name)
        kill_point("read")
        fold = not cfg.history
        kernel = partial(_chunk_kernel, started=started_at, as_of=cfg.as_of, archive=archive, run_id=run_id,
                         keep_late=keep_log)
        runner.read_source(plan, partial(kernel, fold=fold), chunk_outputs)
        log.info("read and checked %d task(s) of the source in %.1fs", len(plan.reads or ()) or 1,
                 time.monotonic() - started)
        whole_because = _refusal(cfg, resumed, stages, started_at) if resumed is not None else whole_because
        if resumed is not None and whole_because is not None:
            log.warning("%s (run %s): the archive is read back and replayed whole", whole_because, resumed.run_id)
            resumed = None
            plan = plan_source(cfg.source, cfg.kafka, runner.cores, archive, read_back=True)
            stages.clear("chunks", chunk_outputs)
            runner.read_source(plan, partial(kernel, fold=fold), chunk_outputs)
        if fold and overlapping(stages.read("chunks", "spans")):
            log.warning("some records may be in the dump twice (overlapping offsets): the log is replayed whole")
            stages.clear("chunks", chunk_outputs)
            runner.read_source(plan, partial(kernel, fold=False), chunk_outputs)
        if archive is not None:
            _stage_archive(stages, sink, archive)
        moments = stages.read("chunks", "moments")
        if resumed is not None:
            moments = pa.concat_tables([moments, resumed.moments])
        as_of = cfg.as_of or newest_plausible(moments) or started_at
        kill_point("replayed")
        settings = ReplaySettings(as_of, cfg.retention_ms, cfg.history, cfg.status_window, cfg.rate_window_ms,
                                  keep_log, resumed.replayed_through if resumed is not None else None)
        inputs = {"log": "chunks", "share_log": "chunks", **({name: EARLIER for name in resumed.files}
                                                             if resumed is not None else {})}
        runner.by_partition("replay", inputs, partial(_replay_kernel, settings=settings, cutoff=cutoff),
                            replay_outputs)
        counts = _counts(stages)
        log.info("replayed %d records (%d decoded, %d quarantined) as of %s, retention %d min, at %.1fs",
                 counts["records_read"], counts["records_decoded"], counts["records_quarantined"],
                 as_of.isoformat(), cfg.retention_minutes, time.monotonic() - started)
        fold_names = stages.read("replay", "fold", filter=pc.field("kind") == "topic_name")
        names = topic_names(fold_names, stages.read("replay", "offset_topics"), topic_ids)
        previous_ends = _previous_end_offsets(cfg)
        ends = _end_offsets(cfg, as_of, previous_ends, live_ends, stages, names)
        derive = _derive_settings(cfg, as_of, names, ends, live_ends is not None)
        runner.by_partition("derive", {name: "replay" for name in DERIVE_INPUTS},
                            partial(_derive_kernel, settings=derive), DERIVE_OUTPUTS)
        appends_ends = resumed is not None and not ends["replaces"]  # what the history lacks, appended
        _write_driver_tables(sink, plan, ends["added"] if appends_ends else ends["history"])
        log.info("derived lag, status and members at %.1fs", time.monotonic() - started)
        kill_point("staged")
        runner.close()
        summary = _summary(cfg, stages, sink, counts, moments, as_of, plan)
        if keep_log:
            summary["resumed_from_run"] = resumed.run_id if resumed is not None else None
            summary["whole_replay_reason"] = whole_because
            if cfg.history:  # a resumed run stages only its new rows: the tables' rows, from the state's counts
                summary.update(history_counts(stages.read("replay", HISTORY_STATE, columns=["kind", "rows"])))
        lock.check()  # before the first commit: a run that lost its output stops here, having committed nothing
        tables = [t for t in TABLES if cfg.history or t not in ("offset_commits", "group_events", "group_status")]
        # The archive grows by an append; with nothing archived by a complete run, it is replaced (a first run
        # that died after its append left rows no complete run holds).
        archived = [ARCHIVE, ARCHIVE_OFFSETS] if archive is not None else []
        kept = [REPLAY_STATE, FOLD_STATE, *([HISTORY_STATE] if cfg.history else [])] if keep_log else []
        # A resumed run's history tables grow by an append of its new rows (end_offsets_history: of its new
        # snapshots, unless one replaces an earlier one); the others are replaced, as the state tables are.
        grown = (*(HISTORY_APPENDS if resumed is not None and cfg.history else ()),
                 *(("end_offsets_history",) if appends_ends else ()))
        info = {"cluster": cfg.cluster_name, "started_at": started_at, "records_read": summary["records_read"],
                "records_quarantined": summary["records_quarantined"]}
        sink.commit(as_of, str(cfg.source), tables=tables + archived + kept,
                    appends=((ARCHIVE,) if archive is not None and archive.version is not None else ()) + grown,
                    info=info)
        vacuumed = keep_runs(cfg.output, cfg.keep_runs, lock.check) if cfg.keep_runs else None
        if archive is not None:  # the tables that grow by appends: their small files, a share of them each run
            compacted = upkeep(cfg.output, run_id, [ARCHIVE, *((*HISTORY_APPENDS, "end_offsets_history")
                                                               if cfg.history else ())], archive.runs, lock.check)
            if compacted:
                summary["compacted_files"] = compacted
    except BaseException as failure:
        runner.close()
        sink.discard(failed=True)
        if not isinstance(failure, LockLost):
            try:
                lock.check()  # a run whose output was taken over failed for that reason (its files removed)
            except LockLost as lost:
                raise lost from failure
        raise
    log.info("wrote the tables under %s with %s", cfg.output, sink.engine)
    return {**summary, "topic_ids": len(topic_ids), "run_id": run_id, "seconds": round(time.monotonic() - started, 2),
            "runner": runner.name,
            **({"vacuumed_files": vacuumed} if vacuumed is not None else {}), **runner.work()}


def _refusal(cfg: RebuildConfig, resumed: ReplayState, stages: Stages, started: datetime) -> str | None:
    """Why the run cannot start from the `resumed` state after all, once the source is read: its new records, or
    (with the history) its as_of, lie among what the state stands for (ReplayState.refusal); None when it can."""
    moments = pa.concat_tables([stages.read("chunks", "moments"), resumed.moments])
    as_of = cfg.as_of or newest_plausible(moments) or started
    return resumed.refusal(stages.read("chunks", "spans"), as_of)


def _stage_archive(stages: Stages, sink: TableSink, archive: Archive) -> None:
    """What the run adds to the archive, made whole: its staged raw_records rows, one per record (`unique`, when
    some may be there twice), and `_archive_offsets`: the archive's ranges and the staged records', as the tasks
    noted them or, when `unique` removed copies, as what stays."""
    new = stages.read("chunks", "archive_ranges")
    if overlapping(stages.read("chunks", "archive_spans")):
        removed = unique(stages.folder("chunks", ARCHIVE))  # raw_records: one row per record
        if removed:
            log.warning("%d copies of records read twice were not archived", removed)
            staged = stages.read("chunks", ARCHIVE, columns=["topic", "partition", "offset"])
            new = offset_ranges(staged.column("topic"), staged.column("partition"), staged.column("offset"))
    sink.write(ARCHIVE_OFFSETS, merged([archive.ranges, new]))


def _chunk_kernel(raw: Iterable[pa.Table], started: datetime, as_of: datetime | None, fold: bool,
                  archive: Archive | None = None, run_id: str = "", keep_late: bool = False
                  ) -> Iterator[tuple[str, pa.Table]]:
    read = partial(read_chunk, started=started, as_of=as_of, fold=fold, keep_late=keep_late)
    foreign: list[tuple[str, pa.Table]] = []
    own = without_foreign(raw, foreign)
    for item in read(own) if archive is None else archive_chunk(own, read, archive, run_id):
        yield item
        yield from foreign
        foreign.clear()
    yield from foreign


def _replay_kernel(inputs: dict[str, pa.Table], settings: ReplaySettings, cutoff: int
                   ) -> Iterator[tuple[str, pa.Table]]:
    """Coordinator partitions of `__consumer_offsets` and the partitions of `__share_group_state` of the same
    numbers: two logs that share nothing but the numbers, replayed apart; each with the previous run's replay
    state of them and their group fold, when the run resumes from one (`cutoff`: this run's, which the state's
    whole rows are put by)."""
    logs = {name: inputs[name] for name in ("log", "share_log")}
    if REPLAY_STATE in inputs:
        earlier = from_state(inputs[REPLAY_STATE], cutoff)
        logs = {name: pa.concat_tables([rows, earlier[name]]) for name, rows in logs.items()}
    for name in (FOLD_STATE, HISTORY_STATE):
        if name in inputs:
            logs[name] = inputs[name]
    for part in together(logs, keyed=["log", *([HISTORY_STATE] if HISTORY_STATE in logs else [])]):
        if part["log"].num_rows:
            yield from replay_partition(part["log"], settings, part.get(FOLD_STATE), part.get(HISTORY_STATE))
        if part["share_log"].num_rows:
            yield from replay_share_state(part["share_log"], settings.as_of_us, settings.as_of, settings.keep_log)


def _counts(stages: Stages) -> dict[str, Any]:
    """The summary's counts of both topics' records: the share coordinator's by its own registry's names."""
    counts = total(stages.read("replay", "counts"))
    share = total(stages.read("replay", "share_counts"), SHARE_STATE_REGISTRY)
    for name in ("records_read", "records_decoded", "records_quarantined", "records_after_as_of"):
        counts[name] += share[name]
    counts["records_by_type"] = {**counts["records_by_type"], **share["records_by_type"]}
    return counts


def _derive_kernel(inputs: dict[str, pa.Table], settings: DeriveSettings) -> Iterator[tuple[str, pa.Table]]:
    for part in together(inputs, keyed=["committed_offsets", "fold", "commit_windows", "consume_rates"]):
        yield from derive_partition(part, settings)


def _previous_end_offsets(cfg: RebuildConfig) -> pa.Table | None:
    """end_offsets_history as the newest complete run left it, or None."""
    tables = snapshot(cfg.output, ["end_offsets_history"])
    if "end_offsets_history" not in tables.versions:
        return None
    rows = tables.open("end_offsets_history").to_pyarrow_table()
    return rows if rows.num_rows else None


def _end_offsets(cfg: RebuildConfig, as_of: datetime, previous: pa.Table | None, live: Any, stages: Stages,
                 names: dict[str, str]) -> dict[str, Any]:
    """The end offsets lag and Burrow's rules read, and the history the run leaves: earlier runs' snapshots plus
    this run's (a file's, or fetched now from a live cluster for the committed offsets' topic-partitions and the
    share partitions' whose topic has a name)."""
    if live is not None:
        from jobs.sources.end_offsets import fetch_end_offsets

        committed = stages.read("replay", "committed_offsets", columns=["topic", "partition"])
        pairs = set(zip(committed.column("topic").to_pylist(), committed.column("partition").to_pylist()))
        shares = stages.read("replay", "share_state", columns=["topic_id", "partition"])
        pairs |= {(names[t], p) for t, p in zip(shares.column("topic_id").to_pylist(),
                                                  shares.column("partition").to_pylist()) if t in names}
        pairs = sorted(pairs)
        fetched_at = datetime.now(timezone.utc)
        rows = fetch_end_offsets(live, pairs) if pairs else []
        log.info("fetched end offsets of %d topic-partition(s) from %s", len(rows), live.bootstrap)
        fetched = pa.table({"topic": pa.array([r[0] for r in rows], pa.string()),
                            "partition": pa.array([r[1] for r in rows], pa.int32()),
                            "offset": pa.array([r[2] for r in rows], pa.int64()),
                            "log_start_offset": pa.array([r[3] for r in rows], pa.int64()),
                            "fetched_at": pa.array([fetched_at] * len(rows), pa.timestamp("us", tz="UTC"))})
        at_as_of = history_rows(fetched.drop_columns(["fetched_at"]), as_of)
        added, replaces = added_history(previous, history_rows(fetched, as_of))
        return {"history": merge_history(previous, history_rows(fetched, as_of)), "added": added,
                "replaces": replaces, "lag": history_rows(fetched, as_of), "status": merge_history(previous, at_as_of)}
    new = history_rows(load_end_offsets(cfg.end_offsets, dict(cfg.storage), cfg.log_start_offsets), as_of) \
        if cfg.end_offsets else None
    history = previous if new is None else merge_history(previous, new)
    added, replaces = added_history(previous, new) if new is not None else (None, False)
    return {"history": history, "added": added, "replaces": replaces, "lag": history, "status": history}


def _derive_settings(cfg: RebuildConfig, as_of: datetime, names: dict[str, str], ends: dict[str, Any], live: bool
                     ) -> DeriveSettings:
    as_of_us = ReplaySettings(as_of, 0).as_of_us

    def snapshots(history: pa.Table | None, at: int | None) -> Snapshots | None:
        return None if history is None else Snapshots.of(history, at)

    return DeriveSettings(as_of, names, snapshots(ends["lag"], None if live else as_of_us), None if live else as_of,
                          snapshots(ends["status"], as_of_us), cfg.history, cfg.status_window, cfg.rate_window_ms)


def _write_driver_tables(sink: TableSink, plan: Any, history: pa.Table | None) -> None:
    """The tables the driver writes itself: the end-offset history (small, kept across runs) and the files and
    folders a log dir's plan did not read (segment_errors)."""
    if history is not None:
        sink.write("end_offsets_history", history)
    if plan.ignored:
        sink.write("segment_errors", pa.Table.from_pylist(
            [{"coordinator_partition": i.partition, "file": i.path, "action": i.action, "reason": i.reason}
             for i in plan.ignored], schema=arrow_schema("segment_errors")))


def _summary(cfg: RebuildConfig, stages: Stages, sink: TableSink, counts: dict[str, Any], moments: pa.Table,
             as_of: datetime, plan: Any) -> dict[str, Any]:
    """The run summary: counts, rows of the main tables, and what the run found worth saying."""
    rows = {t: sink.rows(t) for t in TABLES}
    duplicates = stages.read("replay", "duplicates")
    copies = int(pc.sum(duplicates.column("duplicates")).as_py() or 0)
    conflicts = int(pc.sum(duplicates.column("conflicts")).as_py() or 0)
    groups = stages.read("replay", "consumer_groups", columns=["group_id", "is_orphan"])
    violations = stages.read("replay", "violations").sort_by("group_id").to_pylist()[:1000]
    foreign = foreign_records(stages.read("chunks", "foreign_records"))
    summary = {
        "records_read": counts["records_read"] + copies,
        # With the archive, records_read is what the source gave; the replay also read the archived records.
        **(_archive_figures(stages, sink, plan.archive, counts["records_read"] + copies) if cfg.archive else {}),
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
        **({t: rows[t] for t in ("offset_commits", "group_events", "group_status")} if cfg.history else {}),
        "end_offsets_history": rows["end_offsets_history"],
        "segment_damage": _segment_damage(sink),
        "as_of": as_of.isoformat().replace("+00:00", "Z"),
        "orphan_groups": sorted(g for g, o in zip(groups.column("group_id").to_pylist(),
                                                 groups.column("is_orphan").to_pylist()) if o),
        "replay_violations": violations,
        "unresolved_topic_ids": _unresolved_topic_ids(stages),
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


def _archive_figures(stages: Stages, sink: TableSink, archive: Archive, replayed: int) -> dict[str, Any]:
    """With the archive: the records read from the source (records_read), those the replay saw (archived and
    new), and the archive before and after this run."""
    reads = stages.read("chunks", "archive_reads")
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


def _unresolved_topic_ids(stages: Stages) -> int:
    """Assigned partitions (current and target) whose topic id no mapping could name."""
    members = stages.read("derive", "group_members", columns=["assigned_partitions"])
    current = pc.list_flatten(members.column("assigned_partitions"))
    targets = stages.read("derive", "group_target_assignments", columns=["topic", "topic_id"])
    unnamed = 0
    for topic, topic_id in ((pc.struct_field(current, "topic"), pc.struct_field(current, "topic_id")),
                            (targets.column("topic"), targets.column("topic_id"))):
        unnamed += pc.sum(pc.and_(pc.is_null(topic), pc.is_valid(topic_id))).as_py() or 0
    return unnamed

