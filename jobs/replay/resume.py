"""The replay state (`rebuild --archive`): a run's reduced log, kept so that the next run replays it with the new
records instead of the whole archive, at the cost of what is new.

The fold is associative (jobs.replay.reduction): the replay of fold(archive) + new records is the replay of
archive + new records, for every state table. So each partition's replay, once it has dropped copies, folds its
rows again and leaves them as `_replay_state` rows (`state_rows`): the fold of every archived record, less what
the archive does not hold either (copies that differ, records without a place). Share-state records are never
folded (a ShareUpdate is a delta): they are kept whole, tagged with their topic. The next run reads them back
(`from_state`) beside the new records.

A folded row stands for records on one side of its run's cutoff, and the records after it are kept whole
(`keep_late`): so the state serves any later as_of, whose cutoff is recomputed on the whole rows, but not an
as_of before its newest folded record (`newest_folded`: the run then replays the archive).

The group replay (jobs.replay.groups) decodes every group's records, and most groups have none new in a day: so the
run also leaves its group rows, each group's with a fingerprint of the records they were replayed from
(`_group_fold`), and the next run replays only the groups whose records differ (`reusable`). A group's replay
reads nothing but its own records, so reused rows are those its replay would give again. Of the records of the
groups it replays, the state keeps only those a replay still reads (jobs.replay.groups.PartitionReplay.superseded:
a rebalance rewrites a group's keys, and the state would otherwise grow by every one); each record dropped is
counted by one it keeps (`counted_elsewhere`, `without_superseded`), and the fingerprints are of the records kept.

With the history, the rows the previous run wrote stay as they are, and a run appends those of the records it
did not replay (`unreplayed`: after the offset through which it replayed their coordinator partition, and the
transactional commits kept whole, whose row waits for their marker). Each such row needs a little of what came
before it: its key's last row (jobs.replay.history.offset_commits), each key's last few rows and those in the rate
window (group_status and the consume rates), all of it in `_history_state` (`history_state`, with each history
table's rows so far, for the summary); and each group's last event (the group replay's `last_event` rows:
jobs.replay.groups.PartitionReplay).
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import TIMESTAMP, mask, numbers, run_starts
from jobs.base.tables import FOLD_STATE, HISTORY_STATE, REPLAY_STATE, conform
from jobs.replay.chunk import LOG_SCHEMA
from jobs.replay.counts import moments
from jobs.replay.duplicates import CONFLICT
from jobs.replay.groups import GROUP_ROWS_SCHEMA, of_kind, replay_groups
from jobs.replay.history import STATE_SCHEMA
from jobs.replay.records import RECORD_SCHEMA
from jobs.replay.reduction import counted_by, in_partition, positions
from jobs.replay.transactions import whole_commits
from offsets_codec.registry import OFFSETS_TOPIC, SHARE_STATE_TOPIC


def state_rows(rows: pa.Table, topic: str = OFFSETS_TOPIC) -> pa.Table:
    """One partition's rows, copies dropped (and, of the offsets topic, folded), as `_replay_state` rows: those
    the archive holds, so not the conflicting copies nor the records without a place."""
    n = rows.num_rows
    offset = rows.column("record_offset")
    kept = mask(pc.is_valid(rows.column("coordinator_partition"))) & mask(pc.is_valid(offset)) & \
        (numbers(offset, -1) >= 0) & ~mask(pc.fill_null(pc.equal(rows.column("error"), CONFLICT), False))
    given = {name: rows.column(name) for name in rows.column_names}
    if topic != OFFSETS_TOPIC:  # a whole record of its own topic: it stands for itself
        given = {name: given[name] for name in RECORD_SCHEMA.names}
        given.update(records=pa.array(np.ones(n, np.int64)), newest_timestamp=rows.column("record_timestamp"),
                     after_as_of=pa.array(np.zeros(n, bool)), reduced=pa.array(np.zeros(n, bool)))
    given["topic"] = pa.array([topic] * n, pa.string())
    return conform(given, REPLAY_STATE, n).filter(pa.array(kept))


def from_state(state: pa.Table, cutoff_us: int) -> dict[str, pa.Table]:
    """`_replay_state` rows as the replay's inputs: `log` (jobs.replay.chunk.LOG_SCHEMA), each whole row on its
    side of this run's cutoff, and `share_log` (RECORD_SCHEMA)."""
    share = mask(pc.equal(state.column("topic"), SHARE_STATE_TOPIC))
    log = state.filter(pa.array(~share))
    late = pc.greater(log.column("record_timestamp"), pa.scalar(cutoff_us, TIMESTAMP))
    after = pc.if_else(log.column("reduced"), False, pc.fill_null(late, False))
    log = log.set_column(log.column_names.index("after_as_of"), "after_as_of", after)
    return {"log": log.select(LOG_SCHEMA.names).cast(LOG_SCHEMA),
            "share_log": state.filter(pa.array(share)).select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)}


