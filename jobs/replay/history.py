"""offset_commits: every offset record the coordinator applied up to as_of, in the order it applied them, with
what each replaced; and what consumer_lag and group_status read of them (jobs.derive).

One coordinator partition's valid offset records, whole: a plain record and a tombstone apply where they are,
a transactional commit at its COMMIT marker (jobs.replay.transactions), and only when no record on its key newer
than it came before the marker (the broker keeps the committed offset with the greater record offset; a
tombstone in between removed the pending commit); of two commits of one key in one transaction, the later
replaced the earlier before either applied. Each row then gets its key's previous committed offset, the time
since it and how many of the key's records came after it (group_status reads only each key's last few).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.decode.arrow_reader import read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, OFFSET_KEY_PREFIXES, OFFSET_VALUE
from jobs.decode.columns import offset_commit_columns
from jobs.lake.tables import arrow_schema
from jobs.replay.offsets import offset_keys
from jobs.replay.records import MAX_MS, MIN_MS, TIMESTAMP, mask, micros, numbers
from jobs.replay.transactions import fates
from offsets_codec import decode_key

_VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp")
WINDOW_POINT = pa.struct([("coordinator_partition", pa.int32()), ("record_offset", pa.int64()),
                          ("committed_at", TIMESTAMP), ("committed_offset", pa.int64())])
# Per live offset, its last commits (group_status) and its consume rate (consumer_lag), for jobs.derive.
COMMIT_WINDOW_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()),
                                  ("topic", pa.string()), ("partition", pa.int32()), ("window", pa.list_(WINDOW_POINT))])
CONSUME_RATE_SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("group_id", pa.string()),
                                 ("topic", pa.string()), ("partition", pa.int32()), ("consume_rate", pa.float64())])


def offset_commits(offset_records: pa.Table, found: pa.Table) -> pa.Table:
    """The offset_commits rows of one coordinator partition's valid offset records up to as_of (checked rows,
    whole), given its markers `found` (jobs.replay.transactions.markers)."""
    effective, _, position = fates(offset_records, found)
    keys = pc.dictionary_encode(offset_keys(offset_records.column("key")).combine_chunks())
    rows = np.flatnonzero(effective)
    index = numbers(keys.indices)[rows]
    source = numbers(offset_records.column("record_offset"))[rows]
    position = position[rows]
    keep = _applies(index, position, source)
    rows, index, position, source = rows[keep], index[keep], position[keep], source[keep]
    taken = pa.array(rows)
    applied = offset_records.select(["coordinator_partition", "record_timestamp", "producer_id"]).take(taken)
    values = {name: column.take(taken) for name, column in _values(offset_records).items()}
    return _rows(applied, values, index, position, source, _names(keys.dictionary))


def _applies(key: np.ndarray, position: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per record, in application order per key (position, then the record's own offset): a commit followed by
    one at the same position (the same transaction's later commit on the key) was replaced before it applied; a
    commit applies only when every earlier record of its key is older than it. Plain records always apply."""
    result = np.ones(len(key), bool)
    moved = position != source  # transactional commits: only their keys' rows can be ruled out
    if not moved.any():
        return result
    has_moved = np.zeros(int(key.max()) + 1, bool)
    has_moved[key[moved]] = True
    ruled = np.flatnonzero(has_moved[key])
    k, p, s = key[ruled], position[ruled], source[ruled]
    order = np.lexsort((s, p, k))
    k, p, s = k[order], p[order], s[order]
    n = len(k)
    same_key = np.zeros(n, bool)  # the row follows another of its key
    same_key[1:] = k[1:] == k[:-1]
    superseded = np.zeros(n, bool)
    superseded[:-1] = same_key[1:] & (p[1:] == p[:-1])
    newest_before = np.empty(n, np.int64)
    newest_before[1:] = _running_max(s, same_key)[:-1]
    applies = ~superseded & (~same_key | (newest_before < s))
    ruled_applies = np.empty(n, bool)
    ruled_applies[order] = applies
    result[ruled] = ruled_applies
    return result


