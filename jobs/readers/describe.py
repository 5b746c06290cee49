"""`kafka-consumer-groups.sh --describe` from the rebuilt tables (spec §11.1), without Spark.

The layouts follow ConsumerGroupCommand: left-aligned printf columns, every offsets/state row starting
with a newline, `-` for a missing value, and the Empty / rebalancing notices on stderr. The coordinator
column shows the coordinator partition, since a log holds no broker address. A share group's offsets are its
share partitions' start offsets and lag, as ShareGroupCommand prints them (`kafka-share-groups.sh --describe`).
"""
from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pyarrow.compute as pc

from jobs.base.errors import BadInput
from jobs.base.storage import Location
from jobs.lake.runs import Snapshot, snapshot

READS = ("consumer_groups", "group_members", "group_target_assignments", "committed_offsets", "consumer_lag")
# Absent from outputs written before these tables existed.
HISTORY = ("group_events", "group_status")
SHARE = "share_partition_state"
MISSING = "-"
REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}


def describe_group(output: Location, group_id: str, views: tuple[str, ...] | str, verbose: bool) -> tuple[str, str]:
    """(stdout, stderr) text for one group in the `offsets` view, or the `state` and/or `members` views (both, in
    that order, when both are asked for), as the tool of its family prints them: kafka-consumer-groups.sh,
    kafka-share-groups.sh, kafka-streams-groups.sh; a Connect worker group as a classic group. stderr opens with the
    moment the tables describe. An unknown group is bad input (BadInput), as in reset-offsets."""
    tables = snapshot(output, READS + HISTORY + (SHARE,))  # every table of one run, even while one is committing
    views = (views,) if isinstance(views, str) else tuple(views) or ("offsets",)
    group = _rows(tables, "consumer_groups", group_id)
    shares = _rows(tables, SHARE, group_id, optional=True)
    if not group and not shares:
        raise BadInput(f"--group {group_id}: no such group{_at(tables)}")
    out, err = [], [_moment(tables)]
    for view in views:
        text, notice = _view(tables, group_id, group[0] if group else None, shares, view, verbose)
        out.append(text)
        if notice and notice not in err:
            err.append(notice)
    lost = _records_lost(_rows(tables, "consumer_lag", group_id))
    return "".join(out), "".join(err) + lost


def _view(tables: Snapshot, group_id: str, g: dict | None, shares: list[dict], view: str, verbose: bool
          ) -> tuple[str, str]:
    if g is None or g["protocol_type"] == "share":  # a share group (or only its share state is left)
        notice = f"\nShare group '{group_id}' has no active members.\n" if g is not None and g["state"] == "Empty" \
            else ""
        if view == "offsets" or g is None:
            lag = [r for r in _rows(tables, "consumer_lag", group_id) if r.get("progress") == "share_start_offset"]
            return _share_offsets(group_id, g, shares, lag, verbose)
        if view == "state":
            return _share_state(g, verbose), notice
        return _share_members(g, _rows(tables, "group_members", group_id), verbose), notice
    members = _rows(tables, "group_members", group_id)
    if g["group_type"] == "streams":
        notice = f"\nStreams group '{group_id}' has no active members.\n" if g["state"] == "Empty" else ""
        if view == "state":
            return _streams_state(g, verbose), notice
        if view == "members":
            return _share_members(g, members, verbose, header="MEMBER"), notice
        return _streams_offsets(g, _rows(tables, "committed_offsets", group_id),
                                _rows(tables, "consumer_lag", group_id), verbose), notice
    if view == "state":
        history = _history(g, *(_rows(tables, t, group_id, optional=True) for t in (*HISTORY, "consumer_lag")))
        labels = "".join(f"\nNote: {label}.\n" for label in (*map(tables.label, HISTORY),
                                                           *map(tables.history_note, HISTORY)) if label and history)
        return _state(g, members, verbose) + history, _notice(g) + labels
    if view == "members" or g["protocol_type"] not in (None, "consumer"):
        targets = _rows(tables, "group_target_assignments", group_id) if g["group_type"] != "classic" else []
        notice = _notice(g)
        if view == "offsets":  # a Connect worker group (or another protocol): no offsets, its members instead
            notice += (f"\nGroup '{group_id}' is a classic group of protocol type {g['protocol_type']} (e.g. Kafka "
                       f"Connect's workers): it commits no offsets; its members:\n")
        return _members(g, members, targets, verbose), notice
    return _offsets(g, members, _rows(tables, "committed_offsets", group_id),
                    _rows(tables, "consumer_lag", group_id), verbose)


