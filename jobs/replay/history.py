"""offset_commits: every offset record the coordinator applied up to as_of, in the order it applied them, with
what each replaced; and what consumer_lag and group_status read of them (jobs.derive).

One row per record of one coordinator partition's valid offset records (whole) that applied, where it applied
(jobs.replay.applied: the applied sequence). Each row then gets its key's previous committed offset, the time since
it and how many of the key's rows came before it, all of which stay true as the log grows: a run that
resumes (jobs.replay.resume) appends the rows of its new records, each key continued from its last row before
them (`earlier`: each key's state the previous run kept, `commit_state`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask, micros, numbers, ranges, run_starts
from jobs.base.tables import HISTORY_STATE, arrow_schema
from jobs.decode.arrow_reader import read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, OFFSET_KEY_PREFIXES, OFFSET_VALUE
from jobs.decode.columns import offset_commit_columns
from jobs.replay import contract
from jobs.replay.applied import AppliedSequence
from offsets_codec import decode_key

_VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp")
# What offset_commits leaves the rules after it, per key (`commit_state`): its last row (which the next row of a
# resumed run follows), its window of last commits (group_status) and its commits in the rate window: the rows
# of `_history_state` but the run's counts and windows.
STATE_SCHEMA = pa.schema([f for f in arrow_schema(HISTORY_STATE)
                          if f.name not in ("kind", "rows", "status_window", "rate_window_ms")])
WINDOW_POINT = STATE_SCHEMA.field("window").type.value_type
RATE_POINT = STATE_SCHEMA.field("rates").type.value_type
# Per live offset, its last commits (group_status) and its consume rate (consumer_lag), for jobs.derive.
COMMIT_WINDOW_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()),
                                  ("topic", pa.string()), ("partition", pa.int32()), ("window", pa.list_(WINDOW_POINT))])
CONSUME_RATE_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()),
                                 ("topic", pa.string()), ("partition", pa.int32()), ("consume_rate", pa.float64())])


KEY = ["coordinator_partition", "group_id", "topic", "partition"]


@dataclass(frozen=True)
class Keys:
    """The keys of offset_commits rows: per row its key (a row of `names`: KEY), the rows in (key, position)
    order, and per key its row of the `earlier` state the call continued (STATE_SCHEMA; -1: none)."""

    key: np.ndarray
    order: np.ndarray
    names: pa.Table
    earlier: np.ndarray


def offset_commits(offset_records: pa.Table, sequence: AppliedSequence, earlier: pa.Table | None = None
                   ) -> tuple[pa.Table, Keys]:
    """The offset_commits rows of one coordinator partition's valid offset records up to as_of (checked rows,
    whole), from their applied `sequence` (jobs.replay.applied), and their Keys. `earlier`: each key's state
    (STATE_SCHEMA, `commit_state`) an earlier run left, when `offset_records` are what came after the rows it
    wrote (jobs.replay.resume): each key goes on from its last one."""
    names = _names(sequence.keys)
    names = pa.table({"coordinator_partition": pa.array(sequence.key_partition, pa.int32()),
                      **{name: names.column(name) for name in names.column_names}})
    at = _matched(earlier, names)
    heads = _heads(earlier, at)
    keep = sequence.applies(heads["source_record_offset"]) if heads["has"].any() else sequence.applied
    rows, index = sequence.rows[keep], sequence.key[keep]
    position, source = sequence.position[keep], sequence.source[keep]
    # In commit_date order: the table's folders are runs of rows, which a task writes without copying them again.
    stamp = offset_records.column("record_timestamp")
    day = np.where(mask(pc.is_valid(stamp)), micros(stamp) // 86_400_000_000, np.iinfo(np.int64).max)[rows]
    by_day = np.argsort(day, kind="stable")
    rows, index, position, source = rows[by_day], index[by_day], position[by_day], source[by_day]
    taken = pa.array(rows)
    applied = offset_records.select(["coordinator_partition", "record_timestamp", "producer_id"]).take(taken)
    values = {name: column.take(taken) for name, column in _values(offset_records).items()}
    commits, order = _rows(applied, values, index, position, source, names, heads)
    return commits, Keys(index, order, names.select(KEY), at)


def _matched(earlier: pa.Table | None, names: pa.Table) -> np.ndarray:
    """Per key of `names`, its row of `earlier` (-1: none)."""
    at = np.full(names.num_rows, -1, np.int64)
    if earlier is None or not earlier.num_rows or not names.num_rows:
        return at
    keyed = names.select(KEY).append_column("_key", pa.array(np.arange(names.num_rows)))
    rows = earlier.select(KEY).append_column("_row", pa.array(np.arange(earlier.num_rows)))
    joined = keyed.join(rows, KEY, join_type="inner", use_threads=False)
    at[numbers(joined.column("_key"))] = numbers(joined.column("_row"))
    return at


def _heads(earlier: pa.Table | None, at: np.ndarray) -> dict[str, np.ndarray]:
    """Per key, its last row before these (`at`: its row of `earlier`, STATE_SCHEMA, or -1): committed_offset
    (has_offset), record_timestamp in µs (has_timestamp), source_record_offset and earlier_records (-1: none)."""
    n = len(at)
    found = {"has": at >= 0, "committed_offset": np.zeros(n, np.int64), "has_offset": np.zeros(n, bool),
             "record_timestamp": np.zeros(n, np.int64), "has_timestamp": np.zeros(n, bool),
             "source_record_offset": np.full(n, -1, np.int64), "earlier_records": np.full(n, -1, np.int64)}
    if not found["has"].any():
        return found
    mine = np.flatnonzero(found["has"])
    rows = earlier.take(pa.array(at[mine]))
    for name in ("committed_offset", "source_record_offset", "earlier_records"):
        found[name][mine] = numbers(rows.column(name))
    found["has_offset"][mine] = mask(pc.is_valid(rows.column("committed_offset")))
    found["record_timestamp"][mine] = micros(rows.column("record_timestamp"))
    found["has_timestamp"][mine] = mask(pc.is_valid(rows.column("record_timestamp")))
    return found


def _names(keys: pa.Array) -> pa.Table:
    """group_id, topic, partition of each distinct offset key (its bytes after the record type)."""
    whole_keys = pc.binary_join_element_wise(pa.scalar(OFFSET_KEY_PREFIXES[-1]), keys, b"") if len(keys) else keys
    read_keys = read(whole_keys, OFFSET_KEY, ("group", "topic", "partition"), heads=OFFSET_KEY_HEADS)
    names = {"group_id": read_keys.fields["group"], "topic": read_keys.fields["topic"],
             "partition": read_keys.fields["partition"].cast(pa.int32())}
    unproven = np.flatnonzero(~read_keys.ok)
    if len(unproven):
        data = [decode_key(k).data for k in whole_keys.take(pa.array(unproven)).to_pylist()]
        for name, field in (("group_id", "group"), ("topic", "topic"), ("partition", "partition")):
            column = names[name].to_pylist()
            for i, d in zip(unproven, data):
                column[i] = d[field]
            names[name] = pa.array(column, names[name].type)
    return pa.table(names)


def _values(records: pa.Table) -> dict[str, pa.Array]:
    """committed_offset, leader_epoch, metadata, commit_timestamp_ms of each record (null for a tombstone)."""
    values = records.column("value").combine_chunks()
    read_values = read(values, OFFSET_VALUE, _VALUE_FIELDS, checked=True)
    epoch = read_values.fields["leaderEpoch"]
    fields = {"committed_offset": read_values.fields["offset"],
              "leader_epoch": pc.if_else(pc.equal(epoch, -1), pa.scalar(None, pa.int64()), epoch).cast(pa.int32()),
              "metadata": read_values.fields["metadata"],
              "commit_timestamp_ms": read_values.fields["commitTimestamp"]}
    unproven = np.flatnonzero(~read_values.ok & mask(pc.is_valid(values)))
    if len(unproven):  # the codec, where the bulk reader was unsure
        keys = records.column("key").combine_chunks().take(pa.array(unproven)).to_pylist()
        data = [offset_commit_columns(k, v) for k, v in zip(keys, values.take(pa.array(unproven)).to_pylist())]
        for name in fields:
            column = fields[name].to_pylist()
            for i, d in zip(unproven, data):
                column[i] = d[name]
            fields[name] = pa.array(column, fields[name].type)
    return fields


def _rows(records: pa.Table, values: dict[str, pa.Array], key: np.ndarray, position: np.ndarray,
          source: np.ndarray, names: pa.Table, heads: dict[str, np.ndarray]) -> tuple[pa.Table, np.ndarray]:
    """The offset_commits rows of applied records (`records`: their partition, timestamp and producer; `values`:
    their decoded values; `key`: their key's row of `names`), and the rows in (key, position) order: each with its
    key's previous one (in application order; for a key's first, its last of `heads`), the movement since, and
    the key's rows before it."""
    n = len(key)
    order = np.lexsort((position, key)) if n else np.zeros(0, np.int64)
    follows = np.zeros(n, bool)  # in `order`: the row follows another of its key
    follows[1:] = key[order[1:]] == key[order[:-1]]
    before = np.full(n, -1)
    before[order[1:][follows[1:]]] = order[:-1][follows[1:]]
    starts = np.flatnonzero(~follows)
    ends = np.append(starts, n)[1:]
    earlier = np.empty(n, np.int64)
    earlier[order] = np.arange(n) - np.repeat(starts, ends - starts)
    has_before = before >= 0
    offset_column = values["committed_offset"]
    has_offset = mask(pc.is_valid(offset_column))
    offset = numbers(offset_column)
    stamp = records.column("record_timestamp")
    has_stamp = mask(pc.is_valid(stamp))
    stamp_us = micros(stamp)
    # The previous row: this call's, else the key's last before it (a resumed run's), else none.
    head = ~has_before & heads["has"][key]
    previous = np.where(has_before, offset[before], heads["committed_offset"][key])
    has_previous = np.where(has_before, has_offset[before], head & heads["has_offset"][key])
    before_us = np.where(has_before, stamp_us[before], heads["record_timestamp"][key])
    has_before_stamp = np.where(has_before, has_stamp[before], head & heads["has_timestamp"][key])
    seconds = (stamp_us - before_us).astype(np.float64) / 1e6
    earlier += heads["earlier_records"][key] + 1
    both = has_offset & has_previous  # a commit after a commit: a movement
    named = pa.array(key)
    columns = {
        "group_id": names.column("group_id").take(named), "topic": names.column("topic").take(named),
        "partition": names.column("partition").take(named),
        "kind": pc.if_else(pa.array(has_offset), "commit", "delete"),
        "committed_offset": offset_column,
        "previous_offset": pa.array(previous, pa.int64(), mask=~has_previous),
        "offset_delta": pa.array(offset - previous, pa.int64(), mask=~both),
        "commit_timestamp_ms": values["commit_timestamp_ms"],
        "record_timestamp": stamp,
        "seconds_since_previous": pa.array(seconds, pa.float64(), mask=~(has_previous & has_stamp & has_before_stamp)),
        "is_rewind": pa.array(both & (offset < previous)),
        "leader_epoch": values["leader_epoch"], "metadata": values["metadata"],
        "producer_id": records.column("producer_id"),
        "coordinator_partition": records.column("coordinator_partition"),
        "record_offset": pa.array(position, pa.int64()),
        "source_record_offset": pa.array(source, pa.int64()),
        "earlier_records": pa.array(earlier),
    }
    return contract.offset_commit_rows(columns), order


