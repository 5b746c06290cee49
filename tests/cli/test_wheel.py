"""The wheel: `python -m build` makes it, a fresh virtualenv installs it, and spark-submit runs a rebuild with
it: the one whole-process Spark run of the front-door work, sharing its start between everything that needs
one. The rebuild keeps a snapshot and registers the tables in a local Derby catalog; a later Spark session,
built from nothing but the catalog's spark-defaults.conf, then reads them by name.

The wheel and its virtualenv are the run's (tests/wheel_env.py, the `wheel_venv` fixture): the virtualenv holds
only the wheel (`--no-deps`); a .pth file lends it the running interpreter's site-packages for pyspark, pyarrow,
deltalake and the rest, so nothing is downloaded.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member
from wheel_env import run

from jobs.base.tables import SNAPSHOT_TABLES, TABLES, snapshot_table

REPO = Path(__file__).resolve().parents[2]
DATABASE = "lake"

# Run by spark-submit inside the fresh virtualenv: the wheel's spark-submit entry (jobs/__main__.py of the
# installed package) exactly as spark-submit runs a script, then a later session of the same user.
DRIVER = '''
import importlib.util, json, runpy, sys
from pathlib import Path

catalog = Path(sys.argv[1])
entry = importlib.util.find_spec("jobs.__main__").origin
sys.argv = [entry, *sys.argv[2:]]
try:
    runpy.run_path(entry, run_name="__main__")
except SystemExit as e:
    if e.code:
        raise
import jobs
from pyspark.sql import SparkSession
from jobs.lake.catalog import read_properties_file

SparkSession.getActiveSession().stop()  # the rebuild's session and its SparkContext are gone
builder = SparkSession.Builder()  # a new builder: nothing carried over from the rebuild's options
for key, value in read_properties_file(catalog / "spark-defaults.conf").items():
    builder = builder.config(key, value)
later = builder.getOrCreate()
later.conf.set("spark.sql.session.timeZone", "UTC")  # as_of printed in UTC, whatever the machine's zone
snapshots = later.sql("SELECT date_format(as_of, \\"yyyy-MM-dd'T'HH:mm:ss\\"), count(*) "
                      "FROM lake.snapshots_committed_offsets GROUP BY 1").collect()
print("LATER " + json.dumps({
    "jobs": jobs.__file__,
    "catalog": later.conf.get("spark.sql.catalogImplementation"),
    "tables": sorted(t.name for t in later.catalog.listTables("lake")),
    "committed": [list(r) for r in later.sql("SELECT group_id, partition, committed_offset "
                                             "FROM lake.committed_offsets ORDER BY 1, 2").collect()],
    "snapshots": {r[0]: r[1] for r in snapshots},
}))
'''


@pytest.fixture(scope="module")
def wheel(wheel_venv) -> Path:
    """The run's wheel (tests/wheel_env.py: built once, shared with the cluster tests)."""
    return wheel_venv.wheel


def test_the_wheel_holds_every_package_and_the_data_read_at_run_time(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(REPO)) for top in ("jobs", "offsets_codec")
                for p in (REPO / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    missing = {p for p in packages if f"{p}/__init__.py" not in names}
    assert not missing, f"packages missing from the wheel (list them in pyproject.toml): {sorted(missing)}"
    modules = {str(p.relative_to(REPO)) for top in ("jobs", "offsets_codec") for p in (REPO / top).rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names, sorted(modules - names)
    data = {f"jobs/schemas/{p.name}" for p in (REPO / "schemas").glob("*.json")}
    data |= {"jobs/conf/offsetlake.toml", "jobs/conf/log4j2.properties"}
    assert data <= names, sorted(data - names)
    entry_points = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-py3')[0]}.dist-info/entry_points.txt").decode()
    assert "offsetlake = jobs.cli:main" in entry_points


@pytest.fixture(scope="module")
def installed(wheel_venv) -> Path:
    """A fresh virtualenv with the wheel alone; returns its python."""
    return wheel_venv.python


def test_spark_submit_rebuilds_with_the_installed_wheel_and_a_later_session_sees_the_catalog(installed,
                                                                                           tmp_path):
    import pyspark

    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    log.write_parquet(tmp_path / "dump")
    out, catalog = tmp_path / "tables", tmp_path / "catalog"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    spark_home = Path(pyspark.__file__).parent  # pip's pyspark bundles Spark, spark-submit included
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH", "SPARK_"))}
    env.update(SPARK_HOME=str(spark_home), PYSPARK_PYTHON=str(installed), PYSPARK_DRIVER_PYTHON=str(installed),
               TMPDIR=str(tmp_path))
    result = run([spark_home / "bin" / "spark-submit", "--master", "local[2]", "--driver-memory", "1g",
                  "--conf", "spark.sql.shuffle.partitions=2", driver, catalog,  # tiny input: few tasks
                  "--source", f"parquet:{tmp_path / 'dump'}", "--output", out, "--snapshot",
                  "--catalog-database", DATABASE, "--catalog-dir", catalog], env=env, cwd=tmp_path)
    lines = result.stdout.splitlines()
    summary = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
    later = json.loads(next(line for line in lines if line.startswith("LATER "))[len("LATER "):])

    # The installed wheel ran, not the checkout, with its packaged conf/ and schemas/.
    assert later["jobs"].startswith(str(installed.parent.parent)), later["jobs"]
    assert summary["committed_offsets"] == 2 and summary["delta_engine"] == "delta-rs"
    assert summary["runner"] == "spark" and summary["spark_jobs"] > 0  # spark-submit started it: Spark's tasks ran
    for table in (*TABLES, *(snapshot_table(t) for t in SNAPSHOT_TABLES)):
        assert (out / table / "_delta_log").is_dir(), table
    assert DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().num_rows == 2

    # The catalog outlived the rebuild's session: Derby on disk, opened again from the properties file.
    assert summary["catalog"]["catalog"] == "hive"
    assert summary["catalog"]["properties_file"] == str(catalog / "spark-defaults.conf")
    assert (catalog / "metastore_db").is_dir() and (catalog / "derby.log").is_file()
    assert not (tmp_path / "derby.log").exists() and not (tmp_path / "metastore_db").exists()
    assert later["catalog"] == "hive"
    assert set(later["tables"]) == {*TABLES, *(f"snapshots_{t}" for t in SNAPSHOT_TABLES), "_runs"}
    assert later["committed"] == [["g", 0, 90], ["g", 1, 120]]
    assert later["snapshots"] == {summary["as_of"].rstrip("Z"): 2}