def _at(tables: Snapshot) -> str:
    """ at <as_of>, as reset-offsets says it."""
    from jobs.readers.sql import iso_utc

    return f" at {iso_utc(tables.run['as_of'])}" if tables.run and tables.run.get("as_of") else ""


def _moment(tables: Snapshot) -> str:
    """The first stderr line: which moment and run the tables describe."""
    if not tables.run:
        return "As of the tables' newest versions (no run recorded).\n"
    from jobs.readers.sql import iso_utc

    as_of = iso_utc(tables.run["as_of"]) if tables.run.get("as_of") else "-"
    return f"As of {as_of} (run {tables.run['run_id']}, tables of {tables.output.uri}).\n"


def _records_lost(lag: list[dict]) -> str:
    """A warning naming the partitions whose committed offset fell below the log start (consumer_lag.records_lost)."""
    lost = sorted((r for r in lag if (r.get("records_lost") or 0) > 0), key=lambda r: (r["topic"], r["partition"]))
    if not lost:
        return ""
    listed = ", ".join(f"{r['topic']}-{r['partition']}: {r['records_lost']}" for r in lost[:10])
    more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
    return (f"\nWarning: retention deleted {sum(r['records_lost'] for r in lost)} records before the group read them "
            f"(records lost: {listed}{more}); LAG counts them, as Kafka's tool does.\n")


def _rows(tables: Snapshot, table: str, group_id: str, optional: bool = False) -> list[dict[str, Any]]:
    if table not in tables.versions:
        if optional:
            return []
        raise BadInput(f"--output {tables.output}: no {table} table there; run `offsetlake rebuild` first")
    dataset = tables.open(table).to_pyarrow_dataset()
    return dataset.to_table(filter=pc.field("group_id") == group_id).to_pylist()


def _notice(g: dict[str, Any]) -> str:
    if g["state"] == "Empty":
        return f"\nConsumer group '{g['group_id']}' has no active members.\n"
    if g["state"] in REBALANCING:
        return f"\nWarning: Consumer group '{g['group_id']}' is rebalancing.\n"
    return ""


def _text(value: Any) -> str:
    return MISSING if value is None else str(value)


def _offsets(g: dict, members: list[dict], committed: list[dict], lag: list[dict], verbose: bool) -> tuple[str, str]:
    by_partition = {(c["topic"], c["partition"]): c for c in committed}
    ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in lag}
    rows, assigned = [], set()
    # Members with an assignment, most partitions first (a stable sort), then their partitions in order.
    for m in sorted((m for m in members if m["assigned_partitions"]), key=lambda m: -len(m["assigned_partitions"])):
        for tp in sorted((a["topic"], a["partition"]) for a in m["assigned_partitions"]):
            assigned.add(tp)
            rows.append(_offset_row(g, tp, by_partition.get(tp), ends.get(tp), m))
    for tp in sorted(set(by_partition) - assigned):
        rows.append(_offset_row(g, tp, by_partition[tp], ends.get(tp), None))
    notice = _notice(g)
    if not rows:
        return "", notice
    header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID"]
    table = [header] + rows if verbose else [r[:3] + r[4:] for r in [header] + rows]
    data = table[1:]
    widths = [max([15] + [len(r[0]) for r in data]), max([15] + [len(r[1]) for r in data]), 10]
    widths += [15] * (4 if verbose else 3)
    widths += [max([15] + [len(r[-3]) for r in data]), max([15] + [len(r[-2]) for r in data])]
    return "".join("\n" + _printf(widths, r) for r in table) + "\n", notice


