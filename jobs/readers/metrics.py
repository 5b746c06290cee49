"""`offsetlake metrics`: the newest run as Prometheus text, in the names and labels dashboards already read.

* kafka-lag-exporter's (seglo/kafka-lag-exporter, Metrics.scala), so that its Grafana dashboards work unchanged:
  per partition `kafka_consumergroup_group_offset`, `_group_lag` and `_group_lag_seconds` labelled cluster_name,
  group, topic, partition, member_host, consumer_id, client_id (the member the partition is assigned to, or
  `unknown`, as the exporter labels a group without members); per group `_group_max_lag`, `_group_max_lag_seconds`,
  `_group_sum_lag`, per group and topic `_group_topic_sum_lag`; per partition `kafka_partition_latest_offset` and
  `kafka_partition_earliest_offset`. As the exporter does, a negative lag counts 0 and an unknown lag in time is NaN.
* Burrow's verdict as burrow_exporter shows it: `kafka_burrow_partition_status` and `kafka_burrow_status`, with
  Burrow's status codes (NOTFOUND 0, OK 1, WARN 2, ERR 3, STOP 4, STALL 5, REWIND 6); only when the newest run
  judged them (a --no-history run does not).
* `offsetlake_consumergroup_records_lost` (records retention deleted before the group read them) and the run's own
  health: `offsetlake_run_*` (as_of, finish time, duration, records read and quarantined).

Written for node_exporter's textfile collector: no timestamps, and a file is replaced whole (a temporary file
beside it, renamed over it), so the collector never reads half of one.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import pyarrow as pa

from jobs.base.storage import Location
from jobs.readers.newest import Newest, newest

READS = ("consumer_lag", "group_members", "consumer_groups", "group_status")
UNKNOWN = "unknown"  # kafka-lag-exporter's member labels for a partition no member holds
BURROW_CODES = {"NOTFOUND": 0, "OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}
PARTITION_LABELS = ["cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id"]


def metric_families(output: Location) -> list[Any]:
    """The metric families (prometheus_client's) of the newest complete run under `output`."""
    from prometheus_client.core import GaugeMetricFamily

    found = newest(output, READS)
    cluster = found.run.get("cluster") or found.run.get("source") or output.uri
    families: dict[str, GaugeMetricFamily] = {}

    def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        if name not in families:
            families[name] = GaugeMetricFamily(name, doc, labels=labels)
        return families[name]

    lag = found.read("consumer_lag").to_pylist()
    owners = _owners(found.read("group_members", ["group_id", "member_id", "client_id", "client_host",
                                                  "assigned_partitions"]))
    by_group: dict[str, list[dict]] = {}
    for row in lag:
        member = owners.get((row["group_id"], row["topic"], row["partition"]))
        labels = [cluster, row["group_id"], row["topic"], str(row["partition"]),
                  *(member if member else (UNKNOWN, UNKNOWN, UNKNOWN))]
        offset_lag = _offset_lag(row)
        gauge("kafka_consumergroup_group_offset", "Last group consumed offset of a partition",
              PARTITION_LABELS).add_metric(labels, row["committed_offset"])
        gauge("kafka_consumergroup_group_lag", "Group offset lag of a partition",
              PARTITION_LABELS).add_metric(labels, offset_lag)
        gauge("kafka_consumergroup_group_lag_seconds", "Group time lag of a partition",
              PARTITION_LABELS).add_metric(labels, _number(row["lag_seconds"]))
        if row.get("records_lost") is not None:
            gauge("offsetlake_consumergroup_records_lost", "Records retention deleted before the group read them "
                  "(log start offset - committed offset, when positive)", ["cluster_name", "group", "topic",
                                                                           "partition"]
                  ).add_metric(labels[:4], row["records_lost"])
        by_group.setdefault(row["group_id"], []).append(row)
    for group, rows in sorted(by_group.items()):
        lags = [_offset_lag(r) for r in rows]
        seconds = [r["lag_seconds"] for r in rows if r["lag_seconds"] is not None]
        gauge("kafka_consumergroup_group_max_lag", "Max group offset lag", ["cluster_name", "group"]
              ).add_metric([cluster, group], max(lags))
        gauge("kafka_consumergroup_group_max_lag_seconds", "Max group time lag", ["cluster_name", "group"]
              ).add_metric([cluster, group], max(seconds) if seconds else math.nan)
        gauge("kafka_consumergroup_group_sum_lag", "Sum of group offset lag", ["cluster_name", "group"]
              ).add_metric([cluster, group], sum(lags))
        for topic in sorted({r["topic"] for r in rows}):
            gauge("kafka_consumergroup_group_topic_sum_lag", "Sum of group offset lag across topic partitions",
                  ["cluster_name", "group", "topic"]
                  ).add_metric([cluster, group, topic], sum(_offset_lag(r) for r in rows if r["topic"] == topic))
    for (topic, partition), (end, start) in sorted(_partitions(lag).items()):
        gauge("kafka_partition_latest_offset", "Latest offset of a partition", ["cluster_name", "topic", "partition"]
              ).add_metric([cluster, topic, str(partition)], end)
        if start is not None:
            gauge("kafka_partition_earliest_offset", "Earliest offset of a partition",
                  ["cluster_name", "topic", "partition"]).add_metric([cluster, topic, str(partition)], start)
    if found.written("group_status"):
        _burrow(found, cluster, gauge)
    _health(found, cluster, gauge)
    return list(families.values())


def _offset_lag(row: dict) -> float:
    """kafka-lag-exporter's offset lag: a negative one (a commit past the end it was given) counts 0."""
    return math.nan if row["lag"] is None else float(max(row["lag"], 0))


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _owners(members: pa.Table) -> dict[tuple[str, str, int], tuple[str, str, str]]:
    """(group, topic, partition) -> (member_host, consumer_id, client_id) of the member it is assigned to."""
    owners = {}
    for m in members.to_pylist():
        for a in m["assigned_partitions"] or ():
            owners[(m["group_id"], a["topic"], a["partition"])] = (m["client_host"] or UNKNOWN, m["member_id"],
                                                                    m["client_id"] or UNKNOWN)
    return owners


def _partitions(lag: Iterable[dict]) -> dict[tuple[str, int], tuple[int, int | None]]:
    """Each topic-partition's log end and log start offsets, as consumer_lag measured them."""
    return {(r["topic"], r["partition"]): (r["log_end_offset"], r.get("log_start_offset")) for r in lag
            if r["log_end_offset"] is not None}


def _burrow(found: Newest, cluster: str, gauge: Any) -> None:
    """burrow_exporter's status gauges (its labels: cluster, group, topic, partition)."""
    groups = {}
    for row in found.read("group_status", ["group_id", "topic", "partition", "status", "group_status"]).to_pylist():
        gauge("kafka_burrow_partition_status", "Burrow's status of a partition (NOTFOUND 0, OK 1, WARN 2, ERR 3, "
              "STOP 4, STALL 5, REWIND 6)", ["cluster", "group", "topic", "partition"]
              ).add_metric([cluster, row["group_id"], row["topic"], str(row["partition"])], BURROW_CODES[row["status"]])
        groups[row["group_id"]] = row["group_status"]
    for group, status in sorted(groups.items()):
        gauge("kafka_burrow_status", "Burrow's status of a group: its worst partition's", ["cluster", "group"]
              ).add_metric([cluster, group], BURROW_CODES[status])


def _health(found: Newest, cluster: str, gauge: Any) -> None:
    """The run that wrote the tables: when, how long, how much it read and quarantined."""
    run = found.run
    if not run:
        return
    labels = ["cluster_name"]

    def seconds(moment: Any) -> float:
        from jobs.base.arrow import epoch_us

        return math.nan if moment is None else epoch_us(moment) / 1e6

    gauge("offsetlake_run_as_of_timestamp_seconds", "The moment the tables describe", labels
          ).add_metric([cluster], seconds(run.get("as_of")))
    gauge("offsetlake_run_finished_timestamp_seconds", "When the run committed its tables", labels
          ).add_metric([cluster], seconds(run.get("finished_at")))
    started = run.get("started_at")
    duration = (run["finished_at"] - started).total_seconds() if started is not None else math.nan
    gauge("offsetlake_run_duration_seconds", "From the run's start to its commit", labels).add_metric([cluster], duration)
    gauge("offsetlake_run_records_read", "Records the run read", labels).add_metric([cluster], _number(
        run.get("records_read")))
    gauge("offsetlake_run_records_quarantined", "Records the run could not decode (the quarantine table)", labels
          ).add_metric([cluster], _number(run.get("records_quarantined")))
    gauge("offsetlake_run_info", "The run, by id and source (always 1)", ["cluster_name", "run_id", "source"]
          ).add_metric([cluster, run["run_id"], run.get("source") or ""], 1)


def metrics_text(output: Location) -> str:
    """Prometheus' text exposition format of metric_families."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(_registry(metric_families(output))).decode()


def write_metrics(output: Location, path: str) -> int:
    """Replace the file at `path` with the metrics, atomically (temporary file + rename); returns the samples."""
    import os

    from jobs.base.errors import BadInput

    families = metric_families(output)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise BadInput(f"--to {path}: cannot write in {folder}")
    from prometheus_client.exposition import write_to_textfile

    write_to_textfile(path, _registry(families))
    return sum(len(f.samples) for f in families)


def _registry(families: list[Any]) -> Any:
    from prometheus_client import CollectorRegistry

    class Collected:
        def collect(self) -> list[Any]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collected())
    return registry
