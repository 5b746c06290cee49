"""A rebuild: plan the source -> read, check and reduce it -> replay each coordinator partition -> derive what
needs every partition (topic names, end offsets) -> commit the tables, whichever runner runs the kernel.

`run` is the one front door of a rebuild (the command line, the spark-submit entry and notebooks call it): the
input check, the lock on the output, the run, the tables registered in a catalog, the summary. The steps' rules
live in jobs.replay and jobs.derive, the runner that moves data between them in jobs.engine (what each pass
hands the next: jobs.engine.handoffs), the summary in jobs.summary.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP
from jobs.base.errors import LockLost
from jobs.base.retention import CUT_BY, HistoryCutoff, history_from, kept_rows
from jobs.base.tables import (ARCHIVE, ARCHIVE_OFFSETS, FOLD_STATE, HISTORY_STATE, HISTORY_TABLES, REPLAY_STATE, TABLES,
                              arrow_schema)
from jobs.config import RebuildConfig
from jobs.derive.end_offsets import Snapshots, added_history, history_rows, merge_history
from jobs.derive.members import topic_names
from jobs.derive.stage import OUTPUTS as DERIVE_OUTPUTS, DeriveSettings, derive_partition
from jobs.engine import Runner, choose_runner
from jobs.engine.handoffs import CHUNKS, DERIVE_READS, DERIVED, REPLAYED, Staged
from jobs.engine.stages import EARLIER, StagingLayout, earlier_files
from jobs.kill_points import kill_point
from jobs.lake.output_lock import OutputLock
from jobs.lake.runs import Snapshot, keep_runs, new_run_id, snapshot, storage_failures
from jobs.lake.sink import TableSink
from jobs.lake.upkeep import upkeep
from jobs.replay.chunk import OUTPUTS as CHUNK_OUTPUTS, cutoff_us, newest_plausible, read_chunk, without_foreign
from jobs.replay.duplicates import overlapping
from jobs.replay.partition import OUTPUTS as REPLAY_OUTPUTS, ReplaySettings, partition_sets, replay_partition
from jobs.replay.resume import COUNTED as HISTORY_APPENDS, from_state
from jobs.replay.share_state import OUTPUTS as SHARE_OUTPUTS, replay_share_state
from jobs.sources.archive import (OUTPUTS as ARCHIVE_OUTPUTS, Archive, archive_chunk, merged, offset_ranges,
                                  unique)
from jobs.sources import check_inputs
from jobs.sources.end_offsets import is_live, live_cluster, load_end_offsets
from jobs.sources.plan import SourcePlan, plan_source
from jobs.sources.replay_state import ReplayState
from jobs.sources.tasks import task_errors
from jobs.sources.topic_ids import read_topic_ids
from jobs.summary import committed_rows, record_counts, resumed_figures, run_summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.sources.kafka_client import Cluster

log = logging.getLogger("offsetlake")
REPLAY_WRITES = {**REPLAY_OUTPUTS, **SHARE_OUTPUTS}  # both logs' replays, one pass


def run(cfg: RebuildConfig, spark: SparkSession | None = None) -> dict[str, Any]:
    """Check the inputs (jobs.sources.check_inputs: before the output is touched, and before Spark starts), take
    the output's lock (one run at a time: a second one is refused with one line), check the catalog's session
    (--catalog-database, before any table changes), read, replay and write every table, register them; returns
    the run summary (the command line prints it as JSON). A storage that refuses the writes is RunFailed, a failed
    source task its BadInput: one line each. `spark`: a session to use, by the Spark runner
    (jobs.engine.choose_runner) and the catalog; with --catalog-database and none, one is started here (which the
    runner uses only with --engine spark)."""
    check_inputs(cfg)
    run_id = new_run_id()
    with storage_failures(cfg.output, run_id):  # a full disk: its one line, saying what readers see
        with OutputLock.acquire(cfg.output, run_id, cfg.lock_lease_seconds) as lock:
            catalog = _catalog_session(cfg, spark)
            with task_errors():  # a failed source task (Kafka, a dump's row group): its one line, not Spark's error
                summary = _run(cfg, lock, spark if spark is not None or cfg.engine != "spark" else catalog)
            if catalog is not None:
                summary["catalog"] = _register(cfg, catalog)
    return summary


def _catalog_session(cfg: RebuildConfig, spark: SparkSession | None) -> SparkSession | None:
    """With --catalog-database: the session that registers the tables, checked before any table changes."""
    if not cfg.catalog:
        return None
    from jobs.lake.catalog import LocalCatalog, check_catalog

    if spark is None:
        from jobs.runtime.session import get_spark

        log.info("starting Spark to register the tables as %s.<table> (--catalog-database): this takes a while",
                 cfg.catalog.database)
        spark = get_spark(None if cfg.catalog.folder is None else LocalCatalog(cfg.catalog.folder))
    check_catalog(spark, cfg.output, cfg.catalog.database, cfg.catalog.folder)
    return spark


def _register(cfg: RebuildConfig, spark: SparkSession) -> dict[str, Any]:
    from jobs.lake.catalog import register_catalog

    try:
        return register_catalog(spark, cfg.output, cfg.catalog.database, cfg.catalog.folder)
    except Exception as e:  # the tables are committed: say so, in the one line
        raise RuntimeError(f"the tables were written, but registering them as {cfg.catalog.database}.<table> "
                           f"failed: {type(e).__name__}: {str(e).strip()}") from e


@dataclass
class _Rebuild:
    """One run holding its output: what every step reads."""

    cfg: RebuildConfig
    lock: OutputLock
    runner: Runner
    layout: StagingLayout
    sink: TableSink
    archive: Archive | None  # --archive: what the archive holds
    newest_run: Snapshot  # the newest complete run's tables this run reads back (the archive, the end offsets)
    started_at: datetime
    started: float  # time.monotonic() at the start
    cutoff: HistoryCutoff | None = None  # --history-days, once as_of is known

    @property
    def keep_log(self) -> bool:
        """The archive is kept reduced too, and the next run starts from that (jobs.replay.resume)."""
        return self.archive is not None

    def seconds(self) -> float:
        return time.monotonic() - self.started


def _run(cfg: RebuildConfig, lock: OutputLock, spark: SparkSession | None) -> dict[str, Any]:
    """Source -> check -> replay -> derive -> sink, holding the output's `lock`."""
    started_at, started = datetime.now(timezone.utc), time.monotonic()
    live_ends = live_cluster(cfg.end_offsets, cfg.source, cfg.kafka) if cfg.end_offsets and is_live(cfg.end_offsets) \
        else None
    topic_ids = read_topic_ids(cfg.topic_ids, dict(cfg.storage)) if cfg.topic_ids else {}
    runner = choose_runner(cfg.engine, cfg.workers, f"offsetlake rebuild {cfg.source}", spark)
    # Read once the lock's recovery has undone what an unfinished run appended.
    newest_run = snapshot(cfg.output, [ARCHIVE, "end_offsets_history"])  # read back through one interface
    archive = Archive.open(newest_run, exact=cfg.source.kind == "parquet") if cfg.archive else None
    resumed, whole_because = ReplayState.open(newest_run, cutoff_us(started_at, cfg.as_of), started_at, cfg.history,
                                              (cfg.status_window, cfg.rate_window_ms)) if archive is not None \
        else (None, None)
    plan = plan_source(cfg.source, cfg.kafka, runner.cores, archive, read_back=resumed is None)
    earlier = {name: earlier_files(files) for name, files in resumed.files.items()} if resumed is not None else {}
    layout = StagingLayout(cfg.output, lock.run_id, runner.groups(plan), earlier)
    runner.attach(layout)
    sink = TableSink(cfg.output, lock.run_id, runner.delta_engine(), cfg.snapshot, runner.spark, guard=lock.check)
    rebuild = _Rebuild(cfg, lock, runner, layout, sink, archive, newest_run, started_at, started)
    try:
        plan, resumed, whole_because = _read_source(rebuild, plan, resumed, whole_because)
        moments, as_of = _moments(cfg, layout, resumed, started_at)
        rebuild.cutoff = HistoryCutoff.of(as_of, cfg.history_days)
        kill_point("replayed")
        counts = _replay(rebuild, as_of, resumed)
        appends_ends, kept_from = _derive(rebuild, as_of, topic_ids, live_ends, plan, resumed is not None)
        kill_point("staged")
        runner.close()
        summary = run_summary(cfg, layout, sink, counts, moments, as_of, archive)
        if rebuild.keep_log:
            summary.update(resumed_figures(cfg, layout, resumed.run_id if resumed is not None else None,
                                           whole_because))
        summary["history_from"] = kept_from.isoformat().replace("+00:00", "Z") if kept_from is not None else None
        summary.update(_commit(rebuild, as_of, summary, resumed is not None, appends_ends, kept_from))
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
    return {**summary, "topic_ids": len(topic_ids), "run_id": lock.run_id, "seconds": round(rebuild.seconds(), 2),
            "runner": runner.name, **runner.work()}