def _offset_row(g: dict, tp: tuple[str, int], c: dict | None, end: int | None, m: dict | None) -> list[str]:
    offset = c["committed_offset"] if c else None
    lag = end - offset if end is not None and offset not in (None, -1) else None
    return [g["group_id"], tp[0], str(tp[1]), _text(c["leader_epoch"] if c else None), _text(offset), _text(end),
            _text(lag), _text(m and m["member_id"]), _text(m and m["client_host"]), _text(m and m["client_id"])]


def _share_offsets(group_id: str, g: dict | None, shares: list[dict], lag: list[dict], verbose: bool
                   ) -> tuple[str, str]:
    """ShareGroupCommand's offsets: GROUP TOPIC PARTITION [LEADER-EPOCH] START-OFFSET LAG, by topic and partition;
    an unnamed topic shows its id. The lag is consumer_lag's (end offset - start offset), `-` when unknown."""
    lags = {(r["topic"], r["partition"]): r["lag"] for r in lag}
    rows = sorted(([s["topic"] or s["topic_id"], s["partition"], s["leader_epoch"],
                    s["start_offset"] if s["start_offset"] >= 0 else None, lags.get((s["topic"], s["partition"]))]
                   for s in shares), key=lambda r: (r[0], r[1]))
    notice = f"\nShare group '{group_id}' has no active members.\n" if g is not None and g["state"] == "Empty" else ""
    header = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    table = [header] + [[group_id, t, str(p), _text(e), _text(o), _text(n)] for t, p, e, o, n in rows]
    if not verbose:
        table = [r[:3] + r[4:] for r in table]
    widths = [max(15, len(group_id)), max([15] + [len(r[1]) for r in table[1:]]), 10] + [13] * (2 if verbose else 1)
    return "".join("\n" + _printf(widths, r) for r in table) + "\n", notice


def _share_state(g: dict, verbose: bool) -> str:
    """ShareGroupCommand's --state: GROUP COORDINATOR (ID) STATE [GROUP-EPOCH ASSIGNMENT-EPOCH] #MEMBERS."""
    return _modern_state(g, verbose, {"GROUP-EPOCH": 12, "ASSIGNMENT-EPOCH": 17})


def _modern_state(g: dict, verbose: bool, epochs: dict[str, int]) -> str:
    """A modern group's --state: GROUP COORDINATOR (ID) STATE, with --verbose its group epoch and target assignment
    epoch (under the tool's names, in columns of its widths: `epochs`), then #MEMBERS."""
    coordinator = f"__consumer_offsets-{g['coordinator_partition']}  (-)"
    widths = [max(15, len(g["group_id"])), max(25, len(coordinator)), 15] + (list(epochs.values()) if verbose else [])
    header = ["GROUP", "COORDINATOR (ID)", "STATE"] + (list(epochs) if verbose else [])
    row = [g["group_id"], coordinator, g["state"]]
    row += [_text(g["generation"]), _text(g["target_assignment_epoch"])] if verbose else []
    return "\n" + _printf(widths, header + ["#MEMBERS"]) + "\n" + _printf(widths, row + [str(g["member_count"])]) + "\n"


