"""One rebuild at a time per output, fenced: a run that lost its output commits nothing more.

Two rebuilds writing the same tables at once would interleave their commits, and neither's run record would
describe the tables it names. So a rebuild holds DIR/_offsetlake_lock from before it starts any work until its
run is recorded. The lock is a one-row Delta table (who holds it, since when, its lease), and every change of it
is a compare-and-swap: a commit of the version read plus one, with no commit retry (Delta's optimistic
concurrency: of two runs that read the same version, one commits and the other is refused). The version at
which a run took the lock is its epoch, and the holder renews its lease by a heartbeat commit every
lease / RENEWALS_PER_LEASE seconds, retrying storage errors until the lease runs out.

A holder that died (SIGKILL, a lost container) or hangs (a long GC pause, a frozen VM, SIGSTOP) cannot give its
lock up, so another run takes it over once the holder's newest heartbeat is older than the holder's lease; on the
holder's own host at once when its process is gone (pid, process start time, boot id and pid namespace all
compared: a reused pid, a zombie or a restarted container with the same host name is not the holder). A
heartbeat's age is the storage's time of its commit against the taker's clock, so the holder's clock never
counts (docs/robustness.md: clocks and skew).

Taking over is not enough when the holder is alive and merely paused: it may resume and commit at any moment,
after any check it made. So commits are fenced (a fencing token, as Kleppmann's "How to do distributed locking"
describes it, on Delta's own optimistic concurrency): the taker first commits an empty fence commit to every
table of the output, then cleans up (`recover`); a run commits a table only by opening it, then confirming it
still holds the lock (`check`), then committing exactly the version it opened plus one (jobs.lake.runs.
fenced_commit). A paused holder's commit therefore lands before the fence (and `recover`, which runs after the
fences, undoes it as a dead run's) or conflicts with it and fails; its next check ends the run with one line.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Callable

import pyarrow as pa

from jobs.base.arrow import TIMESTAMP
from jobs.base.errors import BadInput, LockLost
from jobs.base.storage import Location, first_line, located, write_parquet
from jobs.lake.runs import FENCE_KEY, LOCK_TABLE, add_actions

log = logging.getLogger("offsetlake")
STAGING_DIR = "_offsetlake_staging"
RUN_FOLDER = "run-"  # a table's files staged by a run: <table>/run-<run id>/...
DEFAULT_LEASE_SECONDS = 300
# Renewals per lease: five in a row may fail (a storage hiccup) before the lease runs out.
RENEWALS_PER_LEASE = 6
LOCK_KEY = "offsetlake.lock"  # commit metadata of a lock commit: the run that made it
FENCED_BY_KEY = "offsetlake.fenced_by"
# The lock's own history is of no use: old log entries go (the tables keep theirs: jobs.lake.runs).
_LOCK_PROPERTIES = {"delta.logRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "20"}
_SCHEMA = pa.schema([("run_id", pa.string()), ("host", pa.string()), ("pid", pa.int64()),
                     ("started_at", TIMESTAMP), ("beat_at", TIMESTAMP),
                     ("boot_id", pa.string()), ("pid_namespace", pa.string()), ("process_start", pa.int64()),
                     ("lease_seconds", pa.float64()), ("epoch", pa.int64())])


class OutputLock:
    """The hold of run `run_id` on `output`; `check()` before every commit; `release()` (or leaving the `with`
    block) gives it up."""

    def __init__(self, output: Location, run_id: str, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        self.output = output
        self.run_id = run_id
        self.lease_seconds = float(lease_seconds)
        self.table = output.child(LOCK_TABLE)
        self.started_at = datetime.now(timezone.utc)
        self.epoch: int | None = None  # the lock table's version at which this run took it
        self.version: int | None = None  # the lock table's version of this run's newest commit
        self.renewed_at = 0.0  # time.monotonic() of the newest renewal
        self.lost: LockLost | None = None  # set once another run took the output over
        self._files: list[str] = []  # the data file of this run's newest lock row
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._mutex = threading.Lock()

    @classmethod
    def acquire(cls, output: Location | str, run_id: str, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                force: bool = False, clean_up: bool = True) -> "OutputLock":
        """Hold `output` for run `run_id`, taking over a lock whose holder is dead or hung (any lock: `force`);
        BadInput naming the holder when a live run holds it. After a takeover, every table is fenced; then
        what dead runs left behind is cleaned (`recover`, unless not `clean_up`)."""
        lock = cls(located(output), run_id, lease_seconds)
        taken_from = None
        for _ in range(5):  # another run may commit between our read and our commit: read again
            table, holder = lock._read()
            taken_from = None
            if holder is not None and holder["run_id"] != run_id:
                if not force and _alive(holder, lock.table):
                    raise BadInput(f"--output {lock.output}: {describe_holder(holder, lock.table)} is writing "
                                   f"these tables; wait for it to finish (its lock is taken over once its "
                                   f"heartbeat is {_lease(holder):g} s old, or at once on its host when its "
                                   f"process is gone), or see `offsetlake unlock`")
                taken_from = holder
            if lock._swap(table, holding=True):
                break
        else:
            raise BadInput(f"--output {lock.output}: cannot take the lock {lock.table} (other runs keep taking it)")
        lock.epoch = lock.version
        if taken_from is not None:
            log.warning("taking over the lock of run %s (%s)", taken_from["run_id"],
                        "forced" if force else "its heartbeat stopped or its process is gone")
            fence(lock.output, lock.epoch, run_id)
        lock._beat = threading.Thread(target=lock._heartbeat, name="offsetlake-lock", daemon=True)
        lock._beat.start()
        if clean_up:
            recover(lock.output, run_id, lock.check)
        return lock

    def check(self) -> None:
        """LockLost unless this run still holds the output. Called between opening a table and committing the
        version opened plus one (jobs.lake.runs.fenced_commit): a takeover after this check fences that
        version, so the commit fails. When the heartbeat could not renew within the lease, it renews now: a
        renewal that succeeds proves nobody took over meanwhile."""
        with self._mutex:
            if self.lost is not None:
                raise self.lost
            lapsed = time.monotonic() - self.renewed_at > self.lease_seconds
            if not lapsed and self._newest_is_mine():
                return
            table = self._open_retrying()
            if table is None or table.version() != self.version:
                self._lose(self._read(table)[1] if table is not None else None)
            if lapsed and not self._swap(table, holding=True):
                self._lose(self._read()[1])

    def _newest_is_mine(self) -> bool:
        """Whether the lock's log ends at this run's newest commit: its entry there and none after it. Two
        files' existence, where opening the table would read its log (every commit of a run checks the lock);
        False, for the full check, on any doubt (a storage error, an entry the log's cleanup removed)."""
        entries = self.table.child("_delta_log")
        try:
            return (self.version is not None and entries.child(f"{self.version:020d}.json").exists()
                    and not entries.child(f"{self.version + 1:020d}.json").exists())
        except OSError:
            return False

    def release(self, failed: bool = False) -> None:
        """Give the lock up (if this run still holds it). Where the storage refuses (a full disk), the lock stays
        as a killed run's would, and the next run takes it over; a warning says so, unless the run `failed` (its
        own error is then the one line, which this one must not replace)."""
        self._stop.set()
        try:
            with self._mutex:
                if self.lost is not None:
                    return
                for _ in range(3):
                    table, holder = self._read()
                    if holder is None or holder["run_id"] != self.run_id or self._swap(table, holding=False):
                        return
        except Exception as e:
            (log.debug if failed else log.warning)(
                "could not release the lock on %s (%s): the next run takes it over, at once on this host, elsewhere "
                "once its heartbeat is %g s old", self.output, first_line(e), self.lease_seconds)

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.release(failed=kind is not None)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_seconds / RENEWALS_PER_LEASE):
            try:
                with self._mutex:
                    if self.lost is not None:
                        return
                    table, holder = self._read()
                    if table is None or table.version() != self.version:
                        self._lose(holder)
                    if not self._swap(table, holding=True):
                        self._lose(self._read()[1])
            except LockLost:  # the run's next check says so, in its one line
                log.debug("run %s lost the lock on %s to another run", self.run_id, self.output)
                return
            except Exception as e:  # a storage hiccup: the next beat tries again, the lease covers several
                log.debug("could not renew the lock on %s: %s", self.output, e)

    def _lose(self, holder: dict[str, Any] | None) -> None:
        """Note and raise that another run has the output now (`holder`: the lock's row as read)."""
        taker = self._taker()
        if taker is None and holder is not None and holder["run_id"] != self.run_id:
            taker = (holder["run_id"], holder["started_at"])
        named = f"run {taker[0]} at {taker[1]:%Y-%m-%dT%H:%M:%SZ}" if taker else "another run"
        self.lost = LockLost(f"--output {self.output}: the output was taken over by {named} while this run was "
                             f"not renewing its lock (lease {self.lease_seconds:g} s): this run recorded nothing, "
                             f"and the next run undoes what it committed")
        raise self.lost

    def _taker(self) -> tuple[str, datetime] | None:
        """(run id, when) of the first lock commit after this run's newest: the run that took the output over
        (`offsetlake unlock` names itself `unlock-...`), None when the lock's log no longer tells."""
        try:
            table, _ = self._read()
            later = [c for c in (table.history() if table is not None else [])
                     if c.get("version", -1) > (self.version or -1) and c.get(LOCK_KEY) not in (None, self.run_id)]
        except Exception:  # noqa: BLE001 - only the message's detail is lost
            return None
        if not later:
            return None
        first = min(later, key=lambda c: c["version"])
        return first[LOCK_KEY], datetime.fromtimestamp(first["timestamp"] / 1000, timezone.utc)

    def _row(self, version: int) -> pa.Table:
        """This run's lock row, for the lock table's `version` (the first one it lands at is its epoch)."""
        boot_id, namespace, start = this_process()
        now = datetime.now(timezone.utc)
        epoch = self.epoch if self.epoch is not None else version
        return pa.Table.from_pylist([{
            "run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at,
            "beat_at": now, "boot_id": boot_id, "pid_namespace": namespace, "process_start": start,
            "lease_seconds": self.lease_seconds, "epoch": epoch}], schema=_SCHEMA)

    def _open_retrying(self) -> Any:
        """The lock table (None when there is none), opened again on a storage error while the lease lasts."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        deadline = time.monotonic() + max(1.0, self.lease_seconds / RENEWALS_PER_LEASE)
        while True:
            try:
                return DeltaTable(self.table.delta_uri, storage_options=self.table.storage_options)
            except TableNotFoundError:
                return None
            except Exception as e:
                if time.monotonic() > deadline:
                    raise LockLost(f"--output {self.output}: cannot read the lock to confirm this run still "
                                   f"holds the output ({first_line(e)}): this run recorded nothing") from None
                time.sleep(0.5)

    def _read(self, table: Any = None) -> tuple[Any, dict[str, Any] | None]:
        """(the lock table as read, None when there is none yet; its holder, None when nobody holds it)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        for attempt in range(5):
            try:
                if table is None:
                    table = DeltaTable(self.table.delta_uri, storage_options=self.table.storage_options)
                rows = table.to_pyarrow_table().to_pylist()
            except TableNotFoundError:
                return None, None
            except Exception as e:  # the version read was replaced and its file removed: read again
                if attempt == 4:
                    raise
                log.debug("reading the lock again: %s", e)
                table = None
                continue
            holder = rows[0] if rows else None
            if holder is not None:
                holder["lock_version"] = table.version()
            return table, holder
        return None, None

    def _swap(self, table: Any, holding: bool) -> bool:
        """Replace the version `table` was read at by this run's row (`holding`) or by no row (create the lock
        table when `table` is None); False when another run committed first. The data file of a swap that lost
        is removed, and, once the swap lands, the replaced version's (nobody reads an old lock version)."""
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions

        adds, written = [], None
        landing = 0 if table is None else table.version() + 1
        if holding:
            written = f"{self.run_id or 'unlock'}-{uuid.uuid4().hex[:12]}.parquet"
            file = self.table.child(written)
            self.table.mkdir()
            write_parquet(self._row(landing), file)
            info = file.fs.get_file_info(file.path)
            adds = [AddAction(written, info.size, {}, int(time.time() * 1000), True, '{"numRecords":1}')]
        once = CommitProperties(custom_metadata={LOCK_KEY: self.run_id}, max_commit_retries=0)
        replaced = [] if table is None else add_actions(table, False).column("path").to_pylist()
        try:
            if table is None:
                create_table_with_add_actions(self.table.delta_uri, Schema.from_arrow(_SCHEMA), adds, mode="error",
                                              configuration=_LOCK_PROPERTIES,
                                              storage_options=self.table.storage_options, commit_properties=once)
            else:
                table.create_write_transaction(adds, "overwrite", Schema.from_arrow(_SCHEMA), commit_properties=once)
        except (CommitFailedError, DeltaError) as e:
            if written is not None:
                self.table.child(written).remove()
            if isinstance(e, CommitFailedError) or "already exists" in str(e):
                return False
            raise
        self.version = landing
        self.renewed_at = time.monotonic()
        for name in replaced:
            try:
                self.table.child(name).remove()
            except OSError:  # another store's hiccup: an orphan row file is harmless
                pass
        return True


