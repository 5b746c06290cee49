"""`offsetlake bench`: a rebuild timed against a scan floor and a peer, each a whole new process.

Machines here are noisy, so the figures that matter are ratios between runs of the same bench on the same
dump, each started the way a user starts it (interpreter, JVM and session start included):

* floor: a fresh Spark process summing the lengths of every key and value (jobs/tools/bench_floor.py);
* rebuild: `offsetlake rebuild` with the default settings, with and without the history
  tables (`--no-history`); its run summary gives the runner, its Spark work, and each round's peak memory (of
  the driver, the largest worker or a local JVM);
* peer: a single-process pure-Python parser from PyPI (jobs/tools/bench_peer.py) in a throwaway virtualenv under
  the work folder; skipped, with a note, when it cannot be installed.

With `--master URL` (`local[2]`, `spark://host:7077`, `yarn`), the floor and two more rebuilds run under pyspark's
spark-submit on that master: the Spark runner as spark-submit and Databricks users get it (no local pool), with and
without history, against the floor on the same master; the CLI's rebuilds stay beside them.

Rounds alternate the processes (floor, rebuild, no-history, peer, floor, ...) so a slow spell of the
machine falls on all of them; each figure is the median of its rounds, each ratio to the floor the median of
the rounds' ratios (a run against the floor run of its own round).

With `--incremental FRACTION` (`run_incremental`), the bench times a daily run instead: the dump split by offset
into its older records and each partition's newest FRACTION, a full `--no-history` rebuild of the whole dump
against a `--archive --no-history` run of the newest records only, which resumes from the state an untimed run
of the older ones left (jobs.replay.resume); the two outputs' state tables must be equal.
"""
from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import time
import venv
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from jobs.config import SourceSpec
from jobs.sources import check_source
from jobs.tools.sample import write_log_dir, write_sample

log = logging.getLogger("offsetlake")
PEER = "prometheus-kafka-consumer-group-exporter==0.5.5"
HERE = Path(__file__).resolve().parent
ARCHIVE_WAIT_SECONDS = 120  # a JVM writes its class archive in seconds once its process has ended


