"""A realistic sample dump of __consumer_offsets, made with offsets_codec's own encoder.

Ten days of a cluster, simulated tick by tick and streamed to Parquet (so 10M records need little memory):
* KIP-848 consumer, share and streams groups (members joining and leaving, epochs, assignments, a topology);
* classic consumer groups (range / roundrobin / cooperative-sticky) with rebalances, changing membership
  and a topic dropped from a subscription now and then; some go Empty (recently, or long enough ago that
  retention expires them); some are deleted (offset tombstones, then the group tombstone);
* simple groups (assign() + commitSync(), offsets only), some long idle;
* Kafka Connect worker groups (protocol type `connect`, opaque member bytes, no offsets);
* a client that commits with an explicit retention (value v1 with expireTimestamp);
* exactly-once applications (transactional producers committing offsets with sendOffsetsToTransaction):
  each tick is a transaction, ended by a COMMIT marker or now and then an ABORT; the last one is still
  open at the end of the dump, so it shows in pending_transactions;
* one group whose type-2 tombstone left its offsets behind (an orphan);
* a broker upgrade to 4.1 halfway through (offset commits become value v4 with a topicId tag);
* two damaged records (an unknown value version, a truncated value) that must land in quarantine;
* what Burrow's rules catch (group_status): a consumer that stalls (`stall-app`), one that stops committing
  (`stop-app`), one whose offsets are reset back (`rewind-app`), and one that rebalances at every tick
  (`flapping-app`), on a topic whose log end grows steadily;
* share groups' progress in the share coordinator's own topic, `__share_group_state` (a ShareSnapshot, then a
  ShareUpdate per tick moving the start offset, with the records in flight);
* end offsets as `kafka-get-offsets.sh` output of the last few ticks, each line with its timestamp, and a close
  watch of the last quarter hour (commits and snapshots every 5 minutes, as a rebuild every 5 minutes would see
  them), so that consume and produce rates are known at the end; and the log start offsets of the same moments
  (`kafka-get-offsets.sh --time -2`): the lagging topic keeps a day of records, so a consumer that stopped long
  ago has lost records to retention.
"""
from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.base.errors import BadInput
from jobs.config import defaults
from jobs.runtime.progress import Progress
from offsets_codec import SHARE_STATE, encode_key, encode_value, partition_for, record_type_named
from offsets_codec.consumer_protocol import encode_assignment, encode_subscription
from offsets_codec.segment_writer import control_record
from offsets_codec.registry import SHARE_SNAPSHOT, SHARE_STATE_TOPIC, SHARE_UPDATE
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

END = datetime(2026, 11, 20, tzinfo=timezone.utc)
DAY_MS = 86_400_000
SPAN_MS = 10 * DAY_MS
START_MS = int(END.timestamp() * 1000) - SPAN_MS
UPGRADE_MS = START_MS + SPAN_MS // 2  # the broker starts writing OffsetCommitValue v4
OFFSET_COMMIT, GROUP_METADATA = 1, 2  # record types written (see offsets_codec.registry)
# The contract's raw-record columns and the batch metadata, as `offsetlake dump --source segments:` writes
# them: the sample has transactions, and with these columns they replay exactly (spec §7.2).
RAW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestampType", pa.int32()),
    ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("is_transactional", pa.bool_()),
    ("is_control", pa.bool_()),
])
ABORT_RATE = 0.05  # of an exactly-once application's transactions
ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


@dataclass
class Group:
    group_id: str
    kind: str  # consumer | simple | connect | retention | deleted | orphan | eos | kip848 | share | streams
    topics: list[str]
    start_tick: int
    stop_tick: int  # the tick it stops (goes Empty / is deleted / stops committing); > ticks = never
    assignor: str = "range"
    generation: int = 0
    members: list[str] = field(default_factory=list)
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    stopped: bool = False
    rewound: bool = False