def _running_max(values: np.ndarray, continues: np.ndarray) -> np.ndarray:
    """The running maximum of `values`, restarting where `continues` is False."""
    starts = np.flatnonzero(~continues)
    ends = np.append(starts[1:], len(values))
    low, width = int(values.min()), int(values.max() - values.min()) + 1
    if len(starts) * width < 1 << 62:  # one pass: each run lifted above the ones before it
        run = np.repeat(np.arange(len(starts), dtype=np.int64), ends - starts) * width
        return np.maximum.accumulate(run + (values - low)) - run + low
    return np.concatenate([np.maximum.accumulate(values[a:b]) for a, b in zip(starts, ends)])


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
    read_values = read(values, OFFSET_VALUE, _VALUE_FIELDS)
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
          source: np.ndarray, names: pa.Table) -> pa.Table:
    """The offset_commits rows of applied records (`records`: their partition, timestamp and producer; `values`:
    their decoded values; `key`: their key's row of `names`): each with its key's previous one (in application
    order), the movement since, and the key's records after it."""
    schema = arrow_schema("offset_commits")
    n = len(key)
    order = np.lexsort((position, key)) if n else np.zeros(0, np.int64)
    follows = np.zeros(n, bool)  # in `order`: the row follows another of its key
    follows[1:] = key[order[1:]] == key[order[:-1]]
    before = np.full(n, -1)
    before[order[1:][follows[1:]]] = order[:-1][follows[1:]]
    starts = np.flatnonzero(~follows)
    ends = np.append(starts, n)[1:]
    later = np.empty(n, np.int64)
    later[order] = np.repeat(ends, ends - starts) - np.arange(n) - 1
    has_before = before >= 0
    offset_column = values["committed_offset"]
    has_offset = mask(pc.is_valid(offset_column))
    offset = numbers(offset_column)
    previous, has_previous = offset[before], has_offset[before] & has_before
    stamp = records.column("record_timestamp")
    has_stamp = mask(pc.is_valid(stamp))
    seconds = micros(stamp).astype(np.float64) / 1e6
    both = has_offset & has_previous  # a commit after a commit: a movement
    commit_ms = numbers(values["commit_timestamp_ms"])
    in_range = mask(pc.is_valid(values["commit_timestamp_ms"])) & (commit_ms >= MIN_MS) & (commit_ms <= MAX_MS)
    named = pa.array(key)
    columns = {
        "group_id": names.column("group_id").take(named), "topic": names.column("topic").take(named),
        "partition": names.column("partition").take(named),
        "kind": pc.if_else(pa.array(has_offset), "commit", "delete"),
        "committed_offset": offset_column,
        "previous_offset": pa.array(previous, pa.int64(), mask=~has_previous),
        "offset_delta": pa.array(offset - previous, pa.int64(), mask=~both),
        "commit_timestamp": pa.array(np.where(in_range, commit_ms, 0) * 1000, pa.int64(), mask=~in_range
                                     ).cast(TIMESTAMP),
        "record_timestamp": stamp,
        "seconds_since_previous": pa.array(seconds - seconds[before], pa.float64(),
                                           mask=~(has_previous & has_stamp & has_stamp[before])),
        "is_rewind": pa.array(both & (offset < previous)),
        "leader_epoch": values["leader_epoch"], "metadata": values["metadata"],
        "producer_id": records.column("producer_id"),
        "coordinator_partition": records.column("coordinator_partition"),
        "record_offset": pa.array(position, pa.int64()),
        "commit_date": pc.cast(stamp, pa.date32()),
        "source_record_offset": pa.array(source, pa.int64()),
        "later_records": pa.array(later),
    }
    return pa.table([columns[f.name] for f in schema], schema=schema)