def run_bench(records: int, dump: Path | None, work: Path, source_format: str = "parquet",
              repeat: int = 1, peer: bool = True, master: str | None = None) -> dict[str, Any]:
    """Generate (or reuse) a dump, then time the floor, the rebuild (with and without history) and the peer.
    Relative paths are the caller's working folder's: the processes timed get them absolute."""
    work = work.resolve()
    dump = dump.resolve() if dump is not None else None
    if dump is None:
        dump = work / f"dump-{records}"
        if not any(dump.glob("*.parquet")):
            log.info("generating a %d-record dump in %s", records, dump)
            write_sample(dump, records, seed=7)
    check_source(SourceSpec("parquet", str(dump)))  # the dump's columns
    source = f"parquet:{dump}"
    if source_format == "segments":
        log_dir = work / f"{dump.name}-segments"
        if not log_dir.exists():
            log.info("writing %s as a broker log dir in %s", dump, log_dir)
            write_log_dir(dump, log_dir)
        source = f"segments:{log_dir}"
    peer_python, peer_note = _peer_python(work) if peer else (None, "not asked for (--no-peer)")

    commands: dict[str, list[str]] = {
        # -I: the script's folder (jobs/, whose types.py would shadow the standard library's) is not on sys.path.
        "floor": [sys.executable, "-I", str(HERE / "bench_floor.py"), str(dump)],
        # The console script `offsetlake` is jobs.cli:main.
        "rebuild": [sys.executable, "-m", "jobs.cli", "-q", "rebuild", "--source", source,
                    "--output", str(work / "tables")],
        "no_history": [sys.executable, "-m", "jobs.cli", "-q", "rebuild", "--source", source,
                       "--output", str(work / "tables-no-history"), "--no-history"],
    }
    if master is not None:
        submit = _spark_submit(master)
        commands["floor"] = [*submit, str(HERE / "bench_floor.py"), str(dump)]
        entry = str(HERE.parent / "__main__.py")
        commands["spark_rebuild"] = [*submit, entry, "--source", source, "--output", str(work / "tables-spark")]
        commands["spark_no_history"] = [*submit, entry, "--source", source,
                                        "--output", str(work / "tables-spark-no-history"), "--no-history"]
    if peer_python is not None:
        commands["peer"] = [str(peer_python), "-I", str(HERE / "bench_peer.py"), str(dump)]
    archive = _with_jvm_archive(commands["no_history"])
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    peaks: dict[str, list[int]] = {name: [] for name in commands if "rebuild" in name or "history" in name}
    outputs: dict[str, str] = {}
    for round_ in range(repeat):
        for name, command in commands.items():
            log.info("round %d/%d: %s", round_ + 1, repeat, name)
            took, outputs[name] = _timed(command)
            seconds[name].append(took)
            if name in peaks:  # every round's: a jump in one round must not hide behind a median
                peaks[name].append(_peak_mb(json.loads(outputs[name].strip().splitlines()[-1])))
    median = {name: round(statistics.median(s), 2) for name, s in seconds.items()}

    def vs_floor(name: str) -> float:
        """The median of each round's ratio to the floor run just before it (paired, as farm-bench pairs: a
        machine that drifts between rounds moves both runs of a pair, where a ratio of medians compares runs
        minutes apart)."""
        return round(statistics.median(t / f for t, f in zip(seconds[name], seconds["floor"])), 2)

    summary = json.loads(outputs["rebuild"].strip().splitlines()[-1])
    result: dict[str, Any] = {
        "records": summary["records_read"],
        "rebuild_seconds": median["rebuild"],
        "no_history_seconds": median["no_history"],
        "floor_seconds": median["floor"],
        "peer_seconds": median.get("peer"),
        "rebuild_vs_floor": vs_floor("rebuild"),
        "no_history_vs_floor": vs_floor("no_history"),
        "peer_vs_rebuild": round(median["peer"] / median["rebuild"], 2) if "peer" in median else None,
        "peer_vs_no_history": round(median["peer"] / median["no_history"], 2) if "peer" in median else None,
        **{k: summary.get(k) for k in ("runner", "spark_jobs", "spark_stages", "spark_tasks")},
        # Per round, the largest process of the run: the driver, a worker, or a local JVM.
        "peak_mb_rebuild": peaks["rebuild"],
        "peak_mb_no_history": peaks["no_history"],
        "groups": summary["groups"],
        "committed_offsets": summary["committed_offsets"],
        "rounds": repeat,
        "source": source,
        "dump": str(dump),
        "dump_mb": round(sum(p.stat().st_size for p in Path(dump).rglob("*.parquet")) / 2**20, 1),
        "jvm_archive": str(archive) if archive else None,
    }
    if master is not None:
        spark_summary = json.loads(outputs["spark_rebuild"].strip().splitlines()[-1])
        result.update({
            "master": master,
            "spark_rebuild_seconds": median["spark_rebuild"],
            "spark_no_history_seconds": median["spark_no_history"],
            "spark_rebuild_vs_floor": vs_floor("spark_rebuild"),
            "spark_no_history_vs_floor": vs_floor("spark_no_history"),
            "spark_runner": spark_summary.get("runner"),
            "spark_stages": spark_summary.get("spark_stages"),
            "peak_mb_spark_rebuild": peaks["spark_rebuild"],
            "peak_mb_spark_no_history": peaks["spark_no_history"],
        })
    if peer_note:
        result["peer_note"] = peer_note
    else:
        result["peer_keys"] = json.loads(outputs["peer"].strip().splitlines()[-1])["keys"]
    return result


def _spark_submit(master: str) -> list[str]:
    """pyspark's own spark-submit on `master`, its Python workers this interpreter (the one with offsetlake's
    dependencies); the driver's memory as conf/offsetlake.toml gives a local session."""
    import pyspark

    from jobs.config import defaults

    home = Path(pyspark.__file__).resolve().parent
    return [str(home / "bin" / "spark-submit"), "--master", master,
            "--driver-memory", defaults()["spark"].get("spark.driver.memory", "2g"),
            "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.showConsoleProgress=false"]


def _peak_mb(summary: dict[str, Any]) -> int:
    """The largest peak memory a run reports (its driver, its largest worker, its local JVM)."""
    return max(summary.get(k) or 0 for k in ("driver_python_peak_mb", "worker_peak_mb", "driver_jvm_peak_mb"))


