"""rebuild --history-days N (jobs.base.retention): the history tables keep the N days before as_of. A week of
daily records rebuilt as three --archive runs, each resuming from the one before, must give every table of one
rebuild of all the records with the same --history-days (a run appends its new rows, then removes what its cutoff
passed, in its own commits); offset_commits loses whole commit_date folders without a file being read.
"""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from offsets_log import DAY, HOUR, MINUTE, T0, OffsetsLog, member, write_dump
from runs import read_tables

import jobs.lake.sink
from jobs.base.errors import BadInput
from jobs.base.retention import CUT_BY, HistoryCutoff, history_from
from jobs.cli import cli
from jobs.config import RebuildConfig
from jobs.lake.runs import delta_table, finished_runs, snapshot
from jobs.pipeline import run

DAYS = 2
RUN_DAYS = (2, 4, 6)  # each run's records end on this day, and its as_of is that day's end


def day_end(day: int) -> str:
    return datetime.fromtimestamp((T0 + (day + 1) * DAY - 1000) / 1000, tz=timezone.utc).isoformat()


def a_week() -> tuple[OffsetsLog, list[int]]:
    """A week of one day's work a day over two coordinator partitions (a rebalance, commits), a transaction opened on
    day 1 and committed on day 5; and where each day's records end in the log."""
    log, ends = OffsetsLog(), []
    for day in range(7):
        at = T0 + day * DAY
        log.group("g", at + HOUR, members=[member(f"m{day}", ["orders"], {"orders": [0, 1]})], generation=day + 1,
                  coordinator=0)
        for i in range(3):
            log.commit("g", "orders", i % 2, 100 * day + 10 * i, at + 2 * HOUR + i * MINUTE, coordinator=0)
        log.commit("s", "payments", 0, 50 * day, at + 3 * HOUR, coordinator=1)
        if day == 1:
            log.commit("tx", "orders", 0, 7, at + 4 * HOUR, coordinator=1, producer_id=9)
        if day == 5:
            log.marker(9, "COMMIT", at + 4 * HOUR, coordinator=1)
        ends.append(len(log.rows))
    return log, ends


def end_offsets(path: Path, days: range) -> Path:
    """A snapshot of the topics' end offsets at the end of each of `days` (kafka-get-offsets.sh text with a time)."""
    lines = [f"{t}:{p}:{100 * d + 50}:{T0 + d * DAY + 20 * HOUR}" for d in days for t, p in
             (("orders", 0), ("orders", 1), ("payments", 0))]
    path.write_text("\n".join(lines) + "\n")
    return path


def rebuild(source: Path, out: Path, as_of: str, ends: Path, archive: bool = True, **options: Any) -> dict[str, Any]:
    cfg = RebuildConfig.build(source=f"parquet:{source}", output=str(out), as_of=as_of, archive=archive,
                              engine="local", workers=0, end_offsets=str(ends), **options)
    return run(cfg)


@pytest.fixture(scope="module")
def week(tmp_path_factory) -> dict[str, Any]:
    """The week as three daily --archive runs with --history-days 2 (before the last, the files of offset_commits'
    oldest folders are made unreadable: its removal must not read them), and as one rebuild of every record."""
    base = tmp_path_factory.mktemp("history-days")
    log, ends = a_week()
    summaries, start = [], 0
    for i, day in enumerate(RUN_DAYS):
        if i == len(RUN_DAYS) - 1:
            garbled = _garble(base / "out", before=date(2026, 11, 1) + timedelta(days=day - DAYS))
        first_day = RUN_DAYS[i - 1] + 1 if i else 0
        part = write_dump(log.rows[start:ends[day]], base / f"part{i}")
        summaries.append(rebuild(part, base / "out", day_end(day),
                                 end_offsets(base / f"ends{i}.txt", range(first_day, day + 1)), history_days=DAYS))
        start = ends[day]
    whole = rebuild(write_dump(log.rows[:start], base / "whole"), base / "plain", day_end(RUN_DAYS[-1]),
                    end_offsets(base / "ends.txt", range(RUN_DAYS[-1] + 1)), archive=False, history_days=DAYS)
    return {"base": base, "out": base / "out", "plain": base / "plain", "summaries": summaries, "whole": whole,
            "garbled": garbled}


def _files(table: Path) -> dict[Path, date]:
    """The data files of offset_commits at its newest version, with their commit_date."""
    adds = pa.table(delta_table(table).get_add_actions(flatten=True)).to_pylist()
    return {table / unquote(a["path"]): a["partition.commit_date"] for a in adds}


def _garble(out: Path, before: date) -> list[Path]:
    """Overwrite the data files of offset_commits' folders before `before`, at its newest version, with bytes no
    reader can read."""
    found = [f for f, day in _files(out / "offset_commits").items() if day < before]
    for f in found:
        f.write_bytes(b"not parquet")
    return found


