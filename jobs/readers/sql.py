"""`offsetlake sql`: SQL over the tables of the newest complete run, without Spark.

Tables have their contract names; the snapshots that `rebuild --snapshot` keeps in DIR/snapshots/<table> are
`snapshots_<table>` (every as_of kept, one partition each); `_runs` lists the complete runs.

delta-rs ships Apache DataFusion (`deltalake.QueryBuilder`), so a query answers in about a second. Results
stream batch by batch; only the aligned table holds its rows, up to its limit. Every format prints timestamps
as ISO-8601 UTC and bytes as Base64 (as `decode` does).
"""
from __future__ import annotations

import re

import base64
import csv
import io
import json
import math
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.errors import BadInput
from jobs.base.storage import Location
from jobs.base.tables import known_tables, query_name, snapshot_tables, utc_micros
from jobs.lake.runs import RUNS_TABLE, snapshot

MAX_CELL = 100  # characters of one value in the aligned table; csv and json print values whole
MAX_ERROR = 400
TEXT_TYPES = {pa.string(), pa.large_string(), *([pa.string_view()] if hasattr(pa, "string_view") else [])}


def query(output: Location, sql: str, notes: list[str] | None = None) -> pa.RecordBatchReader:
    """Start `sql` over every table under `output` (at the newest complete run's versions, and `_runs`); `notes`
    gains a line for each table the SQL names that comes from an earlier run than the newest (--no-history)."""
    from deltalake import QueryBuilder
    from deltalake.exceptions import DeltaError

    if not sql.strip():
        raise BadInput("no SQL given")
    tables = snapshot(output, (*known_tables(), *snapshot_tables(), RUNS_TABLE))
    if not tables.versions.keys() - {RUNS_TABLE}:
        raise BadInput(f"--output {output}: no offsetlake tables there; run `offsetlake rebuild` first")
    builder = QueryBuilder()
    for table in tables.versions:
        builder.register(query_name(table), tables.open(table))
        label = tables.label(table) or tables.history_note(table)
        if label is not None and notes is not None and re.search(rf"\b{re.escape(query_name(table))}\b", sql, re.I):
            notes.append(label)
    try:
        return pa.RecordBatchReader.from_stream(builder.execute(sql))
    except (DeltaError, pa.ArrowException) as e:
        message = f"SQL: {_one_line(e)}"
        if "table '" in message and "not found" in message:
            message += f" (tables here: {', '.join(map(query_name, tables.versions))})"
        raise BadInput(message) from None


def table_text(reader: pa.RecordBatchReader, limit: int | None) -> tuple[str, bool]:
    """An aligned table (numbers right-aligned, then a row count) of at most `limit` rows, and whether rows
    were left out."""
    taken = list(_batches(reader, None if limit is None else limit + 1))  # one more row tells if there are more
    rows = [row for batch in taken for row in zip(*(_cells(c, null="NULL") for c in batch.columns))]
    truncated = limit is not None and len(rows) > limit
    cells = [[_cut(v) for v in row] for row in rows[:limit]]
    header = reader.schema.names
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    numeric = [_is_number(f.type) for f in reader.schema]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    lines = [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in cells]
    lines.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'}{', more not shown' if truncated else ''})")
    return "\n".join(lines) + "\n", truncated


