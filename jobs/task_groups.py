"""The member-level group tables (members, target assignments, topologies) written outside Spark, from the
group fold and the offsets a run pins.

jobs.replay names the modern members' and target assignments' partitions with Spark (their topic ids by the
names the records and the --topic-ids map give, their streams tasks by their subtopologies' source topics) and
keeps the assignments and topologies of the groups that exist: for tables of a few thousand rows, several of a
cold JVM's queries, about 2 s each of a run on a small machine. A run (jobs.pipeline.run) pins the group fold
and the decoded offsets as files in its staging area anyway (or the early reduction's workers wrote them there:
jobs.sources.early_reduction), so the driver writes these tables from those files itself, by the same rules,
while Spark computes the others. jobs.pipeline.rebuild, the transform without a sink, keeps Spark's
(tests/jobs/test_modern.py compares the two).

It runs in the driver, without Spark: pyarrow in, pyarrow out.
"""
from __future__ import annotations

import threading
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

# The tables written here, and whether each keeps only the rows of the groups that exist after expiry.
NAMED_TABLES = {"group_members": False, "group_target_assignments": True, "streams_topologies": True}
# The members' attributes that group_members takes from the fold as they are.
_KEPT = ("member_id", "group_instance_id", "client_id", "client_host", "rack_id", "session_timeout_ms",
         "rebalance_timeout_ms", "subscribed_topics", "member_epoch", "previous_member_epoch", "server_assignor",
         "subscribed_topic_regex", "is_classic_member", "subscription_version", "member_payload_error")
GroupKey = tuple[int, str]  # (coordinator partition, group id)


class NamedFold:
    """The fold's member, target and topology rows (jobs.groups.fold_schema), with what names their partitions:
    `offset_topics`, (topic_id, topic) of the live offsets, name topic ids as the fold's topic names and
    `topic_ids` (--topic-ids) do (jobs.replay.topic_names)."""

    def __init__(self, fold: pa.Table, offset_topics: Iterable[tuple[str | None, str | None]],
                 topic_ids: dict[str, str], as_of: datetime) -> None:
        kind = fold.column("kind")
        self.members = fold.filter(pc.equal(kind, "member"))
        self.targets = fold.filter(pc.equal(kind, "target"))
        self.topologies = fold.filter(pc.equal(kind, "topology"))
        self.as_of = as_of
        self._names = _topic_names(fold.filter(pc.equal(kind, "topic_name")), offset_topics, topic_ids)
        self._sources: dict[tuple[int, str, str], list[str | None]] = {}  # (group key, subtopology) -> topics
        for row in self.topologies.select(["coordinator_partition", "group_id", "topology"]).to_pylist():
            key = (row["coordinator_partition"], row["group_id"], row["topology"]["subtopology_id"])
            self._sources.setdefault(key, []).extend(row["topology"]["source_topics"] or [])

    def table(self, name: str, existing: set[GroupKey] | None = None) -> pa.Table:
        """NAMED_TABLES `name` (its Arrow schema); `existing`: the groups that exist, whose target assignments and
        topologies are kept."""
        schema = arrow_schema(name)
        if name == "group_members":
            table = self._group_members(schema)
        elif name == "group_target_assignments":
            rows = [{"coordinator_partition": t["coordinator_partition"], "group_id": t["group_id"],
                     "member_id": t["target"]["member_id"], **p}
                    for t in self.targets.filter(_of(self.targets, existing)).to_pylist()
                    for p in self._named(t, t["target"]["partitions"])]
            table = pa.Table.from_pylist(rows, schema)
        else:
            rows = self.topologies.filter(_of(self.topologies, existing))
            fields = dict(zip([f.name for f in rows.schema.field("topology").type],
                              rows.column("topology").combine_chunks().flatten()))
            table = _table(schema, rows, fields)
        stamp = pa.scalar(self.as_of, schema.field("as_of").type)
        index = schema.get_field_index("as_of")
        return table.set_column(index, schema.field(index), pa.repeat(stamp, table.num_rows))

    def _group_members(self, schema: pa.Schema) -> pa.Table:
        family = pc.struct_field(self.members.column("member"), "family")
        classic = _classic_members(self.members.filter(pc.equal(family, CLASSIC)), schema)
        modern = [self._modern_member(m) for m in self.members.filter(pc.not_equal(family, CLASSIC)).to_pylist()]
        return pa.concat_tables([classic, pa.Table.from_pylist(modern, schema)])

    def _modern_member(self, row: dict[str, Any]) -> dict[str, Any]:
        """A modern member with its partitions named (jobs.replay.modern_members), sorted as Spark's sort_array
        sorts structs (field by field, nulls first)."""
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
        """A group's partitions named (jobs.replay.name_partitions): a topic id by the names known, a streams task
        (subtopology, partition) as that partition of each of the subtopology's source topics (a null topic when
        neither is known)."""
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


