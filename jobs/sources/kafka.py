"""Live source: a bounded snapshot of `__consumer_offsets` read straight from a cluster (and of the share
coordinator's `__share_group_state` when the cluster has it).

The driver plans the snapshot once: for every offsets-topic partition, [log start, end) where the end is
the high watermark (read_uncommitted) or the last stable offset (read_committed, spec §1), captured now.
Each partition is then read in its own task up to that end (`read_slice`, over confluent-kafka), so the run sees
a reproducible snapshot while the topic keeps growing. Spark reads the same plan (jobs.sources.kafka_spark).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterator

from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster
from jobs.sources.tasks import BATCH_ROWS, RAW_FIELDS, RecordColumns, task_error, task_logger

log = logging.getLogger("offsetlake")


@dataclass(frozen=True)
class Slice:
    """One partition's planned range [start, end) of an internal topic: one Spark task."""

    partition: int
    start: int
    end: int
    topic: str = OFFSETS_TOPIC

    @property
    def records(self) -> int:
        """Upper bound of the records in the range (compaction and transaction markers leave gaps)."""
        return self.end - self.start


def plan_snapshot(cluster: Cluster, topic: str = OFFSETS_TOPIC, optional: bool = False) -> list[Slice]:
    """[log start, end) of every partition of `topic`, from two batched ListOffsets requests; `optional`: none
    when the cluster has no such topic (a cluster without share groups has no `__share_group_state`)."""
    admin = cluster.admin()
    partitions = cluster.partitions(admin, topic, optional)
    if not partitions:
        return []
    tps = [(topic, p) for p in partitions]
    starts = cluster.list_offsets(admin, tps, latest=False, isolation="read_uncommitted")
    ends = cluster.list_offsets(admin, tps, latest=True, isolation=cluster.isolation)
    return [Slice(p, starts[(topic, p)], max(ends[(topic, p)], starts[(topic, p)]), topic) for p in partitions]


def read_slice(cluster: Cluster, topic: str, part: Slice) -> Iterator[Any]:
    """pyarrow RecordBatches of `part`, every record in [start, end), or an error: never a partial range.

    Gaps are normal (compaction, transaction markers, aborted records under read_committed), so completeness
    is judged by the consumer's position reaching `end`; records deleted under us fail as out of range.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    worker_log = task_logger()
    started = time.monotonic()
    try:
        consumer = Consumer(cluster.conf(**{
            "group.id": "offsetlake-snapshot",  # required by librdkafka; never joined or committed (assign only)
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "error",  # the planned start deleted by retention must fail, not skip
            "enable.partition.eof": True, "isolation.level": cluster.isolation,
        }))
    except KafkaException as e:
        raise task_error(cluster.fail("cannot create a consumer", e)) from None
    columns = RecordColumns(RAW_FIELDS, topic, part.partition)
    total = 0
    try:
        consumer.assign([TopicPartition(topic, part.partition, part.start)])
        last_progress, position, done = time.monotonic(), part.start, False
        while not done:
            for m in consumer.consume(num_messages=BATCH_ROWS, timeout=min(1.0, cluster.timeout_s)):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue  # the position check below decides
                    if m.topic() is None and not err.fatal():
                        cluster.last_error = err.str()  # transient (retried by librdkafka); bounded by timeout
                        continue
                    raise task_error(cluster.fail(f"cannot read {topic}-{part.partition} at offset {position}", err))
                if m.offset() >= part.end:
                    done = True
                    break
                kind, ts = m.timestamp()
                # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark's column: 0 CreateTime, 1 LogAppendTime.
                columns.add(m.key(), m.value(), m.offset(), ts if kind else None, kind - 1 if kind else None)
                if m.offset() == part.end - 1:
                    done = True
                    break
            now = time.monotonic()
            current = consumer.position([TopicPartition(topic, part.partition)])[0].offset
            if current > position:
                position, last_progress = current, now
            done = done or position >= part.end
            if columns.full or (done and len(columns)):
                total += len(columns)
                yield columns.batch()
            if not done and now - last_progress > cluster.timeout_s:
                raise task_error(cluster.fail(
                    f"cannot read {topic}-{part.partition} up to the planned offset {part.end}",
                    f"no progress at offset {position} for {cluster.timeout_s:g}s"
                    + (f" (last error: {cluster.last_error})" if cluster.last_error else "")))
    finally:
        consumer.close()
    worker_log.info("read %s-%d: %d records in [%d, %d) in %.1fs", topic, part.partition, total, part.start,
                    part.end, time.monotonic() - started)