def unreplayed(rows: pa.Table, through: dict[int, int] | None) -> np.ndarray:
    """Per record of `rows` (the state's and the new ones): a run writes its rows of the history. Every one whole
    when it replays them all (`through` None), else those after the offset through which the previous run
    replayed their coordinator partition (`through`, jobs.sources.replay_state.ReplayState), and the transactional
    commits kept whole, which wait for their marker."""
    whole = ~mask(rows.column("reduced"))
    if through is None:
        return whole
    partition = numbers(rows.column("coordinator_partition"), -1)
    ends = np.full(max([*through, int(partition.max(initial=0))]) + 2, -1, np.int64)  # [-1]: no partition's
    ends[list(through)] = list(through.values())
    after = numbers(rows.column("record_offset"), -1) > ends[partition]
    return (whole & after) | whole_commits(rows)


def newest_folded(state: pa.Table) -> datetime | None:
    """The newest record a folded row of `state` (newest_timestamp, reduced) stands for, or a group record kept for
    the older ones of its key (`records` > 1, `without_superseded`): no as_of before it can be replayed from the
    state."""
    folded = state.filter(pc.or_(pc.fill_null(state.column("reduced"), False),
                                 pc.greater(pc.fill_null(state.column("records"), 1), 1)))
    return pc.max(folded.column("newest_timestamp")).as_py() if folded.num_rows else None


def state_moments(state: pa.Table, started: datetime) -> pa.Table:
    """The moments (jobs.replay.counts.MOMENT_SCHEMA) of `state` (newest_timestamp), as the records it stands for
    would give them to the default as_of."""
    return moments(pa.table({"record_timestamp": state.column("newest_timestamp")}), started)


FINGERPRINT = ["folded_records", "folded_hash"]


def fingerprints(group_records: pa.Table) -> pa.Table:
    """Per group id of a coordinator partition's group records (group_id, record_offset): how many, and the sum of
    a hash of their offsets (modulo 2**64). A record is its offset in the partition: the same records give the
    same fingerprint, other records almost surely another."""
    schema = pa.schema([("group_id", pa.string()), ("folded_records", pa.int64()), ("folded_hash", pa.int64())])
    if not group_records.num_rows:
        return schema.empty_table()
    encoded = pc.dictionary_encode(group_records.column("group_id")).combine_chunks()
    code = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(code, kind="stable")
    code, hashed = code[order], _mix(numbers(group_records.column("record_offset")).astype(np.uint64)[order])
    starts = run_starts(code)
    return pa.table([encoded.dictionary.take(pa.array(code[starts])),
                     pa.array(np.diff(np.append(starts, len(code)))),
                     pa.array(np.add.reduceat(hashed, starts).view(np.int64))], schema=schema)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: each uint64 to a well-spread one (arrays wrap on overflow)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def reusable(earlier: pa.Table, now: pa.Table) -> pa.Table:
    """The `earlier` group rows (FOLD_STATE) of the groups whose fingerprint is `now`'s (`fingerprints`)."""
    keys = ["group_id", *FINGERPRINT]
    rows = earlier.select(keys).append_column("row", pa.array(np.arange(earlier.num_rows)))
    same = rows.join(now.select(keys), keys=keys, join_type="left semi", use_threads=False)
    return earlier.take(same.column("row"))