def _read_source(rebuild: _Rebuild, plan: SourcePlan, resumed: ReplayState | None, whole_because: str | None
                 ) -> tuple[SourcePlan, ReplayState | None, str | None]:
    """Pass 1: every task of the source read, checked and reduced; read again (and the plan, the state resumed
    from and why not, as they end up) when what was read says the state cannot be started from after all, or
    that some records may be there twice (then nothing is folded before the replay)."""
    cfg, runner, layout = rebuild.cfg, rebuild.runner, rebuild.layout
    chunk_writes = {**CHUNK_OUTPUTS, **(ARCHIVE_OUTPUTS if rebuild.archive is not None else {})}
    log.info("reading %s (%s runner)", cfg.source, runner.name)
    kill_point("read")
    fold = not cfg.history
    kernel = partial(_chunk_kernel, started=rebuild.started_at, as_of=cfg.as_of, archive=rebuild.archive,
                     run_id=rebuild.lock.run_id, keep_late=rebuild.keep_log)
    runner.read_source(plan, partial(kernel, fold=fold), chunk_writes)
    log.info("read and checked %d task(s) of the source in %.1fs", len(plan.reads or ()) or 1, rebuild.seconds())
    whole_because = _refusal(cfg, resumed, layout, rebuild.started_at) if resumed is not None else whole_because
    if resumed is not None and whole_because is not None:
        log.warning("%s (run %s): the archive is read back and replayed whole", whole_because, resumed.run_id)
        resumed = None
        plan = plan_source(cfg.source, cfg.kafka, runner.cores, rebuild.archive, read_back=True)
        layout.clear(CHUNKS.stage, chunk_writes)
        runner.read_source(plan, partial(kernel, fold=fold), chunk_writes)
    if fold and overlapping(layout.read(CHUNKS.spans)):
        log.warning("some records may be in the dump twice (overlapping offsets): the log is replayed whole")
        layout.clear(CHUNKS.stage, chunk_writes)
        runner.read_source(plan, partial(kernel, fold=False), chunk_writes)
    if rebuild.archive is not None:
        _stage_archive(layout, rebuild.sink, rebuild.archive)
    return plan, resumed, whole_because