def csv_chunks(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[str]:
    """CSV with a header line, one chunk of text per batch; NULL is an empty field."""
    yield _csv_rows([reader.schema.names])
    for batch in _batches(reader, limit):
        yield _csv_rows(zip(*(_cells(c, null="") for c in batch.columns)))


def json_lines(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[str]:
    """One JSON object per row and line (JSON Lines), one chunk of text per batch."""
    names = reader.schema.names
    for batch in _batches(reader, limit):
        columns = [_plain_column(c, json_safe=True) for c in batch.columns]
        yield "".join(json.dumps(dict(zip(names, row)), ensure_ascii=False, separators=(",", ":")) + "\n"
                      for row in zip(*columns))


def _batches(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[pa.RecordBatch]:
    """The result's batches, at most `limit` rows, with printable types. An error while the query runs (a
    division by zero, a failed cast) is bad SQL too."""
    from deltalake.exceptions import DeltaError

    schema = _printable(reader.schema)
    rows = 0
    try:
        for batch in reader:
            if limit is not None and rows + batch.num_rows > limit:
                batch = batch.slice(0, limit - rows)
            rows += batch.num_rows
            if batch.num_rows:
                yield _cast(batch, schema)
            if limit is not None and rows >= limit:
                return
    except (DeltaError, pa.ArrowException) as e:
        raise BadInput(f"SQL: {_one_line(e)}") from None


def _csv_rows(rows: Iterable[Iterable[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)  # None is written as an empty field
    return buffer.getvalue()


def _printable(schema: pa.Schema) -> pa.Schema:
    # DataFusion may answer in nanoseconds (now()) or in other zones. Naive microseconds hold the same UTC
    # values, and Python reads them without importing pandas (half a second, for zone-aware ones).
    return pa.schema([f.with_type(utc_micros(f.type, tz=None)) for f in schema])


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema == schema:
        return batch
    columns = [pc.cast(c, f.type, safe=False) if c.type != f.type else c for c, f in zip(batch.columns, schema)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _cells(column: pa.Array, null: str) -> list[Any]:
    """A column as text cells: JSON for lists and structs, the JSON spelling of booleans. For CSV (null "")
    numbers and text stay as they are: the csv module writes them, and None as an empty field."""
    values = _plain_column(column, json_safe=False)
    t = column.type
    if null == "" and (_is_number(t) or t in TEXT_TYPES or pa.types.is_timestamp(t) or pa.types.is_date(t)):
        return values
    return [_text(v, null) for v in values]


def _text(value: Any, null: str) -> str:
    if value is None:
        return null
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, bool)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _plain_column(column: pa.Array, json_safe: bool) -> list[Any]:
    """A column as Python values JSON can hold: ISO-8601 UTC times, Base64 bytes, nested lists and objects.
    Vectorised where Arrow can: a result may have millions of rows."""
    t = column.type
    if pa.types.is_timestamp(t):  # naive UTC microseconds (_printable): the same text as iso_utc
        text = pc.replace_substring_regex(pc.strftime(column, format="%Y-%m-%dT%H:%M:%S"), pattern=r"\.000000$",
                                          replacement="")
        return pc.binary_join_element_wise(text, "Z", "").to_pylist()
    if pa.types.is_date(t) or pa.types.is_decimal(t):
        return column.cast(pa.string()).to_pylist()
    values = column.to_pylist()
    if t in TEXT_TYPES or pa.types.is_integer(t) or pa.types.is_boolean(t):
        return values
    if pa.types.is_floating(t) and not json_safe:
        return values
    return [_plain(v, json_safe) for v in values]


def _plain(value: Any, json_safe: bool) -> Any:
    """One value of _plain_column, at any depth."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return None if json_safe and not math.isfinite(value) else value  # JSON has no NaN or Infinity
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, pa.MonthDayNano):
        return _interval(value)
    if isinstance(value, dict):
        return {k: _plain(v, json_safe) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map
            return {str(k): _plain(v, json_safe) for k, v in value}
        return [_plain(v, json_safe) for v in value]
    return str(value)


def iso_utc(moment: datetime) -> str:
    """ISO-8601 with a Z, e.g. 2026-11-21T08:00:00Z; a naive time is UTC."""
    moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    return moment.isoformat().replace("+00:00", "Z")


def _duration(d: timedelta) -> str:
    """ISO-8601 duration, e.g. P1DT2H3M4.5S, -PT30S."""
    sign, d = ("-", -d) if d < timedelta(0) else ("", d)
    hours, rest = divmod(d.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    clock = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n)
    if seconds or d.microseconds or not (d.days or clock):
        fraction = f".{d.microseconds:06d}".rstrip("0") if d.microseconds else ""
        clock += f"{seconds}{fraction}S"
    return f"{sign}P{f'{d.days}D' if d.days else ''}{'T' + clock if clock else ''}"


def _interval(value: pa.MonthDayNano) -> str:
    """ISO-8601 duration of an SQL interval, e.g. P1M2DT3.5S."""
    seconds = Decimal(value.nanoseconds).scaleb(-9).normalize()
    text = "P" + (f"{value.months}M" if value.months else "") + (f"{value.days}D" if value.days else "")
    return text + f"T{seconds:f}S" if seconds or text == "P" else text


def _cut(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR - 1] + "…"