def _share_members(g: dict, members: list[dict], verbose: bool, header: str = "CONSUMER-ID") -> str:
    """ShareGroupCommand's --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS [MEMBER-EPOCH] ASSIGNMENT, by
    member id; nothing for a group without members (its notice says so). A streams group's the same, its members
    headed MEMBER and their active tasks as the source partitions they read."""
    if not members:
        return ""
    members = sorted(members, key=lambda m: m["member_id"])
    widths = [max(15, len(g["group_id"]))] + [max([15] + [len(m[c]) for m in members])
                                               for c in ("member_id", "client_host", "client_id")]
    widths += [12, 13] if verbose else [12]
    header = ["GROUP", header, "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else [])
    rows = [[g["group_id"], m["member_id"], m["client_host"], m["client_id"], str(len(m["assigned_partitions"]))]
            + ([_text(m["member_epoch"])] if verbose else []) + [_share_assignment(m["assigned_partitions"])]
            for m in members]
    return "".join("\n" + _printf(widths, r) for r in [header + ["ASSIGNMENT"], *rows]) + "\n"


def _streams_state(g: dict, verbose: bool) -> str:
    """StreamsGroupCommand's --state: GROUP COORDINATOR (ID) STATE [GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH] #MEMBERS."""
    return _modern_state(g, verbose, {"GROUP-EPOCH": 15, "TARGET-ASSIGNMENT-EPOCH": 15})


def _streams_offsets(g: dict, committed: list[dict], lag: list[dict], verbose: bool) -> str:
    """A streams group's committed offsets: GROUP TOPIC PARTITION CURRENT-OFFSET [LEADER-EPOCH] LOG-END-OFFSET LAG,
    by topic and partition (kafka-streams-groups.sh --describe --offsets)."""
    if not committed:
        return ""
    ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in lag}
    rows = []
    for c in sorted(committed, key=lambda c: (c["topic"], c["partition"])):
        end = ends.get((c["topic"], c["partition"]))
        rows.append([g["group_id"], c["topic"], str(c["partition"]), _text(c["committed_offset"]),
                     _text(c["leader_epoch"]), _text(end),
                     _text(end - c["committed_offset"] if end is not None else None)])
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LEADER-EPOCH", "LOG-END-OFFSET", "LAG"]
    table = [header, *rows] if verbose else [r[:4] + r[5:] for r in [header, *rows]]
    widths = [max(15, len(g["group_id"])), max([15] + [len(r[1]) for r in rows]), 10] + [15] * (3 if verbose else 2)
    return "".join("\n" + _printf(widths, r) for r in table) + "\n"


def _share_assignment(partitions: list[dict]) -> str:
    """topicA:0,1;topicB:0, as getAssignmentString (empty when nothing is assigned); an unnamed topic by its id."""
    return "" if not partitions else _assignment(partitions)


def _printf(widths: list[int], values: list[str]) -> str:
    """Java's `%-Ns %-Ns ... %s`: every column but the last padded to its width, single spaces between."""
    return " ".join(f"{v:<{w}}" for v, w in zip(values, widths)) + " " + values[-1]


def _assignment(partitions: list[dict]) -> str:
    """topicA:0,1,2;topicB:0 with partitions sorted, topic entries sorted as strings; `-` when empty."""
    by_topic: dict[str, list[int]] = {}
    for a in partitions:
        by_topic.setdefault(a["topic"] or a.get("topic_id") or MISSING, []).append(a["partition"])
    entries = sorted(f"{t}:" + ",".join(str(p) for p in sorted(ps)) for t, ps in by_topic.items())
    return ";".join(entries) or MISSING