def commit_state(commits: pa.Table, window: int, since_us: int, keys: Keys | None = None,
                 earlier: pa.Table | None = None) -> pa.Table:
    """Per key of offset_commits rows `commits` (with their `keys`, or found from KEY), and of the `earlier` state
    they continue (STATE_SCHEMA): its last row, its window (its last `window` commits after its last tombstone:
    group_status reads it, `commit_windows`) and its commits after `since_us` (the rate window's start:
    `consume_rates`), as STATE_SCHEMA rows. A key without rows keeps its earlier state, less the commits before
    `since_us`."""
    keys = keys if keys is not None else _keys_of(commits)
    order, key = keys.order, keys.key[keys.order]
    starts = run_starts(key)
    ends = np.append(starts[1:], len(key)) if len(key) else starts
    touched = key[starts]  # the keys with rows, in order
    kept = np.flatnonzero(~np.isin(np.arange(earlier.num_rows), keys.earlier[touched])) \
        if earlier is not None else np.zeros(0, np.int64)  # earlier keys without rows: as they were
    heads = commits.take(pa.array(order[ends - 1])) if len(touched) else commits.slice(0, 0)
    flat = pa.schema(list(STATE_SCHEMA)[:-2])
    out = pa.concat_tables([
        pa.table({**{c: keys.names.column(c).take(pa.array(touched)) for c in KEY},
                  **{c: heads.column(c) for c in flat.names[len(KEY):]}}).cast(flat),
        *([earlier.select(flat.names).cast(flat).take(pa.array(kept))] if earlier is not None else [])])
    windows = [_windows(commits, keys, starts, ends, earlier, window)]
    if earlier is not None:
        windows.append(earlier.column("window").take(pa.array(kept)).combine_chunks())
    return out.append_column("window", pa.concat_arrays(windows)).append_column(
        "rates", _rates(commits, keys, touched, earlier, kept, since_us))


