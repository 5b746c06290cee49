"""The command line as an operator runs it, one process per case.

A bad argument or unreadable input: exactly one stderr line `offsetlake: error: ...`, exit status 2, no
table changed, and Spark never started. Whether Spark started is not guessed from timing: SPARK_HOME
points at a fake `bin/spark-submit` (pyspark launches its JVM through it) that records it was run and
exits 1. A good run of a local source never starts Spark at all (the local runner); only `--engine spark`
does. Only the last test starts a real JVM, to see that a good Spark run shows no JVM or Spark banner.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from offsets_log import MINUTE, T0, OffsetsLog, member
from runs import read_tables

from jobs.base.tables import arrow_schema

REPO = Path(__file__).resolve().parents[2]
OFFSETLAKE = Path(sys.executable).with_name("offsetlake")  # the console script
SPARK_SUBMIT_ENTRY = [sys.executable, str(REPO / "jobs" / "__main__.py")]  # what spark-submit runs
NOBODY = 65534


def offsetlake(args: list[str], spark_home: Path | None, tmp: Path, *, entry: list[str] | None = None,
               as_user: list[str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run a command (`spark_home` None: the real Spark) as a user would, in a plain local environment, with
    `tmp` as its temp folder (where a Spark log would go). `as_user`: a prefix that runs it as another user."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}
    if spark_home is not None:
        env["SPARK_HOME"] = str(spark_home)
    env["TMPDIR"] = str(tmp)
    return subprocess.run([*(as_user or []), *(entry or [str(OFFSETLAKE)]), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture
def tmp(tmp_path) -> Path:
    """The command's temp folder."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


@pytest.fixture
def spark_home(tmp_path) -> Path:
    """A SPARK_HOME whose spark-submit only leaves `started` behind and fails, as a missing Java would."""
    home = tmp_path / "fake-spark-home"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-submit"
    script.write_text('#!/bin/sh\ntouch "$(dirname "$0")/../started"\n'
                      'echo "fake spark-submit: no JVM here" >&2\nexit 1\n')
    script.chmod(0o755)
    return home


def one_line_error(result: subprocess.CompletedProcess, spark_home: Path, *fragments: str) -> str:
    assert not (spark_home / "started").exists(), f"Spark was started: {result.stderr}"
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def closed_port() -> int:
    """A local port nothing listens on: bound, read, and closed again."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def tables(tmp_path) -> Iterator[Path]:
    """An output folder holding a Delta table (version 0) that a failed run must leave exactly as it is."""
    out = tmp_path / "tables"
    write_deltalake(str(out / "committed_offsets"), arrow_schema("committed_offsets").empty_table())
    before = tree(out)
    yield out
    assert DeltaTable(str(out / "committed_offsets")).version() == 0
    assert tree(out) == before


def offsets_log() -> OffsetsLog:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    return log


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Good and bad inputs, side by side."""
    root = tmp_path_factory.mktemp("inputs")
    offsets_log().write_parquet(root / "dump")
    columns = pq.read_table(root / "dump")
    pq.write_table(columns.drop_columns(["key"]), root / "no-key.parquet")
    pq.write_table(columns.set_column(0, "key", pa.array(["k"] * columns.num_rows)), root / "string-key.parquet")
    (root / "not-parquet.parquet").write_text("hello, not Parquet\n")
    (root / "mixed").mkdir()
    pq.write_table(columns, root / "mixed" / "part-0.parquet")
    (root / "mixed" / "part-1.parquet").write_bytes(b"PAR1 cut off")
    (root / "mixed" / "_SUCCESS").touch()  # hidden from Spark: not a data file
    (root / "several-bad").mkdir()  # two good files, two that are not usable
    pq.write_table(columns, root / "several-bad" / "part-0.parquet")
    pq.write_table(columns, root / "several-bad" / "part-1.parquet")
    (root / "several-bad" / "readme.txt").write_text("not Parquet\n")
    (root / "several-bad" / "part-2.parquet").write_bytes((root / "several-bad" / "part-0.parquet").read_bytes()[:-9])
    (root / "empty").mkdir()
    (root / "no-partitions").mkdir()
    (root / "a-file").write_text("a regular file\n")
    (root / "ends.txt").write_text("t:0:100\n")
    (root / "bad-ends.txt").write_text("t:0:100\nthis is not an offset\n")
    (root / "bad-ends.csv").write_text("topic,partition\nt,0\n")
    (root / "bad-ids.csv").write_text("not-an-id,t\n")
    return root


