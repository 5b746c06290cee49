"""Runs: which version of each table belongs to which rebuild, so readers see one run's tables whole.

Each table is replaced in its own Delta commit, so a run killed between two commits would leave some tables
new and some old. Runs make the set atomic:

* Writing (jobs/lake/sink.py): every table commit carries the run's id, as commit metadata `offsetlake.run_id`
  (Spark's Delta writer can only set `userMetadata`, which then reads `offsetlake.run_id=<id>`). After the
  last table, one row is appended to the Delta table `DIR/_runs`: run_id, as_of, finished_at, source,
  delta_engine and the version of every table. That append is the run's commit point.
* Reading (`snapshot`): the newest complete run (greatest finished_at in `_runs`) gives each table's
  version. A table that run did not record (written before `_runs` existed, or only by a run that never
  finished) is read at its newest version not written by an unfinished run.

`_runs` is always written and read with delta-rs (it reads any Delta table, also those Spark wrote).
"""
from __future__ import annotations

import errno
import json
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, TypeVar
from urllib.parse import unquote

import pyarrow as pa

from jobs.base.arrow import TIMESTAMP, utc
from jobs.base.retention import CUT_BY
from jobs.base.storage import Location, located, os_cause, os_detail
from jobs.base.tables import utc_micros

RUNS_TABLE = "_runs"
LOCK_TABLE = "_offsetlake_lock"  # jobs.lake.output_lock: not a table of the runs
RUN_ID_KEY = "offsetlake.run_id"
RUNS_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("as_of", TIMESTAMP),
    ("finished_at", TIMESTAMP),
    ("source", pa.string()),
    ("delta_engine", pa.string()),
    ("tables", pa.list_(pa.struct([("table", pa.string()), ("version", pa.int64())]))),
    # What `offsetlake metrics` reports of the run itself (null in rows of runs before them).
    ("cluster", pa.string()),
    ("started_at", TIMESTAMP),
    ("records_read", pa.int64()),
    ("records_quarantined", pa.int64()),
    # The version of _runs this row was committed at: the order runs were recorded in, which decides the newest
    # (finished_at is a clock's, and the hosts' clocks may disagree). Null in rows of runs before it.
    ("recorded_version", pa.int64()),
    # From when the history tables are whole (rebuild --history-days: jobs.base.retention.history_from); null:
    # every day the output has seen.
    ("history_from", TIMESTAMP),
])
RUN_INFO = ("cluster", "started_at", "records_read", "records_quarantined", "history_from")  # record_run's `info`
# _runs gains one small file per run; past this many it is compacted, so readers open few files (a run reads it
# three or four times: at 64 files, those reads cost a daily run a tenth more than at 8).
RUNS_FILES_BEFORE_COMPACTION = 8
# Every committed version stays readable: delta-rs would otherwise delete log entries older than 30 days at its
# checkpoints, and the versions they hold. Old versions go only with rebuild --keep-runs (`keep_runs`). A
# checkpoint every 10 commits (not 100): a daily run opens each table reading at most 10 commits of its log, so
# a year of runs costs no more to open than a week (docs/performance.md).
TABLE_PROPERTIES = {"delta.enableExpiredLogCleanup": "false", "delta.checkpointInterval": "10"}
# How far back a run looks for its own commit in a table's history (other writers may have committed since).
OWN_COMMIT_LOOKBACK = 16
# A takeover's empty commit to a table (jobs.lake.output_lock.fence): it changes no data, so a table's newest
# data commit may lie below it.
FENCE_KEY = "offsetlake.fence"
T = TypeVar("T")


def new_run_id() -> str:
    return uuid.uuid4().hex


def commit_metadata(run_id: str) -> dict[str, str]:
    """delta-rs custom commit metadata that tags a table commit with its run."""
    return {RUN_ID_KEY: run_id}


def spark_user_metadata(run_id: str) -> str:
    """The same tag as Spark's Delta writer can set it (option `userMetadata`)."""
    return f"{RUN_ID_KEY}={run_id}"