def test_daily_runs_that_resume_give_every_table_of_one_rebuild_with_the_same_days(week):
    summaries = week["summaries"]
    assert [s["resumed_from_run"] for s in summaries[1:]] == [s["run_id"] for s in summaries[:-1]]
    assert read_tables(week["out"]) == read_tables(week["plain"])
    rows = read_tables(week["plain"])
    for name in ("offset_commits", "group_events"):
        assert summaries[-1][name] == week["whole"][name] == len(rows[name]), name


def test_the_cutoff_removes_whole_days_of_offset_commits_and_the_rows_before_it_of_the_others(week):
    cutoff = datetime.fromisoformat(day_end(RUN_DAYS[-1])) - timedelta(days=DAYS)
    rows = read_tables(week["out"])
    assert {r["commit_date"] for r in rows["offset_commits"]} == {cutoff.date() + timedelta(days=d) for d in range(3)}
    assert min(r["event_timestamp"] for r in rows["group_events"]) >= cutoff
    assert min(r["observed_at"] for r in rows["end_offsets_history"]) >= cutoff
    removed = week["summaries"][-1]["history_removed"]
    # The last run removed the garbled files unread, and the days its cutoff passed from the others.
    assert removed["offset_commits"]["files"] == len(week["garbled"]) > 0 and removed["offset_commits"]["rows"] == 8
    assert removed["group_events"]["rows"] > 0 and removed["end_offsets_history"]["rows"] == 6
    assert _files(week["out"] / "offset_commits").keys().isdisjoint(week["garbled"])


def test_the_run_says_from_when_its_history_is_whole(week):
    cutoff = datetime.fromisoformat(day_end(RUN_DAYS[-1])) - timedelta(days=DAYS)
    said = cutoff.isoformat().replace("+00:00", "Z")
    assert week["summaries"][-1]["history_from"] == week["whole"]["history_from"] == said
    assert finished_runs(week["out"])[-1]["history_from"] == cutoff.replace(tzinfo=None)
    note = snapshot(week["out"], ["offset_commits"]).history_note("offset_commits")
    assert note == f"offset_commits: history kept from {cutoff.replace(tzinfo=None).isoformat()}Z (rebuild --history-days)"


def test_readers_say_so_and_refuse_a_moment_before_it(week, tmp_path):
    shown = CliRunner().invoke(cli, ["show", "--output", str(week["out"]), "--rows", "0"])
    assert shown.exit_code == 0 and "(offset_commits: history kept from 2026-11-05T" in shown.stdout, shown.output
    early = CliRunner().invoke(cli, ["report", "--output", str(week["out"]), "--to", str(tmp_path / "r.html"),
                                     "--since", "2026-11-02T00:00:00Z"])
    assert early.exit_code == 2 and early.stderr.strip().splitlines() == [
        "offsetlake: error: --since 2026-11-02T00:00:00Z: before the history kept (from 2026-11-05T23:59:59Z: "
        "rebuild --history-days)"], early.stderr
    later = CliRunner().invoke(cli, ["report", "--output", str(week["out"]), "--to", str(tmp_path / "r.html"),
                                     "--since", "2026-11-06T00:00:00Z"])
    assert later.exit_code == 0, later.output
    assert "history kept from 2026-11-05T23:59:59Z" in (tmp_path / "r.html").read_text()


def test_a_run_that_replays_the_archive_whole_applies_the_same_cutoff(tmp_path):
    log, ends = a_week()
    first = rebuild(write_dump(log.rows[:ends[3]], tmp_path / "one"), tmp_path / "out", day_end(3),
                    end_offsets(tmp_path / "e1.txt", range(4)), history_days=DAYS, status_window=3)
    second = rebuild(write_dump(log.rows[ends[3]:], tmp_path / "two"), tmp_path / "out", day_end(6),
                     end_offsets(tmp_path / "e2.txt", range(4, 7)), history_days=DAYS)
    assert second["resumed_from_run"] is None and second["whole_replay_reason"] == \
        "the status or rate window is wider than the previous run kept", first["run_id"]
    rebuild(write_dump(log.rows, tmp_path / "whole"), tmp_path / "plain", day_end(6),
            end_offsets(tmp_path / "e.txt", range(7)), archive=False, history_days=DAYS)
    assert read_tables(tmp_path / "out") == read_tables(tmp_path / "plain")