REBUILD_CASES: dict[str, tuple[Callable[[Path], list[str]], list[str]]] = {
    "unknown source kind": (lambda d: ["--source", "nope:x"], ["--source 'nope:x'", "parquet:PATH"]),
    "missing dump": (lambda d: ["--source", f"parquet:{d}/nope"], ["no such file or directory"]),
    "dump without key": (lambda d: ["--source", f"parquet:{d}/no-key.parquet"],
                         ["missing required column(s) key", "found: value, topic, partition"]),
    "key of the wrong type": (lambda d: ["--source", f"parquet:{d}/string-key.parquet"],
                              ["column key has type string, expected binary"]),
    "file that is not Parquet": (lambda d: ["--source", f"parquet:{d}/not-parquet.parquet"], ["cannot read Parquet"]),
    "folder with a file that is not Parquet": (
        lambda d: ["--source", f"parquet:{d}/mixed"],
        ["mixed: 1 of 2 files is not usable: part-1.parquet (cannot read Parquet: "]),
    "folder with several files that are not Parquet": (
        lambda d: ["--source", f"parquet:{d}/several-bad"],
        ["several-bad: 2 of 4 files are not usable: ", "part-2.parquet (cannot read Parquet: ",
         "readme.txt (cannot read Parquet: "]),
    "folder without Parquet files": (lambda d: ["--source", f"parquet:{d}/empty"], ["no Parquet files"]),
    "missing log dir": (lambda d: ["--source", f"segments:{d}/nope"], ["no such directory"]),
    "log dir without partitions": (lambda d: ["--source", f"segments:{d}/no-partitions"],
                                   ["no __consumer_offsets-N folder found"]),
    "log dir that is a file": (lambda d: ["--source", f"segments:{d}/a-file"], ["not a directory"]),
    "cluster address": (lambda d: ["--source", "kafka:broker-without-port"], ["expected HOST:PORT"]),
    "missing client properties": (lambda d: ["--source", "kafka:b:9092", "--kafka-config", f"{d}/nope.properties"],
                                  ["--kafka-config", "no such file"]),
    "unreachable cluster": (lambda d: ["--source", f"kafka:127.0.0.1:{closed_port()}", "--kafka-timeout", "2"],
                            ["cannot reach the brokers: no answer within 2s"]),
    "bad as-of": (lambda d: ["--source", f"parquet:{d}/dump", "--as-of", "yesterday"], ["--as-of 'yesterday'"]),
    "zero retention": (lambda d: ["--source", f"parquet:{d}/dump", "--retention-minutes", "0"],
                       ["--retention-minutes"]),
    "missing end offsets": (lambda d: ["--source", f"parquet:{d}/dump", "--end-offsets", f"{d}/nope.txt"],
                            ["--end-offsets", "no such file or directory"]),
    "malformed end offsets": (lambda d: ["--source", f"parquet:{d}/dump", "--end-offsets", f"{d}/bad-ends.txt"],
                              ["expected topic:partition:offset per line", "this is not an offset"]),
    "end offsets without offset": (lambda d: ["--source", f"parquet:{d}/dump", "--end-offsets", f"{d}/bad-ends.csv"],
                                   ["missing column(s) offset"]),
    "end offsets that are not Parquet": (lambda d: ["--source", f"parquet:{d}/dump", "--end-offsets",
                                                    f"{d}/not-parquet.parquet"], ["--end-offsets", "cannot read"]),
    "live end offsets of a dump": (lambda d: ["--source", f"parquet:{d}/dump", "--end-offsets", "kafka"],
                                   ["takes the cluster of --source"]),
    "missing topic ids": (lambda d: ["--source", f"parquet:{d}/dump", "--topic-ids", f"{d}/nope.csv"],
                          ["--topic-ids", "no such file"]),
    "malformed topic ids": (lambda d: ["--source", f"parquet:{d}/dump", "--topic-ids", f"{d}/bad-ids.csv"],
                            ["line 1: expected topic_id,topic"]),
    "catalog database that is not an identifier": (
        lambda d: ["--source", f"parquet:{d}/dump", "--catalog-database", "my-db"],
        ["--catalog-database 'my-db': not a SQL identifier"]),
    "catalog dir without a database": (lambda d: ["--source", f"parquet:{d}/dump", "--catalog-dir", f"{d}/catalog"],
                                       ["--catalog-dir: given without --catalog-database"]),
    "catalog dir under a file": (
        lambda d: ["--source", f"parquet:{d}/dump", "--catalog-database", "lake", "--catalog-dir", f"{d}/a-file/c"],
        ["--catalog-dir", "cannot be created", "a-file is not a directory"]),
}


