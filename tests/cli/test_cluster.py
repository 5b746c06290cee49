"""On a real cluster: a Spark standalone master and two workers (tests/cluster.py, the `spark_cluster` fixture),
the wheel installed in a fresh virtualenv (tests/wheel_env.py), and spark-submit of the wheel's entry with
`--master spark://127.0.0.1:PORT`, as users run it. Executors are other processes, in other working folders:
whatever the driver plans, they must be able to read.

One spark-submit rebuilds the same records from a Parquet dump and from a broker log dir, each as the entry runs
under spark-submit; every table must equal a local run's of the same source, row for row. Then
conf/spark-submit-daily.sh runs against the cluster with only its variables changed, its source librdkafka's mock
cluster (tests/kafka_mock.py, in this process: the executors read it over 127.0.0.1) with the same records, live
end offsets, a snapshot and the catalog; its tables too must equal a local run's. An application's start (the
driver's JVM, an executor on each worker, their Python workers) is what costs here, hence two in all.
"""
from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from kafka_mock import MockCluster, produce_data, produce_rows
from offsets_log import HOUR, MINUTE, OffsetsLog, member
from runs import read_tables

from jobs.base.tables import SNAPSHOT_TABLES, TABLES, snapshot_table
from jobs.cli import cli
from jobs.sources.kafka_client import OFFSETS_TOPIC

