"""One rebuild at a time per output, and what a killed rebuild left behind cleaned by the next one.

Two rebuilds writing the same tables at once would interleave their commits, and neither's run record would
describe the tables it names. So a rebuild holds DIR/_offsetlake_lock from before it starts any work until its
run is recorded. The lock is a one-row Delta table (who holds it, since when, its last heartbeat), so taking it
is a Delta commit, atomic wherever delta-rs writes (a local disk, HDFS, an object store): a run reads the lock,
and takes it by replacing that very version; of two runs that read the same version, one commits and the other
is refused. A second rebuild is refused with one line naming the holder (exit status 2). The holder renews its
heartbeat every HEARTBEAT_SECONDS.

A holder that died (SIGKILL, a lost container) cannot give its lock up: the lock is stale when its process is
gone from this host, or, from another host, when its heartbeat is STALE_SECONDS old. A stale lock is taken over,
and the new holder then cleans up after the dead run (`recover`): its staging area, the files it staged in
table folders but never committed, and tables it replaced before it could record itself, which are restored to
the newest complete run's version so that a plain Delta reader sees one whole run again.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from jobs.errors import BadInput
from jobs.lake.storage import Location, located

log = logging.getLogger("offsetlake")
LOCK_TABLE = "_offsetlake_lock"
STAGING_DIR = "_offsetlake_staging"
RUN_FOLDER = "run-"  # a table's files staged by a run: <table>/run-<run id>/...
HEARTBEAT_SECONDS = 30
# A lock from another host whose heartbeat is this old is taken to be a dead run's: ten missed heartbeats.
STALE_SECONDS = 10 * HEARTBEAT_SECONDS
_SCHEMA = pa.schema([("run_id", pa.string()), ("host", pa.string()), ("pid", pa.int64()),
                     ("started_at", pa.timestamp("us", tz="UTC")), ("beat_at", pa.timestamp("us", tz="UTC"))])


class OutputLock:
    """The hold of run `run_id` on `output`; `release` (or leaving the `with` block) gives it up."""

    def __init__(self, output: Location, run_id: str) -> None:
        self.output = output
        self.run_id = run_id
        self.table = output.child(LOCK_TABLE)
        self.started_at = datetime.now(timezone.utc)
        self.lost = False  # another run took the lock over (this one was taken for dead)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._mutex = threading.Lock()

    @classmethod
    def acquire(cls, output: Location | str, run_id: str) -> "OutputLock":
        """Hold `output` for run `run_id`, taking over a stale lock; BadInput naming the holder when a live run
        holds it. What dead runs left behind is cleaned once the lock is held (`recover`)."""
        lock = cls(located(output), run_id)
        for _ in range(5):  # another run may commit between our read and our commit: read again
            table, holder = lock._read()
            if holder is not None and holder["run_id"] != run_id and not _stale(holder):
                raise BadInput(f"--output {lock.output}: run {holder['run_id']} (process {holder['pid']} on "
                               f"{holder['host']}, started {holder['started_at']:%Y-%m-%dT%H:%M:%SZ}) is writing "
                               f"these tables; wait for it to finish (a dead run's lock is taken over "
                               f"{STALE_SECONDS // 60} minutes after its last heartbeat, or at once on its host)")
            if holder is not None and holder["run_id"] != run_id:
                log.warning("taking over the lock of run %s, which is no longer running", holder["run_id"])
            if lock._commit(table, lock._row()):
                break
        else:
            raise BadInput(f"--output {lock.output}: cannot take the lock {lock.table} (other runs keep taking it)")
        lock._beat = threading.Thread(target=lock._heartbeat, name="offsetlake-lock", daemon=True)
        lock._beat.start()
        recover(lock.output, run_id)
        return lock

    def _row(self, holding: bool = True) -> pa.Table:
        if not holding:
            return _SCHEMA.empty_table()
        return pa.Table.from_pylist([{"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                                      "started_at": self.started_at, "beat_at": datetime.now(timezone.utc)}],
                                    schema=_SCHEMA)

    def _read(self) -> tuple[Any, dict[str, Any] | None]:
        """(the lock table as read, None when there is none yet; its holder, None when nobody holds it)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(self.table.delta_uri, storage_options=self.table.storage_options)
        except TableNotFoundError:
            return None, None
        rows = table.to_pyarrow_table().to_pylist()
        return table, rows[0] if rows else None

    def _commit(self, table: Any, row: pa.Table) -> bool:
        """Replace the version `table` was read at with `row` (create the lock table when `table` is None);
        False when another run committed first."""
        from deltalake import write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.transaction import CommitProperties

        # No retry: delta-rs would otherwise commit a write that lost the race on top of the winner's.
        once = CommitProperties(max_commit_retries=0)
        try:
            if table is None:
                write_deltalake(self.table.delta_uri, row, mode="error", storage_options=self.table.storage_options,
                                commit_properties=once)
            else:
                write_deltalake(table, row, mode="overwrite", commit_properties=once)
        except (CommitFailedError, DeltaError) as e:
            if isinstance(e, CommitFailedError) or "already exists" in str(e):
                return False
            raise
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._mutex:
                table, holder = self._read()
                if holder is None or holder["run_id"] != self.run_id or not self._commit(table, self._row()):
                    self.lost = True
                    log.warning("run %s lost the lock on %s to another run", self.run_id, self.output)
                    return

    def release(self) -> None:
        """Give the lock up (if this run still holds it)."""
        self._stop.set()
        with self._mutex:
            for _ in range(3):
                table, holder = self._read()
                if holder is None or holder["run_id"] != self.run_id or self._commit(table, self._row(False)):
                    return

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_of(output: Location | str) -> dict[str, Any] | None:
    """The run holding `output`'s lock (run_id, host, pid, started_at, beat_at), None when nobody holds it."""
    return OutputLock(located(output), "")._read()[1]


