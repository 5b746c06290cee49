"""rebuild --archive --no-history: a run starts from the reduced log the previous one left (_replay_state), reads
only the new records, and gives the state tables of a plain --no-history rebuild of every record.

The log crosses the boundary between the runs in every way the replay cares about: transactions whose markers come
in the second run (COMMIT and ABORT), one still open, a group deleted, offsets that expire and one refreshed, a
share partition updated, a record that fails the check, and records after the first run's as_of.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from offsets_log import DAY, HOUR, MINUTE, T0, OffsetsLog, member, random_log, compacted, write_dump
from runs import read_tables

import jobs.pipeline
from jobs.base.tables import ARCHIVE, FOLD_STATE, REPLAY_STATE, arrow_schema
from jobs.config import RebuildConfig
from jobs.lake.runs import snapshot
from jobs.pipeline import run
from jobs.replay.chunk import LOG_SCHEMA

FIRST_AS_OF = str(T0 + DAY)
AS_OF = str(T0 + 2 * DAY)
STATE_TABLES = ("committed_offsets", "expired_offsets", "consumer_groups", "group_members", "consumer_lag",
                "pending_transactions", "quarantine", "share_partition_state")
ORDERS = "AQIDBAUGBwgJCgsMDQ4PEA"  # a topic id


def the_log() -> tuple[OffsetsLog, int]:
    """A log over two coordinator partitions, and how many of its rows the first run reads."""
    log = OffsetsLog()
    log.group("g", T0, members=[member("m1", ["orders"], {"orders": [0, 1]})], coordinator=0)
    for i in range(1, 4):
        log.commit("g", "orders", 0, 10 * i, T0 + i * MINUTE, coordinator=0)
    log.commit("g", "orders", 1, 7, T0 + MINUTE, coordinator=0)
    log.group("gone", T0, coordinator=1)
    log.commit("gone", "orders", 0, 4, T0 + MINUTE, coordinator=1)
    log.commit("stale", "payments", 0, 5, T0 + MINUTE, coordinator=1)  # expires (a simple group)
    log.commit("stale", "payments", 1, 6, T0 + MINUTE, coordinator=1)  # refreshed in the second run
    log.commit("tx", "orders", 0, 11, T0 + 2 * MINUTE, coordinator=1, producer_id=7)  # committed later
    log.commit("ab", "orders", 0, 12, T0 + 2 * MINUTE, coordinator=1, producer_id=8)  # aborted later
    log.commit("ab", "orders", 0, 3, T0 + MINUTE, coordinator=1)
    log.raw(b"\x00\x01broken", b"\x00", T0 + MINUTE, 1)  # fails the check: quarantined
    log.share_snapshot("sg", ORDERS, 0, T0 + MINUTE, start=10, batches=[(10, 12, 0, 1)], coordinator=0)
    log.commit("g", "orders", 1, 8, T0 + DAY + HOUR, coordinator=0)  # after the first run's as_of
    first = len(log.rows)
    for i in range(4, 6):
        log.commit("g", "orders", 0, 10 * i, T0 + DAY + i * MINUTE, coordinator=0)
    log.group("g", T0 + DAY, members=[member("m2", ["orders"], {"orders": [0, 1]})], generation=2,
              coordinator=0)
    log.delete_offset("gone", "orders", 0, T0 + DAY, coordinator=1)
    log.delete_group("gone", T0 + DAY, coordinator=1)
    log.commit("stale", "payments", 1, 9, T0 + DAY + MINUTE, coordinator=1)
    log.marker(7, "COMMIT", T0 + DAY, coordinator=1)
    log.marker(8, "ABORT", T0 + DAY, coordinator=1)
    log.commit("open", "orders", 1, 2, T0 + DAY, coordinator=0, producer_id=9)  # still open at as_of
    log.share_update("sg", ORDERS, 0, T0 + DAY, start=11, coordinator=0)
    return log, first


def ends(path: Path) -> Path:
    path.write_text("orders:0:100\norders:1:100\npayments:0:10\npayments:1:10\n")
    return path


def rebuild(source: Path, out: Path, as_of: str = AS_OF, archive: bool = True, spark: Any = None,
            **options: Any) -> dict[str, Any]:
    options.setdefault("retention_minutes", 36 * 60)
    runner = {"engine": "spark"} if spark is not None else {"engine": "local", "workers": 0}
    cfg = RebuildConfig.build(source=f"parquet:{source}", output=str(out), as_of=as_of, archive=archive,
                              no_history=True, **runner, **options)
    return run(cfg, spark=spark)


def state_tables(out: Path) -> dict[str, Any]:
    found = read_tables(out)
    return {t: found.get(t) for t in STATE_TABLES}


def assert_same(out: Path, expected: dict[str, Any]) -> None:
    found = state_tables(out)
    for table in STATE_TABLES:
        assert found[table] == expected[table], table


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("resume")
    log, first = the_log()
    union = write_dump(log.rows, base / "union")
    plain = base / "plain"
    rebuild(union, plain, archive=False, end_offsets=str(ends(base / "ends.txt")))
    return {"log": log, "first": first, "base": base, "ends": base / "ends.txt", "plain": state_tables(plain),
            "one": write_dump(log.rows[:first], base / "one"), "rest": write_dump(log.rows[first:], base / "rest"),
            "union": union}


def test_the_state_table_holds_the_log_and_its_topic():
    assert arrow_schema(REPLAY_STATE).names == [*LOG_SCHEMA.names, "topic"]
    assert arrow_schema(REPLAY_STATE).types[:len(LOG_SCHEMA)] == LOG_SCHEMA.types


def test_the_fixture_covers_every_state_table(inputs):
    plain = inputs["plain"]
    for table in STATE_TABLES:
        assert plain[table], table
    expired = {(r["group_id"], r["partition"]) for r in plain["expired_offsets"]}
    assert ("stale", 0) in expired and ("stale", 1) not in expired  # refreshed in the second part
    assert "gone" not in {r["group_id"] for r in plain["consumer_groups"]}
    assert [r["group_id"] for r in plain["pending_transactions"]] == ["open"]


def test_a_run_resumes_from_the_previous_ones_state_reading_only_the_new_records(inputs, tmp_path):
    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)
    assert one["resumed_from_run"] is None
    two = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    new = len(inputs["log"].rows) - inputs["first"]
    assert two["resumed_from_run"] == one["run_id"]
    assert two["records_read"] == two["records_new"] == new
    assert two["records_archived_after"] == len(inputs["log"].rows)
    assert two["records_replayed"] == len(inputs["log"].rows)
    assert_same(out, inputs["plain"])
    assert (out / REPLAY_STATE / f"run-{two['run_id']}").is_dir()


def test_a_run_after_one_that_kept_no_group_fold_folds_every_group(inputs, tmp_path, monkeypatch):
    """An output whose newest run left its state but no _group_fold (an older offsetlake's): the next run resumes
    from the state and folds every group again."""
    import jobs.sources.replay_state as replay_state

    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)
    monkeypatch.setattr(replay_state, "FOLD_STATE", "_not_recorded")
    two = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    assert two["resumed_from_run"] == one["run_id"]
    assert_same(out, inputs["plain"])


def test_a_group_fold_kept_with_another_layout_is_not_reused(inputs, tmp_path, monkeypatch):
    """A fold an offsetlake with other fold fields kept (here: one this run's fold has and it lacks) would read with
    nulls in the missing fields: the next run folds every group again."""
    import pyarrow as pa

    import jobs.sources.replay_state as replay_state

    out = tmp_path / "out"
    rebuild(inputs["one"], out, as_of=FIRST_AS_OF)

    def kept() -> set[str]:
        return set(replay_state.ReplayState.open(snapshot(out, []), 2 ** 62, datetime.now(timezone.utc))[0].files)

    assert kept() == {REPLAY_STATE, FOLD_STATE}
    fold = arrow_schema(FOLD_STATE)
    group = fold.field("group")
    wider = fold.set(fold.get_field_index("group"),
                     group.with_type(pa.struct([*group.type, pa.field("a_later_field", pa.int32())])))
    monkeypatch.setattr(replay_state, "arrow_schema", lambda name: wider if name == FOLD_STATE else arrow_schema(name))
    assert kept() == {REPLAY_STATE}


def test_a_compacted_dump_that_lost_older_records(inputs, tmp_path):
    log, first = inputs["log"], inputs["first"]
    second = [r for r in log.rows[:first] if r in compacted(log.rows)] + log.rows[first:]
    assert len(second) < len(log.rows)
    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)
    two = rebuild(write_dump(second, tmp_path / "second"), out, end_offsets=str(inputs["ends"]))
    assert two["resumed_from_run"] == one["run_id"]
    assert two["records_new"] == len(log.rows) - first
    assert_same(out, inputs["plain"])


def test_a_failed_run_leaves_the_state_as_it_was(inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the derivation failed")

    with monkeypatch.context() as patched:
        patched.setattr(jobs.pipeline, "_derive_kernel", fail)
        with pytest.raises(RuntimeError, match="the derivation failed"):
            rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    three = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    assert three["resumed_from_run"] == one["run_id"]
    assert three["records_new"] == len(inputs["log"].rows) - inputs["first"]
    assert_same(out, inputs["plain"])


def test_an_as_of_before_the_states_newest_record_replays_the_archive(inputs, tmp_path):
    out = tmp_path / "out"
    rebuild(inputs["union"], out)
    again = rebuild(inputs["union"], out, as_of=FIRST_AS_OF)
    assert again["resumed_from_run"] is None and again["records_new"] == 0
    plain = tmp_path / "plain"
    rebuild(inputs["union"], plain, as_of=FIRST_AS_OF, archive=False)
    assert_same(out, state_tables(plain))
    later = rebuild(inputs["union"], out, end_offsets=str(inputs["ends"]))  # the fallback's state serves it
    assert later["resumed_from_run"] == again["run_id"]
    assert_same(out, inputs["plain"])


def test_other_retention_resumes_all_the_same(inputs, tmp_path):
    """The state is the log before the replay: retention applies after it."""
    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)
    two = rebuild(inputs["rest"], out, retention_minutes=3 * DAY // MINUTE)
    plain = tmp_path / "plain"
    rebuild(inputs["union"], plain, archive=False, retention_minutes=3 * DAY // MINUTE)
    assert two["resumed_from_run"] == one["run_id"]
    assert_same(out, state_tables(plain))


def test_a_run_without_the_history_resumes_from_one_with_it(inputs, tmp_path):
    """A run with the history keeps the same replay state: a --no-history run starts from it (and leaves none a run
    with the history could continue its tables from: that one replays the archive)."""
    out = tmp_path / "out"
    one = run(RebuildConfig.build(source=f"parquet:{inputs['one']}", output=str(out), as_of=FIRST_AS_OF,
                                  engine="local", workers=0, archive=True, retention_minutes=36 * 60))
    two = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    assert two["resumed_from_run"] == one["run_id"]
    assert_same(out, inputs["plain"])
    assert ARCHIVE in {p.name for p in out.iterdir()}
    three = run(RebuildConfig.build(source=f"parquet:{inputs['rest']}", output=str(out), as_of=AS_OF, engine="local",
                                    workers=0, archive=True, retention_minutes=36 * 60))
    assert three["resumed_from_run"] is None
    assert three["whole_replay_reason"] == "the newest complete run kept no history state"


def test_a_record_from_the_future_does_not_stop_the_next_run_from_resuming(inputs, tmp_path):
    """Records after a run's cutoff stay whole in its state (a folded one could not be split at a later as_of)."""
    log, first = inputs["log"], inputs["first"]
    future = OffsetsLog()
    future.rows = list(log.rows)
    future.next_offset = dict(log.next_offset)
    future.commit("g", "orders", 0, 99, T0 + 400 * DAY, coordinator=0)
    out = tmp_path / "out"
    one = rebuild(write_dump(log.rows[:first] + future.rows[-1:], tmp_path / "one"), out, as_of=FIRST_AS_OF)
    two = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    assert two["resumed_from_run"] == one["run_id"]
    plain = tmp_path / "plain"
    rebuild(write_dump(future.rows, tmp_path / "union"), plain, archive=False, end_offsets=str(inputs["ends"]))
    assert_same(out, state_tables(plain))


def test_the_spark_runner_resumes_as_the_local_one(spark, inputs, tmp_path):
    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF, spark=spark)
    two = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]), spark=spark)
    assert (two["runner"], two["resumed_from_run"]) == ("spark", one["run_id"])
    assert two["records_read"] == len(inputs["log"].rows) - inputs["first"]
    assert_same(out, inputs["plain"])