def run_id_of(commit: dict[str, Any]) -> str | None:
    """The run that wrote a commit (an entry of DeltaTable.history()), None when it carries no tag."""
    if RUN_ID_KEY in commit:
        return str(commit[RUN_ID_KEY])
    prefix = f"{RUN_ID_KEY}="
    user = commit.get("userMetadata")
    return user[len(prefix):] if isinstance(user, str) and user.startswith(prefix) else None


def is_fence(commit: dict[str, Any]) -> bool:
    return FENCE_KEY in commit


def fenced_commit(target: Location, commit: Callable[[Any], T], guard: Callable[[], None] | None) -> T:
    """Commit to the table at `target` only while this run holds the output: open the table, `guard()` (the
    lock's check: LockLost once another run took the output over), then `commit(table)`, which must commit
    exactly the version opened plus one (no commit retry), or create the table when it is None (failing when it
    exists). A takeover between the check and the commit fences that version, or creates a staged table
    (jobs.lake.output_lock.fence), so the commit fails, and the check after it ends the run; another writer's
    commit (a user's OPTIMIZE) is simply retried."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    for _ in range(5):
        table = delta_table(target) if is_table(target) else None
        if guard is not None:
            guard()
        try:
            return commit(table)
        except CommitFailedError:
            continue
        except DeltaError as e:
            if table is None and "already exists" in str(e).lower():
                continue
            raise
    if guard is not None:
        guard()
    raise RuntimeError(f"{target}: other writers kept committing to this table; try again")


def delta_table(where: Location | str, version: int | None = None) -> Any:
    """The Delta table at `where` (a deltalake.DeltaTable), at `version` (default: its newest)."""
    from deltalake import DeltaTable

    where = located(where)
    return DeltaTable(where.delta_uri, version=version, storage_options=where.storage_options)


def add_actions(table: Any, flatten: bool = True) -> pa.Table:
    """The add actions of `table` (a deltalake.DeltaTable) at its version, one row per data file (path, size_bytes,
    num_records, partition.<column> when `flatten`). Read as a stream: pa.table() of delta-rs's table imports
    pandas first, where nothing else of a run does."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=flatten)).read_all()


def table_rows(table: Any) -> int:
    """`table`'s rows at its version (a deltalake.DeltaTable), from its files' statistics: no data file read."""
    import pyarrow.compute as pc

    return int(pc.sum(add_actions(table).column("num_records")).as_py() or 0)


def version_files(where: Location, table: Any) -> list[tuple[Location, dict[str, str]]]:
    """The data files of `table` (a deltalake.DeltaTable at `where`, at its version) with their partition values
    as strings (the add actions' paths are URL-encoded and relative to the table)."""
    adds = add_actions(table).to_pylist()
    return [(where.child(*unquote(a["path"]).split("/")),
             {k.removeprefix("partition."): str(v) for k, v in a.items() if k.startswith("partition.")})
            for a in adds]


def is_table(where: Location) -> bool:
    return where.child("_delta_log").is_dir()


def committed_version(path: Location | str, run_id: str) -> int:
    """The version of the table at `path` that run `run_id` just committed."""
    for commit in delta_table(path).history(OWN_COMMIT_LOOKBACK):
        if run_id_of(commit) == run_id:
            return int(commit["version"])
    raise RuntimeError(f"{path}: no commit of run {run_id} among its last {OWN_COMMIT_LOOKBACK}")