def holder_of(output: Location | str) -> dict[str, Any] | None:
    """The run holding `output`'s lock (run_id, host, pid, started_at, beat_at, lease_seconds, ...), None when
    nobody holds it."""
    return OutputLock(located(output), "")._read()[1]


def unlock(output: Location | str, force: bool = False) -> dict[str, Any] | None:
    """Break `output`'s lock: take it over as a run of its own (fencing every table, as any takeover does) and
    release it; the next run cleans up as after a kill. A lock whose holder is alive is broken only with
    `force` (BadInput otherwise). Returns the holder it removed, None when nobody held the lock."""
    output = located(output)
    holder = holder_of(output)
    if holder is None:
        return None
    OutputLock.acquire(output, f"unlock-{uuid.uuid4().hex}", force=force, clean_up=False).release()
    return holder


def describe_holder(holder: dict[str, Any], table: Location | None = None) -> str:
    """`run R (process P on H, started T, last heartbeat N s ago)`."""
    beat = _beat_time(holder, table)
    ago = f", last heartbeat {max(0, time.time() - beat):.0f} s ago" if beat is not None else ""
    return (f"run {holder['run_id']} (process {holder['pid']} on {holder['host']}, started "
            f"{holder['started_at']:%Y-%m-%dT%H:%M:%SZ}{ago})")