@pytest.mark.parametrize("moment", ["staged", "committed:15"])
def test_a_killed_run_leaves_the_state_as_it_was(inputs, tmp_path, moment):
    """Killed with every table staged, or right after its state's commit (the 15th: 12 state tables, raw_records,
    _archive_offsets, _replay_state) but before its group fold's and its record: the next run resumes from the
    first one's state and fold, and nothing of the dead run's is left."""
    import os
    import subprocess
    import sys

    from jobs.kill_points import KILL_AT
    from jobs.lake.runs import unreferenced_files

    out = tmp_path / "out"
    one = rebuild(inputs["one"], out, as_of=FIRST_AS_OF)
    command = [sys.executable, "-m", "jobs.cli", "rebuild", "--source", f"parquet:{inputs['rest']}", "--output",
               str(out), "--as-of", AS_OF, "--engine", "local", "--workers", "0", "--archive", "--no-history",
               "--retention-minutes", str(36 * 60), "--end-offsets", str(inputs["ends"])]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=300, start_new_session=True,
                            cwd=Path(jobs.pipeline.__file__).parents[1], env={**os.environ, KILL_AT: moment})
    assert killed.returncode == -9, killed.stderr
    three = rebuild(inputs["rest"], out, end_offsets=str(inputs["ends"]))
    assert three["resumed_from_run"] == one["run_id"]
    assert_same(out, inputs["plain"])
    assert unreferenced_files(out) == []
    if moment == "staged":
        assert sorted(p.name for p in (out / REPLAY_STATE).iterdir() if p.name.startswith("run-")) == sorted([
            f"run-{one['run_id']}", f"run-{three['run_id']}"])


