"""Run configuration: defaults from conf/offsetlake.toml, overridden by command-line values.

Building a configuration checks every value on its own (numbers, names, the form of a location) and reads
nothing: it is plain data. `check_places` asks the filesystems about the places it names (a folder that can be
written, a bucket that answers), as part of the input check (jobs.sources.check_inputs), before any work starts.
"""
from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.base.data import data_dir
from jobs.base.errors import BadInput

if TYPE_CHECKING:
    from jobs.base.storage import Location

CONF_DIR = data_dir("conf")
CONF_FILE = CONF_DIR / "offsetlake.toml"
SOURCE_KINDS = ("parquet", "segments", "kafka")
ENGINES = ("auto", "local", "spark")


@lru_cache(maxsize=1)
def defaults() -> dict[str, Any]:
    """The parsed conf/offsetlake.toml."""
    with CONF_FILE.open("rb") as f:
        return tomllib.load(f)


@dataclass(frozen=True)
class SourceSpec:
    """`kind:location`, e.g. parquet:/dumps/offsets or kafka:broker1:9092,broker2:9092."""

    kind: str
    location: str
    storage: tuple[tuple[str, str], ...] = ()  # --storage-option pairs, for a dump on an object store

    @classmethod
    def parse(cls, text: str, storage: dict[str, str] | None = None) -> "SourceSpec":
        kind, sep, location = text.partition(":")
        if not sep or kind not in SOURCE_KINDS or not location:
            raise BadInput(
                f"--source {text!r}: expected parquet:PATH, segments:DIR or kafka:HOST:PORT[,HOST:PORT...]"
            )
        spec = cls(kind, location, tuple(sorted((storage or {}).items())))
        if kind == "parquet":
            spec.dump  # an unknown scheme is reported now
        return spec

    @property
    def dump(self) -> "Location":
        """A parquet source's location."""
        from jobs.base.storage import Location

        return Location.parse(self.location, dict(self.storage), f"--source {self.kind}:")

    def __str__(self) -> str:
        return f"{self.kind}:{self.location}"


def source_folder_name(location: str) -> str:
    """The last folder name of a dump's or log dir's location (a path or a URI), e.g. `offsets` of s3://dumps/offsets/."""
    trimmed = location.rstrip("/")
    name = trimmed.rsplit("/", 1)[-1]
    return name or trimmed or location


def log_dir(location: str) -> Path:
    """The folder of `segments:DIR`: a broker log dir, a folder of them, or one partition folder."""
    root = Path(location)
    if not root.exists():
        raise BadInput(f"--source segments:{location}: no such directory")
    if not root.is_dir():
        raise BadInput(f"--source segments:{location}: not a directory (give a broker log dir or a "
                       f"__consumer_offsets-N folder)")
    return root


def output_folder(location: str, option: str = "--output", *, new: bool = False, local: bool = False,
                  storage_options: dict[str, str] | None = None) -> "Location":
    """A folder this process can write in, or create (`new`: one that must not exist yet, as a dump is never
    overwritten): a local path (relative to the working folder) or a URI (jobs.base.storage), whose filesystem
    is asked once, so that a bucket that does not exist, missing credentials or an unreachable endpoint is one
    line now rather than a failure after the work."""
    from jobs.base.storage import Location

    where = Location.parse(location, storage_options, option)
    check_writable(where, location, option, new=new, local=local)
    return where


