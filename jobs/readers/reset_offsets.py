"""`offsetlake reset-offsets`: a group's committed offsets as the reset plan Kafka's tool reads, without Spark.

`kafka-consumer-groups.sh --group G --reset-offsets --from-file plan.csv` (ConsumerGroupCommand's
parseResetPlan) reads, for a single group, one `topic,partition,offset` line per partition and no header
(a first line that does not parse that way makes it expect `group,topic,partition,offset` instead). The
offsets are committed_offsets of the newest complete run, so the plan restores the group to the state at
that run's as_of, e.g. after a bad deployment committed offsets past data it never processed.

With --bootstrap-server, the plan goes to the cluster itself (`restore`): a dry run that shows each partition's
current and new offset, and with --execute the commit, then the offsets read back.
"""
from __future__ import annotations

from typing import Any, Callable

import pyarrow.compute as pc

from jobs.base.errors import BadInput
from jobs.base.storage import Location
from jobs.lake.runs import Snapshot, snapshot

READS = ("committed_offsets", "consumer_groups")


def reset_plan(output: Location, group_id: str, topic: str | None = None, as_of: str | None = None) -> str:
    """`topic,partition,offset` lines, sorted by topic and partition."""
    return "".join(f"{t},{p},{o}\n" for t, p, o in plan_rows(output, group_id, topic, as_of))


def plan_rows(output: Location, group_id: str, topic: str | None = None, as_of: str | None = None
              ) -> list[tuple[str, int, int]]:
    """The group's committed offsets (topic, partition, offset), sorted, in the newest complete run, or with
    `as_of` in the newest one whose as_of is at or before it (an earlier run, to restore what was then)."""
    tables = _run_tables(output, as_of)
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
    return sorted(zip(*(offsets.column(c).to_pylist() for c in ("topic", "partition", "committed_offset"))))


def _run_tables(output: Location, as_of: str | None) -> Snapshot:
    """The tables of the newest complete run, or of the newest with an as_of at or before `as_of`."""
    if as_of is None:
        return snapshot(output, READS)  # one run's tables, even while a rebuild is committing
    from jobs.config import parse_time
    from jobs.lake.runs import finished_runs, recorded_order

    moment = parse_time(as_of).replace(tzinfo=None)  # the runs' times are naive UTC
    runs = [r for r in finished_runs(output) if r["as_of"] is not None and r["as_of"] <= moment]
    if not runs:
        raise BadInput(f"--as-of {as_of}: no complete run under {output} describes that moment or an earlier one")
    run = max(runs, key=lambda r: (r["as_of"], recorded_order(r)))
    versions = {t["table"]: t["version"] for t in run["tables"] if t["table"] in READS}
    return Snapshot(output, versions, run)


def _group_exists(tables: Snapshot, group_id: str) -> bool:
    if "consumer_groups" not in tables.versions:
        return False
    groups = tables.open("consumer_groups").to_pyarrow_dataset()
    return groups.count_rows(filter=pc.field("group_id") == group_id) > 0


def _as_of(run: dict) -> str:
    from jobs.readers.sql import iso_utc

    return iso_utc(run["as_of"])


# --- a restore that commits -------------------------------------------------------------------------------

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset there
INACTIVE = ("EMPTY", "DEAD")  # states kafka-consumer-groups.sh --reset-offsets accepts (DEAD: the group is gone)


