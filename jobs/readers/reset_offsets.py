"""`offsetlake reset-offsets`: a group's committed offsets as the reset plan Kafka's tool reads, without Spark.

`kafka-consumer-groups.sh --group G --reset-offsets --from-file plan.csv` (ConsumerGroupCommand's
parseResetPlan) reads, for a single group, one `topic,partition,offset` line per partition and no header
(a first line that does not parse that way makes it expect `group,topic,partition,offset` instead). The
offsets are committed_offsets of the newest complete run, so the plan restores the group to the state at
that run's as_of, e.g. after a bad deployment committed offsets past data it never processed.
"""
from __future__ import annotations

import pyarrow.compute as pc

from jobs.errors import BadInput
from jobs.lake.runs import Snapshot, snapshot
from jobs.lake.storage import Location

READS = ("committed_offsets", "consumer_groups")


def reset_plan(output: Location, group_id: str, topic: str | None = None) -> str:
    """`topic,partition,offset` lines, sorted by topic and partition."""
    tables = snapshot(output, READS)  # one run's tables, even while a rebuild is committing
    if "committed_offsets" not in tables.versions:
        raise BadInput(f"--output {output}: no committed_offsets table there; run `offsetlake rebuild` first")
    at = f" at {_as_of(tables.run)}" if tables.run and tables.run.get("as_of") else ""
    offsets = tables.open("committed_offsets").to_pyarrow_dataset().to_table(
        columns=["topic", "partition", "committed_offset"], filter=pc.field("group_id") == group_id)
    if offsets.num_rows == 0:
        if not _group_exists(tables, group_id):
            raise BadInput(f"--group {group_id}: no such group{at}")
        raise BadInput(f"--group {group_id}: the group has no committed offsets{at}")
    if topic is not None:
        offsets = offsets.filter(pc.field("topic") == topic)
        if offsets.num_rows == 0:
            raise BadInput(f"--topic {topic}: group {group_id} has no committed offsets on it{at}")
    rows = sorted(zip(*(offsets.column(c).to_pylist() for c in ("topic", "partition", "committed_offset"))))
    return "".join(f"{t},{p},{o}\n" for t, p, o in rows)


def _group_exists(tables: Snapshot, group_id: str) -> bool:
    if "consumer_groups" not in tables.versions:
        return False
    groups = tables.open("consumer_groups").to_pyarrow_dataset()
    return groups.count_rows(filter=pc.field("group_id") == group_id) > 0


def _as_of(run: dict) -> str:
    from jobs.readers.sql import iso_utc

    return iso_utc(run["as_of"])
