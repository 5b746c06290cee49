"""Output table schemas, kept as data in schemas/<table>.json and enforced on every write."""
from __future__ import annotations

import json
from functools import lru_cache

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from jobs.config import data_dir
from jobs.types import parse_type

SCHEMA_DIR = data_dir("schemas")
TABLES = (
    "committed_offsets",
    "expired_offsets",
    "consumer_groups",
    "group_members",
    "group_target_assignments",
    "streams_topologies",
    "consumer_lag",
    "quarantine",
    "pending_transactions",
    "segment_errors",
    # History (--no-history skips them): they grow with the log.
    "offset_commits",
    "group_events",
    "group_status",
    # Kept across runs: earlier runs' snapshots plus this run's.
    "end_offsets_history",
)

# State tables that `rebuild --snapshot` also keeps by as_of, in DIR/snapshots/<table> (not quarantine and
# segment_errors: they describe the input, not the state at a moment).
SNAPSHOTS = "snapshots"
SNAPSHOT_TABLES = (
    "committed_offsets",
    "expired_offsets",
    "consumer_groups",
    "group_members",
    "consumer_lag",
    "group_target_assignments",
    "streams_topologies",
    "pending_transactions",
)
SNAPSHOT_PARTITION = "as_of"


def snapshot_table(table: str) -> str:
    """Where the snapshots of `table` are, relative to the output folder: snapshots/<table>."""
    return f"{SNAPSHOTS}/{table}"


def snapshot_tables() -> tuple[str, ...]:
    return tuple(snapshot_table(t) for t in SNAPSHOT_TABLES)


def contract_table(table: str) -> str:
    """The contract table a path under the output holds: snapshots/<table> has the schema of <table>."""
    return table.rsplit("/", 1)[-1]


def query_name(table: str) -> str:
    """The name SQL knows a table by (offsetlake sql, register_tables, the catalog): snapshots/committed_offsets
    is snapshots_committed_offsets; the others keep their own name."""
    return table.replace("/", "_")


def known_tables() -> tuple[str, ...]:
    """TABLES, then every other table with a schema in schemas/ (tables a rebuild does not write each run)."""
    others = sorted(p.stem for p in SCHEMA_DIR.glob("*.json") if p.stem not in TABLES)
    return TABLES + tuple(others)


@lru_cache(maxsize=None)
def _schema_doc(table: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{table}.json").read_text())


def partition_columns(table: str) -> list[str]:
    """The table's Delta partition columns (a table that grows with the log is partitioned by date)."""
    return list(_schema_doc(table).get("partition_by", []))


@lru_cache(maxsize=None)
def spark_schema(table: str) -> StructType:
    """The table's Spark schema, from schemas/<table>.json."""
    doc = _schema_doc(table)
    return StructType([StructField(c["name"], parse_type(c["type"])) for c in doc["columns"]])


def arrow_schema(table: str) -> pa.Schema:
    """The same schema for delta-rs: timestamps are UTC microseconds, as Delta's `timestamp`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_schema(table), timezone="UTC")
    return pa.schema([f.with_type(utc_micros(f.type)) for f in schema])


def utc_micros(t: pa.DataType, tz: str | None = "UTC") -> pa.DataType:
    """`t` with every timestamp in microseconds with time zone `tz` (UTC: Delta's `timestamp`; None: the same
    UTC values, which Python reads without importing pandas) and every duration in microseconds, inside
    lists and structs too."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=tz)
    if pa.types.is_duration(t):
        return pa.duration("us")
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(utc_micros(t.value_type, tz)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(utc_micros(t.value_type, tz)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(utc_micros(f.type, tz)) for f in t])
    return t


def conform(df: DataFrame, table: str) -> DataFrame:
    """Select the table's columns in contract order with contract types; a missing column is a bug."""
    schema = spark_schema(table)
    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise AssertionError(f"{table}: the pipeline produced no column(s) {missing}")
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema])