def _replay(rebuild: _Rebuild, as_of: datetime, resumed: ReplayState | None) -> dict[str, Any]:
    """Pass 2: each group of coordinator partitions replayed (with the state an earlier run left of them, when the
    run resumes from one); returns the records' counts."""
    cfg = rebuild.cfg
    settings = ReplaySettings(as_of, cfg.retention_ms, cfg.history, cfg.status_window, cfg.rate_window_ms,
                              rebuild.keep_log, resumed.replayed_through if resumed is not None else None,
                              rebuild.cutoff)
    earlier = tuple(Staged(EARLIER, name, REPLAYED.named(name).schema) for name in resumed.files) \
        if resumed is not None else ()
    rebuild.runner.by_partition(REPLAYED.stage, (CHUNKS.log, CHUNKS.share_log, *earlier),
                                partial(_replay_kernel, settings=settings,
                                        cutoff=cutoff_us(rebuild.started_at, cfg.as_of)), REPLAY_WRITES)
    counts = record_counts(rebuild.layout)
    log.info("replayed %d records (%d decoded, %d quarantined) as of %s, retention %d min, at %.1fs",
             counts["records_read"], counts["records_decoded"], counts["records_quarantined"],
             as_of.isoformat(), cfg.retention_minutes, rebuild.seconds())
    return counts


