"""Topic end offsets for lag: kafka-get-offsets.sh text (`topic:partition:offset`), CSV or Parquet,
or fetched from a live cluster (`kafka`, `kafka:HOST:PORT`) for the topic-partitions with a committed offset.

A file may carry a 4th column, `timestamp`: when that snapshot was taken (ISO-8601 or epoch milliseconds in
text and CSV, `topic:partition:offset:timestamp`; a timestamp or int64 epoch-ms column in Parquet), so one
file can hold many snapshots of the same partitions. Without it (or where a CSV cell is empty) the timestamp
is null: the snapshot is taken to be at as_of, which jobs.derive.end_offsets fills in once as_of is known.
A CSV or Parquet file may carry a 5th, `log_start_offset`; the text of `kafka-get-offsets.sh --time -2` (the log
start offsets) comes as a second file (--log-start-offsets), matched to the end offsets by topic, partition and
timestamp. Either lets lag tell records retention deleted from records waiting (consumer_lag.records_lost).

A file is small (one row per topic-partition and snapshot): it is parsed and checked in Python
(`load_end_offsets`), before anything else starts.
"""
from __future__ import annotations

import csv
import io
import logging
import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterable

from jobs.base.arrow import EPOCH
from jobs.base.arrow import TIMESTAMP as UTC_MICROS  # this module's TIMESTAMP is a column name
from jobs.base.errors import BadInput
from jobs.base.storage import Location, first_line
from jobs.config import KafkaOptions, SourceSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from jobs.sources.kafka_client import Cluster

log = logging.getLogger("offsetlake")
COLUMNS = ("topic", "partition", "offset")
TIMESTAMP = "timestamp"  # optional: when the snapshot was taken; null means at as_of
LOG_START = "log_start_offset"  # optional, CSV and Parquet: the partition's log start offset then
# Topic names are [a-zA-Z0-9._-]+ (never a colon), so the first colon ends the topic of a kafka-get-offsets.sh
# line; whatever follows the third colon is the optional timestamp (an ISO-8601 time has colons of its own).
TEXT_LINE = re.compile(r"^\s*([^:]+):(-?\d+):(-?\d+)(?::(.*?))?\s*$")
_WHOLE = re.compile(r"\s*-?\d+\s*")
_INT32, _INT64 = 1 << 31, 1 << 63


def check_end_offsets(location: str, source: SourceSpec, options: KafkaOptions, log_starts: str | None = None) -> None:
    """BadInput for what is wrong with --end-offsets (and --log-start-offsets) before the run (a live cluster is
    not contacted)."""
    if is_live(location):
        if log_starts is not None:
            raise BadInput(f"--log-start-offsets {log_starts}: --end-offsets {location} fetches the log start "
                           f"offsets with the end offsets")
        live_cluster(location, source, options)
    else:
        load_end_offsets(location, dict(source.storage), log_starts)


def load_end_offsets(location: str, storage: dict[str, str] | None = None, log_starts: str | None = None
                     ) -> pa.Table:
    """The file's rows as topic string, partition int32, offset int64, timestamp (UTC microseconds, null when
    the file has none), log_start_offset int64 (null when unknown), every row checked; a topic-partition given
    twice for the same moment is refused. `log_starts`: a second file, of log start offsets (`--time -2`)."""
    import pyarrow as pa

    if is_live(location):  # the caller fetches these with live_end_offsets, once offsets are known
        raise BadInput(f"--end-offsets {location}: a cluster, not a file")
    checked = _read_file(location, storage, "--end-offsets")
    if log_starts is not None:
        starts = {(t, p, at): offset for t, p, offset, at, _ in _read_file(log_starts, storage, "--log-start-offsets")}
        unmatched = len(starts.keys() - {(t, p, at) for t, p, _, at, _ in checked})
        if unmatched:
            log.info("--log-start-offsets %s: %d row(s) match no end offset (topic, partition, timestamp) and are "
                     "not read", log_starts, unmatched)
        checked = [(t, p, o, at, starts.get((t, p, at), start)) for t, p, o, at, start in checked]
    topics, partitions, offsets, times, log_start = (list(c) for c in zip(*checked)) if checked else ([],) * 5
    return pa.table({"topic": pa.array(topics, pa.string()), "partition": pa.array(partitions, pa.int32()),
                     "offset": pa.array(offsets, pa.int64()), TIMESTAMP: pa.array(times, UTC_MICROS),
                     LOG_START: pa.array(log_start, pa.int64())})


