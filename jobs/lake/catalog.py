"""Spark catalog entries for the tables: `rebuild --catalog-database NAME` registers each as NAME.<table>.

What an entry is depends on what Spark can read:

* With Spark's Delta (io.delta on the classpath: Databricks, `--packages io.delta:...` with Delta's catalog
  configured), an external table `USING DELTA LOCATION 'DIR/<table>'`: Spark reads the newest version
  itself, so the entry follows every later rebuild.
* Without it, Spark cannot read Delta at all, and a Parquet table over DIR/<table> would be wrong: a
  replaced version's files stay in the folder (until VACUUM) and would be read as well. So each entry is
  a view over exactly the files of the table's version in the newest complete run (jobs/lake/runs.py), hard
  linked into the catalog folder (copied when a hard link cannot be made): the files of that version and
  nothing else, even after a VACUUM of the table. A snapshot table's partitions become folders
  `as_of_us=<epoch microseconds>`, which the view turns back into the `as_of` timestamp (no time zone
  involved). Such an entry shows the run it was registered from: the next rebuild with
  --catalog-database (or `register_catalog`) moves it to that run.

Where the session has no metastore (a plain local run), the catalog is Spark's Hive catalog in an embedded
Derby database under the catalog folder (DIR/_catalog, or --catalog-dir). The settings that open it are
written to `<catalog folder>/spark-defaults.conf`, so a later session sees the tables:
`pyspark --properties-file DIR/_catalog/spark-defaults.conf`, then `spark.table("NAME.committed_offsets")`.
Derby admits one JVM at a time. A session started by Databricks, or with a metastore configured
(hive-site.xml, spark.sql.catalogImplementation, ...), keeps its own catalog.

An existing entry is replaced only when offsetlake made it for this output (a view carrying the
`offsetlake.output` property, or a table at this table's location); any other entry of the same name is a
bad argument, found before the run changes any table (`check_catalog`).
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from jobs.base.arrow import EPOCH, epoch_us
from jobs.base.errors import BadInput
from jobs.base.storage import Location, located

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("offsetlake")
OWNER_PROPERTY = "offsetlake.output"
PROPERTIES_FILE = "spark-defaults.conf"
LINKS_DIR = "files"
# Settings that mean the launcher chose a catalog or a metastore: then it is used as it is.
METASTORE_SETTINGS = ("spark.sql.catalogImplementation", "spark.hadoop.hive.metastore.uris",
                      "spark.hadoop.javax.jdo.option.ConnectionURL", "spark.sql.hive.metastore.jars")
# Spark's default list, plus Derby: the JVM then has one Derby engine, which a later SparkContext of the same
# process shares (a second engine in another class loader could not open the database the first one holds).
SHARED_PREFIXES = "com.mysql.jdbc,org.postgresql,com.microsoft.sqlserver,oracle.jdbc,org.apache.derby"


def metastore_configured(launcher_settings: Iterable[str], environ: dict[str, str] | None = None) -> bool:
    """Whether the launcher's settings (or a hive-site.xml in Spark's conf folder) name a catalog already."""
    environ = os.environ if environ is None else environ
    if any(key in METASTORE_SETTINGS for key in launcher_settings):
        return True
    folders = [environ.get("SPARK_CONF_DIR"), environ.get("HADOOP_CONF_DIR")]
    return any(folder and (Path(folder) / "hive-site.xml").is_file() for folder in folders)


def local_catalog_settings(folder: Path) -> dict[str, str]:
    """Spark settings for a Hive catalog in an embedded Derby database under `folder` (absolute)."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": (folder / "warehouse").as_uri(),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true",
        "spark.sql.hive.metastore.sharedPrefixes": SHARED_PREFIXES,
    }


@dataclass(frozen=True)
class LocalCatalog:
    """Spark's Hive catalog in an embedded Derby database under `folder` (absolute), for a session this process
    builds where the launcher configured no catalog or metastore (jobs.runtime.session.get_spark)."""

    folder: Path

    def settings(self, launcher_settings: set[str]) -> dict[str, str]:
        return {} if metastore_configured(launcher_settings) else local_catalog_settings(self.folder)

    def opened(self, spark: Any) -> None:
        # Derby writes its log to the working folder unless told otherwise; it starts on first catalog use.
        self.folder.mkdir(parents=True, exist_ok=True)
        spark._jvm.java.lang.System.setProperty("derby.stream.error.file", str(self.folder / "derby.log"))  # noqa: SLF001