def _derive(rebuild: _Rebuild, as_of: datetime, topic_ids: dict[str, str], live_ends: Cluster | None,
            plan: SourcePlan, resumed: bool) -> tuple[bool, datetime | None]:
    """Pass 3: topic names and end offsets gathered from every partition, then each group's replayed state
    derived; the driver's own tables staged. Returns whether end_offsets_history grows by an append (a resumed
    run's new snapshots, none replacing an earlier one), and from when the history is whole after the run (the
    newest complete run's word and this run's cutoff: jobs.base.retention.history_from)."""
    cfg, layout = rebuild.cfg, rebuild.layout
    named = layout.read(REPLAYED.group_rows, filter=pc.field("kind") == "topic_name")
    names = topic_names(named, layout.read(REPLAYED.offset_topics), topic_ids)
    earlier = rebuild.newest_run
    ends = _end_offsets(cfg, as_of, _previous_end_offsets(earlier), live_ends, layout, names, rebuild.cutoff)
    derive = _derive_settings(cfg, as_of, names, ends, live_ends is not None)
    rebuild.runner.by_partition(DERIVED.stage, DERIVE_READS, partial(_derive_kernel, settings=derive),
                                DERIVE_OUTPUTS)
    appends_ends = resumed and not ends["replaces"]  # what the history lacks, appended
    _write_driver_tables(rebuild.sink, plan, ends["added"] if appends_ends else ends["history"])
    log.info("derived lag, status and members at %.1fs", rebuild.seconds())
    return appends_ends, history_from(rebuild.cutoff, (earlier.run or {}).get("history_from"))


def _commit(rebuild: _Rebuild, as_of: datetime, summary: dict[str, Any], resumed: bool, appends_ends: bool,
            kept_from: datetime | None) -> dict[str, Any]:
    """The sink: every staged table committed (with --history-days, the rows before the cutoff removed from the
    tables appended to: those replaced hold none), and the run recorded, with from when its history is whole
    (`kept_from`); then the files of runs no longer kept removed (--keep-runs) and the small files of the tables
    that grow by appends compacted. Returns the summary's figures of those, and with a history not kept whole,
    the history tables' rows (the state counts every row ever made)."""
    cfg, lock, sink, archive = rebuild.cfg, rebuild.lock, rebuild.sink, rebuild.archive
    lock.check()  # before the first commit: a run that lost its output stops here, having committed nothing
    tables = [t for t in TABLES if cfg.history or t not in HISTORY_TABLES]
    # The archive grows by an append; with nothing archived by a complete run, it is replaced (a first run
    # that died after its append left rows no complete run holds).
    archived = [ARCHIVE, ARCHIVE_OFFSETS] if archive is not None else []
    kept = [REPLAY_STATE, FOLD_STATE, *([HISTORY_STATE] if cfg.history else [])] if rebuild.keep_log else []
    # A resumed run's history tables grow by an append of its new rows (end_offsets_history: of its new
    # snapshots, unless one replaces an earlier one); the others are replaced, as the state tables are.
    grown = (*(HISTORY_APPENDS if resumed and cfg.history else ()), *(("end_offsets_history",) if appends_ends else ()))
    info = {"cluster": cfg.cluster_name, "started_at": rebuild.started_at, "records_read": summary["records_read"],
            "records_quarantined": summary["records_quarantined"], "history_from": kept_from}
    cutoff = rebuild.cutoff
    sink.commit(as_of, str(cfg.source), tables=tables + archived + kept,
                appends=((ARCHIVE,) if archive is not None and archive.version is not None else ()) + grown,
                info=info, removals={t: cutoff.removed(t) for t in grown if t in CUT_BY} if cutoff else None)
    figures: dict[str, Any] = {"history_removed": sink.removed} if cutoff is not None else {}
    if kept_from is not None and cfg.history:
        figures.update(committed_rows(cfg.output, HISTORY_APPENDS))
    if cfg.keep_runs:
        figures["vacuumed_files"] = keep_runs(cfg.output, cfg.keep_runs, lock.check)
    if archive is not None:  # the tables that grow by appends: their small files, a share of them each run
        compacted = upkeep(cfg.output, lock.run_id, [ARCHIVE, *((*HISTORY_APPENDS, "end_offsets_history")
                                                                if cfg.history else ())], archive.runs, lock.check)
        if compacted:
            figures["compacted_files"] = compacted
    return figures


def _refusal(cfg: RebuildConfig, resumed: ReplayState, layout: StagingLayout, started: datetime) -> str | None:
    """Why the run cannot start from the `resumed` state after all, once the source is read: its new records, or
    (with the history) its as_of, lie among what the state stands for (ReplayState.refusal); None when it can."""
    return resumed.refusal(layout.read(CHUNKS.spans), _moments(cfg, layout, resumed, started)[1])


def _moments(cfg: RebuildConfig, layout: StagingLayout, resumed: ReplayState | None, started: datetime
             ) -> tuple[pa.Table, datetime]:
    """The moments of the records read (and of those the `resumed` state stands for), and the run's as_of: the one
    asked for, else the newest plausible record's, else the run's start."""
    moments = layout.read(CHUNKS.moments)
    if resumed is not None:
        moments = pa.concat_tables([moments, resumed.moments])
    return moments, cfg.as_of or newest_plausible(moments) or started


