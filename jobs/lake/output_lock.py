"""One rebuild at a time per output, and what a killed rebuild left behind cleaned by the next one.

Two rebuilds writing the same tables at once would interleave their commits, and neither's run record would
describe the tables it names. So a rebuild holds DIR/_offsetlake_lock from before it starts Spark until its run
is recorded: the file is created exclusively (one creator wins), names the run, its host and process, and is
touched every HEARTBEAT_SECONDS. A second rebuild is refused with one line naming the holder (exit status 2).

A holder that died (SIGKILL, a lost container) cannot remove its lock: the lock is stale when its process is
gone from this host, or, from another host, when it has not been touched for STALE_SECONDS. A stale lock is
taken over, and the new holder then cleans up after the dead run (`recover`): its staging area, the data files
it linked into table folders without committing them, and tables it replaced before it could record itself,
which are restored to the newest complete run's version so that a plain Delta reader sees one whole run again.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.errors import BadInput

log = logging.getLogger("offsetlake")
LOCK_FILE = "_offsetlake_lock"
STAGING_DIR = "_offsetlake_staging"
HEARTBEAT_SECONDS = 30
# A lock from another host untouched for this long is taken to be a dead run's: ten missed heartbeats.
STALE_SECONDS = 10 * HEARTBEAT_SECONDS


class OutputLock:
    """The hold of run `run_id` on `output`; `release` (or leaving the `with` block) gives it up."""

    def __init__(self, output: Path, run_id: str) -> None:
        self.output = output
        self.run_id = run_id
        self.path = output / LOCK_FILE
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    @classmethod
    def acquire(cls, output: Path, run_id: str) -> "OutputLock":
        """Hold `output` for run `run_id`, taking over a stale lock; BadInput naming the holder when a live
        run holds it. What dead runs left behind is cleaned once the lock is held (`recover`)."""
        lock = cls(output, run_id)
        output.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # another taker may remove a stale lock between our look and our create
            if lock._create():
                break
            holder = _read(lock.path)
            if holder is not None and not _stale(holder, lock.path):
                raise BadInput(f"--output {output}: run {holder.get('run_id')} (process {holder.get('pid')} on "
                               f"{holder.get('host')}, started {holder.get('started_at')}) is writing these "
                               f"tables; wait for it to finish (a dead run's lock is taken over "
                               f"{STALE_SECONDS // 60} minutes after its last heartbeat, or at once on its host)")
            lock._take_over(holder)
        else:
            raise BadInput(f"--output {output}: cannot take the lock {lock.path} (other runs keep taking it)")
        lock._beat = threading.Thread(target=lock._heartbeat, name="offsetlake-lock", daemon=True)
        lock._beat.start()
        recover(output, run_id)
        return lock

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump({"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}, f)
        return True

    def _take_over(self, holder: dict[str, Any] | None) -> None:
        """Move a stale lock aside (a rename: only one taker succeeds), then try to create ours again."""
        aside = self.path.with_name(f"{LOCK_FILE}.stale-{self.run_id}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        log.warning("taking over the lock of run %s, which is no longer running",
                    (holder or {}).get("run_id", "(unreadable lock)"))
        aside.unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        self._stop.set()
        if _read(self.path, {}).get("run_id") == self.run_id:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(path: Path, default: dict[str, Any] | None = None) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _stale(holder: dict[str, Any], path: Path) -> bool:
    """The run that wrote `holder` is gone: its process has ended (same host), or its heartbeat stopped."""
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False
    try:
        return time.time() - path.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        return True


def recover(output: Path, run_id: str) -> None:
    """Clean up after runs that died writing `output` (the caller holds its lock, so none is running): their
    staging areas, the files they linked into table folders but never committed, and tables whose newest
    version a dead run committed, restored to the newest version of a complete run."""
    from jobs.lake.runs import restore_unfinished

    staging = output / STAGING_DIR
    dead = [p for p in staging.iterdir() if p.name != run_id] if staging.is_dir() else []
    for area in dead:
        removed = _remove_uncommitted_files(output, area.name)
        shutil.rmtree(area, ignore_errors=True)
        log.warning("removed the staging area of run %s, which did not finish (%d uncommitted data files)",
                    area.name, removed)
    restored = restore_unfinished(output)
    if restored:
        log.warning("restored %s to the newest complete run's version (a run died after replacing them)",
                    ", ".join(restored))
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()


def _remove_uncommitted_files(output: Path, run_id: str) -> int:
    """Data files run `run_id` placed in table folders (jobs.lake.sink names them `<run_id>-...`) that no commit of
    that run references."""
    from jobs.lake.runs import committed_by

    removed = 0
    for table in output.iterdir():
        if not table.is_dir() or table.name.startswith("_"):
            continue
        placed = list(table.rglob(f"{run_id}-*"))
        # No log yet: the dead run was creating the table, and nothing of it was committed.
        if placed and not ((table / "_delta_log").is_dir() and committed_by(table, run_id)):
            for file in placed:
                file.unlink(missing_ok=True)
                removed += 1
    return removed
