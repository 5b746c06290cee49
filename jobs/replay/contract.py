"""The replay's tables as the contract shapes them (../shared/docs/table-contract.md): columns, order and types,
in one place. The rules (jobs.replay.offsets, expiry, groups, history) give their rows in their own terms;
jobs.replay.partition hands them here (and jobs.replay.history its offset_commits rows, which its state reads).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask, numbers
from jobs.base.tables import conform
from jobs.replay.groups import GROUP_ROWS_SCHEMA
from jobs.replay.records import MAX_MS, MIN_MS

VIOLATION_SCHEMA = pa.schema([("group_id", pa.string()), ("reason", pa.string())])


def consumer_groups(groups: pa.Table, activity: pa.Table, as_of: pa.Scalar) -> pa.Table:
    """consumer_groups rows of the groups that exist (jobs.replay.groups.remaining_groups) and their newest
    records (`activity`: jobs.replay.groups.group_activity)."""
    n = groups.num_rows
    at = pc.index_in(groups.column("group_id"), value_set=activity.column("group_id"))
    columns = {name: groups.column(name) for name in groups.column_names}
    columns.update({
        "current_state_timestamp": timestamps_ms(groups.column("current_state_timestamp_ms")),
        "last_record_offset": activity.column("record_offset").take(at),
        "last_record_timestamp": activity.column("record_timestamp").take(at),
        "as_of": pa.repeat(as_of, n),
    })
    return conform(columns, "consumer_groups")


def offset_rows(offsets: pa.Table, as_of: pa.Scalar, table: str) -> pa.Table:
    """committed_offsets or expired_offsets (`table`) rows of jobs.replay.expiry's offsets."""
    columns = {name: offsets.column(name) for name in offsets.column_names}
    columns.update({
        "commit_timestamp": timestamps_ms(offsets.column("commit_timestamp_ms")),
        "expire_timestamp": timestamps_ms(offsets.column("expire_timestamp_ms")),
        "expires_at": timestamps_ms(offsets.column("expires_at_ms")),
        "as_of": pa.repeat(as_of, offsets.num_rows),
    })
    if "expired_at_ms" in columns:
        columns["expired_at"] = timestamps_ms(offsets.column("expired_at_ms"))
    return conform(columns, table)


def pending_transactions(pending: pa.Table, as_of: pa.Scalar) -> pa.Table:
    """pending_transactions rows of the open transactional commits (jobs.replay.offsets.OffsetState.pending)."""
    columns = {name: pending.column(name) for name in pending.column_names}
    columns.update({"offset": pending.column("committed_offset"),
                    "commit_timestamp": timestamps_ms(pending.column("commit_timestamp_ms")),
                    "as_of": pa.repeat(as_of, pending.num_rows)})
    return conform(columns, "pending_transactions")


def offset_commit_rows(columns: dict[str, pa.Array | pa.ChunkedArray]) -> pa.Table:
    """offset_commits rows of the applied offset records' columns (jobs.replay.history, with commit_timestamp_ms)."""
    columns = {**columns, "commit_timestamp": timestamps_ms(columns["commit_timestamp_ms"]),
               "commit_date": pc.cast(columns["record_timestamp"], pa.date32())}
    return conform(columns, "offset_commits")


def group_events(events: pa.Table) -> pa.Table:
    """group_events rows of the group replay's `event` rows (jobs.replay.groups)."""
    fields = events.column("event").combine_chunks() if events.num_rows else None
    columns = {"group_id": events.column("group_id"), "coordinator_partition": events.column("coordinator_partition")}
    for f in GROUP_ROWS_SCHEMA.field("event").type:
        columns[f.name] = pc.struct_field(fields, f.name) if fields is not None else pa.nulls(0, f.type)
    columns["event_timestamp"] = timestamps_ms(columns["event_timestamp_ms"])
    return conform(columns, "group_events")


def quarantine(failed: pa.Table) -> pa.Table:
    """quarantine rows of the records that failed the check (jobs.decode.check)."""
    return conform(failed, "quarantine")


def violations(rows: pa.Table) -> pa.Table:
    """VIOLATION_SCHEMA rows of the group replay's `violation` rows (jobs.replay.groups)."""
    return pa.table([rows.column("group_id"), pc.struct_field(rows.column("violation"), "reason")],
                    schema=VIOLATION_SCHEMA)


def timestamps_ms(ms: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Epoch milliseconds as timestamps; null outside the years a timestamp can hold."""
    values = numbers(ms)
    ok = mask(pc.is_valid(ms)) & (values >= MIN_MS) & (values <= MAX_MS)
    return pa.array(np.where(ok, values, 0) * 1000, pa.int64(), mask=~ok).cast(TIMESTAMP)