def _topic_names(rows: pa.Table, offset_topics: Iterable[tuple[str | None, str | None]],
                 topic_ids: dict[str, str]) -> dict[str, str]:
    """topic_id -> topic, the greatest name where several are given (jobs.replay.topic_names)."""
    names: dict[str, str] = {}
    records = ((t["topic_id"], t["topic"]) for t in rows.column("topic_name").to_pylist())
    for topic_id, topic in [*records, *offset_topics, *topic_ids.items()]:
        if topic_id is not None and topic is not None and (topic_id not in names or topic > names[topic_id]):
            names[topic_id] = topic
    return names


def _classic_members(members: pa.Table, schema: pa.Schema) -> pa.Table:
    """Classic members: the consumer protocol named their partitions (jobs.replay.classic_members)."""
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


def _of(rows: pa.Table, existing: set[GroupKey]) -> pa.Array:
    """Which of `rows` belong to the `existing` groups."""
    keys = zip(rows.column("coordinator_partition").to_pylist(), rows.column("group_id").to_pylist())
    return pa.array([key in existing for key in keys], pa.bool_())


class PinnedFold:
    """The NAMED_TABLES of a run's pinned group fold (`fold`) and offsets (`offsets`: jobs.replay's pinned
    offsets, or jobs.task_offsets's rows with their tombstones), written into the staging area; the pinned
    files are read once, by the first of the sink's threads to ask."""

    def __init__(self, fold: Path, offsets: Path, topic_ids: dict[str, str], as_of: datetime) -> None:
        self._paths = (fold, offsets)
        self._topic_ids = topic_ids
        self._as_of = as_of
        self._named: NamedFold | None = None
        self._lock = threading.Lock()

    def write(self, name: str, groups: Path, out: Path) -> int:
        """NAMED_TABLES `name` written to OUT/part-00000.parquet; `groups`: the staged consumer_groups (the groups
        that exist). Returns how many rows."""
        existing = None
        if NAMED_TABLES[name]:
            keys = pads.dataset(groups, format="parquet").to_table(columns=["coordinator_partition", "group_id"])
            existing = set(zip(keys.column("coordinator_partition").to_pylist(), keys.column("group_id").to_pylist()))
        table = self._read().table(name, existing)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / "part-00000.parquet")
        return table.num_rows

    def _read(self) -> NamedFold:
        with self._lock:
            if self._named is None:
                self._named = read_fold(*self._paths, self._topic_ids, self._as_of)
            return self._named


def read_fold(fold: Path, offsets: Path, topic_ids: dict[str, str], as_of: datetime) -> NamedFold:
    """The NamedFold of the fold pinned in `fold` and of the live offsets in `offsets` (PinnedFold; the ones the
    native reader left unproven decoded here by the codec)."""
    kinds = ["member", "target", "topology", "topic_name"]  # not the groups, nor the events (they grow with the log)
    rows = pads.dataset(fold, format="parquet").to_table(
        columns=["coordinator_partition", "group_id", "kind", *kinds], filter=pc.field("kind").isin(kinds))
    pinned = pads.dataset(offsets, format="parquet")
    live = ~pc.field("open") & (pc.field("live") if "live" in pinned.schema.names else True)
    state = pinned.to_table(
        columns={"topic_id": pc.field("c", "topic_id"), "topic": pc.field("c", "topic"), "proven": pc.field("proven"),
                 "key": pc.field("unproven_key"), "value": pc.field("unproven_value")}, filter=live)
    proven = state.filter(pc.and_(state.column("proven"), pc.is_valid(state.column("topic_id"))))
    unproven = state.filter(pc.invert(state.column("proven")))
    decoded = (offset_commit_columns(key, value) for key, value in zip(unproven.column("key").to_pylist(),
                                                                       unproven.column("value").to_pylist()))
    offset_topics = [*zip(proven.column("topic_id").to_pylist(), proven.column("topic").to_pylist()),
                     *((c["topic_id"], c["topic"]) for c in decoded)]
    return NamedFold(rows, offset_topics, topic_ids, as_of)