def _read_file(location: str, storage: dict[str, str] | None, option: str) -> list[tuple]:
    """The checked rows (topic, partition, offset, timestamp, log start) of one file of offsets."""
    import pyarrow as pa

    path = Location.parse(location, storage, option)
    if not path.local:
        path.check_reachable(option, location, folder=False)
    if not path.exists():
        raise BadInput(f"{option} {location}: no such file or directory")
    location = f"{option} {location}"  # as the messages below name it
    try:
        if path.name.endswith(".parquet") or path.is_dir():
            rows = _parquet_rows(path, location)
        elif path.name.endswith(".csv"):
            rows = _csv_rows(path.read_text(), location)
        else:
            rows = _text_rows(path.read_text(), location)
        return _unique([(where, _checked(row, where, location)) for where, row in rows], location)
    except (OSError, UnicodeDecodeError, csv.Error, pa.ArrowException) as e:
        raise BadInput(f"{location}: cannot read ({first_line(e, 200)})") from None


def _unique(checked: list[tuple[str, tuple]], location: str) -> list[tuple]:
    """The rows, refusing a second end offset for one topic-partition at one moment: which one holds is unknowable."""
    first: dict[tuple, str] = {}
    for where, (topic, partition, _, at, _) in checked:
        seen = first.setdefault((topic, partition, at), where)
        if seen != where:
            moment = at.isoformat() if at is not None else "as_of (no timestamp)"
            raise BadInput(f"{location}: {where} repeats {topic}:{partition} at {moment}, given on {seen}")
    return [row for _, row in checked]


def _text_rows(text: str, location: str) -> Iterable[tuple[str, dict[str, Any]]]:
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = TEXT_LINE.match(line)
        if not match:
            raise BadInput(f"{location}: expected topic:partition:offset per line "
                           f"(or topic:partition:offset:timestamp), got {line!r}")
        yield f"line {n}", dict(zip((*COLUMNS, TIMESTAMP), match.groups()))


