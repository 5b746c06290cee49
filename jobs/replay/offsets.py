"""Committed offsets (spec §7.2): the newest effective record per key wins, a tombstone meaning deleted.

Kafka's in-order fold over offset records ends there once transactional commits are placed by their fate
(jobs.replay.transactions): a plain record and a tombstone apply where they are, a committed transactional
commit competes by its own offset, an aborted one never applies. A transactional commit whose transaction is
still open is pending, the newest per key and producer, unless a tombstone came after it (a tombstone, from
anyone, removes every producer's pending commit on its key). Only the winners are decoded: in bulk
(jobs.decode.arrow_reader), the rare value it does not prove by the codec.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask
from jobs.decode.arrow_reader import read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, OFFSET_KEY_PREFIXES, OFFSET_VALUE
from jobs.decode.columns import offset_commit_columns
from jobs.replay.transactions import fates
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


def offset_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Offset-commit keys' bytes after their type: types 0 and 1 share the key layout and the broker converts type
    0 to type 1 before replay, so these bytes identify (group, topic, partition) whichever type wrote them."""
    if not len(keys):
        return keys
    # An explicit end: pyarrow sizes its output by it.
    return pc.binary_slice(keys, 2, max(pc.max(pc.binary_length(keys)).as_py() or 2, 2))


def is_offset_record(rows: pa.Table) -> np.ndarray:
    head = pc.binary_slice(rows.column("key"), 0, 2)
    return mask(pc.is_in(head, value_set=pa.array(OFFSET_KEY_PREFIXES, pa.binary()))) & \
        mask(pc.is_valid(rows.column("record_type")))


def offset_state(offset_records: pa.Table, found: pa.Table) -> OffsetState:
    """The committed offsets, the open transactional commits and the winners of coordinator partitions' valid
    offset records (checked rows, reduced or whole) given their markers `found` (transactions.markers)."""
    n = offset_records.num_rows
    effective, still_open, _ = fates(offset_records, found)
    live = mask(pc.is_valid(offset_records.column("value")))
    keyed = pa.table({"coordinator_partition": offset_records.column("coordinator_partition"),
                      "offset_key": offset_keys(offset_records.column("key")),
                      "record_offset": offset_records.column("record_offset"),
                      "producer_id": offset_records.column("producer_id"),
                      "row": pa.array(np.arange(n, dtype=np.int64))})
    key = ["coordinator_partition", "offset_key"]
    winners = _newest(keyed.filter(pa.array(effective)), key)
    pending = _newest(keyed.filter(pa.array(still_open)), [*key, "producer_id"])
    tombstones = keyed.filter(pa.array(~live)).group_by(key, use_threads=False).aggregate(
        [("record_offset", "max")])
    pending = pending.join(tombstones, key, use_threads=False)
    pending = pending.filter(pc.or_kleene(pc.is_null(pending.column("record_offset_max")),
                                          pc.greater(pending.column("record_offset"),
                                                     pending.column("record_offset_max"))))
    won = offset_records.take(winners.column("row"))
    won_live = mask(pc.is_valid(won.column("value")))
    return OffsetState(committed=decoded(won.filter(pa.array(won_live))),
                       pending=decoded(offset_records.take(pending.column("row"))),
                       winners=won.select(["coordinator_partition", "group_id", "record_offset", "record_timestamp"]))


def _newest(keyed: pa.Table, by: list[str]) -> pa.Table:
    """Of `keyed`'s rows, the one with the highest offset per `by` (which holds coordinator_partition: offsets are
    unique in a coordinator partition)."""
    newest = keyed.group_by(by, use_threads=False).aggregate([("record_offset", "max")])
    place = ["coordinator_partition", "record_offset"]
    return keyed.join(newest.select(["coordinator_partition", "record_offset_max"]).rename_columns(place), place,
                      join_type="inner", use_threads=False)


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