def restore(plan: list[tuple[str, int, int]], group_id: str, bootstrap: str, kafka_config: str | None,
            timeout_s: float | None, execute: bool, show: Callable[[str], None]) -> str:
    """`reset-offsets --bootstrap-server`: each partition's current and target offset, given to `show` first, and
    with `execute` the plan committed through the admin API (AlterConsumerGroupOffsets) and read back. Refused, in one
    line, when the group has members on the cluster: asked first (DescribeGroups, where the cluster answers it;
    librdkafka's mock cluster does not), and refused by the broker's commit itself otherwise (a group with members
    takes commits only from them: UNKNOWN_MEMBER_ID). A partition read back with another offset is Refused too,
    named. Returns what to say on stderr."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    from jobs.base.errors import Refused
    from jobs.config import KafkaOptions
    from jobs.sources.kafka_client import Cluster

    cluster = Cluster.open(bootstrap, KafkaOptions.build(kafka_config, None, timeout_s), f"--bootstrap-server {bootstrap}")
    admin = cluster.admin()
    notes = []
    state, members = _group_state(cluster, admin, group_id)
    if state is None:
        notes.append(f"the cluster does not describe groups: the commit itself is refused if {group_id} has members")
    elif state not in INACTIVE:
        raise Refused(f"--group {group_id} is {state.title()} on {cluster.bootstrap} with {members} member(s): offsets "
                      f"are reset only while a group is Empty or gone, as kafka-consumer-groups.sh requires; stop its "
                      f"consumers first")

    def committed() -> dict[tuple[str, int], int]:
        asked = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p, _ in plan])
        try:
            found = admin.list_consumer_group_offsets([asked], request_timeout=cluster.timeout_s)[group_id].result(
                timeout=cluster.timeout_s + 5)
        except KafkaException as e:
            raise cluster.fail(f"cannot read the offsets of group {group_id}", e) from None
        return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}

    current = committed()
    show(_table(group_id, [(t, p, current.get((t, p), NO_OFFSET), o) for t, p, o in plan]))
    if not execute:
        notes.append("dry run: nothing was committed; add --execute to commit these offsets")
        return "".join(f"offsetlake: {n}\n" for n in notes)
    target = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p, o) for t, p, o in plan])
    try:
        done = admin.alter_consumer_group_offsets([target], request_timeout=cluster.timeout_s)[group_id].result(
            timeout=cluster.timeout_s + 5)
        failed = [tp for tp in done.topic_partitions if tp.error is not None]
    except KafkaException as e:
        failed, error = [], e.args[0]
        if error.name() not in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"):
            raise cluster.fail(f"cannot commit the offsets of group {group_id}", e) from None
        raise Refused(_refusal(group_id, cluster.bootstrap, error.name())) from None
    if failed:
        names = sorted({tp.error.name() for tp in failed})
        if set(names) & {"UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"}:
            raise Refused(_refusal(group_id, cluster.bootstrap, names[0]))
        raise Refused(f"the cluster refused the offsets of {len(failed)} partition(s) of group {group_id}: "
                      f"{', '.join(f'{tp.topic}-{tp.partition} ({tp.error.name()})' for tp in failed[:10])}")
    back = committed()
    differ = [(t, p, o, back.get((t, p))) for t, p, o in plan if back.get((t, p)) != o]
    if differ:
        raise Refused(f"read back, {len(differ)} partition(s) of group {group_id} differ from the plan: "
                      + ", ".join(f"{t}-{p} holds {_shown(b)}, not {o}" for t, p, o, b in differ[:10]))
    notes.append(f"committed {len(plan)} offset(s) of group {group_id} on {cluster.bootstrap}; read back, every "
                 f"partition holds its new offset")
    return "".join(f"offsetlake: {n}\n" for n in notes)


def _group_state(cluster: Any, admin: Any, group_id: str) -> tuple[str | None, int]:
    """The group's state on the cluster (an upper-case name, as ConsumerGroupState's) and its members; state None
    when the cluster does not answer DescribeGroups."""
    from confluent_kafka import KafkaException

    try:
        found = admin.describe_consumer_groups([group_id], request_timeout=cluster.timeout_s)[group_id].result(
            timeout=cluster.timeout_s + 5)
    except KafkaException as e:
        error = e.args[0]
        if error.name() == "_UNSUPPORTED_FEATURE":
            return None, 0
        if error.name() == "GROUP_ID_NOT_FOUND":
            return "DEAD", 0
        raise cluster.fail(f"cannot describe group {group_id}", e) from None
    state = getattr(found.state, "name", str(found.state)).upper()
    return state, len(found.members or ())


def _refusal(group_id: str, bootstrap: str, error: str) -> str:
    return (f"--group {group_id}: {bootstrap} refused the commit ({error}): the group has members there; offsets "
            f"are reset only while a group is Empty or gone: stop its consumers first")


def _table(group_id: str, rows: list[tuple[str, int, int, int]]) -> str:
    """GROUP TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET, as kafka-consumer-groups.sh --reset-offsets prints its plan
    (with the current offset beside it)."""
    widths = [max(15, len(group_id)), max([15] + [len(t) for t, *_ in rows]), 10, 15]
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    lines = [header] + [[group_id, t, str(p), _shown(c), str(o)] for t, p, c, o in rows]
    return "".join("\n" + " ".join(f"{v:<{w}}" for v, w in zip(line, widths)) + " " + line[-1] for line in lines) + "\n"


def _shown(offset: int | None) -> str:
    return "-" if offset is None or offset < 0 else str(offset)
