"""`offsetlake reset-offsets`: the reset plan `kafka-consumer-groups.sh --reset-offsets --from-file` reads,
from tables written with delta-rs alone (tests/delta_runs.py): no Spark anywhere."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from delta_runs import commit_run

from jobs.cli import cli

REPO = Path(__file__).resolve().parents[2]
T = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)


def offsets(group: str, rows: list[tuple[str, int, int]]) -> list[dict]:
    return [{"group_id": group, "topic": t, "partition": p, "committed_offset": o, "commit_timestamp": T,
             "metadata": "", "as_of": T} for t, p, o in rows]


def group(group_id: str) -> dict:
    return {"group_id": group_id, "group_type": "classic", "state": "Empty", "member_count": 0, "as_of": T}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tables")
    # Rows out of order on purpose; partition 10 sorts after 9 as a number.
    committed = offsets("g", [("orders", 10, 1000), ("billing", 0, 5), ("orders", 9, 900), ("orders", 0, 42)])
    committed += offsets("other", [("orders", 0, 1)])
    commit_run(path, {"committed_offsets": committed,
                      "consumer_groups": [group("g"), group("other"), group("no-offsets")]})
    # A run killed after its table commits (never recorded in _runs): its offsets must not be offered.
    commit_run(path, {"committed_offsets": offsets("g", [("orders", 0, 999_999)]),
                      "consumer_groups": [group("g")]}, finish=False)
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, ["reset-offsets", *args], catch_exceptions=False)


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offsetlake: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_the_plan_is_topic_partition_offset_lines_sorted_without_header(out):
    result = invoke("--output", str(out), "--group", "g")
    assert result.exit_code == 0, result.output
    assert result.stdout == "billing,0,5\norders,0,42\norders,9,900\norders,10,1000\n"
    assert result.stderr == ""


def test_topic_keeps_only_that_topic(out):
    assert invoke("--output", str(out), "--group", "g", "--topic", "orders").stdout == \
        "orders,0,42\norders,9,900\norders,10,1000\n"


@pytest.mark.parametrize("args, fragments", [
    (["--group", "nope"], ["--group nope: no such group at 2026-11-01T08:00:00Z"]),
    (["--group", "no-offsets"], ["--group no-offsets: the group has no committed offsets at 2026-11-01T08:00:00Z"]),
    (["--group", "g", "--topic", "payments"], ["--topic payments: group g has no committed offsets on it"]),
], ids=["unknown group", "group without offsets", "topic without offsets"])
def test_nothing_to_reset_is_one_line_and_exit_2(out, args, fragments):
    one_line_error(invoke("--output", str(out), *args), *fragments)


def test_a_missing_or_empty_output_folder_is_one_line_and_exit_2(tmp_path):
    one_line_error(invoke("--output", str(tmp_path / "nope"), "--group", "g"), "no such directory")
    one_line_error(invoke("--output", str(tmp_path), "--group", "g"), "no committed_offsets table there")


def test_the_command_starts_no_jvm(out, tmp_path):
    """As a process: SPARK_HOME points at a spark-submit that records a launch (none may happen)."""
    home = tmp_path / "spark-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text('#!/bin/sh\ntouch "$(dirname "$0")/../started"\nexit 1\n')
    (home / "bin" / "spark-submit").chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}, "SPARK_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "reset-offsets", "--output", str(out), "--group", "g",
                             "--topic", "billing"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, "billing,0,5\n", "")
    assert not (home / "started").exists()