def _keys_of(commits: pa.Table) -> Keys:
    """Keys of offset_commits rows from their KEY columns (rows of a test, or of other tools)."""
    names = commits.select(KEY).group_by(KEY, use_threads=False).aggregate([])
    numbered = names.append_column("_key", pa.array(np.arange(names.num_rows)))
    found = commits.select(KEY).append_column("_row", pa.array(np.arange(commits.num_rows))).join(
        numbered, KEY, join_type="inner", use_threads=False)
    key = np.empty(commits.num_rows, np.int64)
    key[numbers(found.column("_row"))] = numbers(found.column("_key"))
    order = np.lexsort((numbers(commits.column("record_offset")), key))
    return Keys(key, order, names, np.full(names.num_rows, -1, np.int64))


def _windows(commits: pa.Table, keys: Keys, starts: np.ndarray, ends: np.ndarray, earlier: pa.Table | None,
             window: int) -> pa.Array:
    """Per key with rows (runs [starts, ends) of `keys.order`): its last `window` commits after its last
    tombstone, the earlier state's window before its rows when none of them is a tombstone."""
    order = keys.order
    runs = len(starts)
    deleted = np.flatnonzero(mask(pc.equal(commits.column("kind"), "delete"))[order])
    last_delete = np.full(runs, -1)
    np.maximum.at(last_delete, np.searchsorted(starts, deleted, side="right") - 1, deleted)
    # Each run's rows after its last tombstone are commits: its last `window` of them.
    first = np.maximum(np.maximum(starts, last_delete + 1), ends - window)
    new = ranges(first, ends)
    run = np.repeat(np.arange(runs), ends - first)
    rows = commits.take(pa.array(order[new]))
    committed_at = pc.coalesce(rows.column("commit_timestamp"), rows.column("record_timestamp"))
    points = [pa.table({"run": run, "record_offset": rows.column("record_offset"),
                        "point": pa.StructArray.from_arrays(
                            [rows.column("coordinator_partition").combine_chunks(),
                             rows.column("record_offset").combine_chunks(), committed_at.combine_chunks(),
                             rows.column("committed_offset").combine_chunks()], fields=list(WINDOW_POINT))})]
    at = keys.earlier[keys.key[order[starts]]] if runs else np.zeros(0, np.int64)
    before = np.flatnonzero((at >= 0) & (last_delete < 0))  # runs whose earlier window stays ahead of their rows
    if len(before):
        lists = earlier.column("window").take(pa.array(at[before])).combine_chunks()
        old = lists.flatten()
        points.insert(0, pa.table({"run": np.repeat(before, numbers(lists.value_lengths())),
                                   "record_offset": pc.struct_field(old, "record_offset"), "point": old}))
    found = pa.concat_tables(points)
    run_of, offset = numbers(found.column("run")), numbers(found.column("record_offset"))
    ordered = np.lexsort((offset, run_of))
    run_of = run_of[ordered]
    size = np.bincount(run_of, minlength=runs)
    stop = np.cumsum(size)
    keep = np.arange(len(run_of)) >= np.repeat(stop - np.minimum(size, window), size)  # each run's last `window`
    lengths = np.minimum(size, window)
    return pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32()),
                                    found.column("point").take(pa.array(ordered[keep])).combine_chunks())


