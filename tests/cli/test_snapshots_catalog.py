"""`rebuild --snapshot` keeps each as_of's state once, and `--catalog-database` registers the tables.

Three rebuilds of a tiny log (the local runner): as of 00:02, as of 00:10, and 00:02 again from a log that
has two more commits by then, which must replace that partition, not add to it. The last one also registers
the tables in the catalog of the test session's Spark (module fixture; in memory: the test session has no
Hive). The whole-process test (tests/cli/test_wheel.py) registers into a Derby catalog and reads it from a
later session.
"""
from __future__ import annotations

import csv
import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from offsets_log import MINUTE, T0, OffsetsLog, member

from jobs.base.storage import Location
from jobs.base.tables import SNAPSHOT_TABLES, TABLES, snapshot_table
from jobs.cli import cli
from jobs.config import CatalogOptions
from jobs.lake.catalog import LINKS_DIR, delta_statements, metastore_configured, view_statements
from jobs.lake.runs import finished_runs
from jobs.lake.sink import as_of_predicate
from jobs.readers.views import register_tables

EARLY = datetime(2026, 11, 1, 0, 2, tzinfo=timezone.utc)
LATE = datetime(2026, 11, 1, 0, 10, tzinfo=timezone.utc)
DATABASE = "offsetlake_snap"
# committed offsets and groups at each as_of, as the last run of that as_of saw them
EXPECTED_OFFSETS = {EARLY: 4, LATE: 3}
EXPECTED_GROUPS = {EARLY: 1, LATE: 2}


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def write_dump(path: Path, more: bool) -> Path:
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["t"], {"t": [0, 1, 2, 3]}, client_id="c1")])
    log.commit("g", "t", 0, 90, T0 + MINUTE)
    log.commit("g", "t", 1, 120, T0 + MINUTE)
    if more:  # the rerun at EARLY finds two more partitions committed by then
        log.commit("g", "t", 2, 7, T0 + MINUTE)
        log.commit("g", "t", 3, 8, T0 + MINUTE)
    log.group("h", T0 + 5 * MINUTE, members=[member("m2", ["u"], {"u": [0]}, client_id="c2")])
    log.commit("h", "u", 0, 5, T0 + 5 * MINUTE)
    log.write_parquet(path)
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rebuild(dump: Path, out: Path, as_of: datetime, *more: str) -> dict:
    result = invoke("rebuild", "--source", f"parquet:{dump}", "--output", str(out), "--as-of", iso(as_of),
                    "--snapshot", *more)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rebuilt(spark, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("snapshots")
    first, second = write_dump(base / "first", more=False), write_dump(base / "second", more=True)
    out = base / "tables"
    rebuild(first, out, EARLY)
    rebuild(first, out, LATE)
    summary = rebuild(second, out, EARLY, "--catalog-database", DATABASE)
    return {"out": out, "summary": summary, "second": second}


def partition_counts(out: Path, table: str) -> dict[datetime, int]:
    rows = DeltaTable(str(out / snapshot_table(table))).to_pyarrow_table(columns=["as_of"]).column("as_of").to_pylist()
    counts: dict[datetime, int] = {}
    for moment in rows:
        counts[moment.astimezone(timezone.utc)] = counts.get(moment.astimezone(timezone.utc), 0) + 1
    return counts


def test_each_as_of_is_one_partition_and_a_rerun_replaces_it(rebuilt):
    out = rebuilt["out"]
    assert partition_counts(out, "committed_offsets") == EXPECTED_OFFSETS  # 2 + 4 if the rerun had appended
    assert partition_counts(out, "consumer_groups") == EXPECTED_GROUPS
    assert partition_counts(out, "group_members") == {EARLY: 1, LATE: 2}
    for table in SNAPSHOT_TABLES:
        delta = DeltaTable(str(out / snapshot_table(table)))
        assert delta.metadata().partition_columns == ["as_of"], table
        assert delta.version() == 2, table  # one commit per run
    offsets = DeltaTable(str(out / snapshot_table("committed_offsets"))).to_pyarrow_table().to_pylist()
    early = sorted((r["partition"], r["committed_offset"]) for r in offsets if r["as_of"] == EARLY)
    assert early == [(0, 90), (1, 120), (2, 7), (3, 8)]  # the rerun's rows, whole
    # The tables themselves hold the last run only; quarantine and segment_errors have no snapshots.
    assert DeltaTable(str(out / "committed_offsets")).to_pyarrow_table().num_rows == 4
    assert not (out / "snapshots" / "quarantine").exists() and not (out / "snapshots" / "segment_errors").exists()


def test_the_run_records_its_snapshot_versions(rebuilt):
    out = rebuilt["out"]
    runs = finished_runs(out)
    assert len(runs) == 3
    recorded = {t["table"]: t["version"] for t in runs[-1]["tables"]}
    for table in SNAPSHOT_TABLES:
        assert recorded[snapshot_table(table)] == DeltaTable(str(out / snapshot_table(table))).version()
    assert set(TABLES) <= recorded.keys()


def test_sql_reads_snapshots_by_their_query_names(rebuilt):
    result = invoke("sql", "--output", str(rebuilt["out"]), "--format", "csv",
                    "SELECT s.as_of, count(*) AS n, min(g.n) AS groups FROM snapshots_committed_offsets s JOIN "
                    "(SELECT as_of, count(*) AS n FROM snapshots_consumer_groups GROUP BY as_of) g USING (as_of) "
                    "GROUP BY s.as_of ORDER BY s.as_of")
    assert result.exit_code == 0, result.output
    assert list(csv.reader(io.StringIO(result.stdout))) == [
        ["as_of", "n", "groups"], [iso(EARLY), "4", "1"], [iso(LATE), "3", "2"]]


def test_register_tables_reads_snapshot_partitions_without_delta(spark, rebuilt):
    names = register_tables(spark, rebuilt["out"], prefix="snap_")
    assert "snap_snapshots_committed_offsets" in names and "snap_committed_offsets" in names
    rows = spark.sql("SELECT as_of, count(*) FROM snap_snapshots_committed_offsets GROUP BY 1").collect()
    assert {r[0].replace(tzinfo=timezone.utc): r[1] for r in rows} == EXPECTED_OFFSETS
    assert spark.table("snap_snapshots_group_members").columns == spark.table("snap_group_members").columns


def test_the_spark_predicate_selects_exactly_one_as_of(spark):
    """The replaceWhere of Spark's Delta writer (not on this classpath): the same predicate, on a frame."""
    moments = [EARLY, EARLY.replace(microsecond=1), LATE]
    frame = spark.createDataFrame([(m,) for m in moments], "as_of timestamp")
    for moment in moments:
        assert frame.where(as_of_predicate(moment, "spark")).count() == 1


def test_the_catalog_has_every_table_of_the_run(spark, rebuilt):
    catalog = rebuilt["summary"]["catalog"]
    assert catalog["database"] == DATABASE and catalog["kind"] == "views over the run's files"
    expected = {f"{DATABASE}.{t}" for t in TABLES} | {f"{DATABASE}.snapshots_{t}" for t in SNAPSHOT_TABLES}
    assert set(catalog["entries"]) == expected | {f"{DATABASE}._runs"}
    assert spark.sql(f"SELECT count(*) FROM {DATABASE}.committed_offsets").collect()[0][0] == 4
    rows = spark.sql(f"SELECT as_of, count(*) FROM {DATABASE}.snapshots_committed_offsets GROUP BY 1").collect()
    assert {r[0].replace(tzinfo=timezone.utc): r[1] for r in rows} == EXPECTED_OFFSETS
    # Empty tables are typed views with the contract's columns.
    assert spark.table(f"{DATABASE}.streams_topologies").count() == 0
    assert spark.table(f"{DATABASE}.group_members").columns == spark.table(f"{DATABASE}.snapshots_group_members").columns


def test_catalog_views_read_hard_links_of_the_versions_files(spark, rebuilt):
    out = rebuilt["out"]
    links = out / "_catalog" / LINKS_DIR / DATABASE / "committed_offsets"
    assert [p.name for p in links.iterdir()] == [f"v{DeltaTable(str(out / 'committed_offsets')).version()}"]
    linked = sorted(links.rglob("*.parquet"))
    current = sorted(Path(p) for p in DeltaTable(str(out / "committed_offsets")).file_uris())
    assert [p.name for p in linked] == [p.name for p in current]  # that version's files, not the replaced ones
    assert all(os.stat(a).st_ino == os.stat(b).st_ino for a, b in zip(linked, current))
    assert len(list((out / "committed_offsets").rglob("*.parquet"))) == 3  # the folder also holds older files
    # Partitions are folders of epoch microseconds: no time zone in the path.
    snap = out / "_catalog" / LINKS_DIR / DATABASE / "snapshots_committed_offsets"
    assert sorted(p.name for p in next(snap.iterdir()).iterdir()) == sorted(
        f"as_of_us={int(m.timestamp()) * 1_000_000}" for m in EXPECTED_OFFSETS)


def test_an_entry_that_is_not_offsetlakes_is_refused_before_any_table_changes(spark, rebuilt):
    out = rebuilt["out"]
    spark.sql("CREATE DATABASE IF NOT EXISTS offsetlake_taken")
    spark.sql("CREATE OR REPLACE VIEW offsetlake_taken.consumer_lag AS SELECT 1 AS x")
    before = {t: DeltaTable(str(out / t)).version() for t in TABLES}
    result = CliRunner().invoke(cli, ["rebuild", "--source", f"parquet:{rebuilt['second']}", "--output", str(out),
                                      "--catalog-database", "offsetlake_taken"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [f"offsetlake: error: --catalog-database offsetlake_taken: offsetlake_taken.consumer_lag exists "
                     f"and is not offsetlake's table of {out} (drop it, or pick another database)"]
    assert {t: DeltaTable(str(out / t)).version() for t in TABLES} == before


def test_with_delta_in_spark_entries_are_external_delta_tables(tmp_path):
    """Spark's Delta is not on this classpath: the statements are checked as text."""
    path = Location.parse(str(tmp_path / "committed_offsets"))
    create = f"CREATE TABLE `db`.`committed_offsets` USING DELTA LOCATION 'file://{path.path}'"
    assert delta_statements("db", "committed_offsets", path, None) == [create]
    view = {"type": "VIEW", "location": ""}
    assert delta_statements("db", "committed_offsets", path, view) == ["DROP VIEW `db`.`committed_offsets`", create]
    table = {"type": "EXTERNAL", "location": path.hadoop_uri, "provider": "delta"}
    assert delta_statements("db", "committed_offsets", path, table) == []  # Spark reads the newest version itself


def test_a_view_quotes_what_it_names(tmp_path):
    class Empty:  # a Delta version without files
        def metadata(self):
            return type("M", (), {"partition_columns": []})()

    out = Location.parse(str(tmp_path / "it's here"))
    statements = view_statements("db", "quarantine", "quarantine", out, 3, Empty(), tmp_path / "links", 0, None)
    assert len(statements) == 1
    assert f"'offsetlake.output' = '{tmp_path}/it\\'s here'" in statements[0]
    assert statements[0].endswith("CAST(NULL AS string) AS `error`, CAST(NULL AS smallint) AS `record_type` WHERE false")


def test_a_launcher_or_a_hive_site_xml_keeps_its_own_metastore(tmp_path):
    assert not metastore_configured({"spark.master", "spark.app.name"}, environ={})
    assert metastore_configured({"spark.sql.catalogImplementation"}, environ={})
    assert metastore_configured({"spark.hadoop.hive.metastore.uris"}, environ={})
    (tmp_path / "hive-site.xml").write_text("<configuration/>")
    assert metastore_configured(set(), environ={"SPARK_CONF_DIR": str(tmp_path)})


def test_a_remote_output_has_no_local_catalog_folder_unless_given(tmp_path):
    remote = CatalogOptions.build("lake", None, "s3://bucket/tables")
    assert remote is not None and remote.folder is None  # the session's metastore must do: checked when it runs
    given = CatalogOptions.build("lake", str(tmp_path / "catalog"), "s3://bucket/tables")
    assert given is not None and given.folder == tmp_path / "catalog"
    local = CatalogOptions.build("lake", None, "relative/tables")
    assert local is not None and local.folder == Path.cwd() / "relative" / "tables" / "_catalog"
