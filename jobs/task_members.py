"""The group_members table named outside Spark, from the early reduction's group fold and offsets.

jobs.replay names the modern members' partitions with Spark (their topic ids by the names the records and the
--topic-ids map give, their streams tasks by their subtopologies' source topics): for a table of a few thousand
rows, several of a cold JVM's queries, about 2 s of a run on a small machine. When the early reduction's
workers have folded the groups and computed the offsets (jobs.sources.early_reduction), both are files in the
run's staging area, and the driver names the members here, by the same rules, while Spark computes the other
tables (tests/jobs/test_task_members.py compares the two).

It runs in the driver, without Spark: pyarrow in, pyarrow out.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.decode import offset_commit_columns
from jobs.groups import CLASSIC
from jobs.replay import MEMBER_STATES
from jobs.tables import arrow_schema

# The members' attributes that the table takes from the fold as they are.
_KEPT = ("member_id", "group_instance_id", "client_id", "client_host", "rack_id", "session_timeout_ms",
         "rebalance_timeout_ms", "subscribed_topics", "member_epoch", "previous_member_epoch", "server_assignor",
         "subscribed_topic_regex", "is_classic_member", "subscription_version", "member_payload_error")


def group_members(fold: pa.Table, offset_topics: Iterable[tuple[str | None, str | None]], topic_ids: dict[str, str],
                  as_of: datetime) -> pa.Table:
    """group_members' rows (its Arrow schema) from the fold's `member`, `topology` and `topic_name` rows
    (jobs.groups.fold_schema); `offset_topics`: (topic_id, topic) of the live offsets, which name topic ids as
    the fold's topic names and `topic_ids` (--topic-ids) do (jobs.replay.topic_names)."""
    schema = arrow_schema("group_members")
    kind = fold.column("kind")
    members = fold.filter(pc.equal(kind, "member"))
    family = pc.struct_field(members.column("member"), "family")
    classic = _classic(members.filter(pc.equal(family, CLASSIC)), schema)
    modern = members.filter(pc.not_equal(family, CLASSIC))
    if modern.num_rows:
        names = _topic_names(fold.filter(pc.equal(kind, "topic_name")), offset_topics, topic_ids)
        sources = _source_topics(fold.filter(pc.equal(kind, "topology")))
        modern = pa.Table.from_pylist([_named(m, names, sources) for m in modern.to_pylist()], schema)
    else:
        modern = schema.empty_table()
    table = pa.concat_tables([classic, modern])
    stamp = pa.scalar(as_of, schema.field("as_of").type)
    return table.set_column(schema.get_field_index("as_of"), schema.field("as_of"), pa.repeat(stamp, table.num_rows))


def _classic(members: pa.Table, schema: pa.Schema) -> pa.Table:
    """Classic members: the consumer protocol named their partitions (jobs.replay.classic_members)."""
    fields = dict(zip([f.name for f in members.schema.field("member").type],
                      members.column("member").combine_chunks().flatten()))
    assigned = fields["assigned"]
    partitions = pc.list_flatten(assigned).flatten()  # the struct's fields, in its order
    named = dict(zip([f.name for f in assigned.type.value_type], partitions))
    lengths = pc.fill_null(pc.list_value_length(assigned), 0).to_numpy()
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    columns = {
        **{name: fields[name] for name in _KEPT},
        "coordinator_partition": members.column("coordinator_partition"),
        "group_id": members.column("group_id"),
        "assigned_partitions": pa.ListArray.from_arrays(
            offsets, pa.StructArray.from_arrays([named["topic"], named["partition"], named["topic_id"]],
                                                ["topic", "partition", "topic_id"]), mask=assigned.is_null()),
    }
    return pa.table([columns[f.name] if f.name in columns else pa.nulls(members.num_rows, f.type) for f in schema],
                    schema=schema.remove_metadata()).cast(schema)