def check_writable(where: "Location", location: str, option: str = "--output", *, new: bool = False,
                   local: bool = False) -> None:
    """BadInput (one line) unless `where` (given as `location` to `option`) is a folder this process can write in
    or create (`output_folder`)."""
    if local and not where.local:
        raise BadInput(f"{option} {location}: must be a folder of this machine")
    if not where.local:
        where.check_reachable(option, location)
        if new and where.exists():
            raise BadInput(f"{option} {location}: already exists (a dump is never overwritten)")
        return
    path = Path(where.path)
    if new and os.path.lexists(path):
        raise BadInput(f"{option} {location}: already exists (a dump is never overwritten)")
    existing = path  # the folder that exists, or the nearest ancestor that does (mkdir -p starts there)
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == path:
            raise BadInput(f"{option} {location}: is a file, not a folder")
        raise BadInput(f"{option} {location}: cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):  # also false on a read-only filesystem, even for root
        why = "read-only file system" if os.statvfs(existing).f_flag & os.ST_RDONLY else "permission denied"
        raise BadInput(f"{option} {location}: cannot write in {existing} ({why})")
    try:  # access() says yes to root where no folder can be made (/proc, /sys): a folder made and removed says
        os.rmdir(tempfile.mkdtemp(prefix=".offsetlake-check-", dir=existing))
    except OSError as e:
        raise BadInput(f"{option} {location}: cannot write in {existing} ({e.strerror or e})") from None


def storage_options(pairs: tuple[str, ...]) -> dict[str, str]:
    """--storage-option KEY=VALUE pairs as a dict."""
    from jobs.base.storage import parse_storage_options

    return parse_storage_options(pairs)


def parse_time(text: str, option: str = "--as-of") -> datetime:
    """ISO-8601 (a naive time is taken as UTC) or epoch milliseconds -> aware UTC datetime."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        try:
            return datetime.fromtimestamp(int(text) / 1000, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise BadInput(f"{option} {text!r}: epoch milliseconds out of range") from None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"{option} {text!r}: expected ISO-8601 (2026-11-21T08:00:00Z) or epoch milliseconds"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


KAFKA_ISOLATION = ("read_committed", "read_uncommitted")
KAFKA_READERS = ("auto", "python", "spark")


@dataclass(frozen=True)
class KafkaOptions:
    """How to talk to a live cluster (--source kafka:..., --end-offsets kafka[:...])."""

    config_file: Path | None = None  # Java client properties (--command-config format)
    isolation: str = "read_committed"  # spec §1: aborted transactional commits must not look real
    timeout_s: float = 30.0  # every cluster call and every partition read is bounded by this
    reader: str = "auto"  # auto: Spark's Kafka source when its jar is on the classpath, else the Python one

    @classmethod
    def build(cls, config_file: str | None = None, isolation: str | None = None, timeout_s: float | None = None,
              reader: str | None = None) -> "KafkaOptions":
        path = None
        if config_file is not None:
            path = Path(config_file)
            if not path.is_file():
                raise BadInput(f"--kafka-config {config_file}: no such file")
        if isolation is not None and isolation not in KAFKA_ISOLATION:
            raise BadInput(f"--kafka-isolation {isolation!r}: expected read_committed or read_uncommitted")
        if timeout_s is not None and not timeout_s > 0:
            raise BadInput(f"--kafka-timeout {timeout_s}: must be a positive number of seconds")
        if reader is not None and reader not in KAFKA_READERS:
            raise BadInput(f"--kafka-reader {reader!r}: expected auto, python or spark")
        default = cls()
        return cls(path, isolation or default.isolation, timeout_s or default.timeout_s, reader or default.reader)


# An unquoted SQL identifier, as Spark and Hive's metastore take a database name (Hive's limit: 128).
SQL_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
CATALOG_DIR = "_catalog"  # under --output: Spark's local Derby catalog when no metastore is configured


@dataclass(frozen=True)
class CatalogOptions:
    """Where a rebuild registers its tables (--catalog-database NAME, --catalog-dir DIR)."""

    database: str
    # Spark's local Derby catalog, used only when the session has no metastore of its own; None for a
    # scheme:// output without --catalog-dir (then the session must have a metastore: checked once it runs).
    folder: Path | None
    given: str | None = None  # --catalog-dir as given (check_places: a folder this process can write in)

    @classmethod
    def build(cls, database: str | None, catalog_dir: str | None, output: str) -> "CatalogOptions | None":
        if database is None:
            if catalog_dir is not None:
                raise BadInput("--catalog-dir: given without --catalog-database (the catalog of which database?)")
            return None
        if not SQL_IDENTIFIER.fullmatch(database):
            raise BadInput(f"--catalog-database {database!r}: not a SQL identifier (letters, digits and _, "
                           f"not starting with a digit, at most 128)")
        from jobs.base.storage import Location

        if catalog_dir is None:
            where = Location.parse(output)
            if not where.local:  # Derby keeps its files on a local disk
                return cls(database, None)
            folder = Path(where.path) / CATALOG_DIR
        else:
            where = Location.parse(catalog_dir, None, "--catalog-dir")
            if not where.local:
                raise BadInput(f"--catalog-dir {catalog_dir}: must be a folder of this machine")
            folder = Path(where.path)
        # Derby's URL and a view's paths must be absolute
        return cls(database, Path(os.path.abspath(folder)), catalog_dir)


@dataclass(frozen=True)
class RebuildConfig:
    """Everything one rebuild needs; built by the CLI, consumed by pipeline.run."""

    source: SourceSpec
    output: "Location"
    as_of: datetime | None = None  # None: the newest record timestamp in the input
    retention_minutes: int = 10080
    end_offsets: str | None = None  # a file's location, or kafka[:HOST:PORT] (jobs.sources.end_offsets)
    topic_ids: str | None = None  # a file's location
    kafka: KafkaOptions = KafkaOptions()
    history: bool = True  # offset_commits and group_events (--no-history skips them)
    rate_window_minutes: int = 15  # consumer_lag's consume_rate and produce_rate average over this
    status_window: int = 10  # group_status: commits judged per partition (Burrow's intervals)
    snapshot: bool = False  # also keep the state tables by as_of in DIR/snapshots/<table>
    catalog: CatalogOptions | None = None  # register the tables in Spark's catalog after the run
    keep_runs: int | None = None  # delete files only versions older than the last N complete runs reference
    history_days: int | None = None  # the history tables keep the N days before as_of (jobs.base.retention)
    engine: str = "auto"  # who runs the kernel: local, spark, or auto (jobs.engine.choose_runner)
    workers: int | None = None  # the local runner's worker processes (None: one per core; 0: this process)
    storage: tuple[tuple[str, str], ...] = ()  # --storage-option pairs (jobs.base.storage)
    archive: bool = False  # keep every raw record read in DIR/raw_records; read only what is not there yet
    lock_lease_seconds: float = 300.0  # the output lock's lease (jobs.lake.output_lock)
    log_start_offsets: str | None = None  # a file of log start offsets (kafka-get-offsets.sh --time -2)
    cluster: str | None = None  # the cluster's name in _runs and metrics (None: cluster_name's default)

    @property
    def cluster_name(self) -> str:
        """--cluster, else the bootstrap servers of a kafka: source, else the dump's or log dir's folder name."""
        if self.cluster:
            return self.cluster
        if self.source.kind == "kafka":
            return self.source.location
        return source_folder_name(self.source.location)

    @property
    def retention_ms(self) -> int:
        return self.retention_minutes * 60_000

    @property
    def rate_window_ms(self) -> int:
        return self.rate_window_minutes * 60_000

    @classmethod
    def build(cls, source: str, output: str, **options: Any) -> "RebuildConfig":
        """From the options of `offsetlake rebuild` as the command line names them (REBUILD_OPTIONS; absent or
        None: the default of conf/offsetlake.toml or of the field), each value checked on its own. Nothing is
        read or reached: `check_places` and jobs.sources.check_inputs do that, before any work."""
        unknown = sorted(set(options) - set(REBUILD_OPTIONS))
        if unknown:
            raise TypeError(f"RebuildConfig.build: unknown option(s) {', '.join(unknown)}")
        given = {name: options.get(name) for name in REBUILD_OPTIONS}
        conf = defaults()["rebuild"]
        retention = _given(given, "retention_minutes", conf["retention_minutes"])
        if retention <= 0:
            raise BadInput(f"--retention-minutes {retention}: must be a positive number of minutes")
        rate_window = _given(given, "rate_window_minutes", conf["rate_window_minutes"])
        if rate_window <= 0:
            raise BadInput(f"--rate-window-minutes {rate_window}: must be a positive number of minutes")
        window = _given(given, "status_window", conf["status_window"])
        if window < 2:  # Burrow's rules compare commits with each other: one commit shows no progress
            raise BadInput(f"--status-window {window}: must be at least 2 commits")
        engine, workers, keep_runs = given["engine"], given["workers"], given["keep_runs"]
        if engine not in (None, *ENGINES):
            raise BadInput(f"--engine {engine!r}: expected {', '.join(ENGINES)}")
        if workers is not None and workers < 0:
            raise BadInput(f"--workers {workers}: must be 0 (in this process) or more")
        lease = float(_given(given, "lock_lease", conf.get("lock_lease_seconds", 300)))
        if not lease > 0:
            raise BadInput(f"--lock-lease {given['lock_lease'] if given['lock_lease'] is not None else lease}: must "
                           f"be a positive number of seconds")
        if given["log_start_offsets"] is not None and given["end_offsets"] is None:
            raise BadInput(f"--log-start-offsets {given['log_start_offsets']}: given without --end-offsets (the log "
                           "start offsets complete end-offset snapshots)")
        cluster = given["cluster"]
        if cluster is not None and not cluster.strip():
            raise BadInput("--cluster: an empty name")
        if keep_runs is not None and keep_runs < 1:
            raise BadInput(f"--keep-runs {keep_runs}: must be at least 1 (the run just written)")
        history_days = _history_days(given, conf)
        storage = storage_options(tuple(given["storage_option"] or ()))
        from jobs.base.storage import Location

        return cls(
            as_of=parse_time(given["as_of"]) if given["as_of"] is not None else None,
            source=SourceSpec.parse(source, storage),
            output=Location.parse(output, storage, "--output"),
            retention_minutes=retention,
            end_offsets=given["end_offsets"],
            topic_ids=given["topic_ids"],
            kafka=KafkaOptions.build(given["kafka_config"], given["kafka_isolation"], given["kafka_timeout"],
                                     given["kafka_reader"]),
            history=not given["no_history"],
            rate_window_minutes=rate_window,
            status_window=window,
            snapshot=bool(given["snapshot"]),
            catalog=CatalogOptions.build(given["catalog_database"], given["catalog_dir"], output),
            keep_runs=keep_runs,
            history_days=history_days,
            engine=engine or "auto",
            workers=workers,
            storage=tuple(sorted(storage.items())),
            archive=bool(given["archive"]) or bool(conf.get("archive", False)),
            lock_lease_seconds=lease,
            log_start_offsets=given["log_start_offsets"],
            cluster=cluster.strip() if cluster is not None else None,
        )


# The options of `offsetlake rebuild` besides --source and --output, as the command line names them
# (jobs.cli.rebuild_options): what RebuildConfig.build takes.
REBUILD_OPTIONS = ("storage_option", "as_of", "retention_minutes", "end_offsets", "topic_ids", "kafka_config",
                   "kafka_isolation", "kafka_timeout", "kafka_reader", "no_history", "rate_window_minutes",
                   "status_window", "snapshot", "catalog_database", "catalog_dir", "keep_runs", "history_days",
                   "engine", "workers", "archive", "lock_lease", "log_start_offsets", "cluster")


def _given(options: dict[str, Any], name: str, default: Any) -> Any:
    return default if options[name] is None else options[name]


def _history_days(given: dict[str, Any], conf: dict[str, Any]) -> int | None:
    """--history-days, else conf/offsetlake.toml's history_days (which a --no-history run has nothing to apply
    to), else None: the history is kept whole."""
    days = given["history_days"]
    if days is not None and given["no_history"]:
        raise BadInput(f"--history-days {days}: given with --no-history (there is no history to keep)")
    if days is None and not given["no_history"]:
        days = conf.get("history_days")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 1):
        where = "--history-days" if given["history_days"] is not None else f"history_days in {CONF_FILE.name}"
        raise BadInput(f"{where} {days!r}: must be a whole number of days, at least 1")
    return days


def check_places(cfg: RebuildConfig) -> None:
    """BadInput (one line) for a place the configuration names that this process cannot use: a log dir that is not
    a folder, an output it cannot write Delta tables in (its filesystem asked once, so that a bucket that does not
    exist, missing credentials or an unreachable endpoint is one line now rather than a failure after the work),
    a --catalog-dir it cannot write in. Part of the input check (jobs.sources.check_inputs)."""
    from jobs.base.storage import Location

    if cfg.source.kind == "segments":
        log_dir(cfg.source.location)
    check_writable(cfg.output, cfg.output.uri)
    cfg.output.check_delta_path(f"--output {cfg.output.uri}")
    if cfg.catalog is not None and cfg.catalog.given is not None:
        check_writable(Location.parse(cfg.catalog.given, None, "--catalog-dir"), cfg.catalog.given, "--catalog-dir")
