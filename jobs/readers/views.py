"""Small read-only views for people: `decode` (records as Kafka's formatter JSON) and `show` (tables)."""
from __future__ import annotations

import base64
import json
from typing import Iterator

import pyarrow.dataset as pads

from jobs.base.errors import BadInput
from jobs.base.storage import Location, first_line, located
from jobs.base.tables import TABLES, known_tables
from jobs.config import SourceSpec
from offsets_codec import SHARE_STATE, DecodeError, to_kafka_json
from offsets_codec.records import OFFSETS
from offsets_codec.registry import SHARE_STATE_TOPIC
from offsets_codec.segments import control_marker


def decode_lines(source: str, limit: int | None = None, storage: dict[str, str] | None = None) -> Iterator[str]:
    """One JSON line per record of a Parquet dump or of log segments, without starting Spark.

    Undecodable records are kept, with their reason and raw bytes; segments also show transaction
    markers and damage (like kafka-dump-log.sh, which is the only other dump that keeps them).
    """
    spec = SourceSpec.parse(source, storage)
    if spec.kind == "kafka":
        raise BadInput(f"--source {source}: decode reads parquet:PATH or segments:DIR (dump a cluster first)")
    lines = _segment_lines(spec.location) if spec.kind == "segments" else _parquet_lines(source, spec)
    for emitted, line in enumerate(lines):
        if limit is not None and emitted >= limit:
            return
        yield line


def _record_line(partition: int, offset: int, key: bytes | None, value: bytes | None, topic: str | None = None
                 ) -> str:
    try:
        return to_kafka_json(key, value, SHARE_STATE if topic == SHARE_STATE_TOPIC else OFFSETS)
    except DecodeError as e:
        return json.dumps({"partition": partition, "offset": offset, "error": str(e), "key": _b64(key),
                           "value": _b64(value)}, separators=(",", ":"))


def _segment_lines(location: str) -> Iterator[str]:
    from jobs.sources.segments import plan_segments
    from offsets_codec.segments import Batch, read_segment_file

    plan = plan_segments(location)
    for item in plan.ignored:
        yield json.dumps({"file": item.path, "ignored": item.reason}, separators=(",", ":"))
    for part in plan.partitions:
        for name in part.segments:
            path = f"{part.directory}/{name}"
            for item in read_segment_file(path):
                if not isinstance(item, Batch):
                    yield json.dumps({"file": path, "position": item.position, "damage": item.reason,
                                      "fatal": item.fatal}, separators=(",", ":"))
                elif item.is_control:
                    for r in item.records:
                        yield _marker_line(part.partition, r.offset, item.producer_id, r.key)
                else:
                    for r in item.records:
                        yield _record_line(part.partition, r.offset, r.key, r.value, part.topic)


def _parquet_lines(source: str, spec: SourceSpec) -> Iterator[str]:
    dump = spec.dump
    if not dump.local:
        dump.check_reachable("--source", source, folder=False)
    if not dump.exists():
        raise BadInput(f"--source {source}: no such file or directory")
    try:
        dataset = pads.dataset(dump.path, filesystem=dump.fs, format="parquet")
        missing = [c for c in ("key", "value", "partition", "offset") if c not in dataset.schema.names]
    except Exception as e:  # pyarrow raises ArrowInvalid and friends for non-Parquet input
        raise BadInput(f"--source {source}: cannot read Parquet ({first_line(e, 200)})") from None
    if missing:
        raise BadInput(f"--source {source}: missing required column(s) {', '.join(missing)}")
    # A dump with batch metadata (made from segments) holds transaction markers too.
    metadata = [c for c in ("producer_id", "is_control", "topic") if c in dataset.schema.names]
    for batch in dataset.to_batches(columns=["partition", "offset", "key", "value", *metadata]):
        for row in batch.to_pylist():
            if row.get("is_control"):
                yield _marker_line(row["partition"], row["offset"], row.get("producer_id"), row["key"])
            else:
                yield _record_line(row["partition"], row["offset"], row["key"], row["value"], row.get("topic"))


