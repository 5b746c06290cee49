"""Dumps and tables on an object store: moto's S3 server on 127.0.0.1 (tests/s3_server.py), reached as a user
would, by whole `offsetlake` processes given s3:// URIs, credentials in the environment and the endpoint as a
--storage-option. The rebuild reads its dump and end offsets there and writes its tables there with delta-rs;
the reading commands read them there; each prints what it prints for the same tables on a local disk. A bad
location is one line and exit status 2, and leaves nothing in the working folder or in the bucket.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from offsets_log import MINUTE, T0, OffsetsLog, member
from runs import read_tables
from s3_server import S3Server, free_port, no_credentials
from takeover import paused_takeover

from jobs.base.storage import Location
from jobs.lake.runs import finished_runs, unreferenced_files

OFFSETLAKE = str(Path(sys.executable).with_name("offsetlake"))
READS = (("sql", "--format", "csv", "SELECT group_id, topic, partition, committed_offset, lag FROM consumer_lag "
          "ORDER BY 1, 2, 3"),
         ("show", "--rows", "3"),
         ("describe", "--group", "g", "--members", "--verbose"),
         ("reset-offsets", "--group", "g"))


def write_dump(path: Path, later: bool) -> None:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    log.commit("eos", "t", 0, 40, T0 + MINUTE, producer_id=7)  # an exactly-once commit, then its marker
    log.marker(7, "COMMIT", T0 + MINUTE)
    if later:
        log.commit("g", "t", 0, 95, T0 + 2 * MINUTE)
        log.group("h", T0 + 2 * MINUTE, members=[member("m2", ["t"], {"t": [0]}, client_id="c2")])
        log.commit("h", "t", 0, 5, T0 + 2 * MINUTE)
    log.write_parquet(path)


def offsetlake(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([OFFSETLAKE, "--quiet", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server.start(str(tmp_path_factory.mktemp("moto") / "moto.log"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lake(s3, tmp_path_factory) -> dict:
    """The same dumps rebuilt to a local folder and to the bucket (from the dumps uploaded there)."""
    base = tmp_path_factory.mktemp("lake")
    for name, later in (("first", False), ("second", True)):
        write_dump(base / name, later)
        pafs.copy_files(str(base / name), f"{s3.bucket}/dumps/{name}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=s3.fs)
    (base / "ends.txt").write_text("t:0:100\nt:1:140\n")
    with s3.fs.open_output_stream(f"{s3.bucket}/ends.txt") as f:
        f.write(b"t:0:100\nt:1:140\n")
    cwd = base / "cwd"
    cwd.mkdir()
    tables = f"s3://{s3.bucket}/tables"
    results = {}
    for name in ("first", "second"):
        local = offsetlake("rebuild", "--source", f"parquet:{base / name}", "--output", str(base / "tables"),
                           "--end-offsets", str(base / "ends.txt"), env=no_credentials(), cwd=cwd)
        remote = offsetlake("rebuild", "--source", f"parquet:s3://{s3.bucket}/dumps/{name}", "--output", tables,
                            "--end-offsets", f"s3://{s3.bucket}/ends.txt", *s3.options, env=s3.env, cwd=cwd)
        results[name] = (local, remote)
    return {"base": base, "cwd": cwd, "local": base / "tables", "remote": tables, "runs": results}


def test_a_rebuild_reads_its_dump_there_and_writes_its_tables_there(s3, lake):
    for local, remote in lake["runs"].values():
        assert local.returncode == 0, local.stderr
        assert remote.returncode == 0, remote.stderr
    remote = Location.parse(lake["remote"], s3.storage)
    assert read_tables(remote) == read_tables(lake["local"])
    assert len(finished_runs(remote)) == 2 and unreferenced_files(remote) == []
    assert os.listdir(lake["cwd"]) == []  # nothing in the working folder: no `s3:` folder, no staging
    assert not [k for k in s3.keys() if "_offsetlake_staging" in k]


def test_every_version_of_the_first_run_stays_readable_after_the_second(s3, lake):
    remote = Location.parse(lake["remote"], s3.storage)
    first = finished_runs(remote)[0]
    version = {t["table"]: t["version"] for t in first["tables"]}["committed_offsets"]
    from jobs.lake.runs import delta_table

    rows = delta_table(remote.child("committed_offsets"), version).to_pyarrow_table().to_pylist()
    assert sorted((r["group_id"], r["partition"], r["committed_offset"]) for r in rows) == [
        ("eos", 0, 40), ("g", 0, 90), ("g", 1, 120)]


@pytest.mark.parametrize("command", READS, ids=[c[0] for c in READS])
def test_the_reading_commands_print_what_they_print_for_a_local_output(s3, lake, command):
    name, *args = command
    local = offsetlake(name, "--output", str(lake["local"]), *args, env=no_credentials(), cwd=lake["cwd"])
    remote = offsetlake(name, "--output", lake["remote"], *s3.options, *args, env=s3.env, cwd=lake["cwd"])
    assert local.returncode == 0 and remote.returncode == 0, (local.stderr, remote.stderr)
    local_lines = local.stdout.replace(str(lake["local"]), "OUT").splitlines()
    remote_lines = remote.stdout.replace(lake["remote"], "OUT").splitlines()
    if name == "show":  # its first line names the run: another id, time and source
        assert remote_lines[0].endswith(f"from parquet:s3://{s3.bucket}/dumps/second")
        local_lines, remote_lines = local_lines[1:], remote_lines[1:]
    assert local_lines and remote_lines == local_lines


def test_the_archive_there(s3, lake):
    """rebuild --archive into the bucket: raw_records read back there (the plan's files, their row groups) and
    appended to, each record once."""
    import json

    import jobs
    from jobs.lake.runs import snapshot

    tables = f"s3://{s3.bucket}/archived"
    found = []
    # The package's own entry (rebuild's options), from this checkout: the venv's `offsetlake` may be another's.
    env = {**s3.env, "PYTHONPATH": str(Path(jobs.__file__).parents[1])}
    for name in ("first", "second"):  # a rerun appending nothing: tests/lake/test_archive.py
        command = [sys.executable, "-m", "jobs", "--source", f"parquet:s3://{s3.bucket}/dumps/{name}", "--output",
                   tables, "--end-offsets", f"s3://{s3.bucket}/ends.txt", "--archive", *s3.options]
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=lake["cwd"], timeout=300)
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        found.append((summary["records_archived_before"], summary["records_new"]))
    assert found == [(0, 5), (5, 3)]
    remote = Location.parse(tables, s3.storage)
    rows = snapshot(remote, ["raw_records"]).open("raw_records").to_pyarrow_table().to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, o) for o in range(8)]
    assert read_tables(remote)["offset_commits"] == read_tables(lake["local"])["offset_commits"]
    assert unreferenced_files(remote) == [] and not [k for k in s3.keys() if "_offsetlake_staging" in k]


def test_a_paused_run_that_lost_its_output_there_exits_1_and_readers_see_the_taker(s3, lake, tmp_path):
    """The lock's fencing on the object store: a run paused after two table commits, past its lease, loses the
    output to another run; resumed, it commits nothing more (its commit of the version it opened conflicts with
    the taker's fence) and exits 1 with one line; readers see the taker's run, every version opens."""
    tables = f"s3://{s3.bucket}/taken"
    ends = ["--end-offsets", f"s3://{s3.bucket}/ends.txt", *s3.options]
    dumps = {name: ["--source", f"parquet:s3://{s3.bucket}/dumps/{name}", *ends] for name in ("first", "second")}
    assert offsetlake("rebuild", "--output", tables, *dumps["first"], env=s3.env, cwd=lake["cwd"]).returncode == 0
    result = paused_takeover(tables, dumps["second"], dumps["first"], env=s3.env, cwd=lake["cwd"])
    assert result["taker"].returncode == 0, result["taker"].stderr
    status, err = result["holder"]
    assert status == 1 and len(err.strip().splitlines()) == 1 and "taken over by run" in err, err
    remote = Location.parse(tables, s3.storage)
    assert len(finished_runs(remote)) == 2
    lag = ("sql", "--format", "csv", "SELECT group_id, partition, committed_offset FROM committed_offsets ORDER BY 1, 2")
    seen = offsetlake(lag[0], "--output", tables, *s3.options, *lag[1:], env=s3.env, cwd=lake["cwd"])
    assert seen.stdout == "group_id,partition,committed_offset\neos,0,40\ng,0,90\ng,1,120\n", seen.stderr
    from jobs.lake.runs import delta_table, table_folders

    for path in table_folders(remote):
        for version in range(delta_table(path).version() + 1):
            delta_table(path, version).to_pyarrow_table()


def bad_location(s3, tmp_path, *args: str, env: dict[str, str]) -> str:
    """Run a rebuild that must fail on a location: its one stderr line (exit 2, nothing left anywhere)."""
    before = s3.keys()
    cwd = Path(tempfile.mkdtemp(dir=tmp_path))
    result = offsetlake("rebuild", *args, env=env, cwd=cwd)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert os.listdir(cwd) == [] and not (tmp_path / "out").exists() and s3.keys() == before
    return lines[0]


def test_a_bucket_that_does_not_exist(s3, lake, tmp_path):
    dump = f"parquet:{lake['base'] / 'first'}"
    line = bad_location(s3, tmp_path, "--source", dump, "--output", "s3://no-such-bucket/tables", *s3.options,
                        env=s3.env)
    assert line == "offsetlake: error: --output s3://no-such-bucket/tables: bucket no-such-bucket does not exist"
    line = bad_location(s3, tmp_path, "--source", "parquet:s3://no-such-bucket/dump", "--output",
                        str(tmp_path / "out"), *s3.options, env=s3.env)
    assert line == "offsetlake: error: --source parquet:s3://no-such-bucket/dump: bucket no-such-bucket does not exist"


def test_credentials_refused_are_one_line_and_never_printed(s3, lake, tmp_path):
    wrong = "wR0ngSecretValue"
    line = bad_location(s3, tmp_path, "--source", f"parquet:{lake['base'] / 'first'}", "--output",
                        f"s3://{s3.bucket}/tables", *s3.options, "--storage-option", f"AWS_SECRET_ACCESS_KEY={wrong}",
                        env=s3.env)
    assert line.startswith(f"offsetlake: error: --output s3://{s3.bucket}/tables: ") and "denied" in line.lower()
    assert wrong not in line


def test_missing_credentials(s3, lake, tmp_path):
    line = bad_location(s3, tmp_path, "--source", f"parquet:{lake['base'] / 'first'}", "--output",
                        f"s3://{s3.bucket}/tables", *s3.options, env=no_credentials())
    assert line.startswith(f"offsetlake: error: --output s3://{s3.bucket}/tables: ")
    assert "no AWS credentials" in line


def test_an_endpoint_that_does_not_answer(s3, lake, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    line = bad_location(s3, tmp_path, "--source", f"parquet:{lake['base'] / 'first'}", "--output",
                        f"s3://{s3.bucket}/tables", "--storage-option", f"AWS_ENDPOINT_URL={closed}", env=s3.env)
    assert line.startswith(f"offsetlake: error: --output s3://{s3.bucket}/tables: ")


def test_an_unknown_scheme(s3, lake, tmp_path):
    line = bad_location(s3, tmp_path, "--source", f"parquet:{lake['base'] / 'first'}", "--output",
                        "ftp://host/tables", env=s3.env)
    assert line.startswith("offsetlake: error: --output ftp://host/tables: unknown scheme ftp://")
