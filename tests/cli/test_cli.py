"""The command line: errors are one stderr line with exit status 2; tables land as Delta and read back."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from offsets_log import DAY, HOUR, MINUTE, T0, OffsetsLog, member

from jobs.base.tables import TABLES, arrow_schema
from jobs.cli import cli
from jobs.lake.output_lock import LOCK_TABLE, holder_of
from jobs.lake.runs import RUNS_TABLE

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE, leader_epoch=2)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    log.commit("g", "old", 0, 7, T0 - 30 * DAY)  # an unsubscribed topic, long expired
    log.group("gone", T0, members=[])
    log.commit("gone", "t", 0, 1, T0)
    log.delete_group("gone", T0 + MINUTE)  # its offsets stay behind: an orphan
    log.raw(b"\x00\x01\x00", b"\x00\x03", T0 + HOUR)  # truncated key: quarantined
    path = tmp_path_factory.mktemp("dump") / "dump"
    log.write_parquet(path)
    return path


@pytest.fixture(scope="module")
def ends(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ends") / "end-offsets.txt"
    path.write_text("t:0:100\nt:1:110\n")
    return path


@pytest.fixture(scope="module")
def rebuilt(dump, ends, tmp_path_factory):
    out = tmp_path_factory.mktemp("tables")
    result = invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(out), "--end-offsets", str(ends))
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout.strip().splitlines()[-1])


def test_rebuild_prints_the_summary_as_the_last_line(rebuilt):
    _, summary = rebuilt
    assert summary["records_read"] == 8 and summary["records_decoded"] == 7 and summary["records_quarantined"] == 1
    assert summary["groups"] == 2 and summary["committed_offsets"] == 3 and summary["expired_offsets"] == 1
    assert summary["members"] == 1 and summary["consumer_lag"] == 3  # g/t/0, g/t/1 and the orphan's gone/t/0
    assert summary["as_of"] == "2026-11-01T01:00:00Z"  # the newest record timestamp
    assert summary["orphan_groups"] == ["gone"]
    assert summary["delta_engine"] == "delta-rs"


def test_a_small_local_rebuild_does_no_spark_work(rebuilt):
    """A local source on a command line runs on the local runner: no Spark job at all, and Delta written by
    delta-rs (a Spark run's work is bounded in tests/cli/test_whole_process.py)."""
    _, summary = rebuilt
    assert summary["runner"] == "local" and "spark_jobs" not in summary and "spark_stages" not in summary, summary


def test_every_contract_table_is_a_delta_table_with_the_contract_schema(rebuilt):
    out, _ = rebuilt
    # Staged tables and pinned state are gone; _runs records the run (jobs.lake.runs), the lock is released.
    assert sorted(p.name for p in out.iterdir()) == sorted([*TABLES, RUNS_TABLE, LOCK_TABLE])
    assert holder_of(out) is None
    for table in TABLES:
        written = DeltaTable(str(out / table)).to_pyarrow_dataset().schema
        assert written.names == arrow_schema(table).names, table
        for field in arrow_schema(table):
            assert str(written.field(field.name).type).split("<")[0] == str(field.type).split("<")[0], (table, field)
    lag = DeltaTable(str(out / "consumer_lag")).to_pyarrow_table().to_pylist()
    assert sorted((r["group_id"], r["partition"], r["lag"]) for r in lag) == [("g", 0, 10), ("g", 1, -10), ("gone", 0, 99)]
    quarantine = DeltaTable(str(out / "quarantine")).to_pyarrow_table().to_pylist()
    assert [(q["key"], q["value"]) for q in quarantine] == [(b"\x00\x01\x00", b"\x00\x03")]


def test_a_second_run_replaces_the_tables_in_one_new_version(rebuilt, dump, ends):
    out, _ = rebuilt
    before = DeltaTable(str(out / "committed_offsets")).version()
    result = invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(out), "--as-of", str(T0 + 2 * MINUTE),
                    "--end-offsets", str(ends))
    assert result.exit_code == 0, result.output
    table = DeltaTable(str(out / "committed_offsets"))
    assert table.version() == before + 1
    rows = table.to_pyarrow_table().to_pylist()
    assert {r["as_of"].isoformat() for r in rows} == {"2026-11-01T00:02:00+00:00"}
    assert len(rows) == 3  # g/t/0, g/t/1, gone/t/0; old/0 (30 days, unsubscribed) has still expired


def test_a_failed_run_leaves_the_previous_tables_as_they_were(rebuilt, tmp_path):
    out, _ = rebuilt
    version = DeltaTable(str(out / "consumer_groups")).version()
    bad = tmp_path / "bad"
    bad.mkdir()
    pq.write_table(pa.table({"key": [b"x"], "partition": [0]}), bad / "x.parquet")
    result = invoke("rebuild", "--source", f"parquet:{bad}", "--output", str(out))
    one_line_error(result, "missing required column(s) value, offset, timestamp")
    assert DeltaTable(str(out / "consumer_groups")).version() == version
    assert not (out / "_offsetlake_staging").exists()


