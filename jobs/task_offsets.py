"""The replay's offsets, computed from the reduced log's rows in Arrow by the early reduction's workers.

Spark's replay (jobs.replay) takes, of the reduced log's valid offset records, the newest effective record per
key (the offset winners, tombstones included) and the transactional commits still open, and reads them natively
(jobs.native); on a small machine those are three of its queries, each paying the cold JVM's seconds. The
early reduction's workers (jobs.sources.early_reduction) hold the same rows as Arrow once they have combined
them, so they compute the same rows here: the same rules (jobs.transactions: a transactional commit's fate is
its producer's next marker, found by jobs.partial_reduce.next_markers as the history's tasks find it) and the
same decoding, with jobs.arrow_check's reader. A row that reader does not prove is left for Spark's reader and
the Python codec (jobs.replay.committed_offsets), as its own pass does for the rows native code cannot prove.

No Spark import: pyarrow in, pyarrow out.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.arrow_check import read
from jobs.partial_reduce import KEY_HEADS, KEY_LAYOUT, TIMESTAMP, VALUE_LAYOUT, markers, next_markers, offset_keys
from offsets_codec.registry import OFFSET_COMMIT_TYPES
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER
from offsets_codec.wire import ZERO_UUID

_VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp", "expireTimestamp", "topicId")
# decode.OFFSET_COMMIT_DDL in Arrow: a decoded offset commit.
COMMIT_TYPE = pa.struct([("topic", pa.string()), ("partition", pa.int32()), ("committed_offset", pa.int64()),
                         ("leader_epoch", pa.int32()), ("metadata", pa.string()), ("commit_timestamp_ms", pa.int64()),
                         ("expire_timestamp_ms", pa.int64()), ("topic_id", pa.string()),
                         ("value_version", pa.int16())])
# What `offset_state` gives: jobs.replay's columns of an offset row, `open` (a transactional commit still open,
# else an offset winner), `live` (not a tombstone), and its decoding as jobs.replay._native_offsets gives it
# (`c` where `proven`, the key and value where not; both null for a tombstone).
STATE_SCHEMA = pa.schema([
    ("coordinator_partition", pa.int32()), ("group_id", pa.string()), ("record_offset", pa.int64()),
    ("record_timestamp", TIMESTAMP), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
    ("open", pa.bool_()), ("live", pa.bool_()), ("proven", pa.bool_()), ("c", COMMIT_TYPE),
    ("unproven_key", pa.binary()), ("unproven_value", pa.binary()),
])


def offset_state(rows: pa.Table) -> tuple[pa.Table, int]:
    """(STATE_SCHEMA rows, how many live rows are not proven) of the reduced log's `rows` (the early reduction's
    combined rows: jobs.sources.reduced_dump.reduced_schema), of which the valid ones up to as_of are replayed."""
    valid = rows.filter(pc.and_(pc.is_null(rows.column("error")), pc.invert(rows.column("after_as_of"))))
    offsets = valid.filter(pc.fill_null(pc.is_in(valid.column("record_type"),
                                                 value_set=pa.array(OFFSET_COMMIT_TYPES, pa.int16())), False))
    n = offsets.num_rows
    producer = (pc.fill_null(offsets.column("producer_id"), NO_PRODUCER) if "producer_id" in offsets.column_names
                else pa.array(np.full(n, NO_PRODUCER, np.int64)))
    live = offsets.column("value").is_valid().to_numpy(zero_copy_only=False)
    transactional = live & (producer.to_numpy() != NO_PRODUCER)
    effective, still_open = ~transactional, np.zeros(n, bool)
    if transactional.any():
        which = np.flatnonzero(transactional)
        commits = pa.table({"partition": offsets.column("partition").take(which),
                            "offset": offsets.column("offset").take(which), "producer_id": producer.take(which)})
        fate = next_markers(commits, markers(valid))[0]
        effective[which[pc.fill_null(pc.equal(fate, "COMMIT"), False).to_numpy(zero_copy_only=False)]] = True
        still_open[which[pc.is_null(fate).to_numpy(zero_copy_only=False)]] = True
    keyed = pa.table({"partition": offsets.column("partition"), "offset_key": offset_keys(offsets.column("key")),
                      "offset": offsets.column("offset"), "producer_id": producer,
                      "row": pa.array(np.arange(n, dtype=np.int64))})
    winners = _newest(keyed.filter(pa.array(effective)), ["partition", "offset_key"])
    pending = _newest(keyed.filter(pa.array(still_open)), ["partition", "offset_key", "producer_id"])
    # A tombstone after a pending commit removed it from every producer's pending map (jobs.transactions).
    tombstones = keyed.filter(pa.array(~live)).group_by(["partition", "offset_key"], use_threads=False).aggregate(
        [("offset", "max")])
    pending = pending.join(tombstones, ["partition", "offset_key"], use_threads=False)
    pending = pending.filter(pc.or_kleene(pc.is_null(pending.column("offset_max")),
                                          pc.greater(pending.column("offset"), pending.column("offset_max"))))
    chosen = np.concatenate([winners.column("row").to_numpy(), pending.column("row").to_numpy()])
    is_open = np.concatenate([np.zeros(winners.num_rows, bool), np.ones(pending.num_rows, bool)])
    return _decoded(offsets.take(pa.array(chosen, pa.int64())), producer.take(chosen), is_open)


def _newest(keyed: pa.Table, by: list[str]) -> pa.Table:
    """Of `keyed`'s rows, the one with the highest offset per `by` (offsets are unique per coordinator partition)."""
    newest = keyed.group_by(by, use_threads=False).aggregate([("offset", "max")]).select(["partition", "offset_max"])
    return keyed.join(newest.rename_columns(["partition", "offset"]), ["partition", "offset"], join_type="inner",
                      use_threads=False)