def heartbeat_age(holder: dict[str, Any], table: Location) -> float:
    """Seconds since the holder's newest heartbeat landed, by the storage's clock against ours; 0 for a
    heartbeat from the future (this host's clock behind the storage's)."""
    beat = _beat_time(holder, table)
    return 0.0 if beat is None else max(0.0, time.time() - beat)


def _beat_time(holder: dict[str, Any], table: Location | None) -> float | None:
    """When the holder's row landed: its log entry's modification time, set by the storage, not the holder
    (whose clock may be anywhere); the row's own beat_at where the storage keeps no times."""
    if table is not None and holder.get("lock_version") is not None:
        entry = table.child("_delta_log", f"{holder['lock_version']:020d}.json")
        try:
            landed = entry.mtime()
        except OSError:
            landed = None
        if landed is not None:
            return landed
    beat = holder.get("beat_at")
    return beat.timestamp() if beat is not None else None


def _lease(holder: dict[str, Any]) -> float:
    return holder.get("lease_seconds") or DEFAULT_LEASE_SECONDS


def _alive(holder: dict[str, Any], table: Location) -> bool:
    """The holder may still commit: its heartbeat is younger than its lease, unless it is on this machine and
    its process is gone (then it is dead at once)."""
    if _same_machine(holder) and not _process_matches(holder):
        return False
    return heartbeat_age(holder, table) <= _lease(holder)