REPO = Path(__file__).resolve().parents[2]
DAILY = REPO / "conf" / "spark-submit-daily.sh"
NOW = datetime.now(timezone.utc)
# Today 00:00 UTC, the daily script's as_of: the records are of the hours before it, so all of them count.
MIDNIGHT = int(NOW.replace(hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)
START = MIDNIGHT - 6 * HOUR
END_OFFSETS = {"orders": {0: 10, 1: 20}, "payments": {0: 4}}
SOURCES = ("parquet", "segments")  # the daily script's is a live cluster
# What differs between two runs of one live cluster: when the end offsets were fetched.
FETCH_TIMES = {"end_offsets_history": ("observed_at", "fetched_at"), "consumer_lag": ("end_offsets_fetched_at",)}

# Run by spark-submit in the wheel's virtualenv: the installed entry (jobs/__main__.py), as spark-submit runs a
# script, once per source (sys.argv[1]: {name: the entry's arguments}), in one application; then what ran it.
DRIVER = '''
import importlib.util, json, runpy, sys

entry = importlib.util.find_spec("jobs.__main__").origin
for name, arguments in json.loads(sys.argv[1]).items():
    sys.argv = [entry, *arguments]
    print("RUN " + name, flush=True)
    try:
        runpy.run_path(entry, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    print("EXIT " + json.dumps([name, code]), flush=True)
from pyspark.sql import SparkSession

context = SparkSession.getActiveSession().sparkContext
print("APP " + json.dumps({"id": context.applicationId, "master": context.master, "entry": entry}), flush=True)
'''


def offsets_log() -> OffsetsLog:
    """Groups over three coordinator partitions: members, a deleted offset, a simple group, a deleted group (an
    orphan), a rewind, offsets beyond the end and of a topic that is gone, and a record that cannot be decoded."""
    log = OffsetsLog()
    log.group("g", START, members=[member("m1", ["orders"], {"orders": [0, 1]}, client_id="c1")], coordinator=1)
    for i, offset in enumerate((3, 5, 4)):  # 5 -> 4: a rewind
        log.commit("g", "orders", 0, offset, START + (i + 1) * MINUTE, coordinator=1)
    log.commit("g", "orders", 1, 50, START + MINUTE, leader_epoch=3, coordinator=1)  # beyond the end: lag -30
    log.commit("g", "payments", 0, 1, START + MINUTE, coordinator=1)
    log.delete_offset("g", "payments", 0, START + 2 * MINUTE, coordinator=1)
    log.commit("s", "orders", 0, 2, START + MINUTE, coordinator=2)  # a simple group
    log.commit("s", "payments", 0, 3, START + MINUTE, version=4, coordinator=2)
    log.commit("s", "deleted-topic", 0, 9, START + MINUTE, coordinator=2)  # no such topic now
    log.group("gone", START, coordinator=0)
    log.commit("gone", "orders", 1, 7, START, coordinator=0)
    log.delete_group("gone", START + MINUTE, coordinator=0)
    log.raw(b"\x00\x01\x00", b"\x00\x03", START + HOUR, partition=0)  # truncated: quarantined
    return log


@pytest.fixture(scope="module")
def log() -> OffsetsLog:
    return offsets_log()


@pytest.fixture(scope="module")
def inputs(log, tmp_path_factory) -> Path:
    """dump/ (Parquet), logs/ (a broker log dir, with a damaged tail and a file that is not part of the log) and
    ends.txt, the same records and end offsets."""
    base = tmp_path_factory.mktemp("inputs")
    log.write_parquet(base / "dump")
    segments = log.write_segments(base / "logs")
    with open(segments[-1], "ab") as f:
        f.write(b"\x00" * 7)  # a cut-off batch header: the segment ends at its last valid batch
    (base / "logs" / f"{OFFSETS_TOPIC}-0" / "00000000000000000000.log.deleted").write_bytes(b"")
    (base / "ends.txt").write_text("".join(f"{t}:{p}:{o}\n" for t, ps in END_OFFSETS.items() for p, o in ps.items()))
    return base


@pytest.fixture(scope="module")
def mock(log):
    """librdkafka's mock cluster with the records, and the topics they commit for (their end offsets)."""
    cluster = MockCluster()
    try:
        cluster.create_topic(OFFSETS_TOPIC, 3)
        for topic, ends in END_OFFSETS.items():
            cluster.create_topic(topic, len(ends))
        produce_rows(cluster.bootstrap, OFFSETS_TOPIC, log.rows)
        for topic, ends in END_OFFSETS.items():
            produce_data(cluster.bootstrap, topic, ends)
        yield cluster
    finally:
        cluster.close()


def arguments(kind: str, out: Path) -> list[str]:
    """The entry's arguments for a rebuild of `kind`. The dump and the log dir are named relative to the working
    folder, as on a command line: Spark's executors run elsewhere and must be handed what the driver resolved.
    The output is a file:// URI: what Spark reads and writes goes through Hadoop's filesystem, the rest through
    jobs.base.storage (the Hadoop side of hdfs:// and s3a:// outputs, which need jars or services not here).
    """
    source = {"parquet": "parquet:dump", "segments": "segments:logs"}[kind]
    return ["--source", source, "--output", f"file://{out}", "--end-offsets", "ends.txt"]


def submit(cluster, python: Path, args: list, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """pyspark's own spark-submit against the cluster, with the virtualenv's Python on every node."""
    started = time.monotonic()
    result = subprocess.run([str(cluster.spark_submit), "--master", cluster.master_url,
                             "--conf", f"spark.pyspark.python={python}", *map(str, args)],
                            env=cluster.client_env(TMPDIR=str(cwd)), cwd=cwd, capture_output=True, text=True,
                            timeout=900)
    return result, time.monotonic() - started


def summary_of(stdout: str) -> dict:
    return json.loads(next(line for line in reversed(stdout.splitlines()) if line.startswith("{")))


@pytest.fixture(scope="module")
def submitted(spark_cluster, wheel_venv, inputs, tmp_path_factory) -> dict:
    """One spark-submit: a rebuild of each source, each into its own output."""
    base = tmp_path_factory.mktemp("submitted")
    driver = base / "driver.py"
    driver.write_text(DRIVER)
    runs = {kind: arguments(kind, base / kind) for kind in SOURCES}
    result, seconds = submit(spark_cluster, wheel_venv.python, [driver, json.dumps(runs)], cwd=inputs)
    assert result.returncode == 0, result.stderr[-5000:]
    found: dict = {"seconds": seconds, "stderr": result.stderr}
    kind = None
    for line in result.stdout.splitlines():
        if line.startswith("RUN "):
            kind, lines = line[4:], []
        elif line.startswith("EXIT "):
            name, code = json.loads(line[5:])
            found[name] = {"exit": code, "out": base / name,
                           "summary": summary_of("\n".join(lines)) if code == 0 else None}
            kind = None
        elif line.startswith("APP "):
            found["app"] = json.loads(line[4:])
        elif kind is not None:
            lines.append(line)
    print(f"\nspark-submit of the rebuilds on the cluster: {seconds:.1f}s ("
          + ", ".join(f"{k} {found[k]['summary']['seconds']}s" for k in SOURCES if found.get(k, {}).get("summary"))
          + " by their summaries)")
    return found


def local_run(args: list[str], cwd: Path, out: Path) -> dict:
    """The rebuild of `args` by the local runner, in this process, into `out` instead: its tables, and its summary
    under "summary"."""
    i = args.index("--output")
    args = [*args[:i + 1], str(out), *args[i + 2:]]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        result = CliRunner().invoke(cli, ["rebuild", *args, "--engine", "local", "--workers", "0"],
                                    catch_exceptions=False)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return {"summary": summary_of(result.stdout), **read_tables(out)}


def without(rows: list[dict], columns: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in columns} for row in rows]


def ran_on_both_workers(cluster, app_id: str) -> str:
    """The application had an executor on each worker (its folder in each worker's work directory): the run was
    not a local one inside the driver. Returns what the executors wrote to stderr."""
    logs = []
    for work in cluster.worker_dirs:
        executors = list((work / app_id).glob("*/stderr"))
        assert executors, f"no executor of {app_id} on {work.name}: {sorted(p.name for p in work.iterdir())}"
        logs += [p.read_text(errors="replace") for p in executors]
    return "\n".join(logs)


@pytest.mark.parametrize("kind", SOURCES)
def test_spark_submit_on_the_cluster_rebuilds_the_tables_of_a_local_run(kind, submitted, spark_cluster, wheel_venv,
                                                                      inputs, tmp_path):
    run = submitted[kind]
    assert run["exit"] == 0, submitted["stderr"][-5000:]
    summary = run["summary"]
    assert summary["runner"] == "spark" and summary["spark_jobs"] > 0, summary
    app = submitted["app"]
    assert app["master"] == spark_cluster.master_url, app  # spark-submit's --master, not conf/offsetlake.toml's
    assert app["entry"].startswith(str(wheel_venv.python.parent.parent)), app  # the installed wheel ran
    ran_on_both_workers(spark_cluster, app["id"])

    local = local_run(arguments(kind, run["out"]), inputs, tmp_path / "local")
    assert local["summary"]["runner"] == "local"
    tables = read_tables(run["out"])
    assert set(tables) == set(local) - {"summary"} == set(TABLES)
    for name in TABLES:
        assert tables[name] == local[name], name
    assert len(tables["committed_offsets"]) == summary["committed_offsets"] == 6
    assert summary["records_quarantined"] == 1 and summary["orphan_groups"] == ["gone"]
    assert len(tables["consumer_lag"]) == 5 and len(tables["group_members"]) == 1
    if kind == "segments":  # read by the executors: the damage and the file no task reads, by absolute path
        assert {(r["action"], Path(r["file"]).is_absolute()) for r in tables["segment_errors"]} == {
            ("file_ignored", True), ("segment_truncated", True)}, tables["segment_errors"]


def test_the_daily_script_runs_on_the_cluster_with_only_its_variables_changed(spark_cluster, wheel_venv, mock,
                                                                            tmp_path):
    """conf/spark-submit-daily.sh, with the cluster as its master, the mock cluster as its source, no Delta
    package (no Maven here: delta-rs writes) and no client settings; live end offsets, a snapshot and the catalog,
    as users run it. The executors read the live cluster: every table as a local run's at the same as_of."""
    out = tmp_path / "lake"
    env = spark_cluster.client_env(
        TMPDIR=str(tmp_path),
        OFFSETLAKE_SPARK_SUBMIT=str(spark_cluster.spark_submit),
        OFFSETLAKE_MASTER=spark_cluster.master_url,
        OFFSETLAKE_DRIVER_MEMORY="1g",
        OFFSETLAKE_DELTA_PACKAGE="",
        OFFSETLAKE_KAFKA_CONFIG="",
        OFFSETLAKE_VENV=str(wheel_venv.python.parent.parent),
        OFFSETLAKE_SOURCE=f"kafka:{mock.bootstrap}",
        OFFSETLAKE_OUTPUT=f"file://{out}",
        OFFSETLAKE_DATABASE="offsets",
    )
    before = {p.name for work in spark_cluster.worker_dirs for p in work.iterdir()}
    started = time.monotonic()
    result = subprocess.run(["bash", str(DAILY)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    print(f"\nconf/spark-submit-daily.sh on the cluster: {seconds:.1f}s")
    assert result.returncode == 0, result.stderr[-5000:]
    summary = summary_of(result.stdout)
    assert summary["runner"] == "spark" and summary["spark_jobs"] > 0, summary
    apps = {p.name for work in spark_cluster.worker_dirs for p in work.iterdir()} - before
    assert len(apps) == 1, apps
    executors = ran_on_both_workers(spark_cluster, apps.pop())
    for partition in range(3):  # the executors read the live cluster, each partition's planned slice
        assert f"offsetlake: read {OFFSETS_TOPIC}-{partition}: " in executors, partition

    midnight = datetime.fromtimestamp(MIDNIGHT / 1000, timezone.utc)
    assert summary["as_of"] >= midnight.strftime("%Y-%m-%dT00:00:00Z"), summary  # the next day's past midnight
    assert summary["catalog"]["catalog"] == "hive" and (out / "_catalog" / "metastore_db").is_dir(), summary
    assert summary["committed_offsets"] == 6 and summary["consumer_lag"] == 5, summary
    assert summary["records_quarantined"] == 1 and summary["orphan_groups"] == ["gone"], summary

    # The same run by the local runner, at the same as_of: every table equal but for when the ends were fetched.
    local = local_run(["--source", f"kafka:{mock.bootstrap}", "--output", str(out), "--as-of", summary["as_of"],
                       "--end-offsets", "kafka", "--snapshot"], tmp_path, tmp_path / "local")
    tables = read_tables(out)
    assert set(tables) == set(TABLES)
    for name in TABLES:
        ignored = FETCH_TIMES.get(name, ())
        assert without(tables[name], ignored) == without(local[name], ignored), name
    for table in SNAPSHOT_TABLES:  # the day's snapshot, partitioned by as_of
        ignored = FETCH_TIMES.get(table, ())
        rows, local_rows = (sorted(without(DeltaTable(str(o / snapshot_table(table))).to_pyarrow_table().to_pylist(),
                                           ignored), key=lambda r: repr(sorted(r.items())))
                            for o in (out, tmp_path / "local"))
        assert rows == local_rows, table
