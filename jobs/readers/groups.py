"""`offsetlake groups`: one line per group of the newest run: id, type, state, members, lag, status (what
`kafka-consumer-groups.sh --list --state` and a lag exporter show together), without SQL."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.base.storage import Location
from jobs.readers.newest import Newest, newest

READS = ("consumer_groups", "consumer_lag", "group_status")
# Worst first: how groups are ranked by status (Burrow's group status is its worst partition's).
SEVERITY = {"ERR": 6, "STOP": 5, "STALL": 5, "REWIND": 4, "WARN": 3, "OK": 1}


def group_rows(found: Newest) -> list[dict[str, Any]]:
    """Per group: group_id, group_type, protocol_type, state, members, lag (the sum over its partitions),
    lag_seconds (the worst), status (Burrow's, when the newest run judged it), records_lost, partitions (with lag
    measured), by group id."""
    lag = found.read("consumer_lag", ["group_id", "lag", "lag_seconds", "records_lost"])
    sums = {}
    if lag.num_rows:
        grouped = lag.group_by("group_id").aggregate([("lag", "sum"), ("lag_seconds", "max"), ("records_lost", "sum"),
                                                      ("group_id", "count")])
        sums = {r["group_id"]: r for r in grouped.to_pylist()}
    status = {}
    if found.written("group_status"):
        judged = found.read("group_status", ["group_id", "group_status"])
        status = dict(zip(judged.column("group_id").to_pylist(), judged.column("group_status").to_pylist()))
    rows = []
    for g in found.read("consumer_groups", ["group_id", "group_type", "protocol_type", "state", "member_count"]
                        ).sort_by("group_id").to_pylist():
        s = sums.get(g["group_id"], {})
        rows.append({"group_id": g["group_id"], "group_type": g["group_type"], "protocol_type": g["protocol_type"],
                     "state": g["state"], "members": g["member_count"], "lag": s.get("lag_sum"),
                     "lag_seconds": s.get("lag_seconds_max"), "status": status.get(g["group_id"]),
                     "records_lost": s.get("records_lost_sum") or 0, "partitions": s.get("group_id_count") or 0})
    return rows


def groups_text(output: Location) -> str:
    """The aligned table `offsetlake sql` prints, and a first line naming the run and its moment."""
    from jobs.readers.sql import table_text
    from jobs.readers.views import run_line

    found = newest(output, READS)
    rows = group_rows(found)
    table = pa.table({
        "group": pa.array([r["group_id"] for r in rows], pa.string()),
        "type": pa.array([r["group_type"] for r in rows], pa.string()),
        "protocol": pa.array([r["protocol_type"] for r in rows], pa.string()),
        "state": pa.array([r["state"] for r in rows], pa.string()),
        "members": pa.array([r["members"] for r in rows], pa.int32()),
        "lag": pa.array([r["lag"] for r in rows], pa.int64()),
        "lag_seconds": pa.array([None if r["lag_seconds"] is None else round(r["lag_seconds"], 1) for r in rows],
                                pa.float64()),
        "status": pa.array([r["status"] for r in rows], pa.string()),
        "records_lost": pa.array([r["records_lost"] for r in rows], pa.int64()),
    })
    text, _ = table_text(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()), None)
    head = run_line(found.run) + "\n" if found.run else ""
    return head + text
