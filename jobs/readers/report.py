"""`offsetlake report`: what the newest run and its history say, gathered for a page (jobs.readers.report_page).

Per group: its lag in offsets and in seconds over time, replayed from the tables in hindsight (at each of the group's
commits, the committed offsets then against the log end then, interpolated from end_offsets_history; the lag in
seconds by the same rule as consumer_lag's, jobs.derive.end_offsets.Snapshots.passed_at, from the oldest record not
deleted), the tables' own values at as_of, and the snapshots (`rebuild --snapshot`) as measured then; its
rebalances (group_events), Burrow's status per partition (group_status), its offsets that expire soonest, and a
share group's progress (share_partition_state). Overall: the groups ranked by status, then lag.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import epoch_us, from_epoch_us, utc
from jobs.base.storage import Location
from jobs.base.tables import snapshot_table
from jobs.derive.end_offsets import Snapshots
from jobs.readers.groups import SEVERITY, group_rows
from jobs.readers.newest import Newest, newest

READS = ("consumer_groups", "consumer_lag", "group_status", "group_events", "offset_commits", "end_offsets_history",
         "committed_offsets", "share_partition_state", "group_members", snapshot_table("consumer_lag"))
DETAILED = 12  # groups given a section of their own without --group: the troubled ones, then the most lagging
SHARE_SECTIONS = 1  # share groups among them at least
POINTS = 150  # points of a group's lag over time at most (its commits, evenly thinned)
EXPIRING = 25  # a group's offsets listed as about to expire
EXPIRING_ALL = 1000  # of every group, for the overview (which sums them per group and topic)
EXPIRING_WITHIN = timedelta(days=7)


@dataclass
class GroupReport:
    """One group: its overview row and, for a group with a section, the series of its charts."""

    row: dict[str, Any]
    lag: list[dict[str, Any]] = field(default_factory=list)  # time, topic, lag, lag_seconds, source
    events: list[dict[str, Any]] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)
    expiring: list[dict[str, Any]] = field(default_factory=list)
    shares: list[dict[str, Any]] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)  # partitions with records_lost > 0


@dataclass
class Report:
    output: str
    run: dict[str, Any]
    as_of: datetime | None
    since: datetime | None
    groups: list[GroupReport]  # every group, ranked
    detailed: list[GroupReport]  # those with a section
    expiring: list[dict[str, Any]]
    history_written: bool  # the newest run wrote the history tables (not --no-history)
    totals: dict[str, Any]


def gather(output: Location, group_ids: tuple[str, ...] = (), since: datetime | None = None) -> Report:
    """The report of the newest complete run under `output`: every group ranked, and sections for `group_ids`
    (default: the DETAILED worst)."""
    from jobs.base.errors import BadInput

    found = newest(output, READS)
    as_of = utc(found.as_of)
    kept_from = utc(found.run.get("history_from"))
    if since is not None and kept_from is not None and since < kept_from:
        raise BadInput(f"--since {_iso(since)}: before the history kept (from {_iso(kept_from)}: rebuild "
                       "--history-days)")
    groups = _ranked(found)
    by_id = {g.row["group_id"]: g for g in groups}
    unknown = [g for g in group_ids if g not in by_id and g not in _share_groups(found)]
    if unknown:
        raise BadInput(f"--group {unknown[0]}: no such group at {_iso(as_of)}")
    for g in group_ids:  # a share group known only from __share_group_state
        by_id.setdefault(g, GroupReport(_row_without_group(g)))
    chosen = list(group_ids) or _chosen(groups)
    detailed = [by_id[g] for g in chosen]
    _fill(found, detailed, as_of, since)
    expiring = _expiring(found, None, as_of, EXPIRING_ALL)
    totals = {"groups": len(groups), "lag": sum(g.row["lag"] or 0 for g in groups),
              "records_lost": sum(g.row["records_lost"] or 0 for g in groups),
              "by_status": {s: sum(1 for g in groups if g.row["status"] == s) for s in SEVERITY},
              "expiring": len(expiring), "partitions": found.read("consumer_lag").num_rows}
    return Report(output.uri, found.run, as_of, since, groups, detailed, expiring,
                  found.written("offset_commits"), totals)


def _iso(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _share_groups(found: Newest) -> set[str]:
    return set(found.read("share_partition_state", ["group_id"]).column("group_id").to_pylist())


def _row_without_group(group_id: str) -> dict[str, Any]:
    return {"group_id": group_id, "group_type": "share", "protocol_type": "share", "state": "-", "members": 0,
            "lag": None, "lag_seconds": None, "status": None, "records_lost": 0, "partitions": 0}


def _ranked(found: Newest) -> list[GroupReport]:
    """Every group's overview row, worst status first, then records lost, then most lag."""
    return [GroupReport(row) for row in sorted(group_rows(found), key=lambda r: (
        -SEVERITY.get(r["status"], 0), -(r["records_lost"] > 0), -(r["lag"] or 0), r["group_id"]))]


