"""rebuild --archive with the history: a run starts from the state the previous one left (_replay_state,
_group_fold, _history_state), reads only the new records, appends the history rows they make, and gives every
table (state and history) of one rebuild with the history of all the records.

The random logs cross the boundaries between runs in every way the history cares about: transactions open across a
cut (committed or aborted in a later run), offsets deleted and committed again, expiry, classic groups converted to
consumer groups and back, members joining and leaving, share state, and as_of inside the log.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from offsets_log import MINUTE, T0, OffsetsLog, random_log, write_dump
from runs import read_tables

from jobs.base.tables import TABLES
from jobs.config import RebuildConfig
from jobs.pipeline import run

RETENTION_MINUTES = 20


def rebuild(source: Path, out: Path, as_of: str | None, archive: bool = True, ends: Path | None = None,
            **options: Any) -> dict[str, Any]:
    cfg = RebuildConfig.build(source=f"parquet:{source}", output=str(out), as_of=as_of, archive=archive,
                              engine="local", workers=0, retention_minutes=RETENTION_MINUTES,
                              end_offsets=None if ends is None else str(ends), **options)
    return run(cfg)


def ends(path: Path) -> Path:
    path.write_text("".join(f"{t}:{p}:{o}\n" for t in "ab" for p, o in ((0, 40), (1, 25))))
    return path


KINDS = ["commit", "commit", "commit", "commit", "tombstone", "marker", "marker", "group", "group_tombstone",
         "consumer_member", "consumer_leave", "share"]
operation = st.tuples(
    st.integers(0, 1),  # coordinator partition
    st.sampled_from(KINDS),
    st.sampled_from(("g0", "g1")), st.sampled_from("ab"), st.integers(0, 1),
    st.sampled_from([-1, -1, 201, 202]),  # producer: -1 plain
    st.sampled_from(["COMMIT", "COMMIT", "ABORT"]),
)


def compared(out: Path) -> dict[str, Any]:
    return {t: rows for t, rows in read_tables(out).items() if t in TABLES}


def runs_of(log: OffsetsLog, base: Path, cuts: list[int], moments: list[str | None], ends_file: Path | None
            ) -> list[dict[str, Any]]:
    """`log` cut at `cuts`, each part rebuilt in turn into base/out with --archive and the history at its moment
    (the last one with `ends_file`)."""
    bounds = [0, *cuts, len(log.rows)]
    summaries = []
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        last = i == len(bounds) - 2
        summaries.append(rebuild(write_dump(log.rows[a:b], base / f"part{i}"), base / "out", moments[i],
                                 ends=ends_file if last else None))
    return summaries


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(operations=st.lists(operation, min_size=4, max_size=50), cuts=st.lists(st.floats(0.05, 0.95), min_size=2,
                                                                               max_size=2),
       moments=st.lists(st.one_of(st.none(), st.floats(0.2, 1.1)), min_size=3, max_size=3))
def test_random_logs_cut_anywhere_give_every_table_of_one_rebuild(tmp_path_factory, operations, cuts, moments):
    log = random_log(operations)
    base = tmp_path_factory.mktemp("history")
    cut = sorted({max(1, min(len(log.rows) - 1, int(len(log.rows) * c))) for c in cuts})
    at = [None if m is None else str(T0 + int(len(operations) * m) * MINUTE) for m in moments]
    at = at[:len(cut) + 1]
    summaries = runs_of(log, base, cut, at, ends(base / "ends.txt"))
    rebuild(write_dump(log.rows, base / "union"), base / "plain", at[-1], archive=False, ends=base / "ends.txt")
    assert compared(base / "out") == compared(base / "plain")
    for one, two in zip(summaries, summaries[1:]):
        assert two["resumed_from_run"] in (one["run_id"], None)
        assert (two["resumed_from_run"] is None) == (two["whole_replay_reason"] is not None)
    plain = read_tables(base / "plain")
    assert summaries[-1]["offset_commits"] == len(plain["offset_commits"])
    assert summaries[-1]["group_events"] == len(plain["group_events"])


def a_log() -> OffsetsLog:
    log = OffsetsLog()
    for i in range(6):
        log.commit("g", "orders", i % 2, 10 * i, T0 + i * MINUTE, coordinator=i % 2)
    log.group("g", T0 + 6 * MINUTE, members=[], coordinator=0)
    for i in range(6, 10):
        log.commit("g", "orders", i % 2, 10 * i, T0 + i * MINUTE, coordinator=i % 2)
    return log


@pytest.mark.parametrize("case, reason", [
    ("missed", "new records lie among those the previous run replayed"),
    ("wider", "the status or rate window is wider than the previous run kept"),
    ("earlier", "as_of is before the previous run's"),
    ("no_history", "the newest complete run kept no history state"),
])
def test_a_run_that_cannot_append_replays_the_archive_and_says_why(tmp_path, case, reason):
    """What the previous run wrote must stay as it is: a record it missed (a dump without it, given later), a wider
    window than it kept, an earlier as_of, or no history state make the run replay the archive whole, with the
    tables of one rebuild."""
    log = a_log()
    first, second = log.rows[:8], log.rows[8:]
    if case == "missed":  # the first dump lacks one of its records; the second brings it
        first, second = first[:3] + first[4:], [first[3], *second]
    out, moment = tmp_path / "out", str(T0 + 20 * MINUTE)
    options = {"status_window": 3} if case == "wider" else {}
    one = rebuild(write_dump(first, tmp_path / "one"), out, str(T0 + 60 * MINUTE) if case == "earlier" else moment,
                  **options, **({"no_history": True} if case == "no_history" else {}))
    at = moment  # after every record: before the first run's only in case "earlier"
    two = rebuild(write_dump(second, tmp_path / "two"), out, at)
    assert (two["resumed_from_run"], two["whole_replay_reason"]) == (None, reason), one["run_id"]
    rebuild(write_dump(log.rows, tmp_path / "union"), tmp_path / "plain", at, archive=False)
    assert compared(out) == compared(tmp_path / "plain")


def test_a_transactional_commit_gets_its_row_in_the_run_its_marker_comes_in(tmp_path):
    log = OffsetsLog()
    log.commit("g", "orders", 0, 5, T0, coordinator=0)
    log.commit("tx", "orders", 0, 7, T0 + MINUTE, coordinator=0, producer_id=9)
    first = len(log.rows)
    log.commit("g", "orders", 0, 6, T0 + 2 * MINUTE, coordinator=0)
    log.marker(9, "COMMIT", T0 + 3 * MINUTE, coordinator=0)
    out = tmp_path / "out"
    one = rebuild(write_dump(log.rows[:first], tmp_path / "one"), out, None)
    assert [r["group_id"] for r in read_tables(out)["offset_commits"]] == ["g"]
    two = rebuild(write_dump(log.rows[first:], tmp_path / "two"), out, None)
    assert two["resumed_from_run"] == one["run_id"] and two["offset_commits"] == 3
    rows = {(r["group_id"], r["committed_offset"]): r for r in read_tables(out)["offset_commits"]}
    assert (rows[("tx", 7)]["record_offset"], rows[("tx", 7)]["source_record_offset"]) == (3, 1)
    assert rows[("g", 6)]["previous_offset"] == 5 and rows[("g", 6)]["earlier_records"] == 1
    rebuild(write_dump(log.rows, tmp_path / "union"), tmp_path / "plain", None, archive=False)
    assert compared(out) == compared(tmp_path / "plain")