def _same_machine(holder: dict[str, Any]) -> bool:
    """The holder's pid means a process here: same host name, and (rows of runs that noted them) the same boot
    and pid namespace. A restarted container keeps its host name but gets a new pid namespace."""
    if holder["host"] != socket.gethostname():
        return False
    boot_id, namespace, _ = this_process()
    return all(holder.get(name) in (None, mine) for name, mine in (("boot_id", boot_id),
                                                                 ("pid_namespace", namespace)))


def _process_matches(holder: dict[str, Any]) -> bool:
    """The holder's process still runs: its pid exists, is no zombie, and started when the holder's did."""
    found = _process(holder["pid"])
    if found is None:
        return False
    state, start = found
    if state in ("Z", "X"):
        return False
    return holder.get("process_start") in (None, start)


def _process(pid: int) -> tuple[str, int | None] | None:
    """(state, start time in clock ticks since boot) of process `pid`, None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces and parentheses
        return fields[0].decode(), int(fields[19])
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (not Linux): ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "R", None


@lru_cache(maxsize=1)
def this_process() -> tuple[str | None, str | None, int | None]:
    """(boot id, pid namespace, start time) of this process: with its pid and host, who it is."""
    def read(path: str) -> str | None:
        try:
            return os.readlink(path) if path.startswith("/proc/self/ns") else open(path).read().strip()
        except OSError:
            return None

    found = _process(os.getpid())
    return read("/proc/sys/kernel/random/boot_id"), read("/proc/self/ns/pid"), found[1] if found else None


def fence(output: Location, epoch: int, run_id: str) -> None:
    """An empty commit to every table of `output`, tagged with the taker's `epoch`: a run that opened a table
    before this commit can no longer commit to it (jobs.lake.runs.fenced_commit), and one that opens it after
    finds the lock taken. A table staged but not created yet is created empty, for the same reason."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties

    from jobs.base.tables import STAGED_TABLES, arrow_schema, partition_columns
    from jobs.lake.runs import TABLE_PROPERTIES, delta_table, is_table, table_folders

    tag = CommitProperties(custom_metadata={FENCE_KEY: str(epoch), FENCED_BY_KEY: run_id})
    for path in table_folders(output):
        table = delta_table(path)
        table.create_write_transaction([], "append", table.schema(), commit_properties=tag)
    for path in output.children():
        if path.name in STAGED_TABLES and not is_table(path) and \
                any(f.name.startswith(RUN_FOLDER) for f in path.children()):
            DeltaTable.create(path.delta_uri, arrow_schema(path.name), mode="ignore",
                              partition_by=partition_columns(path.name) or None, configuration=TABLE_PROPERTIES,
                              storage_options=path.storage_options, commit_properties=tag)