operation = st.tuples(
    st.integers(0, 1),  # coordinator partition
    st.sampled_from(["commit", "commit", "commit", "tombstone", "marker", "group", "group_tombstone"]),
    st.sampled_from(("g0", "g1")), st.sampled_from("ab"), st.integers(0, 1),
    st.sampled_from([-1, -1, 201, 202]),  # producer: -1 plain
    st.sampled_from(["COMMIT", "COMMIT", "ABORT"]),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(operations=st.lists(operation, min_size=2, max_size=60), split=st.floats(0.1, 0.9),
       first_as_of=st.floats(0.1, 1.0), as_of=st.floats(0.5, 1.0))
@example(operations=[(0, "marker", "g0", "a", 0, -1, "COMMIT")] * 2, split=0.5, first_as_of=1.0, as_of=1.0)  # empty
def test_random_logs_split_anywhere_give_the_tables_of_one_rebuild(tmp_path_factory, operations, split, first_as_of,
                                                                   as_of):
    log = random_log(operations)
    base = tmp_path_factory.mktemp("random")
    cut = max(1, int(len(log.rows) * split))
    moment = lambda f: str(T0 + int(len(operations) * f) * MINUTE)  # noqa: E731
    options = {"retention_minutes": 20}
    one = rebuild(write_dump(log.rows[:cut], base / "one"), base / "out", as_of=moment(first_as_of), **options)
    two = rebuild(write_dump(log.rows[cut:], base / "two"), base / "out", as_of=moment(as_of), **options)
    rebuild(write_dump(log.rows, base / "union"), base / "plain", as_of=moment(as_of), archive=False, **options)
    assert two["resumed_from_run"] in (one["run_id"], None)
    assert_same(base / "out", state_tables(base / "plain"))


def test_new_records_below_the_archived_end_resume_all_the_same(inputs, tmp_path):
    """A first dump with holes (records an export missed), the second with them: new records at offsets below the
    archived end. The fold does not care about the order records come in, so the run still resumes."""
    log, first = inputs["log"], inputs["first"]
    holes = {1, 3, 6}
    out = tmp_path / "out"
    one = rebuild(write_dump([r for i, r in enumerate(log.rows[:first]) if i not in holes], tmp_path / "one"), out,
                  as_of=FIRST_AS_OF)
    two = rebuild(write_dump([log.rows[i] for i in sorted(holes)] + log.rows[first:], tmp_path / "two"), out,
                  end_offsets=str(inputs["ends"]))
    assert two["resumed_from_run"] == one["run_id"]
    assert two["records_new"] == len(log.rows) - first + len(holes)
    assert_same(out, inputs["plain"])


def test_new_records_among_the_transactions_the_state_folded_replay_the_archive(tmp_path):
    """The first dump missed producer 7's ABORT marker: its commit to orders-0 seems decided by the COMMIT after
    it, and the state folds it. The second dump brings the marker, at an offset before the folded transaction's:
    the run replays the archive, and its tables are a plain rebuild's (orders-0 never committed)."""
    log = OffsetsLog()
    log.commit("tx", "orders", 0, 3, T0, coordinator=0, producer_id=7)
    log.marker(7, "ABORT", T0 + MINUTE, coordinator=0)  # missed by the first dump
    log.commit("tx", "orders", 1, 4, T0 + 2 * MINUTE, coordinator=0, producer_id=7)
    log.marker(7, "COMMIT", T0 + 3 * MINUTE, coordinator=0)
    first = len(log.rows)
    log.commit("g", "orders", 0, 4, T0 + DAY, coordinator=0)
    out = tmp_path / "out"
    rebuild(write_dump([r for i, r in enumerate(log.rows[:first]) if i != 1], tmp_path / "one"), out,
            as_of=FIRST_AS_OF)
    state = snapshot(out, [REPLAY_STATE]).open(REPLAY_STATE).to_pyarrow_table().to_pylist()
    assert any(r["producer_id"] == 7 and r["reduced"] for r in state)  # the transaction is folded
    two = rebuild(write_dump([log.rows[1], *log.rows[first:]], tmp_path / "two"), out)
    plain = rebuild(write_dump(log.rows, tmp_path / "union"), tmp_path / "plain", archive=False)
    assert two["resumed_from_run"] is None and two["records_replayed"] == plain["records_read"] == len(log.rows)
    assert_same(out, state_tables(tmp_path / "plain"))
    tables = read_tables(out)
    assert sorted((r["group_id"], r["partition"]) for r in tables["committed_offsets"] + tables["expired_offsets"]) \
        == [("g", 0), ("tx", 1)]


def test_new_records_after_the_transactions_the_state_folded_resume(tmp_path):
    log = OffsetsLog()
    log.commit("tx", "orders", 0, 3, T0, coordinator=0, producer_id=7)
    log.marker(7, "COMMIT", T0 + MINUTE, coordinator=0)
    log.commit("tx", "orders", 0, 5, T0 + 2 * MINUTE, coordinator=0, producer_id=7)
    first = len(log.rows)
    log.marker(7, "ABORT", T0 + DAY, coordinator=0)
    out = tmp_path / "out"
    one = rebuild(write_dump(log.rows[:first], tmp_path / "one"), out, as_of=FIRST_AS_OF)
    two = rebuild(write_dump(log.rows[first:], tmp_path / "two"), out)
    rebuild(write_dump(log.rows, tmp_path / "union"), tmp_path / "plain", archive=False)
    assert two["resumed_from_run"] == one["run_id"]
    assert_same(out, state_tables(tmp_path / "plain"))
    tables = read_tables(out)
    assert [r["committed_offset"] for r in tables["committed_offsets"] + tables["expired_offsets"]] == [3]