def _chosen(groups: list[GroupReport]) -> list[str]:
    """The groups given a section without --group: the DETAILED worst that have lag rows, and the worst share
    groups (SHARE_SECTIONS) besides, so that every family's view shows."""
    measured = [g.row["group_id"] for g in groups if g.row["partitions"] > 0]
    shares = [g.row["group_id"] for g in groups if g.row["protocol_type"] == "share" and g.row["partitions"] > 0]
    chosen = measured[:DETAILED]
    return chosen + [g for g in shares if g not in chosen][:max(0, SHARE_SECTIONS - len(set(shares) & set(chosen)))]


def _fill(found: Newest, groups: list[GroupReport], as_of: datetime | None, since: datetime | None) -> None:
    ids = [g.row["group_id"] for g in groups]
    lag = _rows_of(found, "consumer_lag", ids)
    commits = _rows_of(found, "offset_commits", ids) if found.written("offset_commits") else {}
    events = _rows_of(found, "group_events", ids) if found.written("group_events") else {}
    status = _rows_of(found, "group_status", ids) if found.written("group_status") else {}
    shares = _rows_of(found, "share_partition_state", ids)
    snapshots = _rows_of(found, snapshot_table("consumer_lag"), ids)
    history = Snapshots.of(found.read("end_offsets_history"), epoch_us(as_of) if as_of else None)
    for g in groups:
        gid = g.row["group_id"]
        g.lag = _lag_series(commits.get(gid, []), history, since, as_of) + _measured(lag.get(gid, []), snapshots.get(
            gid, []), since)
        g.events = [e for e in events.get(gid, []) if since is None or utc(e["event_timestamp"]) >= since]
        g.status = status.get(gid, [])
        g.expiring = _expiring(found, gid, as_of, EXPIRING)
        g.lost = sorted((r for r in lag.get(gid, []) if (r.get("records_lost") or 0) > 0),
                        key=lambda r: (-r["records_lost"], r["topic"], r["partition"]))
        ends = {(r["topic"], r["partition"]): r for r in lag.get(gid, [])}
        g.shares = [_share_row(s, ends.get((s["topic"], s["partition"]))) for s in
                    sorted(shares.get(gid, []), key=lambda s: (s["topic"] or s["topic_id"], s["partition"]))]


def _rows_of(found: Newest, table: str, ids: list[str]) -> dict[str, list[dict]]:
    """The rows of `table` of the groups `ids`, by group."""
    if not found.has(table) or not ids:
        return {}
    data = found.tables.open(table).to_pyarrow_dataset().to_table(filter=pc.field("group_id").isin(ids))
    out: dict[str, list[dict]] = {}
    for row in data.to_pylist():
        out.setdefault(row["group_id"], []).append(row)
    return out


def _lag_series(commits: list[dict], history: Snapshots, since: datetime | None, as_of: datetime | None
                ) -> list[dict[str, Any]]:
    """Per topic, at each of the group's commits (at most POINTS, since `since`): the sum of its partitions' lag
    and the worst lag in seconds, from the offsets committed then and the log end then. Partitions without an
    end offset then are left out of that moment."""
    commits = sorted((c for c in commits if c["record_timestamp"] is not None),
                     key=lambda c: (c["record_timestamp"], c["record_offset"]))
    if not commits or not history.table.num_rows:
        return []
    # The group's commits, and the end-offset snapshots of its partitions: a group that stopped committing
    # still lags more at each snapshot after.
    keys = sorted({(c["topic"], c["partition"]) for c in commits})
    observed = history.table.filter(pc.is_in(pc.binary_join_element_wise(
        history.table.column("topic"), pc.cast(history.table.column("partition"), pa.string()), "\0"),
        value_set=pa.array([f"{t}\0{p}" for t, p in keys]))).column("observed_at")
    moments = {epoch_us(utc(c["record_timestamp"])) for c in commits}
    moments |= set(observed.drop_null().cast(pa.int64()).to_pylist())
    if since is not None:
        moments = {m for m in moments if m >= epoch_us(since)}
    moments = sorted(moments)
    if as_of is not None:
        moments = [m for m in moments if m <= epoch_us(as_of)]
    if len(moments) > POINTS:
        moments = [moments[i] for i in np.linspace(0, len(moments) - 1, POINTS).round().astype(int)]
    if not moments:
        return []
    at = np.array(moments, np.int64)
    where = history.find(pa.table({"topic": [k[0] for k in keys], "partition": pa.array([k[1] for k in keys],
                                                                                          pa.int32())}))
    series = []
    for (topic, partition), part in zip(keys, where):
        if part < 0:
            continue
        own = [c for c in commits if (c["topic"], c["partition"]) == (topic, partition)]
        times = np.array([epoch_us(utc(c["record_timestamp"])) for c in own], np.int64)
        offsets = np.array([c["committed_offset"] if c["kind"] == "commit" else -1 for c in own], np.int64)
        latest = np.searchsorted(times, at, side="right") - 1  # the commit in force at each moment
        has = latest >= 0
        committed = np.where(has, offsets[np.clip(latest, 0, None)], -1)
        has &= committed >= 0  # a tombstone: nothing committed then
        parts = np.full(len(at), part)
        end, known_end = history.log_end_at(parts, at)
        # As consumer_lag measures it: records retention had deleted by then are not waiting.
        waiting_from = np.maximum(committed, _log_start_at(history, topic, partition, at))
        passed, known_passed = history.passed_at(parts, waiting_from)
        lag = end - committed
        seconds = np.where(end <= waiting_from, 0.0, np.maximum((at - passed) / 1e6, 0.0))
        for i in np.flatnonzero(has & known_end):
            series.append({"time": from_epoch_us(at[i]), "topic": topic, "partition": partition, "lag": int(lag[i]),
                           "seconds": float(seconds[i]) if (known_passed[i] or lag[i] <= 0) else None})
    return _per_topic(series, "replayed")