def _marker_line(partition: int, offset: int, producer_id: int | None, key: bytes | None) -> str:
    marker = control_marker(key) or "UNKNOWN"  # as Batch.control_type names a key it cannot read
    return json.dumps({"partition": partition, "offset": offset, "producerId": producer_id, "marker": marker},
                      separators=(",", ":"))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def show_tables(output: Location, rows: int) -> str:
    """Each table's path, row count and first rows (of the newest complete run) as the aligned table `sql` prints."""
    import pyarrow as pa

    from jobs.lake.runs import snapshot
    from jobs.readers.sql import table_text

    tables = snapshot(output, known_tables())
    lines = [run_line(tables.run)] if tables.run else []
    for table in known_tables():
        path = tables.path(table).uri
        if table not in tables.versions:
            if table in TABLES:
                lines.append(f"{table}: (missing) {path}")
            continue
        data = tables.open(table).to_pyarrow_dataset()
        label = tables.label(table) or tables.history_note(table)
        lines.append(f"{table}: {data.count_rows()} rows  {path}" + (f"  ({label})" if label else ""))
        if rows:
            head = data.head(rows)
            text, _ = table_text(pa.RecordBatchReader.from_batches(head.schema, head.to_batches()), rows)
            lines += ["  " + line for line in text.splitlines()[:-1]]  # the aligned table `sql` prints, indented
    return "\n".join(lines) + "\n"


def run_line(run: dict) -> str:
    """One line naming a recorded run (a row of DIR/_runs)."""
    from jobs.readers.sql import iso_utc

    as_of = iso_utc(run["as_of"]) if run["as_of"] else "-"
    finished = iso_utc(run["finished_at"].replace(microsecond=0))
    return f"run {run['run_id']}: as of {as_of}, finished {finished}, from {run['source'] or '-'}"


def register_tables(spark, output: "Location | str", prefix: str = "") -> list[str]:
    """Register every table under `output` as a temporary SQL view named `<prefix><table>` (snapshots:
    `<prefix>snapshots_<table>`).

    Each table is read at its version of the newest complete run (jobs/lake/runs.py): with Spark's Delta reader
    (`versionAsOf`) when Delta is on the classpath, otherwise from the files of that version as delta-rs
    lists them (so a replaced table never shows its old files), a partition's files with its value.
    """
    from jobs.base.tables import query_name, snapshot_tables
    from jobs.lake.runs import snapshot
    from jobs.lake.sink import DELTA_JVM_CLASS
    from jobs.runtime.classpath import has_jvm_class

    native = has_jvm_class(spark, DELTA_JVM_CLASS)
    tables = snapshot(located(output), (*known_tables(), *snapshot_tables()))
    names = []
    for table, version in tables.versions.items():
        path = tables.path(table)
        if native:
            df = spark.read.format("delta").option("versionAsOf", version).load(path.hadoop_uri)
        else:
            df = _version_frame(spark, table, tables.open(table))
        name = prefix + query_name(table)
        df.createOrReplaceTempView(name)
        names.append(name)
    return names


def _version_frame(spark, table: str, delta_table):
    """The rows of one Delta version, read by Spark without Delta: its files, the contract's columns, and
    partition columns (not stored in the files) as the literal of each file's partition."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from jobs.base.tables import contract_table
    from jobs.lake.runs import add_actions
    from jobs.runtime.spark_types import spark_schema

    schema = spark_schema(contract_table(table))
    partitions = delta_table.metadata().partition_columns
    files = delta_table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    if not partitions:
        return spark.read.schema(schema).parquet(*files)
    stored = StructType([f for f in schema if f.name not in partitions])
    by_name: dict[str, tuple] = {}
    for action in add_actions(delta_table).to_pylist():
        by_name[action["path"].rsplit("/", 1)[-1]] = tuple(action[f"partition.{c}"] for c in partitions)
    groups: dict[tuple, list[str]] = {}
    for uri in files:
        groups.setdefault(by_name[uri.rsplit("/", 1)[-1]], []).append(uri)
    frames = [spark.read.schema(stored).parquet(*paths).select(
        *(F.lit(values[partitions.index(f.name)]).cast(f.dataType).alias(f.name) if f.name in partitions
          else F.col(f.name) for f in schema)) for values, paths in sorted(groups.items())]
    return reduce(lambda a, b: a.unionByName(b), frames)