def _stage_archive(layout: StagingLayout, sink: TableSink, archive: Archive) -> None:
    """What the run adds to the archive, made whole: its staged raw_records rows, one per record (`unique`, when
    some may be there twice), and `_archive_offsets`: the archive's ranges and the staged records', as the tasks
    noted them or, when `unique` removed copies, as what stays."""
    new = layout.read(CHUNKS.archive_ranges)
    if overlapping(layout.read(CHUNKS.archive_spans)):
        removed = unique(layout.folder(CHUNKS.stage, ARCHIVE))  # raw_records: one row per record
        if removed:
            log.warning("%d copies of records read twice were not archived", removed)
            staged = layout.read(CHUNKS.raw_records, columns=["topic", "partition", "offset"])
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
    for part in partition_sets(logs, keyed=["log", *([HISTORY_STATE] if HISTORY_STATE in logs else [])]):
        if part["log"].num_rows:
            yield from replay_partition(part["log"], settings, part.get(FOLD_STATE), part.get(HISTORY_STATE))
        if part["share_log"].num_rows:
            yield from replay_share_state(part["share_log"], settings.as_of_us, settings.as_of, settings.keep_log)


def _derive_kernel(inputs: dict[str, pa.Table], settings: DeriveSettings) -> Iterator[tuple[str, pa.Table]]:
    for part in partition_sets(inputs, keyed=["committed_offsets", "group_rows", "commit_windows", "consume_rates"]):
        yield from derive_partition(part, settings)


def _previous_end_offsets(tables: Snapshot) -> pa.Table | None:
    """end_offsets_history as the newest complete run left it (`tables`: its snapshot), or None."""
    if "end_offsets_history" not in tables.versions:
        return None
    rows = tables.open("end_offsets_history").to_pyarrow_table()
    return rows if rows.num_rows else None


def _end_offsets(cfg: RebuildConfig, as_of: datetime, previous: pa.Table | None, live: Cluster | None,
                 layout: StagingLayout, names: dict[str, str], cutoff: HistoryCutoff | None) -> dict[str, Any]:
    """The end offsets lag and Burrow's rules read, and the history the run leaves: earlier runs' snapshots plus
    this run's (a file's, or fetched now from a live cluster for the committed offsets' topic-partitions and the
    share partitions' whose topic has a name), those the `cutoff` keeps: lag and status read the history the run
    leaves, as the next run will."""
    def kept(history: pa.Table | None) -> pa.Table | None:
        return kept_rows(cutoff, "end_offsets_history", history) if history is not None else None

    previous = kept(previous)
    if live is not None:
        from jobs.sources.end_offsets import fetch_end_offsets

        committed = layout.read(REPLAYED.committed_offsets, columns=["topic", "partition"])
        pairs = set(zip(committed.column("topic").to_pylist(), committed.column("partition").to_pylist()))
        shares = layout.read(REPLAYED.share_state, columns=["topic_id", "partition"])
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
                            "fetched_at": pa.array([fetched_at] * len(rows), TIMESTAMP)})
        observed = history_rows(fetched, as_of)  # lag reads the fetch; status reads it as the snapshot of as_of
        at_as_of = history_rows(fetched.drop_columns(["fetched_at"]), as_of)
        snapshots = kept(observed)
        added, replaces = added_history(previous, snapshots)
        return {"history": merge_history(previous, snapshots), "added": added, "replaces": replaces,
                "lag": observed, "status": merge_history(previous, at_as_of)}
    new = kept(history_rows(load_end_offsets(cfg.end_offsets, dict(cfg.storage), cfg.log_start_offsets), as_of)) \
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


def _write_driver_tables(sink: TableSink, plan: SourcePlan, history: pa.Table | None) -> None:
    """The tables the driver writes itself: the end-offset history (small, kept across runs) and the files and
    folders a log dir's plan did not read (segment_errors)."""
    if history is not None:
        sink.write("end_offsets_history", history)
    if plan.ignored:
        sink.write("segment_errors", pa.Table.from_pylist(
            [{"coordinator_partition": i.partition, "file": i.path, "action": i.action, "reason": i.reason}
             for i in plan.ignored], schema=arrow_schema("segment_errors")))
