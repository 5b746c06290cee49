"""Which runner runs a rebuild is decided in one place (jobs.engine.choose_runner)."""
from __future__ import annotations

import pytest

from jobs.config import RebuildConfig, SourceSpec
from jobs.engine import choose_runner
from jobs.engine.local import LocalRunner
from jobs.errors import BadInput


class Config:
    def __init__(self, source: str, engine: str = "auto", workers: int | None = None) -> None:
        self.source = SourceSpec(*source.split(":", 1))
        self.engine = engine
        self.workers = workers


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE", "DATABRICKS_RUNTIME_VERSION"):
        monkeypatch.delenv(name, raising=False)


def test_a_local_source_on_a_command_line_runs_on_the_local_pool():
    runner = choose_runner(Config("parquet:/dumps/offsets"))
    assert isinstance(runner, LocalRunner) and runner.processes
    assert choose_runner(Config("segments:/var/lib/kafka", workers=3)).cores == 3
    in_process = choose_runner(Config("parquet:/dumps/offsets", engine="local", workers=0))
    assert not in_process.processes


@pytest.mark.parametrize("launcher", ["PYSPARK_GATEWAY_PORT", "DATABRICKS_RUNTIME_VERSION", "SPARK_REMOTE"])
def test_spark_submit_databricks_and_spark_connect_run_on_spark(monkeypatch, launcher):
    monkeypatch.setenv(launcher, "1")
    import jobs.engine.spark as spark_engine

    chosen = []
    monkeypatch.setattr(spark_engine, "SparkRunner", lambda spark, cfg: chosen.append(cfg) or "spark runner")
    assert choose_runner(Config("parquet:/dumps/offsets")) == "spark runner" and chosen


def test_a_dump_on_an_object_store_runs_on_the_local_pool_too():
    # pyarrow reads it (tests/lake/test_object_store.py): only a launcher or a session chooses Spark.
    assert isinstance(choose_runner(Config("parquet:s3://bucket/dump")), LocalRunner)


def test_an_unknown_engine_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "dump").mkdir()
    with pytest.raises(BadInput, match="--engine 'gpu'"):
        RebuildConfig.build(source=f"parquet:{tmp_path}/dump", output=str(tmp_path / "out"), engine="gpu")
