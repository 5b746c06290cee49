"""Test fixtures: offsets-topic logs written with offsets_codec's own encoder.

    log = OffsetsLog()
    log.commit("g", "orders", 0, offset=42, at=T0)
    log.group("g", at=T0, members=[member("m1", ["orders"], {"orders": [0]})])
    raw = log.frame(spark)          # the contract's raw-record frame
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from offsets_codec import SHARE_STATE, encode_key, encode_value, record_type_named
from offsets_codec.registry import SHARE_SNAPSHOT, SHARE_UPDATE
from offsets_codec.consumer_protocol import encode_assignment, encode_subscription
from offsets_codec.segment_writer import control_record

OFFSET_COMMIT, GROUP_METADATA = 1, 2
OFFSETS_TOPIC, SHARE_STATE_TOPIC = "__consumer_offsets", "__share_group_state"
T0 = int(datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
WEEK = 7 * DAY
RAW_DDL = "key binary, value binary, topic string, partition int, offset bigint, timestamp bigint, timestampType int"
BATCH_DDL = "producer_id bigint, producer_epoch smallint, is_transactional boolean, is_control boolean"
CONTROL_NAMES = {0: "ABORT", 1: "COMMIT"}  # by the control key's type (its fourth byte)


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def utc(ms_value: int) -> datetime:
    """A naive UTC datetime, as Spark returns timestamps when the session time zone is UTC."""
    return datetime.fromtimestamp(ms_value / 1000, tz=timezone.utc).replace(tzinfo=None)


def member(member_id: str, topics: list[str], assigned: dict[str, list[int]] | None = None, *,
           subscription_version: int = 1, client_id: str = "client", host: str = "/10.0.0.1",
           instance_id: str | None = None, subscription: bytes | None = None,
           assignment: bytes | None = None) -> dict[str, Any]:
    """A GroupMetadataValue member whose subscription/assignment are consumer-protocol bytes."""
    assigned = assigned or {}
    parts = [{"topic": t, "partitions": ps} for t, ps in sorted(assigned.items())]
    if subscription is None:
        subscription = encode_subscription({"topics": sorted(topics), "userData": None, "ownedPartitions": parts,
                                            "generationId": 1, "rackId": None}, subscription_version)
    if assignment is None:
        assignment = encode_assignment({"assignedPartitions": parts, "userData": None}, subscription_version)
    return {"memberId": member_id, "groupInstanceId": instance_id, "clientId": client_id, "clientHost": host,
            "rebalanceTimeout": 300_000, "sessionTimeout": 45_000, "subscription": subscription,
            "assignment": assignment}


class OffsetsLog:
    """Raw offsets-topic records; offsets are assigned in append order per coordinator partition."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.next_offset: dict[int, int] = {}

    def raw(self, key: bytes | None, value: bytes | None, at: int, partition: int = 0, *, producer_id: int = -1,
            producer_epoch: int = -1, is_control: bool = False, topic: str = OFFSETS_TOPIC) -> int:
        """Append one record; a producer id makes it transactional (spec §1: producerId != -1)."""
        where = partition if topic == OFFSETS_TOPIC else (topic, partition)
        offset = self.next_offset.get(where, 0)
        self.next_offset[where] = offset + 1
        self.rows.append((key, value, topic, partition, offset, at, 0,
                          producer_id, producer_epoch, producer_id != -1, is_control))
        return offset

    def share_snapshot(self, group: str, topic_id: str, partition: int, at: int, *, start: int,
                       batches: list[tuple[int, int, int, int]] = (), snapshot_epoch: int = 0, state_epoch: int = 0,
                       leader_epoch: int = 0, delivery_complete_count: int = -1, coordinator: int = 0,
                       written: int | None = None) -> int:
        """A ShareSnapshot in `__share_group_state` (batches: first, last, delivery state, delivery count), created
        and written at `written` (default: the record's timestamp)."""
        written = at if written is None else written
        value = {"SnapshotEpoch": snapshot_epoch, "StateEpoch": state_epoch, "LeaderEpoch": leader_epoch,
                 "StartOffset": start, "DeliveryCompleteCount": delivery_complete_count,
                 "CreateTimestamp": written, "WriteTimestamp": written, "StateBatches": _state_batches(batches)}
        return self._share(SHARE_SNAPSHOT, group, topic_id, partition, value, at, coordinator)

    def share_update(self, group: str, topic_id: str, partition: int, at: int, *, start: int = -1,
                     batches: list[tuple[int, int, int, int]] = (), snapshot_epoch: int = 0, leader_epoch: int = -1,
                     delivery_complete_count: int = -1, coordinator: int = 0) -> int:
        """A ShareUpdate in `__share_group_state`: start -1 and leader epoch -1 leave them as they are."""
        value = {"SnapshotEpoch": snapshot_epoch, "LeaderEpoch": leader_epoch, "StartOffset": start,
                 "DeliveryCompleteCount": delivery_complete_count, "StateBatches": _state_batches(batches)}
        return self._share(SHARE_UPDATE, group, topic_id, partition, value, at, coordinator)

    def delete_share_state(self, group: str, topic_id: str, partition: int, at: int, coordinator: int = 0) -> int:
        """The share coordinator's tombstone: a ShareSnapshot key with a null value."""
        return self._share(SHARE_SNAPSHOT, group, topic_id, partition, None, at, coordinator)

    def _share(self, record_type: int, group: str, topic_id: str, partition: int, value: dict | None, at: int,
               coordinator: int) -> int:
        key = SHARE_STATE.encode_key(record_type, {"GroupId": group, "TopicId": topic_id, "Partition": partition})
        encoded = None if value is None else SHARE_STATE.encode_value(record_type, 0, value)
        return self.raw(key, encoded, at, coordinator, topic=SHARE_STATE_TOPIC)

    def marker(self, producer_id: int, marker: str, at: int, coordinator: int = 0, *, producer_epoch: int = 0,
               coordinator_epoch: int = 0) -> int:
        """A COMMIT or ABORT control record for `producer_id`, as the transaction coordinator writes it."""
        key, value = control_record(marker, coordinator_epoch)
        return self.raw(key, value, at, coordinator, producer_id=producer_id, producer_epoch=producer_epoch,
                        is_control=True)

    @property
    def has_batch_metadata(self) -> bool:
        return any(r[7] != -1 or r[10] for r in self.rows)

    def read_committed(self) -> "OffsetsLog":
        """What a read_committed consumer is handed (spec §1): no markers, no aborted records, and nothing
        from the first record of a still-open transaction on (the last stable offset)."""
        fate: dict[tuple, str | None] = {}  # (partition, producer, offset) -> next marker
        pending: dict[tuple, list[int]] = {}
        for r in self.rows:
            partition, offset, producer, control = (r[2], r[3]), r[4], r[7], r[10]
            if control:
                for o in pending.pop((partition, producer), []):
                    fate[(partition, producer, o)] = CONTROL_NAMES[r[0][3]]
            elif producer != -1:
                pending.setdefault((partition, producer), []).append(offset)
        lso = {}
        for (partition, _), offsets in pending.items():
            lso[partition] = min(lso.get(partition, offsets[0]), offsets[0])
        view = OffsetsLog()
        for r in self.rows:
            partition, offset, producer, control = (r[2], r[3]), r[4], r[7], r[10]
            if control or offset >= lso.get(partition, offset + 1):
                continue
            if producer != -1 and fate.get((partition, producer, offset)) == "ABORT":
                continue
            view.rows.append(r[:7] + (-1, -1, False, False))
        return view

    def commit(self, group: str, topic: str, partition: int, offset: int, at: int, *, version: int = 3,
               leader_epoch: int = -1, metadata: str = "", expire: int | None = None, topic_id: str | None = None,
               commit_ts: int | None = None, record_type: int = OFFSET_COMMIT, coordinator: int = 0,
               producer_id: int = -1) -> int:
        """An offset commit; with a producer id, a transactional one (TxnOffsetCommit)."""
        data: dict[str, Any] = {"offset": offset, "leaderEpoch": leader_epoch, "metadata": metadata,
                                "commitTimestamp": at if commit_ts is None else commit_ts}
        if expire is not None:
            data["expireTimestamp"] = expire
        if topic_id is not None:
            data["topicId"] = topic_id
        key = encode_key(record_type, {"group": group, "topic": topic, "partition": partition})
        return self.raw(key, encode_value(record_type, version, data), at, coordinator, producer_id=producer_id,
                        producer_epoch=0 if producer_id != -1 else -1)

    def delete_offset(self, group: str, topic: str, partition: int, at: int, coordinator: int = 0,
                      producer_id: int = -1) -> int:
        key = encode_key(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition})
        return self.raw(key, None, at, coordinator, producer_id=producer_id,
                        producer_epoch=0 if producer_id != -1 else -1)

    def group(self, group: str, at: int, *, members: list[dict] | None = None, protocol_type: str = "consumer",
              generation: int = 1, protocol: str | None = "range", leader: str | None = None,
              state_ts: int | None = None, version: int = 3, coordinator: int = 0) -> int:
        members = members or []
        value = {"protocolType": protocol_type, "generation": generation,
                 "protocol": protocol if members else None,
                 "leader": (leader or members[0]["memberId"]) if members else None,
                 "currentStateTimestamp": at if state_ts is None else state_ts, "members": members}
        return self.raw(encode_key(GROUP_METADATA, {"group": group}), encode_value(GROUP_METADATA, version, value),
                        at, coordinator)

    def delete_group(self, group: str, at: int, coordinator: int = 0) -> int:
        return self.raw(encode_key(GROUP_METADATA, {"group": group}), None, at, coordinator)

    def record(self, name: str, key: dict[str, Any], value: dict[str, Any] | None, at: int, *,
               version: int = 0, coordinator: int = 0) -> int:
        """Any record type, by its name in the codec's registry (e.g. "ConsumerGroupMetadata")."""
        record_type = record_type_named(name)
        encoded = None if value is None else encode_value(record_type, version, value)
        return self.raw(encode_key(record_type, key), encoded, at, coordinator)

    def frame(self, spark, batch_metadata: bool | None = None):
        """The contract's raw-record frame (timestamp as epoch-ms bigint, which the contract accepts), with
        the batch-metadata columns when asked, or by default when the log has transactions."""
        if batch_metadata if batch_metadata is not None else self.has_batch_metadata:
            return spark.createDataFrame(self.rows, f"{RAW_DDL}, {BATCH_DDL}")
        return spark.createDataFrame([r[:7] for r in self.rows], RAW_DDL)

    def table(self, batch_metadata: bool | None = None):
        """The contract's raw records as an Arrow table (timestamps in UTC milliseconds), with the batch-metadata
        columns when asked, or by default when the log has transactions."""
        import pyarrow as pa

        fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
                  ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestampType", pa.int32()),
                  ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("is_transactional", pa.bool_()),
                  ("is_control", pa.bool_())]
        if not (batch_metadata if batch_metadata is not None else self.has_batch_metadata):
            fields = fields[:7]
        return pa.table({n: [r[i] for r in self.rows] for i, (n, _) in enumerate(fields)}, schema=pa.schema(fields))

    def write_parquet(self, path, batch_metadata: bool | None = None) -> None:
        import pyarrow.parquet as pq

        path.mkdir(parents=True, exist_ok=True)
        pq.write_table(self.table(batch_metadata), path / "part-0.parquet")

    def write_segments(self, log_dir, *, compression: str | dict[int, str] = "none", batch_records: int = 50,
                       segment_records: int | None = None, magic: dict[int, int] | None = None) -> list:
        """The log as a broker log dir: `__consumer_offsets-N/<base offset>.log` files of record batches.

        Consecutive records of one producer share a batch (up to `batch_records`), as a producer's appends
        do; markers get their own control batch; `segment_records` rolls a new segment file. `compression`
        and `magic` (0/1: old message sets, which cannot hold transactions) may differ per partition.
        """
        from offsets_codec.segment_writer import (encode_batch, encode_control_batch, encode_message_set,
                                                  segment_file_name, write_segment)
        from offsets_codec.segments import LogRecord

        files = []
        for topic, partition in sorted({(r[2], r[3]) for r in self.rows}):
            rows = [r for r in self.rows if (r[2], r[3]) == (topic, partition)]
            codec = compression if isinstance(compression, str) else compression.get(partition, "none")
            version = (magic or {}).get(partition, 2)
            folder = log_dir / f"{topic}-{partition}"
            folder.mkdir(parents=True, exist_ok=True)
            size = segment_records or len(rows)
            for start in range(0, len(rows), size):
                chunk, chunks = rows[start:start + size], []
                i = 0
                while i < len(chunk):
                    r = chunk[i]
                    if r[10]:
                        chunks.append(encode_control_batch(r[4], CONTROL_NAMES[r[0][3]], producer_id=r[7],
                                                           producer_epoch=r[8], timestamp=r[5]))
                        i += 1
                        continue
                    j = i
                    while j < len(chunk) and j - i < batch_records and not chunk[j][10] and chunk[j][7] == r[7]:
                        j += 1
                    records = [LogRecord(x[4], x[5], 0, x[0], x[1]) for x in chunk[i:j]]
                    if version < 2:
                        assert r[7] == -1, "message sets v0/v1 cannot hold transactional records"
                        chunks.append(encode_message_set(records, magic=version, compression=codec))
                    else:
                        chunks.append(encode_batch(records, compression=codec, producer_id=r[7],
                                                   producer_epoch=r[8], is_transactional=r[7] != -1))
                    i = j
                files.append(write_segment(folder / segment_file_name(chunk[0][4]), chunks))
        return files


