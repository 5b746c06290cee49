"""The member-level group tables: members, target assignments and topologies, their partitions named.

Modern groups name topics by id: a topic id takes the greatest name that the --topic-ids map and the records
carrying both (offset commits v4, partition metadata records of any coordinator partition) give it, so the names
are gathered from every partition first (`topic_names`) and each partition's group rows are named with them
(`member_tables`). A streams task (subtopology, partition) stands for that partition of each source topic of its
subtopology. Lists are sorted field by field, nulls first.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.tables import arrow_schema
from jobs.replay.contract import timestamps_ms
from jobs.replay.groups import CLASSIC, of_kind

MEMBER_TABLES = ("group_members", "group_target_assignments", "streams_topologies")
# Member state names by family and code (modern/MemberState.java, streams/MemberState.java).
MEMBER_STATES = {
    **{f"{f}:{c}": n for f in ("consumer", "share") for c, n in
       ((0, "STABLE"), (1, "UNREVOKED_PARTITIONS"), (2, "UNRELEASED_PARTITIONS"), (127, "UNKNOWN"))},
    **{f"streams:{c}": n for c, n in ((1, "STABLE"), (2, "UNREVOKED_TASKS"), (3, "UNRELEASED_TASKS"), (127, "UNKNOWN"))},
}
# The members' attributes that group_members takes from the group replay's rows as they are.
_KEPT = ("member_id", "group_instance_id", "client_id", "client_host", "rack_id", "session_timeout_ms",
         "rebalance_timeout_ms", "subscribed_topics", "member_epoch", "previous_member_epoch", "server_assignor",
         "subscribed_topic_regex", "is_classic_member", "subscription_version", "member_payload_error")


def topic_names(group_rows: pa.Table, offset_topics: pa.Table, topic_ids: dict[str, str]) -> dict[str, str]:
    """topic_id -> topic, the greatest name where several are given: the group replay's topic_name rows, the
    committed offsets' (topic_id, topic) pairs and the --topic-ids map."""
    names: dict[str, str] = {}
    records = ((t["topic_id"], t["topic"]) for t in
               of_kind(group_rows, "topic_name").column("topic_name").to_pylist())
    pairs = zip(offset_topics.column("topic_id").to_pylist(), offset_topics.column("topic").to_pylist())
    for topic_id, topic in [*records, *pairs, *topic_ids.items()]:
        if topic_id is not None and topic is not None and (topic_id not in names or topic > names[topic_id]):
            names[topic_id] = topic
    return names


def member_tables(group_rows: pa.Table, names: dict[str, str], as_of: datetime) -> dict[str, pa.Table]:
    """MEMBER_TABLES of one coordinator partition's group rows (members, and the target assignments and topologies
    of the groups that exist: jobs.replay.partition), named with `names` (`topic_names`)."""
    named = _NamedGroupRows(group_rows, names, as_of)
    return {name: named.table(name) for name in MEMBER_TABLES}