def write_properties_file(folder: Path, database: str) -> Path:
    """`<folder>/spark-defaults.conf`: the settings a later session needs to open this catalog."""
    path = folder / PROPERTIES_FILE
    lines = [
        "# Spark settings that open offsetlake's local catalog (Hive catalog in an embedded Derby database).",
        f"#   pyspark --properties-file {path}    then    spark.table(\"{database}.committed_offsets\")",
        "# Derby admits one JVM at a time.",
        *(f"{key} {value}" for key, value in local_catalog_settings(folder).items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_properties_file(path: Path) -> dict[str, str]:
    """The settings of a spark-defaults.conf file (`key value` lines, # comments)."""
    settings = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            settings[key] = value.strip()
    return settings


def catalog_tables() -> tuple[str, ...]:
    """Every table a rebuild may write, as paths under the output: contract tables, snapshots, _runs."""
    from jobs.base.tables import known_tables, snapshot_tables
    from jobs.lake.runs import RUNS_TABLE

    return (*known_tables(), *snapshot_tables(), RUNS_TABLE)


def check_catalog(spark: SparkSession, output: "Location | str", database: str, folder: Path | None) -> None:
    """Before a run changes any table: the session has a catalog that outlives it, or a local one can be made,
    and every entry the run would register is absent or offsetlake's own for this output (else BadInput)."""
    from jobs.base.tables import query_name
    from jobs.lake.sink import delta_engine

    if folder is None and spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
        raise BadInput(f"--catalog-database {database}: this Spark has no metastore, and --output {output} cannot "
                       f"hold Spark's local catalog: give --catalog-dir, a local folder")
    output = located(output)
    if delta_engine(spark) != "spark" and (not output.local or folder is None):
        raise BadInput(f"--catalog-database with --output {output}: without Spark's Delta (io.delta) the entries "
                       f"are views over the tables' files, linked on a local disk")
    if not spark.catalog.databaseExists(database):
        return
    for table in catalog_tables():
        _owned_entry(spark, output, database, table, query_name(table))


def register_catalog(spark: SparkSession, output: "Location | str", database: str, folder: Path | None) -> dict[str, Any]:
    """Register every table under `output` (the newest complete run's) as `database.<name>`; returns what
    was registered, for the run summary."""
    from jobs.base.tables import query_name
    from jobs.lake.runs import snapshot
    from jobs.lake.sink import delta_engine

    output = located(output)
    implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
    if implementation != "hive":
        log.warning("Spark's catalog is %s: the entries of %s last only as long as this session", implementation,
                    database)
    delta = delta_engine(spark) == "spark"
    if not delta and (not output.local or folder is None):  # check_catalog said so before the run
        raise BadInput(f"--catalog-database with --output {output}: without Spark's Delta, a local output is needed")
    tables = snapshot(output, catalog_tables())
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    names = []
    for table, version in tables.versions.items():
        name = query_name(table)
        entry = _owned_entry(spark, output, database, table, name)
        if delta:
            statements = delta_statements(database, name, output.child(*table.split("/")), entry)
        else:
            links = folder / LINKS_DIR / database.lower() / name / f"v{version}"
            files = link_version_files(tables.open(table), links)
            statements = view_statements(database, name, table, output, version, tables.open(table), links, files,
                                         entry)
            _remove_other_versions(links)
        for statement in statements:
            spark.sql(statement)
        names.append(f"{database}.{name}")
    summary: dict[str, Any] = {"database": database, "entries": names, "catalog": implementation,
                               "kind": "delta tables" if delta else "views over the run's files"}
    earlier = {f"{database}.{query_name(t)}": tables.label(t) for t in tables.versions if tables.label(t)}
    if earlier:  # a plain Delta table is read at its newest version anyway; a view at the run's
        summary["from_earlier_runs"] = earlier
        for label in earlier.values():
            log.warning("catalog: %s", label)
    if implementation == "hive" and folder is not None and (folder / "metastore_db").is_dir():
        summary["properties_file"] = str(write_properties_file(folder, database))
    log.info("registered %d tables as %s.<table> (%s)", len(names), database, summary["kind"])
    return summary


def _owned_entry(spark: SparkSession, output: Location, database: str, table: str, name: str) -> dict[str, str] | None:
    """The existing entry `database.name` (its type, location and properties), None when there is none;
    BadInput when it exists and is not offsetlake's entry for this output's table."""
    qualified = f"`{database}`.`{name}`"
    if not spark.catalog.tableExists(f"{database}.{name}"):
        return None
    info = {"type": spark.catalog.getTable(f"{database}.{name}").tableType or ""}
    try:
        for row in spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect():
            if row[0] in ("Location", "Provider"):
                info[row[0].lower()] = row[1] or ""
        properties = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {qualified}").collect()}
    except Exception:  # a table of a provider this session cannot load: nothing shows it is offsetlake's
        properties = {}
    ours = properties.get(OWNER_PROPERTY) == output.uri or (
        info["type"].upper() != "VIEW" and _same_path(info.get("location", ""), output.child(*table.split("/"))))
    if not ours:
        raise BadInput(f"--catalog-database {database}: {database}.{name} exists and is not offsetlake's table of "
                       f"{output} (drop it, or pick another database)")
    return info


def _same_path(location: str, path: Location) -> bool:
    from urllib.parse import unquote

    found = Location.parse(unquote(location)) if location else None
    return found is not None and (found.scheme, os.path.normpath(found.path)) == (path.scheme, os.path.normpath(path.path))


def delta_statements(database: str, name: str, path: Location, entry: dict[str, str] | None) -> list[str]:
    """An external Delta table at `path`. One already there at that location is kept as it is: Spark reads
    the newest version anyway, and a CREATE would have to repeat the table's own properties."""
    qualified = f"`{database}`.`{name}`"
    statements = []
    if entry is not None:
        if entry["type"].upper() != "VIEW" and entry.get("provider", "").lower() == "delta":
            return []
        statements.append(f"DROP {'VIEW' if entry['type'].upper() == 'VIEW' else 'TABLE'} {qualified}")
    statements.append(f"CREATE TABLE {qualified} USING DELTA LOCATION {sql_string(path.hadoop_uri)}")
    return statements


def view_statements(database: str, name: str, table: str, output: Location, version: int, delta_table: Any,
                    links: Path, files: int, entry: dict[str, str] | None) -> list[str]:
    """A view over the files linked under `links` (the table's `version`), in the table's column order."""
    from jobs.base.tables import contract_table
    from jobs.runtime.spark_types import spark_schema

    qualified = f"`{database}`.`{name}`"
    partitions = set(delta_table.metadata().partition_columns)
    if files:
        types = {f.name: str(f.type) for f in delta_table.schema().fields}
        columns = [(f"date_from_unix_date(`{c}_day`) AS `{c}`" if "date" in types[c] else
                    f"timestamp_micros(`{c}_us`) AS `{c}`") if c in partitions else f"`{c}`" for c in types]
        select = f"SELECT {', '.join(columns)} FROM parquet.{sql_identifier(links.as_uri())}"
    else:  # no file to read a schema from: the contract's, typed, no rows
        columns = [f"CAST(NULL AS {f.dataType.simpleString()}) AS `{f.name}`"
                   for f in spark_schema(contract_table(table))]
        select = f"SELECT {', '.join(columns)} WHERE false"
    comment = f"offsetlake: {output.child(*table.split('/')).uri} version {version}, its files linked under {links}"
    statements = []
    if entry is not None and entry["type"].upper() != "VIEW":
        statements.append(f"DROP TABLE {qualified}")  # an external table: the drop keeps its data
    statements.append(f"CREATE OR REPLACE VIEW {qualified} COMMENT {sql_string(comment)} TBLPROPERTIES "
                      f"({sql_string(OWNER_PROPERTY)} = {sql_string(output.uri)}, "
                      f"'offsetlake.version' = '{version}') AS {select}")
    return statements


def link_version_files(delta_table: Any, links: Path) -> int:
    """Hard link (or copy) the data files of `delta_table`'s version into `links`, a partition's files into
    `<column>_us=<epoch microseconds>/` (a date: `<column>_day=<days>/`); returns how many. Linking again is a no-op for files already there."""
    from jobs.lake.runs import add_actions

    partitions = delta_table.metadata().partition_columns
    by_name: dict[str, dict[str, Any]] = {}
    if partitions:
        # The add actions carry the partition values (their paths are URL-encoded; file names are plain).
        for action in add_actions(delta_table).to_pylist():
            by_name[action["path"].rsplit("/", 1)[-1]] = {c: action[f"partition.{c}"] for c in partitions}
    staging = links.with_name(links.name + ".partial")  # a half-linked folder is never read
    if links.is_dir():
        return sum(1 for p in links.rglob("*.parquet"))
    shutil.rmtree(staging, ignore_errors=True)
    count = 0
    for uri in delta_table.file_uris():
        source = Path(uri.removeprefix("file://"))
        folder = staging
        for column, value in (by_name[source.name] if partitions else {}).items():
            folder = folder / _partition_folder(column, value)
        folder.mkdir(parents=True, exist_ok=True)
        _link_or_copy(source, folder / source.name)
        count += 1
    staging.mkdir(parents=True, exist_ok=True)
    staging.rename(links)
    return count


def _partition_folder(column: str, value: Any) -> str:
    """A partition's folder as numbers, so no time zone or date format is involved: `<column>_us=<epoch
    microseconds>` for a timestamp (snapshots' as_of), `<column>_day=<days since 1970>` for a date (commit_date)."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return f"{column}_day={(value - EPOCH.date()).days}"
    return f"{column}_us={_micros(value)}"


def _micros(value: Any) -> int:
    if not isinstance(value, datetime):
        raise ValueError(f"partition value {value!r}: only timestamp and date partitions are linked")
    return epoch_us(value)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem (--catalog-dir elsewhere), or one without hard links
        shutil.copy2(source, target)


def _remove_other_versions(links: Path) -> None:
    """Linked versions of this entry other than `links` are no longer named by any view."""
    for other in links.parent.iterdir():
        if other != links:
            shutil.rmtree(other, ignore_errors=True)


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_identifier(text: str) -> str:
    """A back-quoted Spark SQL identifier (e.g. a path in parquet.`...`)."""
    return "`" + text.replace("`", "``") + "`"