@pytest.mark.parametrize("case", REBUILD_CASES)
def test_a_bad_rebuild_argument_is_one_line_before_spark(case, inputs, tables, spark_home, tmp):
    args, fragments = REBUILD_CASES[case]
    result = offsetlake(["rebuild", *args(inputs), "--output", str(tables)], spark_home, tmp)
    one_line_error(result, spark_home, *fragments)


@pytest.mark.parametrize("case", ["missing dump", "dump without key", "malformed end offsets"])
def test_the_spark_submit_entry_has_the_same_errors(case, inputs, tables, spark_home, tmp):
    args, fragments = REBUILD_CASES[case]
    result = offsetlake([*args(inputs), "--output", str(tables)], spark_home, tmp, entry=SPARK_SUBMIT_ENTRY)
    one_line_error(result, spark_home, *fragments)


@pytest.mark.parametrize("output, fragments", [
    ("a-file/tables", ["cannot be created", "a-file is not a directory"]),
    ("a-file/deeper/tables", ["cannot be created", "a-file is not a directory"]),
    ("a-file", ["is a file"]),
])
def test_an_output_that_cannot_be_created_is_one_line_before_spark(output, fragments, inputs, spark_home, tmp):
    result = offsetlake(["rebuild", "--source", f"parquet:{inputs}/dump", "--output", str(inputs / output)],
                        spark_home, tmp)
    one_line_error(result, spark_home, *fragments)


def test_an_output_without_write_permission_is_one_line_before_spark(spark_home):
    shared = Path(tempfile.mkdtemp(prefix="offsetlake-test-"))
    try:
        shared.chmod(0o755)
        home = shutil.copytree(spark_home, shared / "spark-home")
        offsets_log().write_parquet(shared / "dump")
        locked = shared / "locked"
        locked.mkdir(mode=0o555)
        with unwritable(locked) as (as_user, why):
            result = offsetlake(["rebuild", "--source", f"parquet:{shared}/dump", "--output", str(locked / "tables")],
                                home, shared, as_user=as_user, cwd=shared)
        one_line_error(result, home, f"--output {locked}/tables: cannot write in {locked} ({why})")
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(shared)


@contextmanager
def unwritable(folder: Path) -> Iterator[tuple[list[str] | None, str]]:
    """`folder` (mode 555) as a user without write permission finds it; yields the prefix that runs a command as
    such a user (None: this process's), and why the folder cannot be written in. Root may write anywhere: as root,
    the command is run by `nobody` (setpriv) where `nobody` can run this checkout's offsetlake (not in a clone in
    a folder only root may enter, such as `mktemp -d` makes), else by root in a folder root cannot write in either:
    immutable (chattr +i), or else a read-only bind mount; else the test is skipped with the reason."""
    if os.geteuid() != 0:
        yield None, "permission denied"
        return
    nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if succeeds([*nobody, str(OFFSETLAKE), "--help"]):
        yield nobody, "permission denied"
        return
    ways = ((["chattr", "+i", str(folder)], ["chattr", "-i", str(folder)], "permission denied"),
            (["mount", "--bind", "-o", "ro", str(folder), str(folder)], ["umount", str(folder)],
             "read-only file system"))
    for close, reopen, why in ways:
        if succeeds(close):
            try:
                yield None, why
            finally:
                subprocess.run(reopen, check=True)
            return
    pytest.skip(f"running as root: user nobody cannot run {OFFSETLAKE} (is a folder above it closed to others?), "
                "and neither chattr +i nor a read-only bind mount can make a folder root cannot write in")


def succeeds(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=60).returncode == 0
    except OSError:  # not installed
        return False