def commit_windows(commits: pa.Table, window: int) -> pa.Table:
    """Per offset whose newest record is a commit: its last `window` commits after its last tombstone, in log
    order (COMMIT_WINDOW_SCHEMA; committed_at is the commit timestamp, as Burrow reads it, else the record's).
    `commits`: offset_commits rows."""
    recent = commits.filter(pc.less(commits.column("later_records"), window))
    if not recent.num_rows:
        return COMMIT_WINDOW_SCHEMA.empty_table()
    key = ["coordinator_partition", "group_id", "topic", "partition"]
    recent = recent.sort_by([*((k, "ascending") for k in key), ("record_offset", "ascending")])
    n = recent.num_rows
    first = np.zeros(n, bool)  # the row starts its offset's run
    first[0] = True
    for name in key:
        column = recent.column(name)
        first[1:] |= ~mask(pc.equal(column.slice(1), column.slice(0, n - 1)))
    run = np.cumsum(first) - 1
    deleted = mask(pc.equal(recent.column("kind"), "delete"))
    # A commit counts when no tombstone of its offset comes after it (an offset committed again after its
    # tombstone starts a new window): the runs' last tombstone, by position.
    last_delete = np.full(run[-1] + 1, -1)
    np.maximum.at(last_delete, run[deleted], np.flatnonzero(deleted))
    kept = ~deleted & (np.arange(n) > last_delete[run])
    rows = recent.filter(pa.array(kept))
    if not rows.num_rows:
        return COMMIT_WINDOW_SCHEMA.empty_table()
    kept_run = run[kept]
    starts = np.flatnonzero(np.concatenate([[True], kept_run[1:] != kept_run[:-1]]))
    ends = np.append(starts[1:], rows.num_rows)
    starts = np.maximum(starts, ends - window)
    take = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)])
    points = rows.take(pa.array(take))
    committed_at = pc.coalesce(points.column("commit_timestamp"), points.column("record_timestamp"))
    point = pa.StructArray.from_arrays(
        [points.column("coordinator_partition").combine_chunks(), points.column("record_offset").combine_chunks(),
         committed_at.combine_chunks(), points.column("committed_offset").combine_chunks()], fields=list(WINDOW_POINT))
    lengths = ends - starts
    heads = rows.take(pa.array(starts))
    windows = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32()), point)
    return pa.table([heads.column("coordinator_partition"), heads.column("group_id"), heads.column("topic"),
                     heads.column("partition"), windows], schema=COMMIT_WINDOW_SCHEMA)


def consume_rates(commits: pa.Table, as_of_us: int, window_us: int) -> pa.Table:
    """Per offset, the offsets per second its commits in (as_of - window, as_of] moved it: from the first to the
    last commit there (ordered by time, then log order), null with fewer than two or no time between them."""
    stamp = commits.column("record_timestamp")
    inside = pc.and_(pc.equal(commits.column("kind"), "commit"),
                     pc.and_(pc.greater(stamp, pa.scalar(as_of_us - window_us, TIMESTAMP)),
                             pc.less_equal(stamp, pa.scalar(as_of_us, TIMESTAMP))))
    rows = commits.filter(inside)
    if not rows.num_rows:
        return CONSUME_RATE_SCHEMA.empty_table()
    rows = rows.sort_by([("group_id", "ascending"), ("topic", "ascending"), ("partition", "ascending"),
                         ("record_timestamp", "ascending"), ("coordinator_partition", "ascending"),
                         ("record_offset", "ascending")])
    first = rows.group_by(["coordinator_partition", "group_id", "topic", "partition"], use_threads=False).aggregate(
        [("committed_offset", "first"), ("record_timestamp", "first"), ("committed_offset", "last"),
         ("record_timestamp", "last"), ("committed_offset", "count")])
    seconds = (micros(first.column("record_timestamp_last")) - micros(first.column("record_timestamp_first"))) / 1e6
    delta = numbers(first.column("committed_offset_last")) - numbers(first.column("committed_offset_first"))
    known = (numbers(first.column("committed_offset_count")) >= 2) & (seconds > 0)
    rate = pa.array(np.where(known, delta / np.where(seconds > 0, seconds, 1), 0.0), pa.float64(), mask=~known)
    return pa.table([first.column("coordinator_partition"), first.column("group_id"), first.column("topic"),
                     first.column("partition"), rate], schema=CONSUME_RATE_SCHEMA)