def _rates(commits: pa.Table, keys: Keys, touched: np.ndarray, earlier: pa.Table | None, kept: np.ndarray,
           since_us: int) -> pa.Array:
    """Per output row of `commit_state` (the keys with rows, `touched`, then the `earlier` rows `kept`): its
    commits after `since_us`, those of its earlier state and its rows'."""
    out_of_key = np.full(len(keys.names), -1, np.int64)
    out_of_key[touched] = np.arange(len(touched))
    parts = []
    stamp = commits.column("record_timestamp")
    inside = np.flatnonzero(mask(pc.equal(commits.column("kind"), "commit")) &
                            mask(pc.greater(stamp, pa.scalar(since_us, TIMESTAMP))))
    if len(inside):
        rows = commits.take(pa.array(inside))
        parts.append(pa.table({"out": out_of_key[keys.key[inside]], "point": pa.StructArray.from_arrays(
            [rows.column(c).combine_chunks() for c in RATE_POINT.names], fields=list(RATE_POINT))}))
    if earlier is not None and earlier.num_rows:
        out_of_earlier = np.full(earlier.num_rows, -1, np.int64)
        matched = keys.earlier[touched]
        out_of_earlier[matched[matched >= 0]] = np.flatnonzero(matched >= 0)
        out_of_earlier[kept] = len(touched) + np.arange(len(kept))
        lists = earlier.column("rates").combine_chunks()
        owner = np.repeat(out_of_earlier, numbers(lists.value_lengths()))
        parts.append(pa.table({"out": owner, "point": lists.flatten()}))
    rows_out = len(touched) + len(kept)
    if not parts:
        return pa.ListArray.from_arrays(pa.array(np.zeros(rows_out + 1, np.int32)), pa.array([], RATE_POINT))
    found = pa.concat_tables(parts)
    out = numbers(found.column("out"))
    stamp = micros(pc.struct_field(found.column("point"), "record_timestamp"))
    keep = np.flatnonzero((out >= 0) & (stamp > since_us))
    keep = keep[np.argsort(out[keep], kind="stable")]
    size = np.bincount(out[keep], minlength=rows_out)
    return pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(size)]), pa.int32()),
                                    found.column("point").take(pa.array(keep)).combine_chunks())