def _topic_names(rows: pa.Table, offset_topics: Iterable[tuple[str | None, str | None]],
                 topic_ids: dict[str, str]) -> dict[str, str]:
    """topic_id -> topic, the greatest name where several are given (jobs.replay.topic_names)."""
    pairs = [(t["topic_id"], t["topic"]) for t in rows.column("topic_name").to_pylist()]
    names: dict[str, str] = {}
    for topic_id, topic in [*pairs, *offset_topics, *topic_ids.items()]:
        if topic_id is not None and topic is not None and (topic_id not in names or topic > names[topic_id]):
            names[topic_id] = topic
    return names


def _source_topics(rows: pa.Table) -> dict[tuple[int, str, str], list[str | None]]:
    """(coordinator partition, group id, subtopology id) -> the subtopology's source topics."""
    sources: dict[tuple[int, str, str], list[str | None]] = {}
    for row in rows.select(["coordinator_partition", "group_id", "topology"]).to_pylist():
        key = (row["coordinator_partition"], row["group_id"], row["topology"]["subtopology_id"])
        sources.setdefault(key, []).extend(row["topology"]["source_topics"] or [])
    return sources


def _named(row: dict[str, Any], names: dict[str, str], sources: dict[tuple[int, str, str], list[str | None]]
           ) -> dict[str, Any]:
    """A modern member with its partitions named (jobs.replay.modern_members): a topic id by `names`, a streams
    task (subtopology, partition) as that partition of each of the subtopology's source topics; sorted as Spark's
    sort_array sorts structs (field by field, nulls first)."""
    m = row["member"]
    detail = []
    for pending, partitions in ((False, m["assigned"]), (True, m["pending_revocation"])):
        for p in partitions or []:
            if p["subtopology_id"] is None:
                topics = [(names.get(p["topic_id"]), p["topic_id"])]
            else:
                found = sources.get((row["coordinator_partition"], row["group_id"], p["subtopology_id"])) or [None]
                topics = [(topic, None) for topic in found]
            detail += [{"topic": topic, "partition": p["partition"], "topic_id": topic_id,
                        "assignment_epoch": p["assignment_epoch"], "pending_revocation": pending}
                       for topic, topic_id in topics]
    detail.sort(key=_spark_order)
    state = m["member_state"]
    return {
        **{name: m[name] for name in _KEPT},
        "coordinator_partition": row["coordinator_partition"], "group_id": row["group_id"],
        "assigned_partitions": [{k: d[k] for k in ("topic", "partition", "topic_id")}
                                for d in detail if not d["pending_revocation"]],
        "current_assignment_detail": detail or None,
        "member_state": None if state is None else MEMBER_STATES.get(f"{m['family']}:{state}"),
    }


def _spark_order(struct: dict[str, Any]) -> tuple:
    return tuple((value is not None, value) for value in struct.values())


def write_group_members(fold: Path, offset_state: Path, topic_ids: dict[str, str], as_of: datetime, out: Path) -> int:
    """`group_members` of the fold pinned in `fold` and of the offsets in `offset_state` (jobs.task_offsets's rows),
    written to OUT/part-00000.parquet; returns how many rows."""
    rows = pads.dataset(fold, format="parquet").to_table(
        filter=pc.field("kind").isin(["member", "topology", "topic_name"]))
    live = pc.field("live") & ~pc.field("open")
    state = pads.dataset(offset_state, format="parquet").to_table(
        columns={"topic_id": pc.field("c", "topic_id"), "topic": pc.field("c", "topic"), "proven": pc.field("proven"),
                 "key": pc.field("unproven_key"), "value": pc.field("unproven_value")}, filter=live)
    proven = state.filter(state.column("proven")).filter(pc.is_valid(state.column("topic_id")))
    unproven = state.filter(pc.invert(state.column("proven")))
    decoded = (offset_commit_columns(key, value) for key, value in zip(unproven.column("key").to_pylist(),
                                                                       unproven.column("value").to_pylist()))
    offset_topics = [*zip(proven.column("topic_id").to_pylist(), proven.column("topic").to_pylist()),
                     *((c["topic_id"], c["topic"]) for c in decoded)]
    table = group_members(rows, offset_topics, topic_ids, as_of)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "part-00000.parquet")
    return table.num_rows