COUNTED = ("offset_commits", "group_events")  # the history tables a resumed run appends to: their rows so far


def keyed_state(state: pa.Table | None) -> pa.Table | None:
    """The rows of a HISTORY_STATE (or None) that hold a key's state (jobs.replay.history.STATE_SCHEMA)."""
    if state is None:
        return None
    return state.filter(pc.equal(state.column("kind"), "key")).select(STATE_SCHEMA.names).cast(STATE_SCHEMA)


def history_state(keyed: pa.Table, commits: pa.Table, events: pa.Table, earlier: pa.Table | None,
                  status_window: int, rate_window_ms: int) -> pa.Table:
    """HISTORY_STATE rows: each key's state (`keyed`, jobs.replay.history.commit_state: what the next run goes on
    from, kept for these windows), and per coordinator partition its rows of each COUNTED table so far: the
    `earlier` state's count (of the run this one continues) plus this run's `commits` and `events`."""
    counts = []
    for kind, rows in zip(COUNTED, (commits, events)):
        total: dict[int, int] = {}
        if earlier is not None:
            before = earlier.filter(pc.equal(earlier.column("kind"), kind))
            for p, n in zip(before.column("coordinator_partition").to_pylist(), before.column("rows").to_pylist()):
                total[p] = total.get(p, 0) + n
        found, added = np.unique(numbers(rows.column("coordinator_partition")), return_counts=True)
        for p, n in zip(found.tolist(), added.tolist()):
            total[p] = total.get(p, 0) + n
        counts.append(pa.table({"coordinator_partition": pa.array(list(total), pa.int32()),
                                "kind": pa.array([kind] * len(total), pa.string()),
                                "rows": pa.array(list(total.values()), pa.int64())}))
    keyed = keyed.append_column("kind", pa.array(["key"] * keyed.num_rows, pa.string()))
    rows = pa.concat_tables([keyed, *counts], promote_options="default")
    n = rows.num_rows
    columns = {**{name: rows.column(name) for name in rows.column_names},
               "status_window": pa.array(np.full(n, status_window), pa.int32()),
               "rate_window_ms": pa.array(np.full(n, rate_window_ms), pa.int64())}
    return conform(columns, HISTORY_STATE, n)


def history_counts(state: pa.Table) -> dict[str, int]:
    """The rows of each COUNTED table, from a run's HISTORY_STATE rows (kind, rows)."""
    return {kind: int(pc.sum(state.filter(pc.equal(state.column("kind"), kind)).column("rows")).as_py() or 0)
            for kind in COUNTED}