def record_run(output: Location | str, run_id: str, versions: dict[str, int], as_of: datetime | None,
               source: str | None, engine: str, info: dict[str, Any] | None = None,
               guard: Callable[[], None] | None = None) -> None:
    """Append the run's row to DIR/_runs: the commit point after which readers see this run's tables. `info`: the
    columns of RUN_INFO (the cluster's name, when the run started, its records); `guard`: the lock's check (a run
    that lost its output records nothing)."""
    from deltalake import write_deltalake
    from deltalake.transaction import CommitProperties

    def row(version: int) -> pa.Table:
        return pa.table({
            "run_id": [run_id],
            "as_of": [utc(as_of)],
            "finished_at": [datetime.now(timezone.utc)],
            "source": [source],
            "delta_engine": [engine],
            "tables": [[{"table": t, "version": v} for t, v in versions.items()]],
            **{name: [(info or {}).get(name)] for name in RUN_INFO},
            "recorded_version": [version],
        }, schema=RUNS_SCHEMA)

    path = located(output).child(RUNS_TABLE)
    once = CommitProperties(custom_metadata=commit_metadata(run_id), max_commit_retries=0)

    def commit(runs: Any) -> None:  # without retries, the commit lands at the version read plus one, or fails
        if runs is None:
            write_deltalake(path.delta_uri, row(0), mode="error", configuration=TABLE_PROPERTIES,
                            storage_options=path.storage_options, commit_properties=once)
        else:
            write_deltalake(runs, row(runs.version() + 1), mode="append", schema_mode="merge",
                            commit_properties=once)

    fenced_commit(path, commit, guard)
    runs = delta_table(path)
    if len(runs.file_uris()) > RUNS_FILES_BEFORE_COMPACTION:
        if guard is not None:
            guard()
        runs.optimize.compact()  # its own commit, after the commit point: a failure here loses nothing


# What the storage says when it cannot take a run's writes: the disk is full, the quota reached, the folder
# read-only or no longer writable.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


@contextmanager
def storage_failures(output: Location, run_id: str) -> Iterator[None]:
    """Run `run_id`'s failure because the storage under `output` refused its writes (STORAGE_ERRNOS, as the
    operating system or delta-rs report them) as RunFailed: one line that names the cause and says whether the
    run was recorded, where it would be an internal error's."""
    from jobs.base.errors import BadInput, RunFailed

    try:
        yield
    except (BadInput, RunFailed):
        raise
    except Exception as e:
        cause = os_cause(e)
        if cause is None or cause not in {os.strerror(n) for n in STORAGE_ERRNOS}:
            raise
        try:
            recorded = any(r["run_id"] == run_id for r in finished_runs(output))
            after = (", after this run was recorded: readers see its tables" if recorded else
                     ": this run recorded nothing (readers see the tables as they were), and the next run cleans "
                     "up after it")
        except Exception:  # noqa: BLE001 - the cause is still worth its line
            after = ""
        raise RunFailed(f"--output {output}: {cause} ({os_detail(e, cause)}){after}") from e


@dataclass(frozen=True)
class Snapshot:
    """The tables as readers should see them: each existing table's Delta version, and the run they form (an
    EarlierRun, jobs.base.earlier, to a rebuild that reads it back)."""

    output: Location
    versions: dict[str, int]
    run: dict[str, Any] | None = None  # the _runs row; None when no run was ever recorded here
    # Tables the newest run did not write (--no-history skips the history tables), read as the newest earlier
    # complete run wrote them: that run's _runs row, for readers to say so.
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)

    def label(self, table: str) -> str | None:
        """Where a table the newest run did not write comes from, in words; None for the newest run's own."""
        run = self.earlier.get(table)
        if run is None or self.run is None:
            return None
        return (f"{table} is as of {_iso(run['as_of'])} (run {run['run_id']}): the newest run, as of "
                f"{_iso(self.run['as_of'])}, did not write it (--no-history)")

    def history_note(self, table: str) -> str | None:
        """That the run's `table` holds the history from a moment on only (rebuild --history-days), in words; None
        when it is whole, or not a table a cutoff applies to."""
        start = (self.run or {}).get("history_from")
        if start is None or table not in CUT_BY:
            return None
        return f"{table}: history kept from {_iso(start)} (rebuild --history-days)"

    @property
    def recorded(self) -> dict[str, int]:
        """The tables the run recorded, with their versions (none when no run was recorded)."""
        return {t["table"]: t["version"] for t in self.run["tables"]} if self.run else {}

    def open(self, table: str, version: int | None = None) -> Any:
        """The table at `version`, default its version here (a deltalake.DeltaTable); KeyError when it is not
        there."""
        return delta_table(self.path(table), self.versions[table] if version is None else version)

    def files(self, table: str, version: int | None = None, opened: Any = None
              ) -> list[tuple[Location, dict[str, str]]]:
        """The data files of `open(table, version)` (`opened`: that table, opened already), with their partition
        values."""
        return version_files(self.path(table), opened if opened is not None else self.open(table, version))

    def path(self, table: str) -> Location:
        return self.output.child(*table.split("/"))