def _decoded(rows: pa.Table, producer: pa.Array, is_open: np.ndarray) -> tuple[pa.Table, int]:
    """STATE_SCHEMA of the chosen offset records (jobs.native.offset_commit_struct's values, read with
    jobs.arrow_check), and how many live ones are left unproven."""
    keys, values = rows.column("key").combine_chunks(), rows.column("value").combine_chunks()
    key = read(keys, KEY_LAYOUT, ("topic", "partition"), heads=KEY_HEADS)
    value = read(values, VALUE_LAYOUT, _VALUE_FIELDS)
    live = values.is_valid().to_numpy(zero_copy_only=False)
    proven = live & key.ok & value.ok
    v = value.fields

    def sentinel(n: pa.Array) -> pa.Array:  # Kafka's Utils.ofSentinel: -1 means absent
        return pc.if_else(pc.equal(n, -1), pa.scalar(None, n.type), n)

    topic_id = pc.if_else(pc.equal(v["topicId"], ZERO_UUID), pa.scalar(None, pa.string()), v["topicId"])
    decoded = pa.StructArray.from_arrays([
        key.fields["topic"], pc.cast(key.fields["partition"], pa.int32()), v["offset"],
        pc.cast(sentinel(v["leaderEpoch"]), pa.int32()), pc.coalesce(v["metadata"], ""), v["commitTimestamp"],
        sentinel(v["expireTimestamp"]), topic_id, pa.array(value.prefix.astype(np.int16)),
    ], fields=list(COMMIT_TYPE), mask=pa.array(~proven))
    unproven = live & ~proven
    epoch = (rows.column("producer_epoch") if "producer_epoch" in rows.column_names
             else pa.nulls(rows.num_rows, pa.int16()))
    state = pa.table([
        rows.column("partition"), rows.column("group_id"), rows.column("offset"), rows.column("timestamp"), producer,
        epoch, pa.array(is_open), pa.array(live), pa.array(proven), decoded,
        pc.if_else(pa.array(unproven), keys, None), pc.if_else(pa.array(unproven), values, None),
    ], names=STATE_SCHEMA.names)
    return state.cast(STATE_SCHEMA), int(unproven.sum())