def _state_batches(batches) -> list[dict[str, int]]:
    return [{"FirstOffset": f, "LastOffset": last, "DeliveryState": s, "DeliveryCount": c} for f, last, s, c in batches]


SHARE_TOPIC_ID = "AQIDBAUGBwgJCgsMDQ4PEA"  # the topic id of random logs' share state


def random_log(operations: list[tuple]) -> OffsetsLog:
    """A log of hypothesis-drawn operations, one a minute from T0: (coordinator partition, kind, group, topic,
    partition, producer id (-1: plain), marker), kind one of commit, tombstone, marker, group, group_tombstone,
    modern (a group of a KIP-848 family under its own id), consumer_member (a consumer group member of the group's
    own id: a conversion, when a classic group held it), consumer_leave, share (a ShareSnapshot, or a ShareUpdate for
    partition 1)."""
    log = OffsetsLog()
    for i, (coordinator, kind, group, topic, partition, producer, marker) in enumerate(operations):
        at = T0 + i * MINUTE
        if kind == "commit":
            log.commit(group, topic, partition, offset=i, at=at, producer_id=producer, coordinator=coordinator)
        elif kind == "tombstone":
            log.delete_offset(group, topic, partition, at=at, producer_id=producer, coordinator=coordinator)
        elif kind == "marker" and producer != -1:
            log.marker(producer, marker, at=at, coordinator=coordinator)
        elif kind == "group":
            members = [member("m1", [topic], {topic: [partition]})] if partition else []
            log.group(group, at, members=members, generation=i, coordinator=coordinator)
        elif kind == "group_tombstone":
            log.delete_group(group, at, coordinator=coordinator)
        elif kind == "modern":  # a group of another family under its own id: the classic ids' offsets must not move
            family = ("Consumer", "Share", "Streams")[i % 3]
            log.record(f"{family}GroupMetadata", {"GroupId": f"modern-{family}-{group}"}, {"Epoch": i}, at,
                       coordinator=coordinator)
        elif kind == "consumer_member":
            log.record("ConsumerGroupMemberMetadata", {"GroupId": group, "MemberId": f"c{partition}"}, {
                "InstanceId": None, "RackId": None, "ClientId": "c", "ClientHost": "/10.0.0.7",
                "SubscribedTopicNames": [topic], "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 30_000,
                "ServerAssignor": "uniform", "ClassicMemberMetadata": None}, at, coordinator=coordinator)
            log.record("ConsumerGroupMetadata", {"GroupId": group}, {"Epoch": i, "MetadataHash": 0}, at,
                       coordinator=coordinator)
        elif kind == "consumer_leave":
            log.record("ConsumerGroupMemberMetadata", {"GroupId": group, "MemberId": f"c{partition}"}, None, at,
                       coordinator=coordinator)
            log.record("ConsumerGroupMetadata", {"GroupId": group}, {"Epoch": i, "MetadataHash": 0}, at,
                       coordinator=coordinator)
        elif kind == "share" and partition:  # in the group's partition of __share_group_state, as Kafka keeps it
            log.share_update(group, SHARE_TOPIC_ID, 0, at, start=i, batches=[(i, i + 2, 0, 1)],
                             coordinator=sum(map(ord, group)) % 2)
        elif kind == "share":
            log.share_snapshot(group, SHARE_TOPIC_ID, 0, at, start=i, coordinator=sum(map(ord, group)) % 2)
    return log


def write_dump(rows: list[tuple], path) -> Path:
    """`rows` (an OffsetsLog's, or a selection of them) as a Parquet dump at `path`."""
    log = OffsetsLog()
    log.rows = list(rows)
    log.write_parquet(path)
    return Path(path)


def compacted(rows: list[tuple]) -> list[tuple]:
    """What the log cleaner leaves of plain records: each key's newest (transactional ones and markers stay)."""
    newest = {(r[2], r[3], r[0]): r[4] for r in rows if r[7] == -1}
    return [r for r in rows if r[7] != -1 or newest[(r[2], r[3], r[0])] == r[4]]