def _with_jvm_archive(command: list[str]) -> Path | None:
    """This machine's JVM class archive (jobs.runtime.jvm_archive), recorded first by an untimed run of `command` when
    there is none: otherwise the first timed rebuild would record it, and the JVM writing it as it exits would
    slow the process timed after it."""
    from jobs.config import defaults
    from jobs.runtime.jvm_archive import enabled, wait_for_archive

    if not enabled():
        return None
    settings = defaults()["spark"]
    archive = wait_for_archive(settings, 0)
    if archive is None:
        log.info("recording the JVM's class archive (once per machine): an untimed rebuild")
        _timed(command)
        archive = wait_for_archive(settings, ARCHIVE_WAIT_SECONDS)
    return archive


def _timed(command: list[str]) -> tuple[float, str]:
    """Wall seconds of a whole process, and its stdout; a failure stops the bench with its stderr."""
    took, _, out = _timed_cpu(command)
    return took, out


def _timed_cpu(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds of a whole process, the CPU seconds of it and the processes it waited for (its workers: on a
    machine others share, what a run cost more than how long it waited), and its stdout; a failure stops the
    bench with its stderr."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        name = next((Path(c).name for c in command if c.endswith(".py")), Path(command[1]).name)
        raise RuntimeError(f"bench: {name} failed with status {done.returncode}: {tail}")
    return took, cpu, done.stdout


def _peer_python(work: Path) -> tuple[Path | None, str | None]:
    """The peer's interpreter, in WORK/peer-venv (made once, from PyPI); None and why when it cannot be."""
    home = work / "peer-venv"
    python = home / "bin" / "python"
    marker = home / "installed"
    if marker.exists():
        return python, None
    shutil.rmtree(home, ignore_errors=True)
    try:
        venv.create(home, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PEER, "pyarrow"],
                       check=True, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        note = f"peer skipped: could not install {PEER}: {detail.strip().splitlines()[-1] if detail.strip() else e}"
        log.warning("%s", note)
        return None, note
    marker.touch()
    return python, None


# The tables a --no-history run leaves that describe the state at as_of (the incremental bench compares them).
STATE_TABLES = ("committed_offsets", "expired_offsets", "consumer_groups", "group_members",
                "group_target_assignments", "streams_topologies", "consumer_lag", "pending_transactions",
                "quarantine", "share_partition_state")
# With the history, every table of the contract (end_offsets_history: empty, the bench gives no end offsets).
EVERY_TABLE = (*STATE_TABLES, "offset_commits", "group_events", "group_status", "end_offsets_history")


def _bench_dump(records: int, dump: Path | None, work: Path) -> Path:
    """The dump to bench (`dump`, or one of `records` generated once under `work`), checked."""
    if dump is None:
        dump = work / f"dump-{records}"
        if not any(dump.glob("*.parquet")):
            log.info("generating a %d-record dump in %s", records, dump)
            write_sample(dump, records, seed=7)
    dump = dump.resolve()
    check_source(SourceSpec("parquet", str(dump)))
    return dump


def _split(dump: Path, fraction: float, days: int, older: Path, newer: list[Path]) -> dict[str, int]:
    """split_days in a process of its own: a child inherits this process's peak memory (Linux keeps it across fork
    and exec), so the split's would be every run's peak_mb."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(split_days, dump, fraction, days, older, newer).result()


def _rebuild(source: Path, output: Path, history: bool, *options: str) -> list[str]:
    return [sys.executable, "-m", "jobs.cli", "-q", "rebuild", "--source", f"parquet:{source}",
            "--output", str(output), *([] if history else ["--no-history"]), *options]


def run_incremental(records: int, dump: Path | None, work: Path, fraction: float, repeat: int = 1,
                    history: bool = False) -> dict[str, Any]:
    """Time a full rebuild of the dump against an `--archive` run of its newest `fraction` of each partition's
    records, resuming from an untimed run of the rest, both with the history or both `--no-history`; compare
    their tables (with the history, every one). Each round's resumed run starts from a fresh copy of the first
    run's output."""
    work = work.resolve()
    dump = _bench_dump(records, dump, work)
    older, newer = work / f"{dump.name}-older", work / f"{dump.name}-newest-{fraction}"
    split = _split(dump, fraction, 1, older, [newer])
    counts = {"older": split["older"], "newer": split["day1"]}

    def rebuild(source: Path, output: Path, *options: str) -> list[str]:
        return _rebuild(source, output, history, *options)

    first = work / "incremental-first"
    shutil.rmtree(first, ignore_errors=True)
    log.info("the first run, untimed: %d records", counts["older"])
    _timed(rebuild(older, first, "--archive"))
    full, resumed = work / "incremental-full", work / "incremental-resumed"
    seconds: dict[str, list[float]] = {"full": [], "incremental": []}
    cpu: dict[str, list[float]] = {"full": [], "incremental": []}
    summaries: dict[str, Any] = {}
    for round_ in range(repeat):
        log.info("round %d/%d: full", round_ + 1, repeat)
        took, used, out = _timed_cpu(rebuild(dump, full))
        seconds["full"].append(took)
        cpu["full"].append(used)
        summaries["full"] = json.loads(out.strip().splitlines()[-1])
        shutil.rmtree(resumed, ignore_errors=True)
        shutil.copytree(first, resumed)
        log.info("round %d/%d: incremental", round_ + 1, repeat)
        took, used, out = _timed_cpu(rebuild(newer, resumed, "--archive"))
        seconds["incremental"].append(took)
        cpu["incremental"].append(used)
        summaries["incremental"] = json.loads(out.strip().splitlines()[-1])
    median = {name: round(statistics.median(s), 2) for name, s in seconds.items()}
    median_cpu = {name: round(statistics.median(s), 2) for name, s in cpu.items()}
    second = summaries["incremental"]
    differ = _differ(full, resumed, EVERY_TABLE if history else STATE_TABLES)
    return {
        "history": history,
        "records": counts["older"] + counts["newer"],
        "records_second_run": second["records_read"],
        "full_seconds": median["full"],
        "incremental_seconds": median["incremental"],
        "incremental_vs_full": round(median["incremental"] / median["full"], 3),
        "full_cpu_seconds": median_cpu["full"],
        "incremental_cpu_seconds": median_cpu["incremental"],
        "incremental_vs_full_cpu": round(median_cpu["incremental"] / median_cpu["full"], 3),
        "incremental_equal": not differ,
        **({"incremental_differ": differ} if differ else {}),
        "resumed_from_run": second.get("resumed_from_run"),
        "whole_replay_reason": second.get("whole_replay_reason"),
        "as_of": [summaries["full"]["as_of"], second["as_of"]],
        "committed_offsets": summaries["full"]["committed_offsets"],
        "peak_mb_full": _peak_mb(summaries["full"]),
        "peak_mb_incremental": _peak_mb(second),
        "rounds": repeat,
        "dump": str(dump),
    }


def run_daily(records: int, dump: Path | None, work: Path, fraction: float, days: int, repeat: int = 1,
              history: bool = True, history_days: int | None = None) -> dict[str, Any]:
    """Time `days` daily runs into one output: the dump split by offset into its older records and `days` slices
    of each partition's next `fraction` of records (the newest last); an untimed `--archive` run of the older
    records, then one timed `--archive` run per slice, each resuming from the one before, as a daily scheduled run
    does. `repeat` times (each from a fresh output), each run's figure the median. Then one full rebuild of the
    whole dump, timed once, whose tables the last run's must equal. With the history, what offset_commits holds
    after each run (of the last round; `history_days`: every run, the full one too, with --history-days)."""
    work = work.resolve()
    dump = _bench_dump(records, dump, work)
    older = work / f"{dump.name}-daily-older"
    slices = [work / f"{dump.name}-daily-{fraction}-{day:03d}" for day in range(1, days + 1)]
    counts = _split(dump, fraction, days, older, slices)
    kept = ["--history-days", str(history_days)] if history_days else []
    output = work / "daily"
    seconds: list[list[float]] = [[] for _ in slices]
    cpu: list[list[float]] = [[] for _ in slices]
    summaries: list[dict[str, Any]] = []
    for round_ in range(repeat):
        shutil.rmtree(output, ignore_errors=True)
        log.info("round %d/%d: the first run, untimed: %d records", round_ + 1, repeat, counts["older"])
        _timed(_rebuild(older, output, history, "--archive", *kept))
        summaries, held, grown = [], [], []
        for day, source in enumerate(slices):
            took, used, out = _timed_cpu(_rebuild(source, output, history, "--archive", *kept))
            seconds[day].append(took)
            cpu[day].append(used)
            summaries.append(json.loads(out.strip().splitlines()[-1]))
            grown.append(_grown(output))
            if history:
                held.append(_offset_commits_held(output))
            log.info("round %d/%d: day %d: %.2f s", round_ + 1, repeat, day + 1, took)
    full = work / "daily-full"
    shutil.rmtree(full, ignore_errors=True)
    full_seconds, full_cpu, _ = _timed_cpu(_rebuild(dump, full, history, *kept))
    median = [round(statistics.median(s), 2) for s in seconds]
    median_cpu = [round(statistics.median(s), 2) for s in cpu]
    differ = _differ(full, output, EVERY_TABLE if history else STATE_TABLES)
    return {
        "history": history,
        "records": counts["older"] + sum(counts[f"day{d}"] for d in range(1, days + 1)),
        "records_first_run": counts["older"],
        "records_per_day": [counts[f"day{d}"] for d in range(1, days + 1)],
        "day_seconds": median,
        "last_vs_second": round(median[-1] / median[1], 3) if days > 1 else None,
        "day_cpu_seconds": median_cpu,
        "last_vs_second_cpu": round(median_cpu[-1] / median_cpu[1], 3) if days > 1 else None,
        "full_seconds": round(full_seconds, 2),
        "full_cpu_seconds": round(full_cpu, 2),
        "last_vs_full": round(median[-1] / full_seconds, 3),
        "resumed": sum(1 for s in summaries if s.get("resumed_from_run")),
        "whole_replay_reasons": sorted({s["whole_replay_reason"] for s in summaries if s.get("whole_replay_reason")}),
        "daily_equal": not differ,
        **({"daily_differ": differ} if differ else {}),
        **({"history_days": history_days, **{f"offset_commits_{k}_per_day": [h[k] for h in held]
                                            for k in ("rows", "files", "dates")}} if history else {}),
        **{f"{k}_per_day": [g[k] for g in grown] for k in ("replay_state_rows", "raw_records_files")},
        "peak_mb_last": _peak_mb(summaries[-1]),
        "rounds": repeat,
        "dump": str(dump),
    }


def _grown(output: Path) -> dict[str, int]:
    """What a daily run leaves that could grow with the days: the replay state's rows and raw_records' data files
    (from the Delta log, no data file read)."""
    from jobs.lake.runs import add_actions, delta_table, table_rows

    return {"replay_state_rows": table_rows(delta_table(output / "_replay_state")),
            "raw_records_files": add_actions(delta_table(output / "raw_records")).num_rows}


def _offset_commits_held(output: Path) -> dict[str, int]:
    """The rows, data files and commit_date folders of offset_commits' newest version under `output` (from the
    Delta log, no data file read)."""
    import pyarrow.compute as pc

    from jobs.lake.runs import add_actions, delta_table, table_rows

    table = delta_table(output / "offset_commits")
    adds = add_actions(table)
    return {"rows": table_rows(table), "files": adds.num_rows,
            "dates": len(pc.unique(adds.column("partition.commit_date")))}


def _differ(one: Path, other: Path, tables: tuple[str, ...]) -> list[str]:
    """The `tables` whose rows differ between two outputs' newest complete runs. A table with a coordinator
    partition is compared a partition at a time (a 100M-record offset_commits whole, twice, would not fit)."""
    import pyarrow.compute as pc

    from jobs.lake.runs import snapshot

    differ = []
    for table in tables:
        data = [_dataset(snapshot(output, [table]), table) for output in (one, other)]
        if any(d is None for d in data):
            if not _same_rows(*(d.to_table() if d is not None else None for d in data)):
                differ.append(table)
            continue
        if data[0].schema != data[1].schema:
            differ.append(table)
            continue
        column = "coordinator_partition" if "coordinator_partition" in data[0].schema.names else None
        if column is None:
            pieces = [None]
        else:
            pieces = sorted({p for d in data for p in pc.unique(d.to_table(columns=[column]).column(0)).to_pylist()},
                            key=lambda p: (p is None, p or 0))
        for piece in pieces:
            where = None if column is None else (pc.field(column).is_null() if piece is None
                                                 else pc.field(column) == piece)
            if not _same_rows(*(d.to_table(filter=where) for d in data)):
                differ.append(table)
                break
    return differ


def _dataset(tables: Any, table: str) -> Any:
    """A table of a run's snapshot as a pyarrow dataset (None: the run has none)."""
    return tables.open(table).to_pyarrow_dataset() if table in tables.versions else None


def _same_rows(one: Any, other: Any) -> bool:
    """Two Arrow tables hold the same rows, in any order (sorted by every column that sorts, then compared whole:
    a history table has millions of rows, too many to compare as Python objects)."""
    if one is None or other is None:
        return (one is None or not one.num_rows) and (other is None or not other.num_rows)
    if one.schema != other.schema or one.num_rows != other.num_rows:
        return False
    import pyarrow as pa

    keys = [(f.name, "ascending") for f in one.schema if not pa.types.is_nested(f.type)]
    return one.sort_by(keys).equals(other.sort_by(keys))


# split_days' row groups: the older records' as the dump's own (a Spark dump's), the newer few records' small
# enough to spread over a few tasks.
SPLIT_ROW_GROUPS = {"older": 200_000, "newer": 1 << 14}


def split_dump(dump: Path, fraction: float, older: Path, newer: Path) -> dict[str, int]:
    """`split_days` of one day: each (topic, partition)'s newest `fraction` of records in `newer`."""
    counts = split_days(dump, fraction, 1, older, [newer])
    return {"older": counts["older"], "newer": counts["day1"]}


def split_days(dump: Path, fraction: float, days: int, older: Path, newer: list[Path]) -> dict[str, int]:
    """Write `dump`'s records as 1 + `days` dumps: of each (topic, partition)'s records (by offset), the newest
    `days` slices of `fraction` each (at least one record a slice) in `newer` (the newest last), the others in
    `older`; read batch by batch (a 20M-record dump: its offsets, not its records, held). Returns the records
    of each (older, day1, ...)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from jobs.base.arrow import run_starts

    data = pads.dataset(str(dump), format="parquet", partitioning="hive")
    topics: dict[str, int] = {}

    def where(table: Any) -> np.ndarray:
        """Per record: its (topic, partition) as one number."""
        partition = pc.fill_null(table.column("partition"), -1).to_numpy().astype(np.int64)
        if "topic" not in table.column_names:
            return partition
        names = pc.fill_null(table.column("topic"), "").to_numpy(zero_copy_only=False)
        codes = np.array([topics.setdefault(t, len(topics)) for t in np.unique(names)], np.int64)
        return codes[np.searchsorted(np.unique(names), names)] << 32 | (partition & 0xFFFFFFFF)

    placed = data.to_table(columns=["partition", "offset", *(["topic"] if "topic" in data.schema.names else [])])
    key, offset = where(placed), placed.column("offset").to_numpy().astype(np.int64)
    order = np.lexsort((offset, key))
    key, offset = key[order], offset[order]
    starts = run_starts(key)
    sizes = np.diff(np.append(starts, len(key)))
    keys = key[starts]  # sorted
    take = np.maximum(1, np.round(sizes * fraction)).astype(np.int64)  # a slice's records, per key
    # Per day (1 to days) and key: the first offset of its slice (the older records are below day 1's).
    cuts = np.stack([offset[starts + np.maximum(sizes - take * (days - d), 0)] for d in range(days)])
    del placed, key, offset, order
    sides = ["older", *(f"day{d}" for d in range(1, days + 1))]
    folders = dict(zip(sides, [older, *newer]))
    counts = {side: 0 for side in sides}
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    writers = {side: pq.ParquetWriter(str(folder / "part-00000.parquet"), data.schema)
               for side, folder in folders.items()}
    held: dict[str, list[pa.Table]] = {side: [] for side in sides}  # written in row groups of SPLIT_ROW_GROUPS

    def write(side: str, least: int) -> None:
        if sum(t.num_rows for t in held[side]) >= max(least, 1):
            writers[side].write_table(pa.concat_tables(held[side]))
            held[side] = []

    try:
        for batch in data.to_batches():
            table = pa.Table.from_batches([batch], data.schema)
            at = np.minimum(np.searchsorted(keys, where(table)), len(keys) - 1)
            at_offset = table.column("offset").to_numpy().astype(np.int64)
            day = (at_offset[None, :] >= cuts[:, at]).sum(axis=0)  # 0: older
            for number, side in enumerate(sides):
                part = table.filter(pa.array(day == number))
                held[side].append(part)
                counts[side] += part.num_rows
                write(side, SPLIT_ROW_GROUPS["older" if number == 0 else "newer"])
        for side in held:
            write(side, 0)
    finally:
        for writer in writers.values():
            writer.close()
    return counts
