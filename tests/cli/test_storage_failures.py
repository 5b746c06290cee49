"""A rebuild whose storage fails midway, as an operator meets it: the disk fills, or the folder turns read-only.
Whole `offsetlake` processes writing to a small tmpfs (mounted where the test may: as root), each paused at a
moment of its run (OFFSETLAKE_PAUSE_AT) while the disk is filled, then resumed: exactly one stderr line that names
the cause ("No space left on device"), exit status 1, no traceback, no "Exception ignored", no panic; readers still
see the earlier run, every version of every table opens, and the next run, with space again, succeeds.
"""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member
from runs import read_tables
from takeover import OFFSETLAKE, wait_until_stopped

from jobs.kill_points import PAUSE_AT
from jobs.lake.runs import finished_runs, table_folders

FULL, READ_ONLY = "No space left on device", "Read-only file system"
# (moment the run is paused at, None: before it starts; what happens to the disk then, and the bytes a full one
# leaves free; options): the lock's own row; the workers' files, some written when the disk fills (pyarrow's
# writers, left open, failed again when collected); delta-rs's commits, with the archive; a folder turned read-only.
CASES = {
    "full before the run": (None, FULL, 0, []),
    "full while the workers write": ("read", FULL, 64 << 10, []),
    "full between table commits, with the archive": ("committed:2", FULL, 0, ["--archive"]),
    "read-only before the commits": ("staged", READ_ONLY, 0, []),
}


@pytest.fixture(scope="module")
def disk(tmp_path_factory) -> Iterator[Path]:
    """A 4 MiB tmpfs, with a dump beside it and the tables of a first run in it."""
    base = tmp_path_factory.mktemp("storage")
    mount = base / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        log = OffsetsLog()
        for g in range(4):
            log.group(f"g{g}", T0, members=[member(f"m{g}", ["t"], {"t": [g]})], coordinator=g % 2)
            for i in range(30):
                log.commit(f"g{g}", "t", g, i, T0 + i * MINUTE, coordinator=g % 2)
        log.write_parquet(base / "dump")
        assert rebuild(mount, []).returncode == 0
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def rebuild(disk: Path, options: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command(disk, options), capture_output=True, text=True, env=env, timeout=300)


def command(disk: Path, options: list[str]) -> list[str]:
    return [OFFSETLAKE, "--quiet", "rebuild", "--source", f"parquet:{disk.parent}/dump", "--output",
            str(disk / "tables"), *options]


def fill(disk: Path, leave: int = 0) -> None:
    """Write a file until the disk is full, or has only `leave` bytes free."""
    free = os.statvfs(disk)
    try:
        with open(disk / "filler", "wb") as f:
            f.write(bytes(max(0, free.f_bavail * free.f_frsize - leave)))
            while not leave:
                f.write(bytes(4096))
                f.flush()
    except OSError:
        pass


def fail(disk: Path, cause: str, leave: int) -> None:
    if cause == FULL:
        fill(disk, leave)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def mend(disk: Path, cause: str) -> None:
    if cause == FULL:
        (disk / "filler").unlink()
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)


@pytest.mark.parametrize("case", CASES)
def test_a_run_whose_storage_fails_is_one_line_and_the_earlier_run_stays_whole(disk, case):
    moment, cause, leave, options = CASES[case]
    tables, runs = read_tables(disk / "tables"), finished_runs(disk / "tables")
    if moment is None:
        fail(disk, cause, leave)
        result = rebuild(disk, options)
        status, err = result.returncode, result.stderr
    else:
        paused = subprocess.Popen(command(disk, options), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, PAUSE_AT: moment})
        try:
            wait_until_stopped(paused)
            fail(disk, cause, leave)
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        _, err = paused.communicate(timeout=300)
        status = paused.returncode
    mend(disk, cause)
    lines = err.splitlines()
    assert status == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"offsetlake: error: --output {disk}/tables: {cause} (") and \
        lines[0].endswith("this run recorded nothing (readers see the tables as they were), and the next run cleans "
                          "up after it"), lines[0]
    assert finished_runs(disk / "tables") == runs and read_tables(disk / "tables") == tables
    for path in table_folders(disk / "tables"):
        for version in range(DeltaTable(path.path).version() + 1):
            DeltaTable(path.path, version=version).to_pyarrow_table()
    again = rebuild(disk, options)
    assert again.returncode == 0, again.stderr
    assert len(finished_runs(disk / "tables")) == len(runs) + 1