def _stale(holder: dict[str, Any]) -> bool:
    """The run that holds the lock is gone: its process has ended (same host), or its heartbeat stopped."""
    if holder["host"] == socket.gethostname():
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False
    return (datetime.now(timezone.utc) - holder["beat_at"]).total_seconds() > STALE_SECONDS


def recover(output: Location, run_id: str) -> None:
    """Clean up after runs that died writing `output` (the caller holds its lock, so none is running): their
    staging areas, the files they staged in table folders but never committed, and tables whose newest version
    a dead run committed, restored to the newest version of a complete run."""
    from jobs.lake.runs import committed_by, finished_runs, is_table, restore_unfinished
    from jobs.lake.tables import SNAPSHOTS, STAGED_TABLES

    finished = {r["run_id"] for r in finished_runs(output)} | {run_id}
    dead = {area.name for area in output.child(STAGING_DIR).children()} - finished
    # A finished run's folders hold files of versions it committed (time travel reads them); a run that never
    # finished may have committed some tables before it died: only the folders no version references go.
    tables = [t for t in (*output.children(), *output.child(SNAPSHOTS).children())
              if not t.name.startswith("_") or t.name in STAGED_TABLES]
    for table in tables:
        for folder in table.children():
            dead_run = folder.name[len(RUN_FOLDER):] if folder.name.startswith(RUN_FOLDER) else None
            if dead_run is None or dead_run in finished:
                continue
            if not is_table(table) or not committed_by(table, dead_run):
                folder.remove()
                dead.add(dead_run)
    for area in dead:
        output.child(STAGING_DIR, area).remove()
        log.warning("removed what run %s, which did not finish, left behind", area)
    restored = restore_unfinished(output)
    if restored:
        log.warning("restored %s to the newest complete run's version (a run died after replacing them)",
                    ", ".join(restored))
    staging = output.child(STAGING_DIR)
    if staging.is_dir() and not staging.children():
        staging.remove()
