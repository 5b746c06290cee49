"""Committed offsets (spec §7.2): each key's last applied record (jobs.replay.applied), a tombstone meaning
deleted, and the open transactional commits still pending. Only these are decoded: in bulk
(jobs.decode.arrow_reader), the rare value it does not prove by the codec.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask
from jobs.decode.arrow_reader import read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, OFFSET_VALUE
from jobs.decode.columns import offset_commit_columns
from jobs.replay.applied import AppliedSequence
from offsets_codec.wire import ZERO_UUID

# A decoded offset commit: the committed offset's columns.
OFFSET_FIELDS = (("topic", pa.string()), ("partition", pa.int32()), ("committed_offset", pa.int64()),
                 ("leader_epoch", pa.int32()), ("metadata", pa.string()), ("commit_timestamp_ms", pa.int64()),
                 ("expire_timestamp_ms", pa.int64()), ("topic_id", pa.string()), ("value_version", pa.int16()))
OFFSET_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()),
                           ("record_offset", pa.int64()), ("record_timestamp", TIMESTAMP), ("producer_id", pa.int64()),
                           ("producer_epoch", pa.int16()), *OFFSET_FIELDS])
_VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp", "expireTimestamp", "topicId")


class OffsetState(NamedTuple):
    committed: pa.Table  # live committed offsets, one per key (OFFSET_SCHEMA)
    pending: pa.Table  # open transactional commits, one per key and producer (OFFSET_SCHEMA)
    winners: pa.Table  # the newest effective record of every key, tombstones too: group_id, record_offset, timestamp


def offset_state(offset_records: pa.Table, sequence: AppliedSequence) -> OffsetState:
    """The committed offsets, the open transactional commits and the winners of coordinator partitions' valid
    offset records (checked rows, reduced or whole), from their applied `sequence` (jobs.replay.applied): each
    key's last applied record and its pending commits."""
    won = offset_records.take(pa.array(sequence.newest()))
    won_live = mask(pc.is_valid(won.column("value")))
    return OffsetState(committed=decoded(won.filter(pa.array(won_live))),
                       pending=decoded(offset_records.take(pa.array(sequence.pending()))),
                       winners=won.select(["coordinator_partition", "group_id", "record_offset", "record_timestamp"]))


def decoded(rows: pa.Table) -> pa.Table:
    """OFFSET_SCHEMA of offset commits (not tombstones): read in bulk where the reader proves them, by the codec
    otherwise."""
    if not rows.num_rows:  # the bulk reader's steps cost their calls whatever the rows (most partitions: no pending)
        return OFFSET_SCHEMA.empty_table()
    keys, values = rows.column("key").combine_chunks(), rows.column("value").combine_chunks()
    key = read(keys, OFFSET_KEY, ("topic", "partition"), heads=OFFSET_KEY_HEADS)
    value = read(values, OFFSET_VALUE, _VALUE_FIELDS)
    ok = key.ok & value.ok
    v = value.fields

    def sentinel(n: pa.Array) -> pa.Array:  # Kafka's Utils.ofSentinel: -1 means absent
        return pc.if_else(pc.equal(n, -1), pa.scalar(None, n.type), n)

    columns = {
        "topic": key.fields["topic"], "partition": key.fields["partition"], "committed_offset": v["offset"],
        "leader_epoch": sentinel(v["leaderEpoch"]), "metadata": pc.coalesce(v["metadata"], ""),
        "commit_timestamp_ms": v["commitTimestamp"], "expire_timestamp_ms": sentinel(v["expireTimestamp"]),
        "topic_id": pc.if_else(pc.equal(v["topicId"], ZERO_UUID), pa.scalar(None, pa.string()), v["topicId"]),
        "value_version": pa.array(value.prefix.astype(np.int16)),
    }
    unproven = np.flatnonzero(~ok)
    if len(unproven):  # the codec, one record at a time, where the bulk reader was unsure
        by_codec = [offset_commit_columns(k, val) for k, val in
                    zip(keys.take(unproven).to_pylist(), values.take(unproven).to_pylist())]
        for name, t in OFFSET_FIELDS:
            filled = [None] * len(ok)
            for i, row in zip(unproven, by_codec):
                filled[i] = row[name]
            columns[name] = pc.if_else(pa.array(ok), columns[name].cast(t), pa.array(filled, t))
    table = rows.select([f.name for f in OFFSET_SCHEMA][:6])
    for name, t in OFFSET_FIELDS:
        table = table.append_column(name, columns[name].cast(t))
    return table.cast(OFFSET_SCHEMA)