def existing_output(text: str, storage: dict[str, str] | None = None) -> Location:
    """The --output of a reading command: a folder that exists (a URI's store is asked once)."""
    from jobs.base.errors import BadInput

    output = Location.parse(text, storage)
    output.check_delta_path(f"--output {text}")
    if not output.local:
        output.check_reachable("--output", text)
    if not output.exists():
        raise BadInput(f"--output {text}: no such directory")
    if not output.is_dir():
        raise BadInput(f"--output {text}: not a directory")
    return output


def snapshot(output: Location | str, tables: Iterable[str]) -> Snapshot:
    """Which version of each of `tables` to read under `output`: those of the newest complete run."""
    output = located(output)
    runs = finished_runs(output)
    newest = runs[-1] if runs else None  # finished_runs: in the order they were recorded
    recorded = {t["table"]: t["version"] for t in newest["tables"]} if newest else {}
    finished = {r["run_id"] for r in runs}
    versions, earlier = {}, {}
    for table in tables:
        where = output.child(*table.split("/"))
        if not is_table(where):
            continue
        if table in recorded:
            version = recorded[table]
        else:  # the newest earlier run that wrote it, else (written before _runs existed) its newest version
            wrote = next((r for r in reversed(runs) if any(t["table"] == table for t in r["tables"])), None)
            if wrote is not None:
                earlier[table] = wrote
                version = next(t["version"] for t in wrote["tables"] if t["table"] == table)
            else:
                version = _newest_finished_version(delta_table(where), finished)
        if version is not None:
            versions[table] = version
    return Snapshot(output, versions, newest, earlier)