def _csv_rows(text: str, location: str) -> Iterable[tuple[str, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    _with_columns(reader.fieldnames or [], location)
    for row in reader:
        yield f"line {reader.line_num}", row


def _parquet_rows(path: Location, location: str) -> Iterable[tuple[str, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path.path, filesystem=path.fs)
    _with_columns(table.column_names, location)
    columns = list(COLUMNS)
    try:
        if TIMESTAMP in table.column_names:
            times = table.column(TIMESTAMP)
            if pa.types.is_timestamp(times.type):  # any unit; a zone-less time is UTC, as Spark writes it
                times = times.cast(pa.timestamp(times.type.unit, tz=times.type.tz or "UTC"))
                times = times.cast(UTC_MICROS, safe=times.type.unit != "ns")  # nanoseconds: truncated, never too large
                table = table.set_column(table.column_names.index(TIMESTAMP), TIMESTAMP, times)
            elif not pa.types.is_integer(times.type):
                raise BadInput(f"{location}: column timestamp has type {times.type}, expected a timestamp "
                               f"or int64 epoch milliseconds")
            columns.append(TIMESTAMP)
        columns += [LOG_START] if LOG_START in table.column_names else []
        rows = table.select(columns).to_pylist()
    except (OverflowError, ValueError) as e:  # a time beyond the years 1 to 9999 (pyarrow's ArrowInvalid too)
        raise BadInput(f"{location}: a timestamp out of range ({first_line(e)})") from None
    for n, row in enumerate(rows, start=1):
        yield f"row {n}", row


def _with_columns(found: list[str], location: str) -> None:
    missing = [c for c in COLUMNS if c not in found]
    if missing:
        raise BadInput(f"{location}: missing column(s) {', '.join(missing)}; expected topic, partition, offset")


def _checked(row: dict[str, Any], where: str, location: str) -> tuple[str, int, int, datetime | None, int | None]:
    """(topic, partition, offset, timestamp, log start) of one row: a topic name, two whole numbers in their
    ranges, a moment or nothing, and a whole number or nothing."""
    topic, partition, offset = (row.get(c) for c in COLUMNS)
    partition, offset = _whole(partition, _INT32), _whole(offset, _INT64)
    if topic is None or str(topic).strip() == "" or partition is None or offset is None:
        shown = {c: row.get(c) for c in COLUMNS}
        raise BadInput(f"{location}: {where} has no valid topic, partition and offset: {shown}")
    raw_time = row.get(TIMESTAMP)
    try:
        at = _moment(raw_time)
    except ValueError:
        raise BadInput(f"{location}: {where} has no valid timestamp {raw_time!r} "
                       f"(expected ISO-8601 such as 2026-11-21T08:00:00Z, or epoch milliseconds)") from None
    raw_start = row.get(LOG_START)
    start = None if raw_start is None or str(raw_start).strip() == "" else _whole(raw_start, _INT64)
    if start is None and not (raw_start is None or str(raw_start).strip() == ""):
        raise BadInput(f"{location}: {where} has no valid log_start_offset {raw_start!r}")
    return str(topic).strip(), partition, offset, at, start


def _moment(value: Any) -> datetime | None:
    """A timestamp cell as an aware UTC datetime, None when empty (the snapshot is at as_of); ValueError if invalid."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if isinstance(value, datetime):  # from Parquet, already UTC
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    millis = _whole(value, _INT64)
    if millis is not None:
        try:
            return EPOCH + timedelta(milliseconds=millis)  # exact, unlike float seconds
        except OverflowError:
            raise ValueError(value) from None
    if not isinstance(value, str):
        raise ValueError(value)
    parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _whole(value: Any, bound: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        value = int(value)
    return value if isinstance(value, int) and -bound <= value < bound else None


# --- live end offsets ------------------------------------------------------------------------------------


def is_live(location: str) -> bool:
    """`kafka` (the cluster of --source) or `kafka:HOST:PORT[,...]`."""
    return location == "kafka" or location.startswith("kafka:")


def live_cluster(location: str, source: SourceSpec, options: KafkaOptions) -> "Cluster":
    """The cluster to ask, checked before any work: `kafka` needs a kafka: source."""
    from jobs.sources.kafka_client import Cluster

    if location == "kafka":
        if source.kind != "kafka":
            raise BadInput(f"--end-offsets kafka: takes the cluster of --source, but --source is {source.kind}:; "
                           "give one with --end-offsets kafka:HOST:PORT")
        bootstrap = source.location
    else:
        bootstrap = location[len("kafka:"):]
    return Cluster.open(bootstrap, options, f"--end-offsets kafka:{bootstrap}")


def fetch_end_offsets(cluster: "Cluster", topic_partitions: list[tuple[str, int]]) -> list[tuple[str, int, int, int | None]]:
    """(topic, partition, log end offset, log start offset) per topic-partition, as kafka-consumer-groups.sh
    sees them: high watermarks (read_uncommitted), in batched ListOffsets requests. Partitions of deleted
    topics are left out (no end offset, no lag row), as the tool shows them without one."""
    from confluent_kafka import KafkaError

    missing: list[tuple[str, int]] = []

    def skip_unknown(tp: tuple[str, int], err) -> None:
        if err.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
            raise cluster.fail(f"cannot list offsets of {tp[0]}-{tp[1]}", err)
        missing.append(tp)

    admin = cluster.admin()
    ends = cluster.list_offsets(admin, topic_partitions, latest=True, isolation="read_uncommitted", on_error=skip_unknown)
    starts = cluster.list_offsets(admin, list(ends), latest=False, isolation="read_uncommitted",
                                  on_error=lambda tp, err: None)  # log start is a hint: unknown stays null
    if missing:
        log.info("no end offset for %d topic-partition(s) that no longer exist, e.g. %s-%d",
                 len(missing), *missing[0])
    return [(t, p, end, starts.get((t, p))) for (t, p), end in sorted(ends.items())]
