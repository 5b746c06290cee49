"""What `offsetlake bench` runs and how it reports it, with the processes faked: the timings themselves are the
bench's business (whole processes, ratios), never a test's."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.tools import bench

SUMMARY = {"records_read": 3, "groups": 1, "committed_offsets": 1, "runner": "local", "driver_jvm_peak_mb": 300}


def fake_runs(monkeypatch, seconds: dict[str, float]) -> list[list[str]]:
    """bench._timed replaced: each command 'takes' the seconds of the first key of `seconds` found in it."""
    ran: list[list[str]] = []

    def timed(command: list[str]) -> tuple[float, str]:
        ran.append(command)
        text = " ".join(command)
        took = next(s for key, s in seconds.items() if key in text)
        runner = "spark" if "__main__.py" in text else "local"
        return took, json.dumps({**SUMMARY, "runner": runner}) + "\n"

    monkeypatch.setattr(bench, "_timed", timed)
    monkeypatch.setattr(bench, "_with_jvm_archive", lambda command: None)
    return ran


def a_dump(folder: Path) -> Path:
    folder.mkdir()
    pq.write_table(pa.table({"key": [b"k"], "value": [b"v"], "partition": [0], "offset": [0],
                             "timestamp": pa.array([0], pa.timestamp("ms"))}), folder / "part-0.parquet")
    return folder


def test_with_a_master_the_floor_and_the_spark_runner_run_under_spark_submit_on_it(tmp_path, monkeypatch):
    ran = fake_runs(monkeypatch, {"bench_floor": 10.0, "--no-history": 15.0, "__main__.py": 30.0, "jobs.cli": 20.0})
    monkeypatch.setattr(bench, "check_source", lambda spec: None)
    result = bench.run_bench(0, a_dump(tmp_path / "dump"), tmp_path / "work", repeat=1, peer=False,
                             master="spark://127.0.0.1:7077")
    submits = [c for c in ran if c[0].endswith("spark-submit")]
    assert len(submits) == 3  # the floor and the Spark runner with and without history
    for command in submits:
        assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"
    floor = next(c for c in submits if c[-2].endswith("bench_floor.py"))
    assert floor[-1] == str(tmp_path / "dump")
    entries = [c for c in submits if any(w.endswith("jobs/__main__.py") for w in c)]
    assert {c[c.index("--output") + 1] for c in entries} == {
        str(tmp_path / "work" / "tables-spark"), str(tmp_path / "work" / "tables-spark-no-history")}
    assert result["master"] == "spark://127.0.0.1:7077" and result["spark_runner"] == "spark"
    # Whichever figure a command's fake time gave: the no-history runs 15 s (spark's and the CLI's), the rest theirs.
    assert (result["floor_seconds"], result["rebuild_seconds"], result["spark_rebuild_seconds"]) == (10.0, 20.0, 30.0)
    assert result["spark_rebuild_vs_floor"] == 3.0 and result["spark_no_history_vs_floor"] == 1.5
    assert result["rebuild_vs_floor"] == 2.0


def test_without_a_master_nothing_runs_under_spark_submit(tmp_path, monkeypatch):
    ran = fake_runs(monkeypatch, {"bench_floor": 10.0, "--no-history": 15.0, "jobs.cli": 20.0})
    monkeypatch.setattr(bench, "check_source", lambda spec: None)
    result = bench.run_bench(0, a_dump(tmp_path / "dump"), tmp_path / "work", peer=False)
    assert not [c for c in ran if c[0].endswith("spark-submit")] and "master" not in result
    assert result["no_history_vs_floor"] == 1.5


def test_incremental_splits_each_partition_by_offset(tmp_path):
    rows = pa.table({"key": [b"k"] * 7, "value": [b"v"] * 7, "partition": [0, 0, 0, 0, 1, 1, 0],
                     "offset": [0, 1, 2, 3, 0, 1, 4], "timestamp": pa.array([0] * 7, pa.timestamp("ms"))})
    (tmp_path / "dump").mkdir()
    pq.write_table(rows, tmp_path / "dump" / "part-0.parquet")
    counts = bench.split_dump(tmp_path / "dump", 0.4, tmp_path / "older", tmp_path / "newer")
    assert counts == {"older": 4, "newer": 3}
    newer = pq.read_table(tmp_path / "newer").sort_by([("partition", "ascending"), ("offset", "ascending")])
    assert list(zip(newer.column("partition").to_pylist(), newer.column("offset").to_pylist())) == [
        (0, 3), (0, 4), (1, 1)]


def test_incremental_resumes_and_compares_the_tables(tmp_path):
    """Real processes (`python -m jobs.cli`, this checkout's): a small generated dump."""
    result = bench.run_incremental(3000, None, tmp_path / "work", 0.05)
    assert result["incremental_equal"] is True and result["resumed_from_run"]
    assert 0 < result["records_second_run"] < result["records"] // 10


def test_the_daily_bench_resumes_every_day_and_compares_every_table(tmp_path):
    """Real processes: three days of 5% each into one output, with the history kept one day (--history-days 1),
    against one full rebuild with it too."""
    result = bench.run_daily(3000, None, tmp_path / "work", 0.05, 3, history_days=1)
    assert result["daily_equal"] is True and result["resumed"] == 3 and not result["whole_replay_reasons"]
    assert len(result["day_seconds"]) == 3 and result["last_vs_second"] > 0
    assert sum(result["records_per_day"]) + result["records_first_run"] == result["records"]
    # The generated dump spans ten days: one day before as_of reaches two commit_date folders at most.
    assert result["history_days"] == 1 and max(result["offset_commits_dates_per_day"]) <= 2
    assert 0 < result["offset_commits_rows_per_day"][-1] < result["records"] // 5
    assert len(result["replay_state_rows_per_day"]) == 3 and 0 < min(result["replay_state_rows_per_day"])
    assert len(result["raw_records_files_per_day"]) == 3 and 0 < min(result["raw_records_files_per_day"])


def test_split_days_cuts_each_partition_into_slices_by_offset(tmp_path):
    rows = pa.table({"key": [b"k"] * 9, "value": [b"v"] * 9, "partition": [0] * 7 + [1] * 2,
                     "offset": [0, 1, 2, 3, 4, 5, 6, 0, 1], "timestamp": pa.array([0] * 9, pa.timestamp("ms"))})
    (tmp_path / "dump").mkdir()
    pq.write_table(rows, tmp_path / "dump" / "part-0.parquet")
    days = [tmp_path / "d1", tmp_path / "d2"]
    counts = bench.split_days(tmp_path / "dump", 0.25, 2, tmp_path / "older", days)
    assert counts == {"older": 3, "day1": 3, "day2": 3}

    def placed(folder):
        found = pq.read_table(folder)
        return sorted(zip(found.column("partition").to_pylist(), found.column("offset").to_pylist()))

    # Partition 0: 7 records, slices of round(1.75) = 2; partition 1: 2 records, a slice of at least one.
    assert (placed(tmp_path / "older"), placed(days[0]), placed(days[1])) == (
        [(0, 0), (0, 1), (0, 2)], [(0, 3), (0, 4), (1, 0)], [(0, 5), (0, 6), (1, 1)])


def test_tables_are_compared_a_coordinator_partition_at_a_time(monkeypatch):
    """_differ reads a table with a coordinator partition one partition at a time (a 100M-record output's
    offset_commits twice would not fit in memory), and still finds one changed row, a missing row, or a table
    only one output has."""
    import pyarrow.dataset as pads

    def rows(changed=None, drop=False):
        values = {"coordinator_partition": pa.array([0, 0, 1, 1, None, 2], pa.int32()), "offset": [1, 2, 3, 4, 5, 6]}
        table = pa.table(values)
        if changed is not None:
            table = table.set_column(1, "offset", pa.array([changed if o == 4 else o for o in values["offset"]]))
        return table.slice(0, 5) if drop else table

    plain = pa.table({"x": [1, 2]})
    outputs = {"same": {"t": rows(), "plain": plain}, "other": {"t": rows(), "plain": pa.table({"x": [2, 1]})},
               "changed": {"t": rows(changed=40), "plain": plain}, "dropped": {"t": rows(drop=True), "plain": plain},
               "none": {}}

    class Snapshot:
        def __init__(self, output, names):
            self.tables = outputs[str(output)]
            self.versions = {name: 0 for name in names if name in self.tables}

        def open(self, name):
            table = self.tables[name]
            return type("T", (), {"to_pyarrow_dataset": lambda _self: pads.dataset(table)})()

    import jobs.lake.runs

    monkeypatch.setattr(jobs.lake.runs, "snapshot", Snapshot)
    assert bench._differ(Path("same"), Path("other"), ("t", "plain")) == []
    assert bench._differ(Path("same"), Path("changed"), ("t", "plain")) == ["t"]
    assert bench._differ(Path("same"), Path("dropped"), ("t",)) == ["t"]
    assert bench._differ(Path("same"), Path("none"), ("t", "plain")) == ["t", "plain"]