def _members(g: dict, members: list[dict], targets: list[dict], verbose: bool) -> str:
    instance = [m["group_instance_id"] or "" for m in members]
    with_instance = any(instance)
    w_group = max([15] + [len(g["group_id"])])
    w_id = max([15] + [len(m["member_id"]) for m in members])
    w_instance = max([17] + [len(i) for i in instance])
    w_host = max([15] + [len(m["client_host"]) for m in members])
    w_client = max([15] + [len(m["client_id"]) for m in members])
    current = [_assignment(m["assigned_partitions"]) for m in members]
    target = [_assignment([t for t in targets if t["member_id"] == m["member_id"]]) for m in members]
    modern = g["group_type"] != "classic"
    target_epoch = _text(g["target_assignment_epoch"]) if modern else MISSING
    # UPGRADED appears when a consumer group mixes classic-protocol and consumer-protocol members.
    classic_flags = {bool(m["is_classic_member"]) for m in members} if modern else set()
    upgraded = len(classic_flags) == 2
    w_current = max([20] + [len(c) for c in current])
    w_target = max([20] + [len(t) for t in target])

    def line(cols: list[str]) -> str:
        if with_instance:
            widths = [w_group, w_id, w_instance, w_host, w_client, 15]
        else:
            widths = [w_group, w_id, w_host, w_client, 15]
            cols = cols[:2] + cols[3:]
        return "".join(f"{v:<{w}} " for v, w in zip(cols, widths))

    def verbose_part(cols: list[str]) -> str:
        if not verbose:
            return ""
        text = f"{cols[0]:<15} {cols[1]:<{w_current}} {cols[2]:<15} {cols[3]:<{w_target}}"
        return text + f" {cols[4]}" if upgraded else text

    out = "\n" + line(["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"])
    out += verbose_part(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT", "UPGRADED"]) + "\n"
    for m, inst, cur, tgt in zip(members, instance, current, target):
        out += line([g["group_id"], m["member_id"], inst, m["client_host"], m["client_id"],
                     str(len(m["assigned_partitions"]))])
        upgraded_text = str(not m["is_classic_member"]).lower()
        out += verbose_part([_text(m["member_epoch"]), cur, target_epoch, tgt, upgraded_text]) + "\n"
    return out


def _state(g: dict, members: list[dict], verbose: bool) -> str:
    coordinator = f"__consumer_offsets-{g['coordinator_partition']}  (-)"
    w_group, w_coord = max(15, len(g["group_id"])), max(25, len(coordinator))
    strategy = _strategy(g, members)
    if verbose:
        widths = [w_group, w_coord, 20, 20, 15, 25]  # #MEMBERS is last and unpadded
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH",
                  "#MEMBERS"]
        modern = g["group_type"] != "classic"
        epochs = [_text(g["generation"]), _text(g["target_assignment_epoch"])] if modern else [MISSING, MISSING]
        row = [g["group_id"], coordinator, strategy, g["state"], *epochs, str(g["member_count"])]
    else:
        widths = [w_group, w_coord, 20, 20]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = [g["group_id"], coordinator, strategy, g["state"], str(g["member_count"])]
    return "\n" + _printf(widths, header) + "\n" + _printf(widths, row) + "\n"


def _strategy(g: dict, members: list[dict]) -> str:
    """ASSIGNMENT-STRATEGY: a classic group's protocol when Stable; a consumer group's most common server
    assignor, else the broker default `uniform` (first of group.consumer.assignors)."""
    if g["group_type"] == "classic":
        return g["protocol"] if g["state"] == "Stable" and g["protocol"] else MISSING
    if g["group_type"] != "consumer":
        return MISSING
    assignors = Counter(m["server_assignor"] for m in members if m["server_assignor"])
    return assignors.most_common(1)[0][0] if assignors else "uniform"


def _history(g: dict, events: list[dict], status: list[dict], lag: list[dict]) -> str:
    """What the history tables add to --state: the last rebalance, rebalances in the day before as_of, the
    group's Burrow status, and its worst lag in offsets and in seconds (consumer_lag.lag_seconds)."""
    as_of = g["as_of"]
    rebalances = sorted((e["event_timestamp"], e["record_offset"]) for e in events
                        if e["event"] == "rebalanced" and e["event_timestamp"] is not None)
    last_day = sum(1 for ts, _ in rebalances if as_of is None or ts > as_of - timedelta(days=1))
    lags = [r["lag"] for r in lag if r["lag"] is not None]
    seconds = [r["lag_seconds"] for r in lag if r["lag_seconds"] is not None]
    header = ["LAST-REBALANCE", "REBALANCES-LAST-DAY", "STATUS", "MAX-LAG", "MAX-LAG-SECONDS"]
    row = [_instant(rebalances[-1][0]) if rebalances else MISSING, str(last_day),
           status[0]["group_status"] if status else MISSING,
           str(max(lags)) if lags else MISSING, f"{max(seconds):.1f}" if seconds else MISSING]
    widths = [max(25, len(row[0])), 20, 15, 15]
    return "\n" + _printf(widths, header) + "\n" + _printf(widths, row) + "\n"


def _instant(ts: Any) -> str:
    """An ISO-8601 UTC instant, as the tables' timestamps are UTC."""
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
