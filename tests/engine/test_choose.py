"""Which runner runs a rebuild is decided in one place (jobs.engine.choose_runner)."""
from __future__ import annotations

from pathlib import Path

import pytest

import jobs.cli

from jobs.base.errors import BadInput
from jobs.config import RebuildConfig
from jobs.engine import choose_runner
from jobs.engine.local import LocalRunner


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "DATABRICKS_RUNTIME_VERSION"):
        monkeypatch.delenv(name, raising=False)


def test_a_local_source_on_a_command_line_runs_on_the_local_pool():
    runner = choose_runner("auto", None, "offsetlake rebuild parquet:/dumps/offsets")
    assert isinstance(runner, LocalRunner) and runner.processes
    assert choose_runner("auto", 3, "offsetlake rebuild segments:/var/lib/kafka").cores == 3
    in_process = choose_runner("local", 0, "offsetlake rebuild parquet:/dumps/offsets")
    assert not in_process.processes


@pytest.mark.parametrize("launcher", ["PYSPARK_GATEWAY_PORT", "DATABRICKS_RUNTIME_VERSION", "SPARK_REMOTE"])
def test_spark_submit_databricks_and_spark_connect_run_on_spark(monkeypatch, launcher):
    monkeypatch.setenv(launcher, "1")
    import jobs.engine.spark as spark_engine

    chosen = []
    monkeypatch.setattr(spark_engine, "SparkRunner", lambda spark, label: chosen.append(label) or "spark runner")
    assert choose_runner("auto", None, "offsetlake rebuild parquet:/dumps/offsets") == "spark runner" and chosen


def test_a_dump_on_an_object_store_runs_on_the_local_pool_too():
    # pyarrow reads it (tests/lake/test_object_store.py): only a launcher or a session chooses Spark.
    assert isinstance(choose_runner("auto", None, "offsetlake rebuild parquet:s3://bucket/dump"), LocalRunner)


def test_an_unknown_engine_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "dump").mkdir()
    with pytest.raises(BadInput, match="--engine 'gpu'"):
        RebuildConfig.build(source=f"parquet:{tmp_path}/dump", output=str(tmp_path / "out"), engine="gpu")


def test_a_local_rebuild_on_the_command_line_does_without_pandas(tmp_path):
    """pyarrow imports pandas at its first conversion (half a second of a run's start): `offsetlake rebuild` run
    by the local runner does without it (-X importtime lists every module the process imported), and gives the
    tables of a run that has it (here, the test's process, where run_rebuild leaves the imports alone)."""
    import json
    import subprocess
    import sys

    from jobs.cli import run_rebuild
    from jobs.tools.sample import write_sample

    dump = tmp_path / "dump"
    write_sample(dump, 2000, seed=3)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "jobs.cli", "-q", "rebuild", "--source",
                           f"parquet:{dump}", "--output", str(tmp_path / "out"), "--workers", "0"],
                          capture_output=True, text=True, timeout=300, cwd=Path(jobs.cli.__file__).parents[1])
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "pyarrow.lib" in imported and not [m for m in imported if m.startswith("pandas.")]  # ("pandas": tried)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    here = run_rebuild(output=str(tmp_path / "here"), source=f"parquet:{dump}", engine="local", workers=0)
    assert (found["groups"], found["committed_offsets"]) == (here["groups"], here["committed_offsets"])
    assert here["groups"] > 0 and "pandas" in sys.modules