@pytest.mark.parametrize("args, fragments", [
    (["--source", "nope:x"], ["--source 'nope:x'", "parquet:PATH"]),
    (["--source", "parquet:/does/not/exist"], ["no such file or directory"]),
    (["--source", "segments:/does/not/exist"], ["--source segments:/does/not/exist: no such directory"]),
    (["--source", f"segments:{REPO / 'pyproject.toml'}"], ["not a directory", "__consumer_offsets-N folder"]),
    (["--source", "parquet:.", "--as-of", "yesterday"], ["--as-of 'yesterday'", "ISO-8601"]),
    (["--source", "parquet:.", "--retention-minutes", "0"], ["--retention-minutes"]),
    (["--source", "parquet:.", "--topic-ids", "/nope.csv"], ["--topic-ids /nope.csv: no such file"]),
    (["--source", "parquet:.", "--rate-window-minutes", "0"], ["--rate-window-minutes", "0 is not in the range"]),
    (["--source", "parquet:.", "--status-window", "1"], ["--status-window", "1 is not in the range x>=2"]),
    (["--source", "parquet:.", "--history-days", "0"], ["--history-days", "0 is not in the range x>=1"]),
    (["--source", "parquet:.", "--no-history", "--history-days", "3"],
     ["--history-days 3: given with --no-history (there is no history to keep)"]),
])
def test_bad_arguments_are_one_line_and_exit_2(args, fragments, tmp_path):
    one_line_error(invoke("rebuild", "--output", str(tmp_path / "out"), *args), *fragments)
    assert not (tmp_path / "out").exists()


def test_rate_and_status_windows_default_from_conf_and_are_checked_before_spark(tmp_path):
    from jobs.base.errors import BadInput
    from jobs.config import RebuildConfig

    dump = tmp_path / "dump.parquet"
    pq.write_table(pa.table({"key": [b"k"], "value": [b"v"], "partition": pa.array([0], pa.int32()),
                             "offset": pa.array([0], pa.int64()), "timestamp": pa.array([0], pa.int64())}), dump)
    source, out = f"parquet:{dump}", str(tmp_path / "out")
    cfg = RebuildConfig.build(source, out)
    assert (cfg.rate_window_minutes, cfg.rate_window_ms, cfg.status_window) == (15, 15 * 60_000, 10)
    cfg = RebuildConfig.build(source, out, rate_window_minutes=5, status_window=3)
    assert (cfg.rate_window_ms, cfg.status_window) == (5 * 60_000, 3)
    with pytest.raises(BadInput, match=r"^--rate-window-minutes -1: must be a positive number of minutes$"):
        RebuildConfig.build(source, out, rate_window_minutes=-1)
    with pytest.raises(BadInput, match=r"^--status-window 1: must be at least 2 commits$"):
        RebuildConfig.build(source, out, status_window=1)


def test_bad_end_offsets_name_the_line(dump, tmp_path):
    ends = tmp_path / "ends.txt"
    ends.write_text("t:0:100\nthis is not an offset\n")
    result = invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(tmp_path / "o"), "--end-offsets", str(ends))
    one_line_error(result, "expected topic:partition:offset per line", "this is not an offset")