def _iso(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def finished_runs(output: Location | str) -> list[dict[str, Any]]:
    """Every run recorded in DIR/_runs (each one complete: the row is written last), oldest first; times are
    naive UTC."""
    from deltalake import QueryBuilder

    path = located(output).child(RUNS_TABLE)
    if not is_table(path):
        return []
    # Read with delta-rs's own engine, times as naive UTC: pyarrow.dataset, or pandas for zone-aware times,
    # take longer to import than `offsetlake sql` takes to answer.
    found = QueryBuilder().register("runs", delta_table(path)).execute("SELECT * FROM runs")
    table = pa.RecordBatchReader.from_stream(found).read_all()
    table = table.cast(pa.schema([f.with_type(utc_micros(f.type, tz=None)) for f in table.schema]))
    return sorted(table.to_pylist(), key=recorded_order)


def recorded_order(run: dict[str, Any]) -> tuple:
    """The sort key of _runs rows in the order they were recorded: rows of earlier releases (no
    recorded_version, always before the others) by finished_at."""
    version = run.get("recorded_version")
    return (version is not None, version if version is not None else 0, run["finished_at"])


def _newest_finished_version(table: Any, finished: set[str]) -> int | None:
    """The newest version of `table` (a DeltaTable) not written by an unfinished run; None when every version
    was."""
    def ok(commit: dict[str, Any]) -> bool:
        run_id = run_id_of(commit)
        return run_id is None or run_id in finished

    newest = table.history(1)[0]
    if ok(newest) and not is_fence(newest):  # the usual case: one commit read, not the whole log
        return table.version()
    # A fence holds the data of the commit below it: the newest data commit decides.
    data = [c for c in table.history() if not is_fence(c)]
    return next((int(c["version"]) for c in data if ok(c)), None)


def committed_by(path: Location, run_id: str) -> bool:
    """Run `run_id` committed a version of the table at `path` (its whole history is read: only for runs that
    never finished, which are rare)."""
    return any(run_id_of(c) == run_id for c in delta_table(path).history())


def table_folders(output: Location | str) -> list[Location]:
    """Every Delta table under `output`: the tables, the snapshot tables and _runs (not the lock)."""
    from jobs.base.tables import SNAPSHOTS

    output = located(output)
    return [p for p in [*output.children(), *output.child(SNAPSHOTS).children()]
            if p.name != LOCK_TABLE and is_table(p)]


def unreferenced_files(output: Location | str) -> list[str]:
    """Data files in the tables' folders that no version of their table references (a dead run's leftovers,
    which the next run's recovery removes): for checks, it opens every version."""
    output = located(output)
    found = []
    for path in table_folders(output):
        newest = delta_table(path).version()
        referenced = {unquote(file) for version in range(newest + 1)
                      for file in add_actions(delta_table(path, version), False).column("path").to_pylist()}
        for file in path.files():
            name = relative_path(path, file)
            if not name.startswith("_delta_log/") and unquote(name) not in referenced:
                found.append(f"{name_in(output, path)}/{name}")
    return found


def relative_path(root: Location, file: Location) -> str:
    return file.path[len(root.path):].strip("/")


def name_in(output: Location, table: Location) -> str:
    """A table's name under `output`: `committed_offsets`, `snapshots/committed_offsets`."""
    return table.path[len(output.path):].strip("/")


def restore_unfinished(output: Location, guard: Callable[[], None] | None = None) -> list[str]:
    """Tables whose newest version was committed by a run that never recorded itself (it died between its
    commits), restored to their newest version of a complete run, so that a plain Delta reader, which reads
    each table's newest version, sees one whole run again; each restore a fenced commit (`guard`: the lock's
    check). Returns their names."""
    from deltalake.transaction import CommitProperties

    finished = {r["run_id"] for r in finished_runs(output)}
    once = CommitProperties(max_commit_retries=0)

    def restore(table: Any) -> bool:
        if not _by_unfinished(table, finished):
            return False
        version = _newest_finished_version(table, finished)
        if version is not None:
            table.restore(version, commit_properties=once)
        return version is not None

    return [name_in(output, path) for path in table_folders(output)
            if _newest_by_unfinished(path, finished) and fenced_commit(path, restore, guard)]


def _newest_by_unfinished(where: Location, finished: set[str]) -> bool:
    """_by_unfinished, from the newest log entry alone where it tells (every run asks it of every table: the
    table is opened, its log read, only behind a fence or where the entry cannot be read)."""
    commit = _newest_commit(where)
    if commit is None or is_fence(commit):
        return _by_unfinished(delta_table(where), finished)
    newest = run_id_of(commit)
    return newest is not None and newest not in finished


def _newest_commit(where: Location) -> dict[str, Any] | None:
    """The commitInfo of the table's newest log entry, None when it cannot be read."""
    entries = where.child("_delta_log")
    try:
        versions = [int(f.name[:-5]) for f in entries.children() if f.name.endswith(".json") and f.name[:-5].isdigit()]
        if not versions:
            return None
        lines = entries.child(f"{max(versions):020d}.json").read_text().splitlines()
    except OSError:
        return None
    actions = [json.loads(line) for line in lines if line.strip()]
    return next((a["commitInfo"] for a in actions if "commitInfo" in a), None)


def _by_unfinished(table: Any, finished: set[str]) -> bool:
    """The newest data of `table` was committed by a run that never recorded itself (a fence holds the data of
    the commit below it)."""
    commits = table.history(1)
    if commits and is_fence(commits[0]):
        commits = [c for c in table.history() if not is_fence(c)][:1]
    newest = run_id_of(commits[0]) if commits else None
    return newest is not None and newest not in finished


def keep_runs(output: Location | str, runs: int, guard: Callable[[], None] | None = None) -> dict[str, int]:
    """Delete the data files that no version of the last `runs` complete runs references (and no table's newest
    version): the only way old versions go (rebuild --keep-runs). Returns, per table, the files deleted.
    `guard`: the lock's check, before each table (a run that lost its output deletes nothing more)."""
    output = located(output)
    kept = finished_runs(output)[-runs:]
    deleted = {}
    for path in table_folders(output):
        if guard is not None:
            guard()
        name = name_in(output, path)
        versions = sorted({t["version"] for r in kept for t in r["tables"] if t["table"] == name})
        files = delta_table(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False,
                                         keep_versions=versions)
        if files:
            deleted[name] = len(files)
    return deleted
