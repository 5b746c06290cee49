"""The `offsetlake` command line: thin click commands over jobs.pipeline and friends.

Contract: bad arguments or unreadable input print one line on stderr and exit with status 2; the last
stdout line of `rebuild` is the JSON run summary.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

import click

from jobs.base.errors import BadInput, RunFailed

log = logging.getLogger("offsetlake")
EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
SQL_TABLE_ROWS = 1000  # the aligned table holds its rows: a default bound; csv and json stream
_COMMAND_LINE = False  # this process is the command line's own (main), not a caller's
GLOBAL_OPTIONS = ("--debug", "-q", "--quiet")  # `offsetlake`'s own options, taken wherever they stand


class OneLineGroup(click.Group):
    """Every error becomes one stderr line: usage errors and BadInput exit 2, anything else exits 1."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """--debug and -q are taken after the command too (`offsetlake rebuild ... --debug`), up to a `--`."""
        end = args.index("--") if "--" in args else len(args)
        moved = [a for a in args[:end] if a in GLOBAL_OPTIONS]
        return super().parse_args(ctx, [*moved, *(a for a in args[:end] if a not in GLOBAL_OPTIONS), *args[end:]])

    def main(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D102 - click's entry point
        debug = "--debug" in sys.argv
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            _fail("aborted", EXIT_FAILURE)
        except click.UsageError as e:
            _fail(e.format_message(), EXIT_BAD_INPUT)
        except BadInput as e:
            _fail(str(e), EXIT_BAD_INPUT)
        except RunFailed as e:
            _fail(str(e), EXIT_FAILURE)
        except click.ClickException as e:
            _fail(e.format_message(), e.exit_code)
        except Exception as e:  # an internal failure: still one line, the traceback only on request
            if debug:
                raise
            from jobs.base.storage import first_line

            _fail(f"{type(e).__name__}: {first_line(e, 500)} (run with --debug for the traceback"
                  f"{_spark_log_hint()})", EXIT_FAILURE)


def _fail(message: str, status: int) -> None:
    click.echo(f"offsetlake: error: {message}", err=True)
    sys.exit(status)


def _spark_log_hint() -> str:
    """`; Spark's log: PATH` when this process started a local JVM: the log is then kept for the report."""
    session = sys.modules.get("jobs.runtime.session")  # not imported: no Spark was started
    path = session.keep_spark_log() if session is not None else None
    return f"; Spark's log: {path}" if path is not None else ""


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="offsetlake", prog_name="offsetlake", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors, and Spark's own output (before or "
              "after the command).")
@click.option("--quiet", "-q", is_flag=True, help="Only warnings on stderr (no progress; before or after the command).")
def cli(debug: bool, quiet: bool) -> None:
    """Rebuild Kafka consumer-group state from __consumer_offsets into Delta tables."""
    if not log.handlers:  # only offsetlake's own progress; py4j and Spark keep their own loggers
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("offsetlake: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    # jobs.runtime.session reads DEBUG as "let Spark's own output through" (it goes to a log file otherwise).
    log.setLevel(logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO)


def storage_option(fn: Callable) -> Callable:
    """--storage-option, for every command that takes a location."""
    return click.option("--storage-option", "storage_option", multiple=True, metavar="KEY=VALUE",
                        help="A setting of the object store or filesystem of a URI location, as delta-rs names "
                        "it (AWS_ENDPOINT_URL, AWS_REGION, AZURE_STORAGE_ACCOUNT_NAME, ...); repeatable. "
                        "Credentials also come from the environment. Never printed.")(fn)


def _tables(output: str, pairs: tuple[str, ...]) -> Any:
    """The --output of a reading command, checked (jobs.lake.runs.existing_output)."""
    from jobs.config import storage_options
    from jobs.lake.runs import existing_output

    return existing_output(output, storage_options(pairs))


def rebuild_options(fn: Callable) -> Callable:
    """The options of `rebuild`, shared with the spark-submit entry (jobs/__main__.py)."""
    for option in reversed([
        click.option("--source", required=True, metavar="SOURCE",
                     help="parquet:PATH, segments:DIR or kafka:HOST:PORT[,HOST:PORT...]"),
        click.option("--output", required=True, metavar="DIR",
                     help="Folder for the Delta tables (DIR/<table>): a path or a URI (file://, hdfs://, "
                     "s3://, s3a://, abfss://, gs://, dbfs:/)."),
        click.option("--as-of", metavar="TIME", help="ISO-8601 or epoch ms. Default: newest record timestamp."),
        click.option("--retention-minutes", type=click.IntRange(min=1), metavar="N",
                     help="offsets.retention.minutes (default from conf/offsetlake.toml: 10080)."),
        click.option("--end-offsets", metavar="PATH|kafka|kafka:HOST:PORT", help="Topic end offsets for "
                     "consumer_lag: kafka-get-offsets.sh text (topic:partition:offset), CSV or Parquet, each "
                     "optionally with a timestamp (4th column: one file, many snapshots); kafka fetches them now "
                     "from the cluster of --source, kafka:HOST:PORT from another cluster."),
        click.option("--log-start-offsets", metavar="PATH", help="Log start offsets beside --end-offsets: the text "
                     "of kafka-get-offsets.sh --time -2 (or CSV/Parquet), matched by topic, partition and timestamp, so "
                     "that consumer_lag tells records retention deleted (records_lost) from records waiting. A "
                     "CSV/Parquet --end-offsets may carry them as a 5th column, log_start_offset, instead."),
        click.option("--topic-ids", metavar="PATH", help="topic_id,topic CSV (base64url ids)."),
        click.option("--no-history", "no_history", is_flag=True, help="Skip the history tables offset_commits, "
                     "group_events and group_status, which grow with the log; the state tables stay exact. Readers "
                     "then label those tables with the earlier run they come from."),
        click.option("--cluster", metavar="NAME", help="The cluster's name, kept in DIR/_runs and used as "
                     "cluster_name by `offsetlake metrics` (default: the bootstrap servers of a kafka: source, else "
                     "the dump's or log dir's folder name)."),
        click.option("--rate-window-minutes", type=click.IntRange(min=1), metavar="N",
                     help="consumer_lag's consume_rate and produce_rate are averages over the N minutes up to as_of "
                     "(default from conf/offsetlake.toml: 15)."),
        click.option("--status-window", type=click.IntRange(min=2), metavar="N",
                     help="group_status judges each partition's last N commits, as Burrow's intervals (default 10)."),
        click.option("--snapshot", is_flag=True, help="Also keep this run's state tables by as_of in "
                     "DIR/snapshots/<table> (partitioned by as_of; a rerun at the same as_of replaces its partition)."),
        click.option("--catalog-database", metavar="NAME", help="After the run, register every table in Spark's "
                     "catalog as NAME.<table> (snapshots as NAME.snapshots_<table>)."),
        click.option("--catalog-dir", metavar="DIR", help="Spark's local catalog "
                     "(Derby) when the session has no metastore; default: DIR/_catalog of --output."),
        click.option("--engine", type=click.Choice(["auto", "local", "spark"]), help="Who runs the replay: a pool "
                     "of this machine's processes without a JVM (local), Spark's tasks (spark), or local for a local "
                     "source unless spark-submit or Databricks started the process (auto, the default)."),
        click.option("--workers", type=click.IntRange(min=0), metavar="N", help="The local runner's worker "
                     "processes (default: one per core; 0: all work in this process)."),
        click.option("--keep-runs", type=click.IntRange(min=1), metavar="N", help="After the run, delete the data "
                     "files only versions older than the last N complete runs reference (default: keep every "
                     "version, so time travel to any earlier run works)."),
        click.option("--history-days", "history_days", type=click.IntRange(min=1), metavar="N", help="Keep "
                     "only the last N days of history: remove offset_commits' commit_date folders before as_of - N "
                     "days (whole files) and group_events' and end_offsets_history's rows before it, in this run's "
                     "commits. Earlier versions keep those rows until --keep-runs deletes them. Default from "
                     "conf/offsetlake.toml: keep every day."),
        click.option("--lock-lease", "lock_lease", type=click.FloatRange(min=0, min_open=True),
                     metavar="SECONDS", help="The output lock's lease: a run whose heartbeat is this old is taken "
                     "for dead or hung and its output taken over (its later commits fail). Default from "
                     "conf/offsetlake.toml: 300."),
        click.option("--archive", is_flag=True, help="Keep every raw record read in DIR/raw_records across runs "
                     "(each run appends the new ones) and replay archive + new records, so the history outlives "
                     "the cluster's compaction; a live cluster or a log dir is read only after the archived end."),
    ]):
        fn = option(fn)
    return storage_option(kafka_options(fn))


def kafka_options(fn: Callable) -> Callable:
    """Options for a live cluster (--source kafka:..., --end-offsets kafka[:...])."""
    for option in reversed([
        click.option("--kafka-config", metavar="FILE", help="Client properties (the format of Kafka tools' "
                     "--command-config: security.protocol, sasl.*, ssl.*, client.id, ...)."),
        click.option("--kafka-isolation", type=click.Choice(["read_committed", "read_uncommitted"]),
                     help="Read the offsets topic with this isolation.level (default read_committed: aborted "
                     "transactional commits are skipped)."),
        click.option("--kafka-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                     help="Bound on every cluster request and on a partition read without progress (default 30)."),
        click.option("--kafka-reader", type=click.Choice(["auto", "python", "spark"]), help="Spark's Kafka source "
                     "(spark), the built-in Python data source (python), or spark when its jar is present (auto)."),
    ]):
        fn = option(fn)
    return fn


def run_rebuild(**options: Any) -> dict[str, Any]:
    """Parse options into a RebuildConfig and run the pipeline (jobs.pipeline.run: the input check, the lock, the
    run); returns the run summary."""
    from jobs.config import RebuildConfig
    from jobs.engine import runner_name, without_pandas

    cfg = RebuildConfig.build(**options)
    if _COMMAND_LINE and runner_name(cfg.engine) == "local" and not cfg.catalog:  # the catalog needs a Spark session
        without_pandas()  # for this process only: a notebook's or a test's may need pandas later

    from jobs.pipeline import run

    return run(cfg)


@cli.command()
@rebuild_options
def rebuild(**options: Any) -> None:
    """Rebuild every table from SOURCE as of a moment.

    Example: offsetlake rebuild --source parquet:dump/ --output tables/ --as-of 2026-11-21T08:00:00Z
    """
    click.echo(json.dumps(run_rebuild(**options)))


@cli.command()
@click.option("--source", required=True, metavar="SOURCE", help="kafka:HOST:PORT[,...], segments:DIR or parquet:PATH.")
@click.option("--output", required=True, metavar="PATH", help="Parquet dump to write (must not exist): a path or a URI.")
@kafka_options
@storage_option
def dump(source: str, output: str, storage_option: tuple[str, ...], **kafka: Any) -> None:
    """Write SOURCE's raw records as a Parquet dump (the contract's input), to rebuild later at any as-of.

    Example: offsetlake dump --source kafka:broker1:9092 --kafka-config client.properties --output dump/
    """
    from jobs.config import KafkaOptions, SourceSpec, output_folder, storage_options
    from jobs.sources import check_source

    options = KafkaOptions.build(kafka["kafka_config"], kafka["kafka_isolation"], kafka["kafka_timeout"],
                                 kafka["kafka_reader"])
    storage = storage_options(storage_option)
    spec = SourceSpec.parse(source, storage)
    target = output_folder(output, new=True, storage_options=storage)
    check_source(spec, options)

    from jobs.sources.tasks import task_errors
    from jobs.tools.dump import write_dump

    with task_errors():
        click.echo(json.dumps(write_dump(spec, options, target)))


@cli.command()
@click.option("--source", required=True, metavar="SOURCE", help="parquet:PATH (a dump) or segments:DIR.")
@click.option("--limit", type=click.IntRange(min=0), help="Stop after N records.")
@storage_option
def decode(source: str, limit: int | None, storage_option: tuple[str, ...]) -> None:
    """Print each record as Kafka's console formatters do (one JSON object per line).

    Undecodable records print {"partition":..,"offset":..,"error":..} with the raw bytes in Base64;
    segments also print transaction markers ({"marker":"COMMIT",...}) and damage ({"damage":...}).
    Example: offsetlake decode --source parquet:dump/ --limit 20
    """
    from jobs.config import storage_options
    from jobs.readers.views import decode_lines

    for line in decode_lines(source, limit, storage_options(storage_option)):
        click.echo(line)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--group", "group_id", required=True, metavar="G", help="Group id.")
@click.option("--members", is_flag=True, help="Members view.")
@click.option("--state", is_flag=True, help="State view (with --members: both).")
@click.option("--verbose", is_flag=True, help="Extra columns, as kafka-consumer-groups.sh --verbose.")
def describe(output: str, storage_option: tuple[str, ...], group_id: str, members: bool, state: bool,
             verbose: bool) -> None:
    """Print a group as Kafka's tool of its family does: `kafka-consumer-groups.sh --describe` (offsets, --members,
    --state), kafka-share-groups.sh for share groups, kafka-streams-groups.sh for streams groups. stderr says which
    moment (as_of) and run the tables show; an unknown group exits 2.

    Example: offsetlake describe --output tables/ --group my-group --members
    """
    from jobs.readers.describe import describe_group

    views = tuple(v for v, asked in (("state", state), ("members", members)) if asked) or ("offsets",)
    out, err = describe_group(_tables(output, storage_option), group_id, views, verbose)
    if err:
        click.echo(err, err=True, nl=False)
    click.echo(out, nl=False)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--force", is_flag=True, help="Also break a lock whose holder's heartbeat is fresh (a run that may "
              "still be writing: its later commits will fail).")
def unlock(output: str, storage_option: tuple[str, ...], force: bool) -> None:
    """Show who holds the output's lock, and break it when its holder is dead or hung.

    A lock whose heartbeat is older than its holder's lease (or whose process is gone, on this host) is removed;
    a fresh one only with --force. Breaking it fences every table, so a holder that resumes commits nothing
    more; the next rebuild cleans up after it as after a kill.
    Example: offsetlake unlock --output tables/
    """
    from jobs.lake.output_lock import LOCK_TABLE, describe_holder, holder_of, unlock as break_lock

    where = _tables(output, storage_option)
    holder = holder_of(where)
    if holder is None:
        click.echo(f"{where}: nobody holds the lock")
        return
    click.echo(f"{where}: held by {describe_holder(holder, where.child(LOCK_TABLE))}, lease "
               f"{holder.get('lease_seconds') or 300:g} s")
    break_lock(where, force)
    click.echo(f"{where}: lock removed; the next rebuild cleans up after run {holder['run_id']}")


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--rows", type=click.IntRange(min=0), default=5, show_default=True, help="Rows per table.")
def show(output: str, storage_option: tuple[str, ...], rows: int) -> None:
    """Print where each table is, its row count and its first rows.

    Example: offsetlake show --output tables/ --rows 3
    """
    from jobs.readers.views import show_tables

    click.echo(show_tables(_tables(output, storage_option), rows), nl=False)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="An aligned table, CSV with a header line, or JSON Lines (one object per row and line).")
@click.option("--limit", type=click.IntRange(min=0), metavar="N",
              help=f"Print at most N rows (0: all). Default: {SQL_TABLE_ROWS} for the table, all for csv and json.")
@click.argument("query", metavar="SQL")
def sql(output: str, storage_option: tuple[str, ...], fmt: str, limit: int | None, query: str) -> None:
    """Run SQL over the tables, without Spark (DataFusion, as delta-rs ships it: PostgreSQL-like SQL).

    Tables have their contract names (committed_offsets, consumer_lag, consumer_groups, ...), all from the
    newest complete rebuild; _runs lists the complete rebuilds. Timestamps print as ISO-8601 UTC, bytes as
    Base64, lists and structs as JSON.
    Example: offsetlake sql --output tables/ "SELECT group_id, sum(lag) AS lag FROM consumer_lag GROUP BY 1"
    """
    from jobs.readers.sql import csv_chunks, json_lines, query as run_query, table_text

    notes: list[str] = []
    reader = run_query(_tables(output, storage_option), query, notes)
    for note in notes:
        click.echo(f"offsetlake: {note}", err=True)
    try:
        if fmt == "table":
            text, truncated = table_text(reader, SQL_TABLE_ROWS if limit is None else limit or None)
            click.echo(text, nl=False)
            if truncated:
                click.echo("offsetlake: more rows than shown: --limit N for more (0: all), or --format csv|json",
                           err=True)
        else:
            chunks = csv_chunks(reader, limit or None) if fmt == "csv" else json_lines(reader, limit or None)
            for chunk in chunks:
                click.echo(chunk, nl=False)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os._exit(0)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
def groups(output: str, storage_option: tuple[str, ...]) -> None:
    """One line per group of the newest run: id, type, protocol, state, members, lag, worst lag in seconds,
    Burrow's status and records lost, as the aligned table `sql` prints. No Spark.

    Example: offsetlake groups --output tables/
    """
    from jobs.readers.groups import groups_text

    click.echo(groups_text(_tables(output, storage_option)), nl=False)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--to", "to", metavar="FILE", help="Write to FILE, replaced whole (a temporary file renamed over it), "
              "e.g. node_exporter's textfile collector folder: /var/lib/node_exporter/offsetlake.prom. Default: stdout.")
def metrics(output: str, storage_option: tuple[str, ...], to: str | None) -> None:
    """The newest run as Prometheus text, with kafka-lag-exporter's metric names and labels (its Grafana dashboards
    work unchanged: kafka_consumergroup_group_lag, _group_lag_seconds, _group_max_lag, _group_sum_lag,
    kafka_partition_latest_offset, ...), Burrow's status (kafka_burrow_status, kafka_burrow_partition_status), records
    lost and the run's own health (offsetlake_run_*). cluster_name is rebuild's --cluster. No Spark.

    Example: offsetlake metrics --output tables/ --to /var/lib/node_exporter/textfile/offsetlake.prom
    """
    from jobs.readers.metrics import metrics_text, write_metrics

    tables = _tables(output, storage_option)
    if to is None:
        click.echo(metrics_text(tables), nl=False)
        return
    log.info("wrote %d samples to %s", write_metrics(tables, to), to)


@cli.command()
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--to", "to", required=True, metavar="FILE.html", help="The HTML file to write (replaced whole).")
@click.option("--group", "group_ids", multiple=True, metavar="G", help="A section for this group (repeatable); "
              "default: the worst groups by Burrow's status, records lost and lag.")
@click.option("--since", metavar="TIME", help="Lag and rebalances over time from TIME on (ISO-8601 or epoch ms); "
              "default: all the history.")
def report(output: str, storage_option: tuple[str, ...], to: str, group_ids: tuple[str, ...],
           since: str | None) -> None:
    """Write one self-contained HTML file (scripts and data inline: it opens offline) of the newest run and its
    history: groups ranked by status and lag, offsets about to expire, and per group its lag and lag in seconds over
    time, rebalances, Burrow's status per partition, share partitions' progress and records lost. No Spark.

    Example: offsetlake report --output tables/ --to report.html --since 2026-11-14T00:00:00Z
    """
    from jobs.config import parse_time

    moment = parse_time(since, "--since") if since else None
    path = Path(to)
    if path.is_dir() or not path.parent.resolve().is_dir():
        raise BadInput(f"--to {to}: not a file in an existing folder")
    click.echo(str(write_report(_tables(output, storage_option), path, group_ids, moment)))


def write_report(tables: Any, path: Path, group_ids: tuple[str, ...] = (), since: Any = None) -> Path:
    """The report of `tables` written to `path` (a temporary file renamed over it); returns `path`."""
    from jobs.readers.report import gather
    from jobs.readers.report_page import render

    page = render(gather(tables, group_ids, since))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(page, encoding="utf-8")
        temporary.replace(path)
    except OSError as e:
        temporary.unlink(missing_ok=True)
        raise BadInput(f"--to {path}: cannot write ({e.strerror})") from None
    return path


@cli.command("reset-offsets")
@click.option("--output", required=True, metavar="DIR", help="Tables of a rebuild (a path or a URI).")
@storage_option
@click.option("--group", "group_id", required=True, metavar="G", help="Group id.")
@click.option("--topic", metavar="T", help="Only this topic's partitions.")
@click.option("--as-of", metavar="TIME", help="The offsets of the newest run whose as_of is at or before TIME "
              "(ISO-8601 or epoch ms), instead of the newest run's.")
@click.option("--bootstrap-server", metavar="HOST:PORT", help="Show the plan against this cluster's current offsets "
              "(a dry run), or with --execute commit it there.")
@click.option("--execute", is_flag=True, help="Commit the plan to --bootstrap-server (the group must be Empty or gone "
              "there), then read the offsets back; exit 1 naming any partition that differs.")
@click.option("--kafka-config", metavar="FILE", help="Client properties for --bootstrap-server (the format of Kafka "
              "tools' --command-config).")
@click.option("--kafka-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound on every cluster request (default 30).")
def reset_offsets(output: str, storage_option: tuple[str, ...], group_id: str, topic: str | None, as_of: str | None,
                  bootstrap_server: str | None, execute: bool, kafka_config: str | None,
                  kafka_timeout: float | None) -> None:
    """Print the group's committed offsets as `topic,partition,offset` lines (no header, sorted), at the
    as_of of the newest complete rebuild (or --as-of an earlier one): the CSV `kafka-consumer-groups.sh
    --reset-offsets --from-file` reads. With --bootstrap-server: the plan beside the cluster's current offsets, and
    with --execute committed there through the admin API and read back. No Spark.

    Example: offsetlake reset-offsets --output tables/ --group my-group --bootstrap-server b:9092 --execute
    """
    from jobs.readers.reset_offsets import plan_rows, reset_plan, restore

    if (execute or kafka_config or kafka_timeout) and not bootstrap_server:
        raise BadInput("--execute, --kafka-config and --kafka-timeout need --bootstrap-server HOST:PORT (the cluster "
                       "to commit to)")
    tables = _tables(output, storage_option)
    if not bootstrap_server:
        click.echo(reset_plan(tables, group_id, topic, as_of), nl=False)
        return
    said = restore(plan_rows(tables, group_id, topic, as_of), group_id, bootstrap_server, kafka_config, kafka_timeout,
                   execute, show=lambda text: click.echo(text, nl=False))
    click.echo(said, err=True, nl=False)


@cli.command()
@click.option("--output", required=True, type=click.Path(), metavar="PATH", help="Parquet dump to write.")
@click.option("--records", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Approximate number of records.")
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--end-offsets", "end_offsets", type=click.Path(), metavar="PATH",
              help="Also write the topics' end offsets here (kafka-get-offsets.sh text).")
@click.option("--log-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Also write the records as a broker log dir here (for --source segments:DIR).")
def sample(output: str, records: int, seed: int, end_offsets: str | None, log_dir: str | None) -> None:
    """Write a realistic sample dump (many groups, rebalances, Empty/simple/Connect groups, deletions,
    transactional commits).

    Example: offsetlake sample --output dump/ --records 100000 --end-offsets end-offsets.txt
    """
    from jobs.tools.sample import write_sample

    stats = write_sample(Path(output), records, seed, Path(end_offsets) if end_offsets else None,
                         Path(log_dir) if log_dir else None)
    click.echo(json.dumps(stats))


@cli.command()
@click.option("--records", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Records to generate (ignored with --dump).")
@click.option("--dump", type=click.Path(exists=True), help="Benchmark this dump instead of a generated one.")
@click.option("--work", type=click.Path(file_okay=False), default="bench-work", show_default=True,
              help="Scratch folder (dump cache, tables, the peer's virtualenv).")
@click.option("--source-format", type=click.Choice(["parquet", "segments"]), default="parquet", show_default=True,
              help="Rebuild from the dump, or from the same records written as a broker log dir.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rounds; each figure is the median of its rounds.")
@click.option("--no-peer", is_flag=True, help="Skip the pure-Python peer parser (and its virtualenv).")
@click.option("--master", metavar="URL",
              help="Also time the Spark runner under spark-submit on this master (local[2], spark://HOST:PORT), "
                   "against the floor on the same master.")
@click.option("--incremental", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), metavar="FRACTION",
              help="Instead: time a --archive run of each partition's newest FRACTION of records, resuming from a "
                   "run of the rest, against a full rebuild (both --no-history unless --history); compare their "
                   "tables.")
@click.option("--daily", type=click.IntRange(min=1), metavar="DAYS",
              help="With --incremental: time DAYS daily --archive runs of FRACTION of the records each into one "
                   "output, after an untimed run of the rest (with the history unless --no-history).")
@click.option("--history/--no-history", "history", default=None,
              help="With --incremental: the runs keep the history tables (default: with --daily only).")
@click.option("--history-days", "history_days", type=click.IntRange(min=1), metavar="N",
              help="With --daily: every run keeps N days of history (rebuild --history-days); the JSON line then "
                   "says what offset_commits holds after each day's run.")
def bench(records: int, dump: str | None, work: str, source_format: str, repeat: int, no_peer: bool,
          master: str | None, incremental: float | None, daily: int | None, history: bool | None,
          history_days: int | None) -> None:
    """Time a rebuild against a Spark scan floor and a pure-Python peer, each a whole new process; prints
    one JSON line with the seconds, their ratios, and the rebuild's Spark stages and peak memory.

    Example: offsetlake bench --records 1000000 --repeat 3 [--master spark://127.0.0.1:7077]
    [--incremental 0.01 [--history] [--daily 30 [--history-days 7]]]
    """
    from jobs.config import output_folder

    output_folder(work, "--work", local=True)  # before a dump is generated there

    from jobs.tools.bench import run_bench, run_daily, run_incremental

    if daily is not None and incremental is None:
        _fail("--daily needs --incremental FRACTION (each day's share of the records)", 2)
    if daily is not None and daily * incremental >= 1:
        _fail(f"--daily {daily} days of --incremental {incremental} leave no records for the first run", 2)
    if history_days is not None and (daily is None or history is False):
        _fail("--history-days needs --daily with the history (the days of history each daily run keeps)", 2)
    if daily is not None:
        click.echo(json.dumps(run_daily(records, Path(dump) if dump else None, Path(work), incremental, daily, repeat,
                                        history=history is not False, history_days=history_days)))
        return
    if incremental is not None:
        click.echo(json.dumps(run_incremental(records, Path(dump) if dump else None, Path(work), incremental, repeat,
                                              history=bool(history))))
        return
    click.echo(json.dumps(run_bench(records, Path(dump) if dump else None, Path(work), source_format,
                                    repeat, peer=not no_peer, master=master)))


@cli.command()
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default="sample", show_default=True,
              help="Where the sample dump and its tables go.")
@click.option("--records", type=click.IntRange(min=1), default=20_000, show_default=True)
def demo(workdir: str, records: int) -> None:
    """Generate a sample dump, rebuild it, show the tables and write the report (DIR/report.html): the README's
    first command.

    The same records are written as a broker log dir too, to try `rebuild --source segments:DIR` on.
    """
    import shutil

    from jobs.config import output_folder

    base = Path(output_folder(workdir, "--dir", local=True).path)  # before the sample is written there

    from jobs.base.storage import located
    from jobs.readers.views import show_tables
    from jobs.tools.sample import write_sample

    dump, ends, logs, tables = base / "dump", base / "end-offsets.txt", base / "kafka-logs", base / "tables"
    starts = base / "log-start-offsets.txt"
    shutil.rmtree(logs, ignore_errors=True)  # the demo's own folder: a rerun writes it anew
    stats = write_sample(dump, records, seed=7, end_offsets=ends, log_dir=logs, log_starts=starts)
    log.info("sample dump: %s (%d records, %d groups), also as a broker log dir: %s", dump, stats["records"],
             stats["groups"], logs)
    summary = run_rebuild(source=f"parquet:{dump}", output=str(tables), as_of=None, retention_minutes=None,
                          end_offsets=str(ends), log_start_offsets=str(starts), topic_ids=None, cluster="demo")
    click.echo(show_tables(tables, 3), nl=False)
    page = write_report(located(str(tables)), base / "report.html")
    me = command_name()
    log.info("next: %s describe --output %s --group %s --members", me, tables, stats["example_group"])
    log.info("next: %s describe --output %s --group %s", me, tables, stats["example_share_group"])
    log.info("next: %s groups --output %s; %s metrics --output %s", me, tables, me, tables)
    log.info("next: %s rebuild --source segments:%s --output %s-from-segments --end-offsets %s", me, logs, tables, ends)
    log.info("report: %s (open it in a browser)", page)
    click.echo(json.dumps({**summary, "report": str(page)}))


def command_name() -> str:
    """How to run offsetlake again from this shell: `offsetlake` when that is this command on PATH, else the path
    this process was started by, as it was typed (e.g. .venv/bin/offsetlake, when the venv is not activated)."""
    import shutil

    started = Path(sys.argv[0])
    found = shutil.which("offsetlake")
    if started.name != "offsetlake" or (found and Path(found).resolve() == started.resolve()):
        return "offsetlake"
    return str(started)


def main() -> None:
    """Console-script entry."""
    global _COMMAND_LINE
    _COMMAND_LINE = True
    try:
        cli(prog_name="offsetlake")
    except SystemExit as e:
        _exit(e.code)
    _exit(0)


def _exit(code: int | str | None) -> None:
    """End the process with `code`. A command that started no JVM (reset-offsets, describe, sql, checks that
    fail early) ends with os._exit once its output is flushed: Arrow's native thread pools now and then abort
    the interpreter's teardown after all the work is done (`terminate called without an active exception`,
    exit -6: apache/arrow#34314, delta-io/delta-rs#2184; seen here once in 40 reset-offsets under load)."""
    spark = sys.modules.get("pyspark")
    if spark is not None and spark.SparkContext._active_spark_context is not None:  # noqa: SLF001
        sys.exit(code)  # pyspark's own exit handlers stop the JVM
    if isinstance(code, str):
        print(code, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


if __name__ == "__main__":
    main()
