"""The output tables' schemas, kept as data in schemas/<table>.json, as Arrow types (no Spark: every runner and
every reader uses them; jobs.runtime.spark_types converts them for Spark)."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Mapping

import pyarrow as pa

from jobs.base.arrow import TIMESTAMP
from jobs.base.data import data_dir

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
    "share_partition_state",
    # History (--no-history skips them): they grow with the log.
    "offset_commits",
    "group_events",
    "group_status",
    # Kept across runs: earlier runs' snapshots plus this run's.
    "end_offsets_history",
)
HISTORY_TABLES = ("offset_commits", "group_events", "group_status")
# With --archive: every raw record read, appended to across runs (jobs.sources.archive), never replaced.
ARCHIVE = "raw_records"
# With --archive: the offsets raw_records holds, as ranges (jobs.sources.archive); internal.
ARCHIVE_OFFSETS = "_archive_offsets"
# With --archive: the reduced log the next such run starts from (jobs.replay.resume); internal.
REPLAY_STATE = "_replay_state"
# With --archive: the group fold of the replay state, which the next such run reuses (internal).
FOLD_STATE = "_group_fold"
# With --archive and the history: what of offset_commits the next such run continues each key from (internal).
HISTORY_STATE = "_history_state"
# Every table a run may stage in <table>/run-<run id>/ and commit.
STAGED_TABLES = (*TABLES, ARCHIVE, ARCHIVE_OFFSETS, REPLAY_STATE, FOLD_STATE, HISTORY_STATE)

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
    "share_partition_state",
)
SNAPSHOT_PARTITION = "as_of"
_PRIMITIVES = {
    "string": pa.string(), "binary": pa.binary(), "boolean": pa.bool_(), "tinyint": pa.int8(),
    "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(), "timestamp": TIMESTAMP,
    "date": pa.date32(),
}


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
    """TABLES, then every other table with a schema in schemas/ (tables a rebuild does not write each run), but
    the internal ones (`_replay_state`)."""
    others = sorted(p.stem for p in SCHEMA_DIR.glob("*.json") if p.stem not in TABLES and not p.stem.startswith("_"))
    return TABLES + tuple(others)


@lru_cache(maxsize=None)
def _schema_doc(table: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{table}.json").read_text())


def partition_columns(table: str) -> list[str]:
    """The table's Delta partition columns (a table that grows with the log is partitioned by date)."""
    return list(_schema_doc(table).get("partition_by", []))


@lru_cache(maxsize=None)
def arrow_schema(table: str) -> pa.Schema:
    """The table's schema, from schemas/<table>.json: timestamps are UTC microseconds, as Delta's `timestamp`."""
    return pa.schema([(c["name"], arrow_type(c["type"])) for c in _schema_doc(table)["columns"]])


def arrow_type(text: str) -> pa.DataType:
    """`bigint`, `array<string>`, `struct<topic:string,partition:int>`, ... as an Arrow type."""
    text = text.strip()
    if text in _PRIMITIVES:
        return _PRIMITIVES[text]
    if text.startswith("array<") and text.endswith(">"):
        return pa.list_(arrow_type(text[6:-1]))
    if text.startswith("struct<") and text.endswith(">"):
        fields = [part.split(":", 1) for part in _split(text[7:-1])]
        return pa.struct([(name.strip().strip("`"), arrow_type(t)) for name, t in fields])
    raise ValueError(f"unsupported type {text!r}")


def arrow_columns(text: str) -> pa.Schema:
    """`a int, b array<string>` as an Arrow schema."""
    return pa.schema([(name.strip().strip("`"), arrow_type(t)) for name, t in
                      (part.strip().split(" ", 1) for part in _split(text))])


def _split(text: str) -> list[str]:
    """Split on commas that are not inside <...>."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def conform(columns: pa.Table | Mapping[str, pa.Array | pa.ChunkedArray], table: str | pa.Schema,
            rows: int | None = None) -> pa.Table:
    """`columns` (a table, or columns by name) as `table` (a table of schemas/, by name, or a schema): the columns
    of its schema (the contract's and the extra ones it declares), in order and typed. The one cast to a table's
    schema. A missing column is null when `rows` (the number of rows) is given, else a bug."""
    schema = arrow_schema(table) if isinstance(table, str) else table
    if isinstance(columns, pa.Table):
        columns = {name: columns.column(name) for name in columns.column_names}
    missing = [f.name for f in schema if f.name not in columns]
    if missing and rows is None:
        raise AssertionError(f"{table if isinstance(table, str) else 'a table'}: no column(s) {missing}")
    return pa.table([columns[f.name].cast(f.type) if f.name in columns else pa.nulls(rows, f.type) for f in schema],
                    schema=schema)


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
