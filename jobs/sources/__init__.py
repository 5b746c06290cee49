"""Sources: a Parquet dump, broker log segments or a live cluster, each planned as tasks that read the contract's
raw records (jobs.sources.plan; the columns: jobs.sources.raw).

`check_source` is what can be known about a source before anything reads it.
"""
from __future__ import annotations

from jobs.config import KafkaOptions, SourceSpec


def check_source(source: SourceSpec, kafka: KafkaOptions | None = None) -> None:
    """BadInput for what is wrong with `source` before reading it: a local dump's files and columns, a log dir
    without partition folders, a cluster's address, client settings, and whether it answers with the offsets topic
    (one metadata request, bounded by --kafka-timeout)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import check_dump

        check_dump(source.location)
    elif source.kind == "segments":
        from jobs.sources.segments import plan_segments

        plan_segments(source.location)
    else:
        from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster

        cluster = Cluster.open(source.location, kafka or KafkaOptions(), f"--source kafka:{source.location}")
        # Asked now, so an unreachable cluster fails within --kafka-timeout, before any other work.
        cluster.partitions(cluster.admin(), OFFSETS_TOPIC)