def recover(output: Location, run_id: str, guard: Callable[[], None] | None = None) -> None:
    """Clean up after runs that died writing `output` (the caller holds its lock, so none is running, and a hung
    one is fenced): their staging areas, the files they staged in table folders but never committed, and tables
    whose newest version a dead run committed, restored to the newest version of a complete run. `guard`: the
    lock's check, between listing what goes and removing it (a run that takes the output over from this one
    stages under its own name, after that check), and before each restore."""
    from jobs.base.tables import SNAPSHOTS, STAGED_TABLES
    from jobs.lake.runs import committed_by, finished_runs, is_table, restore_unfinished

    finished = {r["run_id"] for r in finished_runs(output)} | {run_id}
    dead = {area.name for area in output.child(STAGING_DIR).children()} - finished
    # A finished run's folders hold files of versions it committed (time travel reads them); a run that never
    # finished may have committed some tables before it died: only the folders no version references go.
    tables = [t for t in (*output.children(), *output.child(SNAPSHOTS).children())
              if not t.name.startswith("_") or t.name in STAGED_TABLES]
    doomed = []
    for table in tables:
        for folder in table.children():
            dead_run = folder.name[len(RUN_FOLDER):] if folder.name.startswith(RUN_FOLDER) else None
            if dead_run is None or dead_run in finished:
                continue
            if not is_table(table) or not committed_by(table, dead_run):
                doomed.append(folder)
                dead.add(dead_run)
    if guard is not None:
        guard()
    for folder in doomed:
        _remove(folder)
    for area in dead:
        _remove(output.child(STAGING_DIR, area))
        log.warning("removed what run %s, which did not finish, left behind", area)
    restored = restore_unfinished(output, guard)
    if restored:
        log.warning("restored %s to the newest complete run's version (a run died after replacing them)",
                    ", ".join(restored))
    staging = output.child(STAGING_DIR)
    if staging.is_dir() and not staging.children():
        _remove(staging)


def _remove(folder: Location) -> None:
    """Remove what a run left behind; a run taken over while it still ran (a taker with a clock ahead) may still
    be writing there until its next check fences it: what it adds meanwhile, the next run removes."""
    try:
        folder.remove()
    except OSError as e:
        log.debug("left %s for the next run: %s", folder, e)


