"""Offset retention (spec §8), evaluated once at as_of on one coordinator partition's replayed state.

The broker's cleanup only considers offsets of topics the group is not subscribed to, then applies the group's
expiration condition (OffsetExpirationConditionImpl); an explicit v1 expireTimestamp replaces the retention
deadline for those candidates. Expiry compares `as_of >= deadline`. An offset with an open transactional commit
on its partition never expires (OffsetMetadataManager.cleanupExpiredOffsets). Which groups the cleanup then
deletes is a group rule (jobs.replay.groups.remaining_groups).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask, numbers
from jobs.decode.columns import CONSUMER_PROTOCOL
from jobs.replay.transactions import with_pending

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


class Expiry(NamedTuple):
    live: pa.Table  # the offsets that stay, with expires_at_ms (null: not expiring now)
    expired: pa.Table  # the offsets whose deadline has passed, with expires_at_ms and expired_at_ms


def retention_base(offsets: pa.Table, groups: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per offset: (the time its retention is measured from, where its group's condition allows expiry at all).

    `groups` has group_id, group_type, protocol_type, state, current_state_timestamp_ms, subscribed_topics."""
    n = offsets.num_rows
    at = pc.index_in(offsets.column("group_id"), value_set=groups.column("group_id"))
    found = mask(pc.is_valid(at))

    def of_group(name: str) -> pa.Array:
        return pc.take(groups.column(name), at)

    group_type, protocol_type, state = of_group("group_type"), of_group("protocol_type"), of_group("state")
    commit_time = numbers(offsets.column("commit_timestamp_ms"))
    has_commit_time = mask(pc.is_valid(offsets.column("commit_timestamp_ms")))
    since_empty = of_group("current_state_timestamp_ms")
    base = commit_time.copy()
    allowed = np.zeros(n, bool)
    decided = np.zeros(n, bool)

    def rule(holds: np.ndarray, expires: bool, time: np.ndarray | None = None, known: np.ndarray | None = None):
        nonlocal base
        now = holds & ~decided
        allowed[now] = expires & (has_commit_time[now] if known is None else known[now])
        if time is not None:
            base = np.where(now, time, base)
        decided[now] = True

    # Share groups hold no committed offsets; Kafka's offsetExpirationCondition throws for them.
    rule(mask(pc.equal(group_type, "share")), False)
    # Consumer (KIP-848) and streams groups: commit time, in any state (unsubscribed topics only).
    rule(mask(pc.not_equal(group_type, "classic")), True)
    # Simple groups (no protocol type), or an offset without a group: commit time.
    rule(~found | mask(pc.is_null(protocol_type)), True)
    # Empty classic groups: from when the group became Empty (v2+), else the commit time.
    empty_time = np.where(mask(pc.is_valid(since_empty)), numbers(since_empty), commit_time)
    empty_known = mask(pc.is_valid(since_empty)) | has_commit_time
    rule(mask(pc.equal(state, "Empty")), True, empty_time, empty_known)
    # Stable consumer-protocol groups with a known subscription: commit time (unsubscribed topics only).
    rule(mask(pc.equal(protocol_type, CONSUMER_PROTOCOL)) & mask(pc.equal(state, "Stable"))
         & mask(pc.is_valid(of_group("subscribed_topics"))), True)
    # Anything else (Stable connect groups, unknown subscriptions): no expiry.
    return base, allowed


def apply_expiry(offsets: pa.Table, groups: pa.Table, pending: pa.Table, as_of_ms: int, retention_ms: int
                 ) -> Expiry:
    """Split `offsets` (jobs.replay.offsets.OFFSET_SCHEMA) into live and expired at as_of. `groups`: the
    partition's groups (jobs.replay.groups.existing_groups); `pending`: its open transactional commits."""
    base, allowed = retention_base(offsets, groups)
    subscribed = _subscribed(offsets, groups)
    in_open_transaction = with_pending(offsets, pending, ["group_id", "topic", "partition"])
    candidate = allowed & ~subscribed & ~in_open_transaction
    explicit_known = mask(pc.is_valid(offsets.column("expire_timestamp_ms")))
    explicit = numbers(offsets.column("expire_timestamp_ms"))
    # Kafka's test in Java longs: a sum or difference that overflows is null here (never expired), as try_add.
    summed_ok = base <= _INT64_MAX - retention_ms
    deadline = np.where(explicit_known, explicit, np.where(summed_ok, base + np.where(summed_ok, retention_ms, 0), 0))
    deadline_known = candidate & (explicit_known | summed_ok)
    difference_ok = (base >= 0) | (as_of_ms <= _INT64_MAX + base)
    by_retention = difference_ok & (as_of_ms - np.where(difference_ok, base, 0) >= retention_ms)
    expired_now = candidate & np.where(explicit_known, as_of_ms >= explicit, by_retention)
    deadlines = pa.array(deadline, pa.int64(), mask=~deadline_known)
    judged = offsets.append_column("expires_at_ms", deadlines)
    live = judged.filter(pa.array(~expired_now))
    expired = judged.filter(pa.array(expired_now))
    expired = expired.append_column("expired_at_ms", expired.column("expires_at_ms"))

    return Expiry(live, expired)


def _subscribed(offsets: pa.Table, groups: pa.Table) -> np.ndarray:
    """Per offset: its topic is among its group's subscribed topics (spec §8.3: those never expire)."""
    lists = groups.column("subscribed_topics").combine_chunks()
    holders = groups.column("group_id").combine_chunks().take(pc.list_parent_indices(lists))
    subscriptions = pa.table({"group_id": holders, "topic": pc.list_flatten(lists)})
    rows = pa.table({"group_id": offsets.column("group_id"), "topic": offsets.column("topic"),
                     "row": pa.array(np.arange(offsets.num_rows))})
    found = rows.join(subscriptions, ["group_id", "topic"], join_type="left semi", use_threads=False)
    subscribed = np.zeros(offsets.num_rows, bool)
    subscribed[numbers(found.column("row"))] = True
    return subscribed