def commit_windows(state: pa.Table) -> pa.Table:
    """Per offset whose newest record is a commit: its last commits after its last tombstone, in log order
    (COMMIT_WINDOW_SCHEMA; committed_at is the commit timestamp, as Burrow reads it, else the record's), from
    `commit_state`'s rows."""
    found = state.filter(pc.greater(pc.list_value_length(state.column("window")), 0))
    return found.select(COMMIT_WINDOW_SCHEMA.names).cast(COMMIT_WINDOW_SCHEMA)


def consume_rates(state: pa.Table, as_of_us: int, window_us: int) -> pa.Table:
    """Per offset, the offsets per second its commits in (as_of - window, as_of] moved it: from the first to the
    last commit there (ordered by time, then log order), null with fewer than two or no time between them; from
    `commit_state`'s rows (their commits after as_of - window at least)."""
    lists = state.column("rates").combine_chunks()
    points = lists.flatten()
    owner = np.repeat(np.arange(state.num_rows), numbers(lists.value_lengths()))
    stamp = micros(pc.struct_field(points, "record_timestamp"))
    inside = np.flatnonzero((stamp > as_of_us - window_us) & (stamp <= as_of_us))
    if not len(inside):
        return CONSUME_RATE_SCHEMA.empty_table()
    owner, stamp = owner[inside], stamp[inside]
    offset = numbers(pc.struct_field(points, "record_offset"))[inside]
    committed = numbers(pc.struct_field(points, "committed_offset"))[inside]
    order = np.lexsort((offset, stamp, owner))
    owner, stamp, committed = owner[order], stamp[order], committed[order]
    starts = run_starts(owner)
    lasts = np.append(starts[1:], len(owner)) - 1
    seconds = (stamp[lasts] - stamp[starts]) / 1e6
    delta = committed[lasts] - committed[starts]
    known = (lasts > starts) & (seconds > 0)
    rate = pa.array(np.where(known, delta / np.where(seconds > 0, seconds, 1), 0.0), pa.float64(), mask=~known)
    heads = state.take(pa.array(owner[starts]))
    return pa.table([heads.column("coordinator_partition"), heads.column("group_id"), heads.column("topic"),
                     heads.column("partition"), rate], schema=CONSUME_RATE_SCHEMA)
