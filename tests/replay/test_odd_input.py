"""Whole rebuilds of dumps no broker writes but users have: records exported twice, conflicting copies, negative
offsets, a timestamp in 2100. Each is replayed, counted and said, never silently merged or swallowed."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from offsets_log import DAY, MINUTE, T0, OffsetsLog
from runs import rebuild_tables

from jobs.decode.check import NEGATIVE_OFFSET
from jobs.replay.duplicates import CONFLICT


def busy_log() -> OffsetsLog:
    """Commits of two groups over two coordinator partitions, one of them in transactions."""
    log = OffsetsLog()
    for i in range(60):
        log.commit(f"g{i % 2}", "t", i % 3, 100 + i, T0 + i * MINUTE, coordinator=i % 2,
                   producer_id=7 if i % 10 == 9 else -1)
        if i % 10 == 9:
            log.marker(7, "COMMIT", T0 + i * MINUTE, coordinator=i % 2)
    return log


def state(tables: dict) -> list:
    return sorted((r["group_id"], r["topic"], r["partition"], r["committed_offset"], r["record_offset"])
                  for r in tables["committed_offsets"])


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict:
    return {history: rebuild_tables(busy_log(), tmp_path_factory.mktemp("clean"), history=history)
            for history in (True, False)}


@pytest.mark.parametrize("history", [True, False])
def test_rows_exported_twice_are_one_record_each_and_counted(tmp_path, clean, history):
    log = busy_log()
    dump = tmp_path / "dump"
    log.write_parquet(dump)
    table = log.table()
    pq.write_table(table.slice(10, 25), dump / "part-1.parquet")  # an overlapping second export
    tables = rebuild_tables(log, tmp_path, history=history)
    summary = tables["summary"]
    assert summary["records_read"] == table.num_rows + 25  # every input row
    assert summary["duplicate_records"] == 25 and summary["conflicting_records"] == 0
    assert state(tables) == state(clean[history])
    if history:
        assert tables["offset_commits"] == clean[history]["offset_commits"]


def test_two_different_records_at_one_offset_are_both_quarantined(tmp_path):
    log = busy_log()
    dump = tmp_path / "dump"
    log.write_parquet(dump)
    table = log.table()
    other = table.slice(20, 1).set_column(table.column_names.index("value"), "value",
                                          table.slice(21, 1).column("value"))  # offset 20's key, 21's value
    pq.write_table(other, dump / "part-1.parquet")
    tables = rebuild_tables(log, tmp_path)
    assert tables["summary"]["conflicting_records"] == 2 and tables["summary"]["records_read"] == table.num_rows + 1
    conflicts = [(r["coordinator_partition"], r["record_offset"]) for r in tables["quarantine"] if r["error"] == CONFLICT]
    assert conflicts == [(table.column("partition")[20].as_py(), table.column("offset")[20].as_py())] * 2


def test_a_negative_offset_is_quarantined(tmp_path):
    log = busy_log()
    dump = tmp_path / "dump"
    log.write_parquet(dump)
    table = log.table()
    bad = table.slice(5, 1).set_column(table.column_names.index("offset"), "offset", pa.array([-3], pa.int64()))
    pq.write_table(bad, dump / "part-1.parquet")
    tables = rebuild_tables(log, tmp_path)
    assert [(r["record_offset"], r["error"]) for r in tables["quarantine"]] == [(-3, NEGATIVE_OFFSET)]
    assert tables["summary"]["records_quarantined"] == 1


def test_a_timestamp_far_in_the_future_is_reported_and_kept_out_of_the_default_as_of(tmp_path, caplog):
    log = busy_log()
    future = int(datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    log.commit("g0", "t", 0, 999, future)
    tables = rebuild_tables(log, tmp_path)
    summary = tables["summary"]
    assert summary["as_of"] == datetime.fromtimestamp((T0 + 59 * MINUTE) / 1000, tz=timezone.utc).isoformat(
        ).replace("+00:00", "Z")
    assert summary["implausible_timestamps"]["future"] == 1
    assert summary["implausible_timestamps"]["latest"].startswith("2100-01-01")
    assert summary["records_after_as_of"] == 1
    assert 999 not in [r["committed_offset"] for r in tables["committed_offsets"]]
    assert any("timestamp in the future" in r.getMessage() for r in caplog.records)
    # Asked for, it is replayed: as_of is the user's.
    asked = rebuild_tables(log, tmp_path / "asked", as_of_ms=future + DAY)
    assert 999 in [r["committed_offset"] for r in asked["committed_offsets"]]


@pytest.mark.parametrize("archive", [False, True], ids=["dump", "archived"])
def test_records_of_other_topics_are_counted_and_never_replayed(tmp_path, clean, archive):
    """A dump of several topics: __transaction_state records at the offsets topic's partitions and offsets
    (other bytes under the same numbers) are left out, counted per topic, and never archived."""
    log = busy_log()
    dump = tmp_path / "dump"
    log.write_parquet(dump)
    table = log.table()
    foreign = table.slice(5, 30).set_column(table.column_names.index("topic"), "topic",
                                            pa.array(["__transaction_state"] * 30))
    foreign = foreign.set_column(foreign.column_names.index("value"), "value", pa.array([b"\x00\x01"] * 30))
    other = table.slice(0, 2).set_column(table.column_names.index("topic"), "topic", pa.array(["orders"] * 2))
    pq.write_table(pa.concat_tables([foreign, other]), dump / "part-1.parquet")
    tables = rebuild_tables(log, tmp_path, archive=archive)
    summary = tables["summary"]
    assert summary["foreign_records"] == {"__transaction_state": 30, "orders": 2}
    assert summary["records_read"] == table.num_rows and summary["conflicting_records"] == 0
    assert summary["records_quarantined"] == clean[True]["summary"]["records_quarantined"]
    assert state(tables) == state(clean[True]) and tables["offset_commits"] == clean[True]["offset_commits"]
    if archive:
        assert summary["records_new"] == table.num_rows
