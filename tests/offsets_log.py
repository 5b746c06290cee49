"""Test fixtures: offsets-topic logs written with offsets_codec's own encoder.

    log = OffsetsLog()
    log.commit("g", "orders", 0, offset=42, at=T0)
    log.group("g", at=T0, members=[member("m1", ["orders"], {"orders": [0]})])
    raw = log.frame(spark)          # the contract's raw-record frame
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from offsets_codec import encode_key, encode_value, record_type_named
from offsets_codec.consumer_protocol import encode_assignment, encode_subscription

OFFSET_COMMIT, GROUP_METADATA = 1, 2
T0 = int(datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
WEEK = 7 * DAY
RAW_DDL = "key binary, value binary, topic string, partition int, offset bigint, timestamp bigint, timestampType int"


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

    def raw(self, key: bytes | None, value: bytes | None, at: int, partition: int = 0) -> int:
        offset = self.next_offset.get(partition, 0)
        self.next_offset[partition] = offset + 1
        self.rows.append((key, value, "__consumer_offsets", partition, offset, at, 0))
        return offset

    def commit(self, group: str, topic: str, partition: int, offset: int, at: int, *, version: int = 3,
               leader_epoch: int = -1, metadata: str = "", expire: int | None = None, topic_id: str | None = None,
               commit_ts: int | None = None, record_type: int = OFFSET_COMMIT, coordinator: int = 0) -> int:
        data: dict[str, Any] = {"offset": offset, "leaderEpoch": leader_epoch, "metadata": metadata,
                                "commitTimestamp": at if commit_ts is None else commit_ts}
        if expire is not None:
            data["expireTimestamp"] = expire
        if topic_id is not None:
            data["topicId"] = topic_id
        key = encode_key(record_type, {"group": group, "topic": topic, "partition": partition})
        return self.raw(key, encode_value(record_type, version, data), at, coordinator)

    def delete_offset(self, group: str, topic: str, partition: int, at: int, coordinator: int = 0) -> int:
        key = encode_key(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition})
        return self.raw(key, None, at, coordinator)

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

    def frame(self, spark):
        """The contract's raw-record frame (timestamp as epoch-ms bigint, which the contract accepts)."""
        return spark.createDataFrame(self.rows, RAW_DDL)

    def write_parquet(self, path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        table = pa.table({n: [r[i] for r in self.rows] for i, n in enumerate(names)}, schema=pa.schema([
            ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
            ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestampType", pa.int32())]))
        path.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path / "part-0.parquet")