def _log_start_at(history: Snapshots, topic: str, partition: int, at: np.ndarray) -> np.ndarray:
    """The partition's log start offset at each moment: of the newest snapshot up to it that has one (0: none)."""
    rows = history.table.filter(pc.and_(pc.and_(pc.equal(history.table.column("topic"), topic),
                                                pc.equal(history.table.column("partition"), partition)),
                                        pc.is_valid(history.table.column("log_start_offset"))))
    if not rows.num_rows:
        return np.zeros(len(at), np.int64)
    times = np.asarray(rows.column("observed_at").cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    starts = np.asarray(rows.column("log_start_offset").to_numpy(zero_copy_only=False), np.int64)
    newest = np.searchsorted(times, at, side="right") - 1
    return np.where(newest >= 0, starts[np.clip(newest, 0, None)], 0)


def _measured(lag: list[dict], snapshots: list[dict], since: datetime | None) -> list[dict[str, Any]]:
    """The lag consumer_lag measured at as_of, and each snapshot's (rebuild --snapshot), per topic."""
    rows = [{"time": utc(r["as_of"]), "topic": r["topic"], "partition": r["partition"], "lag": r["lag"],
             "seconds": r["lag_seconds"]} for r in lag if r["as_of"] is not None and r["lag"] is not None]
    taken = [{"time": utc(r["as_of"]), "topic": r["topic"], "partition": r["partition"], "lag": r["lag"],
              "seconds": r["lag_seconds"]} for r in snapshots if r["as_of"] is not None and r["lag"] is not None
             and (since is None or utc(r["as_of"]) >= since)]
    return _per_topic(taken, "snapshot") + _per_topic(rows, "as_of")


def _per_topic(rows: list[dict], source: str) -> list[dict[str, Any]]:
    """Rows of partitions summed per (time, topic): lag summed, lag in seconds the worst known."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["time"], r["topic"])
        into = out.setdefault(key, {"time": _iso(r["time"]), "topic": r["topic"], "lag": 0, "lag_seconds": None,
                                    "source": source})
        into["lag"] += max(r["lag"], 0)
        if r["seconds"] is not None:
            into["lag_seconds"] = max(into["lag_seconds"] or 0.0, r["seconds"])
    return [out[k] for k in sorted(out)]


def _expiring(found: Newest, group_id: str | None, as_of: datetime | None, most: int) -> list[dict[str, Any]]:
    """Committed offsets whose retention deadline (expires_at) is soonest, within EXPIRING_WITHIN of as_of."""
    data = found.tables.open("committed_offsets").to_pyarrow_dataset() if found.has("committed_offsets") else None
    if data is None or as_of is None:
        return []
    where = pc.field("expires_at").is_valid()
    if group_id is not None:
        where = where & (pc.field("group_id") == group_id)
    rows = data.to_table(columns=["group_id", "topic", "partition", "committed_offset", "commit_timestamp",
                                  "expires_at"], filter=where).sort_by("expires_at").to_pylist()
    soon = []
    for r in rows:
        left = utc(r["expires_at"]) - as_of
        if left > EXPIRING_WITHIN:
            break
        soon.append({**r, "expires_at": _iso(utc(r["expires_at"])), "hours_left": round(left.total_seconds() / 3600, 1)})
        if len(soon) == most:
            break
    return soon


def _share_row(s: dict, lag: dict | None) -> dict[str, Any]:
    """A share partition's progress: its start offset, the log end, and its records in flight by delivery state."""
    counts = {"Acknowledged": 0, "Available": 0, "Archived": 0}
    for batch in s["in_flight"] or ():
        counts[batch["delivery_state"]] = counts.get(batch["delivery_state"], 0) + batch["last_offset"] - \
            batch["first_offset"] + 1
    return {"partition": f"{s['topic'] or s['topic_id']}-{s['partition']}", "start_offset": s["start_offset"],
            "log_end_offset": lag["log_end_offset"] if lag else None, "lag": lag["lag"] if lag else None,
            **counts}