class SampleWriter:
    """Assigns per-coordinator-partition offsets in time order and streams row groups to Parquet."""

    def __init__(self, path: Path, partitions: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.writer = pq.ParquetWriter(path / "part-00000.parquet", RAW_SCHEMA)
        self.partitions = partitions
        self.next_offset = [0] * partitions
        self.next_share_offset = [0] * partitions  # __share_group_state has as many partitions here
        self.rows: dict[str, list] = {name: [] for name in RAW_SCHEMA.names}
        self.count = 0

    def append(self, group_id: str, key: bytes, value: bytes | None, ts_ms: int, producer_id: int = NO_PRODUCER,
               is_control: bool = False, topic: str = "__consumer_offsets") -> None:
        """A record in the coordinator partition of `group_id` (in `__share_group_state`: of the share partition
        key `group_id` stands for); a producer id makes it transactional."""
        p = partition_for(group_id, self.partitions)
        offsets = self.next_offset if topic == "__consumer_offsets" else self.next_share_offset
        rows = self.rows
        rows["producer_id"].append(producer_id)
        rows["producer_epoch"].append(-1 if producer_id == NO_PRODUCER else 0)
        rows["is_transactional"].append(producer_id != NO_PRODUCER)
        rows["is_control"].append(is_control)
        rows["key"].append(key)
        rows["value"].append(value)
        rows["topic"].append(topic)
        rows["partition"].append(p)
        rows["offset"].append(offsets[p])
        rows["timestamp"].append(ts_ms)
        rows["timestampType"].append(0)  # CreateTime
        offsets[p] += 1
        self.count += 1
        if len(rows["key"]) >= 200_000:
            self.flush()

    def marker(self, group_id: str, producer_id: int, result: str, ts_ms: int) -> None:
        """The transaction coordinator's COMMIT or ABORT marker in the partition of `group_id`."""
        key, value = control_record(result)
        self.append(group_id, key, value, ts_ms, producer_id, is_control=True)

    def flush(self) -> None:
        if self.rows["key"]:
            self.writer.write_batch(pa.RecordBatch.from_pydict(self.rows, schema=RAW_SCHEMA))
            self.rows = {name: [] for name in RAW_SCHEMA.names}

    def close(self) -> None:
        self.flush()
        self.writer.close()


def write_sample(output: Path, records: int, seed: int = 7, end_offsets: Path | None = None,
                 log_dir: Path | None = None, log_starts: Path | None = None) -> dict:
    """Write about `records` records to output/part-00000.parquet (and, with `log_dir`, the same records as
    a broker log dir there; with `log_starts`, the log start offsets of the end offsets' moments); returns what
    was written."""
    if log_dir is not None:
        _check_empty(log_dir)  # before anything is written
    rng, ends_rng = random.Random(seed), random.Random(seed + 1)
    partitions = defaults()["rebuild"]["offsets_topic_partitions"]
    names = ("orders", "payments", "clicks", "audit", "inventory", "events")
    topics = {f"{names[i % len(names)]}-{i}": rng.randint(1, 12) for i in range(max(4, records // 20_000))}
    groups = _plan_groups(rng, records, list(topics))
    topics[LAGGING_TOPIC] = LAGGING_PARTITIONS
    groups += _trouble_groups(list(topics))
    topic_ids = {t: _topic_id(rng) for t in topics}
    # Commits per tick if every group were always active, weighted by the share of the span it is active.
    per_tick = sum(sum(topics[t] for t in g.topics) * (min(g.stop_tick, 1000) - g.start_tick) / 1000
                   for g in groups if g.kind != "connect")
    ticks = max(48, int(records / max(1.0, per_tick)))
    tick_ms = SPAN_MS // ticks

    writer = SampleWriter(output, partitions)
    keys: dict[tuple[str, str, int], bytes] = {}
    snapshots: list[tuple[int, dict[tuple[str, int], int]]] = []
    with Progress(f"sample of {records:,} records (ticks of {tick_ms / 3_600_000:.1f} h)", ticks + 1) as progress:
        for tick in range(ticks + 1):
            progress.step()
            now = START_MS + tick * tick_ms
            for g in groups:
                _step(rng, g, now, topics, topic_ids, writer, keys)
            # kafka-get-offsets.sh run after each of the last ticks and now and then before: enough snapshots to
            # bracket when the log end passed a stalled consumer's offset (lag in seconds). Their own random
            # stream, so the records do not depend on how many snapshots there are.
            if tick > ticks - END_OFFSET_SNAPSHOTS or tick % max(1, ticks // END_OFFSET_SNAPSHOTS) == 0:
                ends = _log_ends(ends_rng, groups, topics, now, snapshots[-1][1] if snapshots else {})
                snapshots.append((now, ends))
        end = START_MS + ticks * tick_ms
        for step in range(1, WATCH_STEPS + 1):  # the close watch of the last quarter hour
            now = end + step * WATCH_MS
            for g in groups:
                _step(rng, g, now, topics, topic_ids, writer, keys)
            snapshots.append((now, _log_ends(ends_rng, groups, topics, now, snapshots[-1][1])))
        end += WATCH_STEPS * WATCH_MS
    _damage(writer, groups[0].group_id, end)
    _open_transaction(rng, groups, end, topics, topic_ids, writer, keys)
    writer.close()

    if end_offsets is not None:
        _write_end_offsets(end_offsets, snapshots)
    if log_starts is not None:
        _write_end_offsets(log_starts, [(now, _log_starts(ends)) for now, ends in snapshots])
    if log_dir is not None:
        write_log_dir(output, log_dir)
    stable = next(g.group_id for g in groups if g.kind == "consumer" and not g.stopped)
    share = next((g.group_id for g in groups if g.kind == "share" and not g.stopped), None)
    return {"records": writer.count, "groups": len(groups), "topics": len(topics), "path": str(output),
            "example_group": stable, "example_share_group": share,
            "end_offsets": str(end_offsets) if end_offsets else None,
            "log_starts": str(log_starts) if log_starts else None, "log_dir": str(log_dir) if log_dir else None}


def _plan_groups(rng: random.Random, records: int, topics: list[str]) -> list[Group]:
    # A 20-group cycle, so even a small sample has every kind: 60% consumer, 15% simple, 10% connect, ...
    kinds = ["consumer", "simple", "kip848", "connect", "consumer", "deleted", "eos", "simple", "consumer",
             "retention", "kip848", "simple", "consumer", "connect", "share", "deleted", "consumer", "streams",
             "consumer", "consumer"]
    n = max(len(kinds), min(5000, records // 400))
    groups = []
    ticks = 1000  # planned on a 0..1000 scale, rescaled in _step
    for i in range(n):
        kind = kinds[i % len(kinds)] if i >= 1 else "orphan"
        stop = rng.choice([ticks + 1] * 6 + [rng.randint(50, 250), rng.randint(700, 990)])  # some stop early
        if kind in ("eos", "share") and i < len(kinds):
            # The first exactly-once application runs to the end (its last transaction is open), and so does
            # the first share group (a Stable one), whatever the seed.
            stop = ticks + 1
        g = Group(
            group_id=f"{kind}-app-{i:05d}" if kind != "connect" else f"connect-cluster-{i:05d}",
            kind=kind,
            topics=rng.sample(topics, k=min(len(topics), rng.randint(1, 3))),
            start_tick=rng.randint(0, 100),
            stop_tick=stop if kind not in ("deleted", "orphan") else rng.randint(300, 900),
            assignor=rng.choice(ASSIGNORS),
        )
        groups.append(g)
    return groups


# A topic whose log end grows steadily, read by the groups that show Burrow's verdicts (group_status).
LAGGING_TOPIC, LAGGING_PARTITIONS = "lagging-0", 2
LAGGING_PER_MINUTE = 10
END_OFFSET_SNAPSHOTS = 6
WATCH_STEPS, WATCH_MS = 3, 5 * 60_000  # the close watch at the end: 3 steps of 5 minutes (the rate window: 15)
RETAINED_MINUTES = 24 * 60  # the lagging topic's retention: a day of records
TROUBLE = ("stall", "stop", "rewind", "flapping")


def _trouble_groups(topics: list[str]) -> list[Group]:
    """A consumer that stalls (commits the same offset while the log grows), one that stops committing, one
    that rewinds (an offset reset to an earlier position), and one that rebalances at every tick."""
    return [Group(group_id=f"{kind}-app", kind=kind, topics=[LAGGING_TOPIC] if kind != "flapping" else topics[:1],
                  start_tick=0, stop_tick=1001) for kind in TROUBLE]


def _lagging_end(now: int) -> int:
    return LAGGING_PER_MINUTE * (now - START_MS) // 60_000


def _trouble_commit(g: Group, position: int, now: int, previous: int | None) -> int | None:
    """The offset a trouble group commits now on the lagging topic (None: no commit)."""
    behind = _lagging_end(now) - 50
    if g.kind == "stall":
        return behind if position < 800 or previous is None else previous
    if g.kind == "stop":
        return behind if position < 800 else None
    if g.kind == "rewind" and position >= 960:  # reset back by a day's worth, then creep on from there
        if not g.rewound:
            g.rewound = True
            return max(0, (previous or 0) - LAGGING_PER_MINUTE * 24 * 60)
        return (previous or 0) + 10
    return behind


def _position(now: int) -> int:
    """The plan's 0..1000 scale mapped onto the real time span (the close watch after it is still at 1000)."""
    return min(1000, (now - START_MS) * 1000 // SPAN_MS)


def _step(rng: random.Random, g: Group, now: int, topics: dict[str, int], topic_ids: dict[str, str],
          w: SampleWriter, keys: dict) -> None:
    position = _position(now)
    if position >= g.stop_tick and not g.stopped:
        g.stopped = True
        _stop(g, now, w, keys)
    if g.stopped or position < g.start_tick:
        return
    if g.kind in ("consumer", "deleted", "orphan", "connect", "eos", *TROUBLE) and (
            not g.members or rng.random() < 0.01 or g.kind == "flapping"):
        _rebalance(rng, g, now, topics, w)
    elif g.kind in MODERN and (not g.members or rng.random() < 0.01):
        _modern_rebalance(rng, g, now, topics, topic_ids, w)
    if g.kind == "share":  # share groups keep no offsets here: their progress is the share coordinator's
        _share_progress(rng, g, now, topics, topic_ids, w)
        return
    if g.kind == "connect":
        return  # Connect worker groups coordinate connectors
    if g.kind == "eos":  # one transaction per tick: its offsets, then the coordinator's marker
        result = "ABORT" if rng.random() < ABORT_RATE else "COMMIT"
        _commit_all(rng, g, now, topics, topic_ids, w, keys, producer_id=_producer_id(g), applies=result == "COMMIT")
        w.marker(g.group_id, _producer_id(g), result, now)
        return
    if g.kind in TROUBLE and g.kind != "flapping":
        for p in range(topics[LAGGING_TOPIC]):
            offset = _trouble_commit(g, position, now, g.committed.get((LAGGING_TOPIC, p)))
            if offset is not None:
                g.committed[(LAGGING_TOPIC, p)] = offset
                _commit(g, LAGGING_TOPIC, p, offset, now, topic_ids, w, keys)
        return
    _commit_all(rng, g, now, topics, topic_ids, w, keys)


def _share_progress(rng: random.Random, g: Group, now: int, topics: dict[str, int], topic_ids: dict[str, str],
                    w: SampleWriter) -> None:
    """What the share-partition leaders persist each tick: a ShareSnapshot the first time, then a ShareUpdate moving
    the start offset past what was acknowledged, with the records still in flight (acknowledged, available for
    redelivery, or archived after too many deliveries) as state batches. The start offsets are kept in `committed`,
    so that the topics' log ends stay past them."""
    for topic in g.topics:
        topic_id = topic_ids[topic]
        for p in range(topics[topic]):
            first = (topic, p) not in g.committed
            start = g.committed.get((topic, p), rng.randint(0, 1000)) + (0 if first else rng.randint(0, 400))
            g.committed[(topic, p)] = start
            acked, waiting = rng.randint(0, 30), rng.randint(0, 30)
            batches = [{"FirstOffset": start, "LastOffset": start + acked, "DeliveryState": 2, "DeliveryCount": 1},
                       {"FirstOffset": start + acked + 1, "LastOffset": start + acked + 1 + waiting,
                        "DeliveryState": 0 if rng.random() < 0.9 else 4, "DeliveryCount": rng.randint(1, 3)}]
            key = SHARE_STATE.encode_key(SHARE_SNAPSHOT if first else SHARE_UPDATE,
                                         {"GroupId": g.group_id, "TopicId": topic_id, "Partition": p})
            common = {"SnapshotEpoch": 0, "StartOffset": start, "DeliveryCompleteCount": acked + 1,
                      "StateBatches": batches}
            if first:
                value = SHARE_STATE.encode_value(SHARE_SNAPSHOT, 0, {**common, "StateEpoch": 0, "LeaderEpoch": 0,
                                                                     "CreateTimestamp": now, "WriteTimestamp": now})
            else:
                value = SHARE_STATE.encode_value(SHARE_UPDATE, 0, {**common, "LeaderEpoch": -1})
            w.append(f"{g.group_id}:{topic_id}:{p}", key, value, now, topic=SHARE_STATE_TOPIC)


def _producer_id(g: Group) -> int:
    """The application's transactional producer: one id for all its transactions (its transactional.id)."""
    return 4000 + int(g.group_id.rsplit("-", 1)[1])


def _commit_all(rng: random.Random, g: Group, now: int, topics: dict[str, int], topic_ids: dict[str, str],
                w: SampleWriter, keys: dict, producer_id: int = NO_PRODUCER, applies: bool = True) -> None:
    """A commit of every partition of the group's topics (`applies=False`: of a transaction that aborts or
    stays open, so the group's committed offsets stay where they were)."""
    for topic in g.topics:
        for p in range(topics[topic]):
            offset = g.committed.get((topic, p), rng.randint(0, 1000)) + rng.randint(0, 400)
            if applies:
                g.committed[(topic, p)] = offset
            _commit(g, topic, p, offset, now, topic_ids, w, keys, producer_id)


def _open_transaction(rng: random.Random, groups: list[Group], now: int, topics: dict[str, int],
                      topic_ids: dict[str, str], w: SampleWriter, keys: dict) -> None:
    """The newest transaction of a running exactly-once application: written, its marker not yet."""
    running = next((g for g in groups if g.kind == "eos" and not g.stopped), None)
    if running is not None:
        _commit_all(rng, running, now, topics, topic_ids, w, keys, producer_id=_producer_id(running), applies=False)


def _commit(g: Group, topic: str, p: int, offset: int, now: int, topic_ids: dict[str, str], w: SampleWriter,
            keys: dict, producer_id: int = NO_PRODUCER) -> None:
    key = keys.get((g.group_id, topic, p))
    if key is None:
        key = keys[(g.group_id, topic, p)] = encode_key(OFFSET_COMMIT, {"group": g.group_id, "topic": topic, "partition": p})
    data = {"offset": offset, "leaderEpoch": 3, "metadata": "", "commitTimestamp": now}
    if g.kind == "retention":  # OffsetCommit v2-v4 request with retention_time_ms: value v1 (spec §4.1)
        version = 1
        data = {"offset": offset, "metadata": "", "commitTimestamp": now, "expireTimestamp": now + DAY_MS}
    elif now >= UPGRADE_MS:
        version = 4
        data["topicId"] = topic_ids[topic]
    else:
        version = 3
    w.append(g.group_id, key, encode_value(OFFSET_COMMIT, version, data), now, producer_id)


def _rebalance(rng: random.Random, g: Group, now: int, topics: dict[str, int], w: SampleWriter) -> None:
    g.generation += 1
    g.members = [f"{'connect' if g.kind == 'connect' else 'consumer'}-{g.group_id}-{g.generation}-{i}"
                 for i in range(rng.randint(1, 4))]
    if g.kind != "connect" and len(g.topics) > 1 and rng.random() < 0.15:
        g.topics.pop()  # the subscription drops a topic: its offsets now expire by commit time
    members = [_member(g, m, i, now, topics) for i, m in enumerate(g.members)]
    value = {
        "protocolType": "connect" if g.kind == "connect" else "consumer",
        "generation": g.generation,
        "protocol": "sessioned" if g.kind == "connect" else g.assignor,
        "leader": g.members[0],
        "currentStateTimestamp": now,
        "members": members,
    }
    w.append(g.group_id, encode_key(GROUP_METADATA, {"group": g.group_id}), encode_value(GROUP_METADATA, 3, value), now)


def _member(g: Group, member_id: str, index: int, now: int, topics: dict[str, int]) -> dict:
    common = {"memberId": member_id, "groupInstanceId": None, "clientId": member_id.rsplit("-", 2)[0],
              "clientHost": f"/10.0.{index}.{len(member_id) % 250}", "rebalanceTimeout": 300_000,
              "sessionTimeout": 45_000}
    if g.kind == "connect":  # Connect's own protocol: opaque to offsetlake
        url = f"http://10.0.{index}.1:8083/".encode()
        return {**common, "subscription": b"\x00\x01" + url, "assignment": b"\x00\x01\x00\x00"}
    mine = [(t, p) for t in g.topics for p in range(topics[t])][index::len(g.members)]
    by_topic: dict[str, list[int]] = {}
    for t, p in mine:
        by_topic.setdefault(t, []).append(p)
    owned = [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]
    version = 3 if g.assignor == "cooperative-sticky" else 1
    subscription = encode_subscription({"topics": sorted(g.topics), "userData": None, "ownedPartitions": owned,
                                        "generationId": g.generation, "rackId": None}, version)
    assignment = encode_assignment({"assignedPartitions": owned, "userData": None}, version)
    return {**common, "subscription": subscription, "assignment": assignment}


def _stop(g: Group, now: int, w: SampleWriter, keys: dict) -> None:
    group_key = encode_key(GROUP_METADATA, {"group": g.group_id})
    if g.kind in ("deleted", "orphan"):
        if g.kind == "deleted":  # DeleteGroups: every offset is tombstoned, then the group
            for (topic, p) in sorted(g.committed):
                w.append(g.group_id, keys[(g.group_id, topic, p)], None, now)
        w.append(g.group_id, group_key, None, now)
    elif g.kind in MODERN:  # every member leaves: the group stays, Empty, at a new epoch
        _modern_members_leave(g, g.members, now, w)
        g.generation += 1
        _modern_group_epochs(g, now, w)
    elif g.kind in ("consumer", "connect", "eos"):  # the last member left: an Empty group record
        g.generation += 1
        value = {"protocolType": "connect" if g.kind == "connect" else "consumer", "generation": g.generation,
                 "protocol": None, "leader": None, "currentStateTimestamp": now, "members": []}
        w.append(g.group_id, group_key, encode_value(GROUP_METADATA, 3, value), now)
    g.members = []


# KIP-848 consumer, share and streams groups: their records by family (names from the codec's registry).
MODERN = {
    "kip848": ("ConsumerGroupMetadata", "ConsumerGroupTargetAssignmentMetadata", "ConsumerGroupMemberMetadata",
               "ConsumerGroupTargetAssignmentMember", "ConsumerGroupCurrentMemberAssignment"),
    "share": ("ShareGroupMetadata", "ShareGroupTargetAssignmentMetadata", "ShareGroupMemberMetadata",
              "ShareGroupTargetAssignmentMember", "ShareGroupCurrentMemberAssignment"),
    "streams": ("StreamsGroupMetadata", "StreamsGroupTargetAssignmentMetadata", "StreamsGroupMemberMetadata",
                "StreamsGroupTargetAssignmentMember", "StreamsGroupCurrentMemberAssignment"),
}


def _modern(w: SampleWriter, g: Group, name: str, key: dict, value: dict | None, now: int) -> None:
    record_type = record_type_named(name)
    encoded = None if value is None else encode_value(record_type, 0, value)
    w.append(g.group_id, encode_key(record_type, {"GroupId": g.group_id, **key}), encoded, now)


def _modern_rebalance(rng: random.Random, g: Group, now: int, topics: dict[str, int], topic_ids: dict[str, str],
                      w: SampleWriter) -> None:
    """A heartbeat that changes membership: leavers' tombstones, then a new group epoch, target and assignments."""
    group_meta, target_meta, member_meta, target_member, current = MODERN[g.kind]
    if g.kind == "streams" and not g.generation:
        _modern(w, g, "StreamsGroupTopology", {}, {"Epoch": 1, "Subtopologies": [{
            "SubtopologyId": "0", "SourceTopics": sorted(g.topics), "SourceTopicRegex": [], "StateChangelogTopics": [],
            "RepartitionSinkTopics": [], "RepartitionSourceTopics": [], "CopartitionGroups": []}]}, now)
    new = [f"{g.group_id}-m{g.generation + 1}-{i}" for i in range(rng.randint(1, 3))]
    _modern_members_leave(g, [m for m in g.members if m not in new], now, w)
    g.generation += 1
    g.members = new
    owned = [(t, p) for t in sorted(g.topics) for p in range(topics[t])]
    for i, m in enumerate(new):
        mine = owned[i::len(new)]
        by_topic: dict[str, list[int]] = {}
        for t, p in mine:
            by_topic.setdefault(t, []).append(p)
        client = {"ClientId": f"{g.group_id}-client", "ClientHost": f"/10.3.{i}.1", "RackId": None}
        if g.kind == "streams":
            _modern(w, g, member_meta, {"MemberId": m}, {**client, "InstanceId": None, "RebalanceTimeoutMs": 60_000,
                                                        "TopologyEpoch": 1, "ProcessId": f"p{i}", "UserEndpoint": None,
                                                        "ClientTags": []}, now)
            tasks = [{"SubtopologyId": "0", "Partitions": sorted({p for _, p in mine})}]
            _modern(w, g, target_member, {"MemberId": m}, {"ActiveTasks": tasks, "StandbyTasks": [], "WarmupTasks": []}, now)
            _modern(w, g, current, {"MemberId": m}, {
                "MemberEpoch": g.generation, "PreviousMemberEpoch": g.generation - 1, "State": 1, "ActiveTasks": tasks,
                "StandbyTasks": [], "WarmupTasks": [], "ActiveTasksPendingRevocation": [],
                "StandbyTasksPendingRevocation": [], "WarmupTasksPendingRevocation": []}, now)
            continue
        parts = [{"TopicId": topic_ids[t], "Partitions": ps} for t, ps in sorted(by_topic.items())]
        meta = {**client, "SubscribedTopicNames": sorted(g.topics)}
        if g.kind == "kip848":
            meta.update({"InstanceId": None, "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 300_000,
                         "ServerAssignor": "uniform", "ClassicMemberMetadata": None})
        _modern(w, g, member_meta, {"MemberId": m}, meta, now)
        _modern(w, g, target_member, {"MemberId": m}, {"TopicPartitions": parts}, now)
        assignment = {"MemberEpoch": g.generation, "PreviousMemberEpoch": g.generation - 1, "State": 0,
                      "AssignedPartitions": parts}
        if g.kind == "kip848":
            assignment["PartitionsPendingRevocation"] = []
        _modern(w, g, current, {"MemberId": m}, assignment, now)
    _modern_group_epochs(g, now, w)


def _modern_members_leave(g: Group, leaving: list[str], now: int, w: SampleWriter) -> None:
    _, _, member_meta, target_member, current = MODERN[g.kind]
    for m in leaving:  # the order ConsumerGroup writes them: current assignment, target, then the member
        for name in (current, target_member, member_meta):
            _modern(w, g, name, {"MemberId": m}, None, now)
    g.members = [m for m in g.members if m not in leaving]


def _modern_group_epochs(g: Group, now: int, w: SampleWriter) -> None:
    group_meta, target_meta = MODERN[g.kind][:2]
    epoch = {"Epoch": g.generation, "MetadataHash": 0}
    if g.kind == "streams":
        epoch["ValidatedTopologyEpoch"] = 1
    _modern(w, g, group_meta, {}, epoch, now)
    _modern(w, g, target_meta, {}, {"AssignmentEpoch": g.generation}, now)


def _damage(w: SampleWriter, group_id: str, now: int) -> None:
    """Two records a strict decoder must reject (they go to quarantine, the rest of the run proceeds)."""
    key = encode_key(OFFSET_COMMIT, {"group": group_id, "topic": "damaged", "partition": 0})
    good = encode_value(OFFSET_COMMIT, 3, {"offset": 1, "leaderEpoch": -1, "metadata": "", "commitTimestamp": now})
    w.append(group_id, key, b"\x00\x09" + good[2:], now)  # unknown value version 9
    w.append(group_id, key, good[:14], now)  # truncated before metadata


def _topic_id(rng: random.Random) -> str:
    return base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")


def _log_ends(rng: random.Random, groups: list[Group], topics: dict[str, int], now: int,
              before: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Each partition's log end at `now`: past the furthest commit (one in a while behind it: a negative
    lag), never below the previous snapshot's; the lagging topic grows steadily."""
    furthest: dict[tuple[str, int], int] = {}
    for g in groups:
        for tp, offset in g.committed.items():
            furthest[tp] = max(furthest.get(tp, 0), offset)
    ends = {}
    for topic in sorted(topics):
        for p in range(topics[topic]):
            if topic == LAGGING_TOPIC:
                ends[(topic, p)] = _lagging_end(now)
                continue
            end = furthest.get((topic, p), 0)
            if rng.random() < 0.02:  # the consumer's commit is ahead of the end it was given: lag < 0
                ends[(topic, p)] = max(0, end - rng.randint(1, 5))
            else:
                ends[(topic, p)] = max(end + rng.randint(0, 600), before.get((topic, p), 0))
    return ends


def _log_starts(ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Each partition's log start offset beside its log end: the lagging topic keeps RETAINED_MINUTES of records,
    the others have lost none yet."""
    return {(t, p): max(0, end - LAGGING_PER_MINUTE * RETAINED_MINUTES) if t == LAGGING_TOPIC else 0
            for (t, p), end in ends.items()}


def _write_end_offsets(path: Path, snapshots: list[tuple[int, dict[tuple[str, int], int]]]) -> None:
    """kafka-get-offsets.sh text, one snapshot per run of it: topic:partition:offset:timestamp."""
    lines = []
    for now, ends in snapshots:
        stamp = datetime.fromtimestamp(now / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += [f"{topic}:{p}:{end}:{stamp}" for (topic, p), end in sorted(ends.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def write_log_dir(dump: Path, log_dir: Path, batch_records: int = 200, segment_records: int = 250_000) -> int:
    """A dump's records as a broker log dir: `__consumer_offsets-N/<base offset>.log` (and `__share_group_state-N/`
    for the share coordinator's records), uncompressed v2 batches.

    Consecutive records of one producer share a batch, as a coordinator's appends do; with the dump's batch
    metadata, transactional commits go in transactional batches and markers in control batches, so the log
    dir holds what the dump does. Returns the number of records written.
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    from offsets_codec.segment_writer import segment_file_name, write_segment
    from offsets_codec.segments import LogRecord

    _check_empty(log_dir)
    dataset = pads.dataset(dump, format="parquet")
    metadata = [c for c in ("producer_id", "producer_epoch", "is_control", "topic") if c in dataset.schema.names]
    table = dataset.to_table(columns=["key", "value", "partition", "offset", "timestamp", *metadata])
    if "topic" not in table.column_names:
        table = table.append_column("topic", pa.repeat(pa.scalar("__consumer_offsets"), table.num_rows))
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    if pa.types.is_timestamp(table.schema.field("timestamp").type):
        millis = pc.cast(pc.cast(table.column("timestamp"), pa.timestamp("ms", tz="UTC")), pa.int64())
        table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", millis)
    for topic, partition in sorted(set(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist()))):
        rows = table.filter(pc.and_(pc.equal(table.column("topic"), topic),
                                    pc.equal(table.column("partition"), partition))).to_pydict()
        folder = log_dir / f"{topic}-{partition}"
        folder.mkdir(parents=True, exist_ok=True)
        n = len(rows["offset"])
        records = [LogRecord(o, t, 0, k, v) for k, v, o, t in zip(rows["key"], rows["value"], rows["offset"],
                                                                 rows["timestamp"])]
        batch_of = list(zip(rows.get("producer_id", [NO_PRODUCER] * n), rows.get("producer_epoch", [-1] * n),
                            rows.get("is_control", [False] * n)))
        for start in range(0, n, segment_records):
            end = min(start + segment_records, n)
            write_segment(folder / segment_file_name(records[start].offset),
                          _batches(records, batch_of, start, end, batch_records))
    return table.num_rows


def _check_empty(log_dir: Path) -> None:
    if log_dir.exists() and any(log_dir.iterdir()):
        raise BadInput(f"--log-dir {log_dir}: not empty (a log dir is written whole, never into another)")


def _batches(records: list, batch_of: list[tuple], start: int, end: int, most: int) -> Iterator[bytes]:
    """records[start:end] as v2 batches: runs of one (producer id, epoch, control flag), `most` records at most."""
    from offsets_codec.segment_writer import encode_batch

    i = start
    while i < end:
        producer_id, producer_epoch, is_control = batch_of[i]
        producer_id = NO_PRODUCER if producer_id is None else producer_id
        j = i + 1
        while j < end and j - i < (1 if is_control else most) and batch_of[j] == batch_of[i]:
            j += 1
        yield encode_batch(records[i:j], producer_id=producer_id,
                           producer_epoch=-1 if producer_epoch is None else producer_epoch,
                           is_transactional=producer_id != NO_PRODUCER, is_control=bool(is_control))
        i = j