def test_a_run_that_dies_after_its_removal_is_undone_by_the_next_run(tmp_path, monkeypatch):
    """The removal is one of the run's commits: a run that fails before it is recorded leaves tables readers do not
    see, and the next run restores them, the removal with its append."""
    log, ends = a_week()
    out = tmp_path / "out"
    one, two = write_dump(log.rows[:ends[2]], tmp_path / "one"), write_dump(log.rows[ends[2]:], tmp_path / "two")
    first = rebuild(one, out, day_end(2), end_offsets(tmp_path / "e1.txt", range(3)), history_days=DAYS)
    seen = read_tables(out)
    with monkeypatch.context() as patched:
        def refuse(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("stopped before the run is recorded")

        patched.setattr(jobs.lake.sink, "record_run", refuse)
        with pytest.raises(RuntimeError, match="before the run is recorded"):
            rebuild(two, out, day_end(6), end_offsets(tmp_path / "e2.txt", range(3, 7)), history_days=DAYS)
    removal = delta_table(out / "offset_commits").history(1)[0]
    assert removal["operation"] == "DELETE" and removal["offsetlake.run_id"] != first["run_id"]
    assert read_tables(out) == seen  # readers see the complete run
    again = rebuild(two, out, day_end(6), end_offsets(tmp_path / "e2.txt", range(3, 7)), history_days=DAYS)
    assert again["resumed_from_run"] == first["run_id"]
    rebuild(write_dump(log.rows, tmp_path / "whole"), tmp_path / "plain", day_end(6),
            end_offsets(tmp_path / "e.txt", range(7)), archive=False, history_days=DAYS)
    assert read_tables(out) == read_tables(tmp_path / "plain")


def test_the_arrow_filter_and_the_delta_predicate_keep_the_same_rows(tmp_path):
    """One rule in two forms: rows left out before they are written, and rows deleted from a table."""
    from deltalake import DeltaTable, write_deltalake

    cutoff = HistoryCutoff.of(datetime(2026, 11, 5, 12, 30, 0, 250, tzinfo=timezone.utc), DAYS)
    assert cutoff.moment == datetime(2026, 11, 3, 12, 30, 0, 250, tzinfo=timezone.utc)
    stamps = [datetime(2026, 11, 3, 12, 30, 0, 249, tzinfo=timezone.utc), cutoff.moment,
              datetime(2026, 11, 3, 0, 0, tzinfo=timezone.utc), datetime(2026, 11, 2, 23, 59, tzinfo=timezone.utc),
              None, datetime(2026, 11, 9, tzinfo=timezone.utc)]
    times = pa.array(stamps, pa.timestamp("us", tz="UTC"))
    for table, column in CUT_BY.items():
        values = pc.cast(times, pa.date32()) if column == "commit_date" else times
        rows = pa.table({"n": list(range(len(stamps))), column: values})
        where = tmp_path / table
        write_deltalake(str(where), rows, partition_by=[column] if column == "commit_date" else None)
        DeltaTable(str(where)).delete(cutoff.removed(table))
        left = sorted(DeltaTable(str(where)).to_pyarrow_table().column("n").to_pylist())
        assert left == cutoff.kept(table, rows).column("n").to_pylist(), table
        assert left == ([0, 1, 2, 4, 5] if column == "commit_date" else [1, 4, 5]), table


def test_the_history_is_whole_from_the_later_of_the_cutoffs():
    at = datetime(2026, 11, 9, tzinfo=timezone.utc)
    assert history_from(None, None) is None
    assert history_from(HistoryCutoff.of(at, 3), None) == datetime(2026, 11, 6, tzinfo=timezone.utc)
    assert history_from(None, datetime(2026, 11, 2)) == datetime(2026, 11, 2, tzinfo=timezone.utc)  # naive: UTC
    assert history_from(HistoryCutoff.of(at, 30), datetime(2026, 11, 2)) == datetime(2026, 11, 2, tzinfo=timezone.utc)


def test_history_days_comes_from_the_command_or_the_configuration(tmp_path, monkeypatch):
    import jobs.config

    source, out = "parquet:.", str(tmp_path / "out")
    assert RebuildConfig.build(source, out).history_days is None
    assert RebuildConfig.build(source, out, history_days=3).history_days == 3
    with pytest.raises(BadInput, match=r"^--history-days 3: given with --no-history \(there is no history to keep\)$"):
        RebuildConfig.build(source, out, history_days=3, no_history=True)
    conf = jobs.config.defaults()
    monkeypatch.setattr(jobs.config, "defaults", lambda: {**conf, "rebuild": {**conf["rebuild"], "history_days": 30}})
    assert RebuildConfig.build(source, out).history_days == 30
    assert RebuildConfig.build(source, out, no_history=True).history_days is None  # nothing to apply it to
    monkeypatch.setattr(jobs.config, "defaults", lambda: {**conf, "rebuild": {**conf["rebuild"], "history_days": 0}})
    with pytest.raises(BadInput, match=r"^history_days in offsetlake.toml 0: must be a whole number of days"):
        RebuildConfig.build(source, out)