def test_the_installed_command_exits_2_with_one_line(tmp_path):
    exe = Path(sys.executable).with_name("offsetlake")
    result = subprocess.run([str(exe), "rebuild", "--source", "kafka", "--output", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--source 'kafka'" in result.stderr


def test_decode_prints_kafka_formatter_json(dump):
    result = invoke("decode", "--source", f"parquet:{dump}")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 8
    assert lines[1] == {"key": {"type": 1, "data": {"group": "g", "topic": "t", "partition": 0}},
                        "value": {"version": 3, "data": {"offset": 90, "leaderEpoch": 2, "metadata": "",
                                                         "commitTimestamp": T0 + MINUTE}}}
    assert lines[6] == {"key": {"type": 2, "data": {"group": "gone"}}, "value": None}
    assert lines[7]["error"].startswith("truncated") and lines[7]["key"] == "AAEA"


def test_describe_prints_like_kafka_consumer_groups(rebuilt):
    out, _ = rebuilt
    result = invoke("describe", "--output", str(out), "--group", "g")
    assert result.exit_code == 0, result.output
    pad = lambda s, n: s.ljust(n)  # noqa: E731
    header = " ".join([pad("GROUP", 15), pad("TOPIC", 15), pad("PARTITION", 10), pad("CURRENT-OFFSET", 15),
                       pad("LOG-END-OFFSET", 15), pad("LAG", 15), pad("CONSUMER-ID", 15), pad("HOST", 15), "CLIENT-ID"])
    row0 = " ".join([pad("g", 15), pad("t", 15), pad("0", 10), pad("90", 15), pad("100", 15), pad("10", 15),
                     pad("m1", 15), pad("/10.0.0.1", 15), "c1"])
    lines = result.stdout.split("\n")
    assert lines[0] == "" and lines[1] == header and lines[2] == row0
    assert lines[3].split()[:6] == ["g", "t", "1", "120", "110", "-10"]
    assert result.stdout.endswith("\n") and len(lines) == 5

    members = invoke("describe", "--output", str(out), "--group", "g", "--members", "--verbose").stdout
    assert members.split("\n")[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                              "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    assert members.split("\n")[2].split() == ["g", "m1", "/10.0.0.1", "c1", "2", "-", "t:0,1", "-", "-"]

    state = invoke("describe", "--output", str(out), "--group", "g", "--state").stdout
    assert state.split("\n")[2].split() == ["g", "__consumer_offsets-0", "(-)", "range", "Stable", "1"]

    gone = invoke("describe", "--output", str(out), "--group", "nope")
    assert (gone.exit_code, gone.stdout) == (2, "")  # as reset-offsets: one line naming the group and the moment
    [line] = gone.stderr.strip().splitlines()
    assert re.fullmatch(r"offsetlake: error: --group nope: no such group at 2026-11-\d\dT[\d:]+Z", line), line
    assert invoke("reset-offsets", "--output", str(out), "--group", "nope").stderr == gone.stderr
    both = invoke("describe", "--output", str(out), "--group", "g", "--members", "--state")
    assert both.stdout == state + members_plain(out)  # both views, --state first
    assert both.stderr.startswith(f"As of {line.rsplit(' ', 1)[1]} (run ")  # the moment, always said
    empty = invoke("describe", "--output", str(out), "--group", "gone")
    assert "Consumer group 'gone' has no active members." in empty.stderr


def members_plain(out) -> str:
    return invoke("describe", "--output", str(out), "--group", "g", "--members").stdout


def test_every_command_is_documented():
    for name, command in cli.commands.items():
        assert command.help and "Example" in command.help or name == "demo", name


def test_a_file_that_is_not_parquet_is_bad_input(tmp_path):
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "x.parquet").write_text("hello")
    result = invoke("rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(tmp_path / "o"))
    one_line_error(result, "cannot read Parquet", "x.parquet")


def test_debug_and_quiet_go_after_the_command_and_version_is_known(rebuilt, dump):
    out, _ = rebuilt
    quiet = invoke("sql", "--output", str(out), "SELECT 1 AS x", "-q")
    assert quiet.exit_code == 0 and quiet.stdout.splitlines()[2].strip() == "1"
    # --debug after the command: an internal failure shows its traceback (the runner sees the exception).
    failing = CliRunner().invoke(cli, ["rebuild", "--source", f"parquet:{dump}", "--output", "/proc/lake", "--debug"])
    assert failing.exit_code == 2  # BadInput stays one line even with --debug
    assert failing.stderr.strip() == "offsetlake: error: --output /proc/lake: cannot write in /proc (No such file or directory)"
    version = invoke("--version")
    assert version.exit_code == 0 and re.fullmatch(r"offsetlake \d+\.\d+\.\S+\n", version.stdout)


def test_progress_is_one_updating_line_on_a_terminal_only(monkeypatch):
    import io
    import logging

    from jobs.runtime.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    logging.getLogger("offsetlake").setLevel(logging.INFO)
    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        with Progress("reading", 3, every=0) as progress:
            for _ in range(3):
                progress.step()
        text = stream.getvalue()
        assert ("\n" not in text) and (text.count("\roffsetlake: reading: ") == (3 if shown else 0)), text
        assert text.endswith("\r\x1b[K") == shown  # cleared at the end: the next message starts on its own line


@pytest.mark.parametrize("name", ["a^b", "runs[1]", "x|y"])
def test_an_output_path_delta_rs_cannot_open_is_one_line_before_any_work(tmp_path, name):
    """delta-rs panics (its own trace on stderr) on these characters in a local path: refused before it runs."""
    (tmp_path / "dump").mkdir()
    result = invoke("rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(tmp_path / name))
    one_line_error(result, f"--output {tmp_path / name}: delta-rs cannot open a Delta table under a path with")
    assert not (tmp_path / name).exists()
    (tmp_path / name).mkdir()
    one_line_error(invoke("sql", "--output", str(tmp_path / name), "SELECT 1"), "delta-rs cannot open")