def replay_changed_groups(group_records: pa.Table, earlier: pa.Table | None, events: bool,
                          placed: pa.Table | None, replayed_through: dict[int, int] | None
                          ) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(the group replay's rows, FOLD_STATE rows for the next run, the records it need not keep with what counts
    them: `counted_elsewhere`) of coordinator partitions' group records, for a run that keeps its log: the groups
    whose records are those of the `earlier` run's FOLD_STATE rows (or None) keep their rows; the others are
    replayed again (jobs.replay.groups.replay_groups, with `events`, `placed` and `replayed_through`, from each
    group's last event the earlier run left), which names the records superseded (the state keeps the others:
    `without_superseded`, and each group's fingerprint is theirs, as the next run will find them)."""
    prints = fingerprints(group_records)
    reused = reusable(earlier, prints) if earlier is not None else GROUP_ROWS_SCHEMA.empty_table()
    again = pc.invert(pc.is_in(group_records.column("group_id"), value_set=pc.unique(reused.column("group_id"))))
    last_events = of_kind(earlier, "last_event") if earlier is not None and events else None
    superseded: list[tuple[int, int]] = []
    rows = pa.concat_tables([replay_groups(group_records.filter(again), events, placed, replayed_through, last_events,
                                           superseded),
                             reused.select(GROUP_ROWS_SCHEMA.names).cast(GROUP_ROWS_SCHEMA)])
    kept = rows.filter(pc.not_equal(rows.column("kind"), "event"))  # events are the history's, never state
    counted = counted_elsewhere(group_records, superseded)
    if counted.num_rows:
        kept_records = np.ones(group_records.num_rows, bool)
        kept_records[positions(group_records, numbers(counted.column("coordinator_partition")),
                               numbers(counted.column("record_offset")))] = False
        prints = fingerprints(group_records.filter(pa.array(kept_records)))
    return rows, group_state_rows(kept, prints), counted


def counted_elsewhere(group_records: pa.Table, superseded: list[tuple[int, int]]) -> pa.Table:
    """Of the group records at `superseded` (coordinator partition, offset), those another record the state keeps
    can count (COUNTED_BY rows: partition, offset, the counter's offset): its key's newest record kept, else (a
    member that left) the newest kept record of its type in its partition, so the counts by type stay. A record
    with neither stays."""
    if not superseded:
        return COUNTED_BY.empty_table()
    gone = np.zeros(group_records.num_rows, bool)
    gone[positions(group_records, *(np.array(column, np.int64) for column in zip(*superseded)))] = True
    partition = numbers(group_records.column("coordinator_partition"), -1)
    offset = numbers(group_records.column("record_offset"), -1)
    keys = pc.dictionary_encode(group_records.column("key")).combine_chunks()
    counter = np.full(group_records.num_rows, -1)
    kept = np.flatnonzero(~gone)
    for of in (numbers(keys.indices, -1), numbers(group_records.column("record_type"), -1)) if len(kept) else ():
        place = in_partition(group_records, of)  # a key, or a type, within its partition
        held = kept[np.lexsort((offset[kept], place[kept]))]
        newest = np.append(place[held][1:] != place[held][:-1], True)  # the last row of each: its newest
        places, rows = place[held][newest], held[newest]
        at = np.minimum(np.searchsorted(places, place), len(places) - 1)
        found = gone & (counter < 0) & (places[at] == place)
        counter[found] = offset[rows[at[found]]]
    dropped = np.flatnonzero(counter >= 0)
    return pa.table([pa.array(partition[dropped], pa.int32()), pa.array(offset[dropped]),
                     pa.array(counter[dropped])], schema=COUNTED_BY)


COUNTED_BY = pa.schema([("coordinator_partition", pa.int32()), ("record_offset", pa.int64()),
                        ("counted_by", pa.int64())])


def without_superseded(rows: pa.Table, counted: pa.Table) -> pa.Table:
    """`rows` (a partition's, folded) less the group records `counted` by others (`counted_elsewhere`): the
    counter's `records` and `newest_timestamp` stand for them too, so the counts stay and no as_of before them is
    replayed from the state (`newest_folded`)."""
    if not counted.num_rows:
        return rows
    partition = numbers(counted.column("coordinator_partition"))
    at = positions(rows, np.concatenate([partition, partition]),
                   np.concatenate([numbers(counted.column("record_offset")), numbers(counted.column("counted_by"))]))
    return counted_by(rows, at[:counted.num_rows], at[counted.num_rows:])


def group_state_rows(rows: pa.Table, prints: pa.Table) -> pa.Table:
    """The group replay's rows as FOLD_STATE rows: with their group's fingerprint (`fingerprints`)."""
    at = pc.index_in(rows.column("group_id"), value_set=prints.column("group_id"))
    columns = {**{name: rows.column(name) for name in rows.column_names},
               **{name: prints.column(name).take(at) for name in FINGERPRINT}}
    return conform(columns, FOLD_STATE)