@pytest.mark.parametrize("args, fragments", [
    (lambda d, out: ["dump", "--source", f"parquet:{d}/dump", "--output", str(out)], ["already exists"]),
    (lambda d, out: ["dump", "--source", f"parquet:{d}/dump", "--output", f"{d}/a-file/dump"],
     ["cannot be created", "a-file is not a directory"]),
    (lambda d, out: ["dump", "--source", f"parquet:{d}/no-key.parquet", "--output", f"{out}/dump"],
     ["missing required column(s) key"]),
    (lambda d, out: ["dump", "--source", f"segments:{d}/no-partitions", "--output", f"{out}/dump"],
     ["no __consumer_offsets-N folder found"]),
    (lambda d, out: ["demo", "--dir", f"{d}/a-file/demo"], ["--dir", "a-file is not a directory"]),
    (lambda d, out: ["bench", "--work", f"{d}/a-file/work"], ["--work", "a-file is not a directory"]),
    (lambda d, out: ["bench", "--dump", f"{d}/not-parquet.parquet", "--work", f"{out}/work"],
     ["cannot read Parquet"]),
    (lambda d, out: ["bench", "--daily", "3", "--work", f"{out}/work"], ["--daily needs --incremental"]),
    (lambda d, out: ["bench", "--incremental", "0.5", "--daily", "2", "--work", f"{out}/work"],
     ["leave no records for the first run"]),
], ids=["dump over a dump", "dump under a file", "dump of a dump without key", "dump of an empty log dir",
        "demo under a file", "bench under a file", "bench of a file that is not Parquet", "bench daily alone",
        "bench daily of everything"])
def test_every_spark_command_checks_its_arguments_before_spark(args, fragments, inputs, tables, spark_home, tmp):
    result = offsetlake(args(inputs, tables), spark_home, tmp)
    one_line_error(result, spark_home, *fragments)


def test_a_good_local_rebuild_never_starts_spark(inputs, tmp_path, spark_home, tmp):
    out = tmp_path / "out"
    result = offsetlake(["rebuild", "--source", f"parquet:{inputs}/dump", "--output", str(out), "--end-offsets",
                         str(inputs / "ends.txt")], spark_home, tmp)
    assert result.returncode == 0, result.stderr
    assert not (spark_home / "started").exists(), result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["runner"] == "local" and summary["committed_offsets"] == 1 and summary["consumer_lag"] == 1
    assert summary["delta_engine"] == "delta-rs" and list(tmp.glob("offsetlake-spark-*.log")) == []


def test_when_spark_cannot_start_the_one_line_names_its_log(inputs, tmp_path, spark_home, tmp):
    args = ["rebuild", "--engine", "spark", "--source", f"parquet:{inputs}/dump", "--output", str(tmp_path / "out")]
    result = offsetlake(args, spark_home, tmp)
    assert (spark_home / "started").exists()
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    assert "JAVA_GATEWAY_EXITED" in lines[0]
    logs = list(tmp.glob("offsetlake-spark-*.log"))
    assert len(logs) == 1 and lines[0].endswith(f"; Spark's log: {logs[0]})")
    assert logs[0].read_text() == "fake spark-submit: no JVM here\n"  # the launcher's words, not the user's screen

    debug = offsetlake(["--debug", *args], spark_home, tmp)
    assert debug.returncode == 1
    assert "fake spark-submit: no JVM here" in debug.stderr and "Traceback" in debug.stderr
    assert len(list(tmp.glob("offsetlake-spark-*.log"))) == 1  # --debug writes no log: its output is on stderr


def test_a_rebuild_shows_no_jvm_or_spark_banner(inputs, tmp_path, tmp):
    """The one real Spark process of this module; its tables are the local runner's."""
    out = tmp_path / "tables"
    result = offsetlake(["rebuild", "--engine", "spark", "--source", f"parquet:{inputs}/dump", "--output", str(out),
                         "--end-offsets", str(inputs / "ends.txt")], None, tmp)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("offsetlake: ") for line in lines), result.stderr
    assert not any(line.startswith("offsetlake: error") for line in lines)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["runner"] == "spark" and summary["committed_offsets"] == 1 and summary["consumer_lag"] == 1
    # A count is deterministic where a time is not: a rebuild is three passes, each one Spark job (two with adaptive
    # execution's shuffle), whatever the number of tables (their tasks write them: jobs.engine.spark).
    assert 0 < summary["spark_jobs"] <= 6 and summary["spark_stages"] <= 8, summary
    assert list(tmp.glob("offsetlake-spark-*.log")) == []  # a good run leaves no log behind
    local = offsetlake(["rebuild", "--engine", "local", "--source", f"parquet:{inputs}/dump", "--output",
                        str(tmp_path / "local"), "--end-offsets", str(inputs / "ends.txt")], None, tmp)
    assert local.returncode == 0, local.stderr
    assert read_tables(out) == read_tables(tmp_path / "local")

