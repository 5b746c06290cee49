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

from jobs.config import RebuildConfig
from jobs.lake.runs import snapshot
from jobs.lake.tables import HISTORY_STATE, TABLES
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
