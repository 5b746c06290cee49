"""Sources: a Parquet dump, broker log segments or a live cluster, each planned as tasks that read the contract's
raw records (jobs.sources.plan; the columns: jobs.sources.raw).

`check_inputs` is a rebuild's input check: it reads what the arguments point at, before any work starts.
"""
from __future__ import annotations

from jobs.config import KafkaOptions, RebuildConfig, SourceSpec, check_places


def check_inputs(cfg: RebuildConfig) -> None:
    """BadInput for what is wrong with the places and inputs a rebuild names (jobs.pipeline.run asks before any
    work, and before Spark starts): the places (config.check_places), the end offsets, the topic ids and the
    source (a dump's footers, a log dir's partition folders, a cluster's answer: last, as it may wait up to
    --kafka-timeout)."""
    from jobs.sources.end_offsets import check_end_offsets
    from jobs.sources.topic_ids import read_topic_ids

    check_places(cfg)
    if cfg.end_offsets is not None:
        check_end_offsets(cfg.end_offsets, cfg.source, cfg.kafka, cfg.log_start_offsets)
    if cfg.topic_ids is not None:
        read_topic_ids(cfg.topic_ids, dict(cfg.storage))
    check_source(cfg.source, cfg.kafka)


def check_source(source: SourceSpec, kafka: KafkaOptions | None = None) -> None:
    """BadInput for what is wrong with `source` before reading it: a local dump's files and columns, a log dir
    without partition folders, a cluster's address, client settings, and whether it answers with the offsets topic
    (one metadata request, bounded by --kafka-timeout)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import check_dump

        check_dump(source.dump)
    elif source.kind == "segments":
        from jobs.sources.segments import plan_segments

        plan_segments(source.location)
    else:
        from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster

        cluster = Cluster.open(source.location, kafka or KafkaOptions(), f"--source kafka:{source.location}")
        # Asked now, so an unreachable cluster fails within --kafka-timeout, before any other work.
        cluster.partitions(cluster.admin(), OFFSETS_TOPIC)
