"""Rules of the kernel on small Arrow tables, no runner and no JVM: the check, duplicates, the reduction, the
group fold's deletion events, implausible timestamps."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from offsets_log import DAY, MINUTE, T0, OffsetsLog

from jobs.decode.check import MALFORMED_CONTROL_KEY, NEGATIVE_OFFSET, NO_POSITION, check
from jobs.replay.chunk import newest_plausible, read_chunk
from jobs.replay.counts import moments, total
from jobs.replay.duplicates import CONFLICT, deduplicate, overlapping, spans
from jobs.replay.partition import ReplaySettings, replay_partition
from jobs.replay.records import records
from jobs.sources.tasks import RAW_FIELDS, RecordColumns
from jobs.replay.reduction import prefold, whole

STARTED = datetime.fromtimestamp((T0 + 30 * DAY) / 1000, tz=timezone.utc)


def checked(log: OffsetsLog) -> pa.Table:
    return check(records(log.table()))


def outputs(rows: pa.Table, as_of_ms: int, history: bool = True) -> dict[str, pa.Table]:
    settings = ReplaySettings(datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc), 7 * DAY, history)
    found: dict[str, list[pa.Table]] = {}
    for name, table in replay_partition(rows, settings):
        found.setdefault(name, []).append(table)
    return {name: pa.concat_tables(tables) for name, tables in found.items()}


# --- the check -------------------------------------------------------------------------------------------

def test_a_record_that_cannot_be_placed_is_an_error_and_a_sound_one_is_not():
    log = OffsetsLog()
    log.commit("g", "t", 0, 10, T0)
    log.commit("g", "t", 1, 11, T0)
    log.commit("g", "t", 2, 12, T0)
    table = log.table()
    offsets = pa.array([0, -5, None], pa.int64())
    table = table.set_column(table.column_names.index("offset"), "offset", offsets)
    errors = check(records(table)).column("error").to_pylist()
    assert errors == [None, NEGATIVE_OFFSET, NO_POSITION]


def test_markers_are_read_from_their_keys_and_a_malformed_control_key_is_an_error():
    log = OffsetsLog()
    log.marker(7, "COMMIT", T0)
    log.marker(7, "ABORT", T0)
    log.raw(b"\x80\x00\x00\x01", None, T0, producer_id=7, is_control=True)  # a negative version
    result = checked(log)
    assert result.column("transaction_marker").to_pylist() == ["COMMIT", "ABORT", None]
    assert result.column("error").to_pylist() == [None, None, MALFORMED_CONTROL_KEY]


# --- duplicates --------------------------------------------------------------------------------------------

def test_a_record_seen_twice_is_one_record_and_conflicting_copies_are_both_quarantined():
    log = OffsetsLog()
    for i in range(4):
        log.commit("g", "t", 0, 100 + i, T0 + i * MINUTE)
    rows = log.rows
    log.rows = rows + [rows[1], rows[1]]  # offset 1 twice more, as it was
    changed = list(rows[2])
    changed[1] = rows[3][1]  # offset 2 again, with another value
    log.rows.append(tuple(changed))
    kept, dropped, conflicts = deduplicate(whole(checked(log), None))
    assert dropped == 2 and conflicts == 2
    by_offset = {}
    for offset, error in zip(kept.column("record_offset").to_pylist(), kept.column("error").to_pylist()):
        by_offset.setdefault(offset, []).append(error)
    assert by_offset == {0: [None], 1: [None], 2: [CONFLICT, CONFLICT], 3: [None]}


def test_spans_tell_when_batches_may_hold_a_record_twice():
    log = OffsetsLog()
    for i in range(6):
        log.commit("g", "t", 0, i, T0, coordinator=i % 2)
    found = records(log.table())
    first, second = spans(found.slice(0, 3)), spans(found.slice(3))
    assert not overlapping(pa.concat_tables([first, second]))
    assert overlapping(pa.concat_tables([first, spans(found.slice(1, 3))]))  # offset 1 of partition 1 twice
    reversed_rows = found.take(pa.array([2, 0]))  # one partition's offsets falling: not rising
    assert overlapping(spans(reversed_rows))


# --- the reduction ----------------------------------------------------------------------------------------

def test_the_reduction_keeps_the_newest_commit_and_tombstone_of_a_key_and_counts_what_they_stand_for():
    log = OffsetsLog()
    for i in range(5):
        log.commit("g", "t", 0, i, T0 + i * MINUTE)
    log.delete_offset("g", "t", 0, T0 + 5 * MINUTE)
    log.commit("g", "t", 0, 9, T0 + 6 * MINUTE)
    log.commit("g", "t", 0, 10, T0 + 7 * MINUTE, producer_id=5)  # transactional: kept whole
    folded = pa.concat_tables(list(prefold([checked(log)], None)))
    rows = sorted(zip(folded.column("record_offset").to_pylist(), folded.column("records").to_pylist(),
                      folded.column("reduced").to_pylist()))
    assert rows == [(5, 1, True), (6, 6, True), (7, 1, False)]


def test_a_reduced_log_and_the_whole_log_replay_to_the_same_state():
    log = OffsetsLog()
    for i in range(40):
        log.commit(f"g{i % 3}", "t", i % 2, i, T0 + i * MINUTE, producer_id=-1 if i % 5 else 9)
        if i % 7 == 3:
            log.delete_offset(f"g{i % 3}", "t", i % 2, T0 + i * MINUTE)
        if i % 11 == 0:
            log.marker(9, "COMMIT", T0 + i * MINUTE)
    as_of = T0 + DAY
    whole_rows = whole(checked(log), None)
    batches = [checked(log).slice(0, 20), checked(log).slice(20)]
    reduced = pa.concat_tables(list(prefold(batches, None)))
    from_whole, from_reduced = outputs(whole_rows, as_of, history=False), outputs(reduced, as_of, history=False)
    for name in ("committed_offsets", "pending_transactions", "consumer_groups", "counts"):
        assert sorted_rows(from_whole[name]) == sorted_rows(from_reduced[name]), name
    assert from_whole["pending_transactions"].num_rows and from_whole["committed_offsets"].num_rows


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


# --- group events -----------------------------------------------------------------------------------------

def test_the_tombstone_of_a_group_that_held_only_offsets_is_a_deletion_event():
    log = OffsetsLog()
    log.commit("simple", "t", 0, 5, T0)  # a simple group: offsets only
    log.delete_offset("simple", "t", 0, T0 + MINUTE)
    log.delete_group("simple", T0 + MINUTE)
    log.delete_group("never-had-offsets", T0 + 2 * MINUTE)  # nothing to delete: no event
    log.commit("simple", "t", 0, 6, T0 + 3 * MINUTE)  # made again, deleted again: a second event
    log.delete_group("simple", T0 + 4 * MINUTE)
    events = outputs(whole(checked(log), None), T0 + DAY)["group_events"].to_pylist()
    assert [(e["group_id"], e["event"], e["group_type"], e["previous_generation"], e["record_offset"])
            for e in events] == [("simple", "deleted", "classic", 0, 2), ("simple", "deleted", "classic", 0, 5)]


# --- implausible timestamps -------------------------------------------------------------------------------

def test_a_record_from_the_future_is_counted_and_left_out_of_the_default_as_of():
    log = OffsetsLog()
    log.commit("g", "t", 0, 1, T0)
    log.commit("g", "t", 0, 2, T0 + MINUTE)
    year_2100 = int(datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    log.commit("g", "t", 0, 3, year_2100)
    log.commit("g", "t", 0, 4, int(datetime(1990, 1, 1, tzinfo=timezone.utc).timestamp() * 1000))
    found = moments(records(log.table()), STARTED)
    row = found.to_pylist()[0]
    assert row["newest"] == datetime.fromtimestamp((T0 + MINUTE) / 1000, tz=timezone.utc)
    assert (row["future"], row["past"]) == (1, 1)
    # The chunk keeps the future commit apart: it is never folded into its key's newest commit.
    chunk = {}
    for name, table in read_chunk([log.table()], STARTED, None, fold=True):
        chunk.setdefault(name, []).append(table)
    log_rows = pa.concat_tables(chunk["log"])
    late = log_rows.filter(log_rows.column("after_as_of"))
    assert late.column("record_offset").to_pylist() == [2]
    # The newest record up to as_of is the one of 1990 (offset 3): long expired.
    state = outputs(log_rows, T0 + MINUTE)
    assert state["committed_offsets"].num_rows == 0
    assert state["expired_offsets"].column("record_offset").to_pylist() == [3]


def test_the_future_is_measured_from_the_run_start():
    log = OffsetsLog()
    log.commit("g", "t", 0, 1, T0)
    early = STARTED - timedelta(days=60)  # T0 is a month after it: beyond the day of slack
    assert moments(records(log.table()), early).column("future").to_pylist() == [1]
    assert pc.sum(moments(records(log.table()), STARTED).column("future")).as_py() == 0


BEYOND = [2**62, -(2**62), 2**63 - 1]  # epoch ms of a producer's broken clock or a corrupt batch


@pytest.mark.parametrize("unit", ["epoch ms", "ms", "s", "us"])
def test_a_timestamp_beyond_the_years_a_timestamp_holds_is_kept_at_their_edge(unit):
    """Never a crash: the record stays in the future (or the past) of every as_of, and every reader can read its
    timestamp; a null timestamp stays null."""
    log = OffsetsLog()
    for partition in range(5):  # a key each: none folds another away
        log.commit("g", "t", partition, 1, T0)
    raw = log.table()
    per_ms = {"epoch ms": 1, "ms": 1, "s": 1 / 1000, "us": 1000}[unit]
    stamps = pa.array([int(T0 * per_ms), *BEYOND, None], pa.int64())
    raw = raw.set_column(raw.column_names.index("timestamp"), "timestamp",
                         stamps if unit == "epoch ms" else stamps.cast(pa.timestamp(unit, tz="UTC")))
    found = records(raw)
    years = [None if t is None else t.year for t in found.column("record_timestamp").to_pylist()]
    assert years == [2026, 9999, 1, 9999, None]
    assert moments(found, STARTED).select(["future", "past"]).to_pylist() == [{"future": 2, "past": 1}]
    assert newest_plausible(moments(found, STARTED)) == datetime.fromtimestamp(T0 / 1000, tz=timezone.utc)
    chunk: dict[str, list[pa.Table]] = {}
    for name, table in read_chunk([raw], STARTED, None, fold=True):
        chunk.setdefault(name, []).append(table)
    log_rows = pa.concat_tables(chunk["log"])
    assert sorted(log_rows.filter(log_rows.column("after_as_of")).column("record_offset").to_pylist()) == [1, 3]
    replayed = outputs(log_rows, T0 + DAY)
    assert total(replayed["counts"])["records_after_as_of"] == 2
    assert sorted(replayed["committed_offsets"].column("partition").to_pylist()) == [0, 2, 4]


def test_a_source_task_keeps_a_timestamp_beyond_the_years_at_their_edge():
    """Segments and a live cluster give epoch milliseconds up to 2**63 - 1: a task's batch holds them."""
    columns = RecordColumns(RAW_FIELDS, "__consumer_offsets", 0)
    for offset, at in enumerate([T0, *BEYOND]):
        columns.add(b"k", b"v", offset, at, 0)
    years = [t.year for t in columns.batch().column("timestamp").to_pylist()]
    assert years == [2026, 9999, 1, 9999]


@pytest.mark.parametrize("history", [True, False])
def test_quarantined_records_are_all_kept(history):
    log = OffsetsLog()
    log.commit("g", "t", 0, 1, T0)
    log.raw(b"\x00\x01garbage", b"\x00\x03junk", T0)
    log.raw(b"\x00\x01garbage", b"\x00\x03junk", T0 + MINUTE)
    rows = whole(checked(log), None) if history else pa.concat_tables(list(prefold([checked(log)], None)))
    quarantine = outputs(rows, T0 + DAY, history)["quarantine"]
    assert quarantine.column("record_offset").to_pylist() == [1, 2]