class _NamedGroupRows:
    """The group replay's member, target and topology rows (jobs.replay.groups.GROUP_ROWS_SCHEMA), and the names of
    topic ids."""

    def __init__(self, group_rows: pa.Table, names: dict[str, str], as_of: datetime) -> None:
        self.members, self.targets, self.topologies = (of_kind(group_rows, k)
                                                       for k in ("member", "target", "topology"))
        self.as_of = as_of
        self._names = names
        self._sources: dict[tuple[int, str, str], list[str | None]] = {}  # (group key, subtopology) -> topics
        for row in self.topologies.select(["coordinator_partition", "group_id", "topology"]).to_pylist():
            key = (row["coordinator_partition"], row["group_id"], row["topology"]["subtopology_id"])
            self._sources.setdefault(key, []).extend(row["topology"]["source_topics"] or [])

    def table(self, name: str) -> pa.Table:
        """MEMBER_TABLES `name` (its Arrow schema)."""
        schema = arrow_schema(name)
        if name == "group_members":
            table = self._group_members(schema)
        elif name == "group_target_assignments":
            table = self._group_target_assignments(schema)
        else:
            rows = self.topologies
            fields = dict(zip([f.name for f in rows.schema.field("topology").type],
                              rows.column("topology").combine_chunks().flatten()))
            table = _table(schema, rows, fields)
        stamp = pa.scalar(self.as_of, schema.field("as_of").type)
        index = schema.get_field_index("as_of")
        return table.set_column(index, schema.field(index), pa.repeat(stamp, table.num_rows))

    def _group_target_assignments(self, schema: pa.Schema) -> pa.Table:
        """One row per partition of a target (member_id, assignment_timestamp_ms, partitions), named."""
        rows = [{"coordinator_partition": t["coordinator_partition"], "group_id": t["group_id"], **t["target"], **p}
                for t in self.targets.to_pylist()
                for p in self._named(t, t["target"]["partitions"])]
        stamps = timestamps_ms(pa.array([r["assignment_timestamp_ms"] for r in rows], pa.int64()))
        index = schema.get_field_index("assignment_timestamp")
        return pa.Table.from_pylist(rows, schema).set_column(index, schema.field(index), stamps)

    def _group_members(self, schema: pa.Schema) -> pa.Table:
        family = pc.struct_field(self.members.column("member"), "family")
        classic = _classic_members(self.members.filter(pc.equal(family, CLASSIC)), schema)
        modern = [self._modern_member(m) for m in self.members.filter(pc.not_equal(family, CLASSIC)).to_pylist()]
        return pa.concat_tables([classic, pa.Table.from_pylist(modern, schema)])

    def _modern_member(self, row: dict[str, Any]) -> dict[str, Any]:
        """A modern member with its partitions named, sorted field by field, nulls first."""
        m = row["member"]
        detail = [{**p, "pending_revocation": pending}
                  for pending, partitions in ((False, m["assigned"]), (True, m["pending_revocation"]))
                  for p in self._named(row, partitions)]
        detail.sort(key=lambda p: tuple((v is not None, v) for v in (
            p["topic"], p["partition"], p["topic_id"], p["assignment_epoch"], p["pending_revocation"])))
        state = m["member_state"]
        return {
            **{name: m[name] for name in _KEPT},
            "coordinator_partition": row["coordinator_partition"], "group_id": row["group_id"],
            "assigned_partitions": [{k: p[k] for k in ("topic", "partition", "topic_id")}
                                    for p in detail if not p["pending_revocation"]],
            "current_assignment_detail": detail or None,
            "member_state": None if state is None else MEMBER_STATES.get(f"{m['family']}:{state}"),
        }

    def _named(self, row: dict[str, Any], partitions: list[dict] | None) -> list[dict[str, Any]]:
        """A group's partitions named: a topic id by the names known, a streams task (subtopology, partition) as
        that partition of each of the subtopology's source topics (a null topic when neither is known)."""
        named = []
        for p in partitions or []:
            if p["subtopology_id"] is None:
                topics = [(self._names.get(p["topic_id"]), p["topic_id"])]
            else:
                key = (row["coordinator_partition"], row["group_id"], p["subtopology_id"])
                topics = [(topic, None) for topic in self._sources.get(key) or [None]]
            named += [{"topic": topic, "partition": p["partition"], "topic_id": topic_id,
                       "assignment_epoch": p["assignment_epoch"]} for topic, topic_id in topics]
        return named


def _classic_members(members: pa.Table, schema: pa.Schema) -> pa.Table:
    """Classic members: the consumer protocol named their partitions."""
    fields = dict(zip([f.name for f in members.schema.field("member").type],
                      members.column("member").combine_chunks().flatten()))
    assigned = fields["assigned"]
    partitions = dict(zip([f.name for f in assigned.type.value_type], pc.list_flatten(assigned).flatten()))
    lengths = pc.fill_null(pc.list_value_length(assigned), 0).to_numpy()
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    fields["assigned_partitions"] = pa.ListArray.from_arrays(
        offsets, pa.StructArray.from_arrays([partitions[k] for k in ("topic", "partition", "topic_id")],
                                            ["topic", "partition", "topic_id"]), mask=assigned.is_null())
    return _table(schema, members, {k: v for k, v in fields.items() if k in (*_KEPT, "assigned_partitions")})


def _table(schema: pa.Schema, rows: pa.Table, fields: dict[str, Any]) -> pa.Table:
    """`schema`'s columns: the group key of `rows`, `fields`, nulls for the others (as_of: set by the caller)."""
    columns = {**fields, "coordinator_partition": rows.column("coordinator_partition"),
               "group_id": rows.column("group_id")}
    return pa.table([columns[f.name] if f.name in columns else pa.nulls(rows.num_rows, f.type) for f in schema],
                    schema=schema.remove_metadata()).cast(schema)
