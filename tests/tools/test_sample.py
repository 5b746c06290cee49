"""The sample dump: deterministic, realistic, and rebuilt into every kind of group the issue names."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.base.tables import TABLES
from jobs.cli import cli
from jobs.decode.check import group_id_of
from jobs.tools.sample import write_sample
from offsets_codec import SHARE_STATE, decode_key, decode_value, partition_for
from offsets_codec.segments import control_marker


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    base = tmp_path_factory.mktemp("sample")
    stats = write_sample(base / "dump", 20_000, seed=3, end_offsets=base / "ends.txt")
    return base, stats


def test_sample_is_deterministic_and_consistent(sample, tmp_path):
    base, stats = sample
    again = write_sample(tmp_path / "dump", 20_000, seed=3)
    assert again["records"] == stats["records"]
    first = pq.read_table(base / "dump").to_pydict()
    assert first == pq.read_table(tmp_path / "dump").to_pydict()
    assert 15_000 <= stats["records"] <= 30_000
    per_partition = {}
    for t, p, o in zip(first["topic"], first["partition"], first["offset"]):
        assert o == per_partition.get((t, p), -1) + 1  # offsets are dense per partition of each topic
        per_partition[(t, p)] = o
    assert {t for t, _ in per_partition} == {"__consumer_offsets", "__share_group_state"}
    for key, t, p, control in zip(first["key"][:500], first["topic"][:500], first["partition"][:500],
                                  first["is_control"][:500]):
        if not control and t == "__consumer_offsets":  # groups live in their Kafka partition (a marker goes where
            assert p == partition_for(group_id_of(decode_key(key).data), 50)  # the transaction's commits went)


def test_sample_has_what_the_issue_asks_for(sample):
    base, _ = sample
    table = pq.read_table(base / "dump").to_pydict()
    kinds = Counter()
    open_commits: dict[tuple[int, int], int] = {}  # (coordinator partition, producer): commits since its marker
    for key, value, topic, partition, producer, control in zip(table["key"], table["value"], table["topic"],
                                                              table["partition"], table["producer_id"],
                                                              table["is_control"]):
        if topic == "__share_group_state":  # the share coordinator's own records (its registry)
            kinds[f"share-state-{SHARE_STATE.decode_key(key).record_type}"] += 1
            continue
        if control:
            kinds[f"marker-{control_marker(key)}"] += 1
            open_commits.pop((partition, producer), None)
            continue
        if producer != -1:
            kinds["transactional"] += 1
            open_commits[(partition, producer)] = open_commits.get((partition, producer), 0) + 1
        k = decode_key(key)
        if value is None:
            kinds[f"tombstone-{k.record_type}"] += 1
            continue
        try:
            v = decode_value(k.record_type, value)
        except Exception:
            kinds["damaged"] += 1
            continue
        kinds[f"type{k.record_type}-v{v.version}"] += 1
        if k.record_type == 2:
            kinds[f"protocol-{v.data['protocolType']}-{'empty' if not v.data['members'] else 'members'}"] += 1
    assert kinds["damaged"] == 2
    for kind in ("type1-v1", "type1-v3", "type1-v4", "tombstone-1", "tombstone-2", "protocol-consumer-members",
                 "protocol-consumer-empty", "protocol-connect-members", "transactional", "marker-COMMIT",
                 "marker-ABORT", "share-state-0", "share-state-1"):
        assert kinds[kind] > 0, (kind, kinds)
    assert kinds["marker-COMMIT"] > 10 * kinds["marker-ABORT"]  # aborts are the exception
    assert len(open_commits) == 1  # one transaction is still open at the end


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(cli, ["demo", "--dir", str(base), "--records", "20000"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return base, result


def test_demo_rebuilds_the_sample_into_every_table(demo):
    base, result = demo
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["records_quarantined"] == 2 and len(summary["orphan_groups"]) == 1
    assert summary["pending_transactions"] > 0 and summary["records_by_type"]["TransactionMarker"] > 0
    assert summary["expired_offsets"] > 0 and summary["consumer_lag"] > 0
    groups = DeltaTable(str(base / "tables" / "consumer_groups")).to_pyarrow_table().to_pylist()
    seen = Counter((g["group_type"], g["protocol_type"], g["state"]) for g in groups)
    assert seen[("classic", "consumer", "Stable")] and seen[("classic", "consumer", "Empty")]
    assert seen[("classic", "connect", "Stable")] and seen[("classic", None, "Empty")]  # Connect and simple groups
    assert seen[("consumer", "consumer", "Stable")] and seen[("streams", "streams", "Stable")]  # KIP-848, KIP-1071
    assert seen[("share", "share", "Stable")]
    assert summary["modern_group_records"] > 0 and summary["replay_violations"] == []
    for table in ("committed_offsets", "group_members", "group_target_assignments", "streams_topologies", "quarantine"):
        assert f"{table}: " in result.stdout


def test_the_demos_log_dir_rebuilds_into_the_same_tables(demo):
    """The demo writes its sample twice, as a dump with batch metadata and as a broker log dir: same log,
    same tables (transactions included), and `decode` reads the same records and markers from both."""
    base, _ = demo
    result = CliRunner().invoke(cli, ["rebuild", "--source", f"segments:{base / 'kafka-logs'}", "--output",
                                      str(base / "from-segments"), "--end-offsets", str(base / "end-offsets.txt"),
                                      "--log-start-offsets", str(base / "log-start-offsets.txt")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for table in TABLES:
        rows = [sorted(map(str, DeltaTable(str(out / table)).to_pyarrow_table().to_pylist()))
                for out in (base / "tables", base / "from-segments")]
        assert rows[0] == rows[1], table
    decoded = [sorted(CliRunner().invoke(cli, ["decode", "--source", source]).output.splitlines())
               for source in (f"parquet:{base / 'dump'}", f"segments:{base / 'kafka-logs'}")]
    assert decoded[0] == decoded[1] and sum('"marker":"ABORT"' in line for line in decoded[0]) > 0


def test_the_notebook_runs_locally(spark, tmp_path, monkeypatch, capsys):
    import runpy

    monkeypatch.setenv("OFFSETLAKE_TOUR_DIR", str(tmp_path))
    monkeypatch.setenv("OFFSETLAKE_TOUR_RECORDS", "5000")
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "notebooks" / "offsetlake_tour.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "protocol_type" in out and "total_lag" in out and "unknown value version 9 for record type 1" in out
    assert "pending_offset" in out and "eos-app-" in out  # an exactly-once application's open transaction
    # The history sections: Burrow's verdicts, rebalance counts, lag in time, and both plots as images.
    assert "STALL" in out and "rebalances_last_day" in out and "flapping-app" in out and "lag_seconds" in out
    for image in ("offset_and_lag.png", "rebalances.png"):
        assert (tmp_path / "plots" / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


def test_the_demos_commit_history_is_the_reference_replays(demo):
    """offset_commits of a whole run (plain commits read natively from the log, transactional ones at their
    COMMIT marker) against the reference replay of the same dump, record by record."""
    from reference_replay import LogEntry, replay_log

    base, result = demo
    as_of = datetime.fromisoformat(json.loads(result.stdout.strip().splitlines()[-1])["as_of"].replace("Z", "+00:00"))
    dump = pq.read_table(base / "dump").to_pydict()
    entries = [LogEntry(p, o, pid, control_marker(k) if c else None, k, v)
               for p, o, pid, c, k, v, ts in zip(dump["partition"], dump["offset"], dump["producer_id"],
                                                  dump["is_control"], dump["key"], dump["value"], dump["timestamp"])
               if ts is None or ts <= as_of]
    want = sorted(tuple(a) for a in replay_log(entries).history)
    rows = DeltaTable(str(base / "tables" / "offset_commits")).to_pyarrow_table().to_pylist()
    got = sorted((r["coordinator_partition"], r["record_offset"], (r["group_id"], r["topic"], r["partition"]),
                  r["committed_offset"], r["previous_offset"], r["producer_id"]) for r in rows)
    assert len(got) > 10_000 and any(r[5] != -1 for r in got)  # transactional commits are in it
    assert got == want
    # earlier_records: how many rows of the same key come before each one (a key's last few: group_status).
    positions = defaultdict(list)
    for coordinator_partition, record_offset, key, *_ in want:  # in order: `want` is sorted
        positions[(coordinator_partition, key)].append(record_offset)
    earlier = sorted((p, o, i) for (p, _), offsets in positions.items() for i, o in enumerate(offsets))
    assert earlier == sorted((r["coordinator_partition"], r["record_offset"], r["earlier_records"]) for r in rows)


def test_burrows_rules_catch_the_samples_trouble_groups(demo):
    """The sample's stalled, stopped and rewound consumers are caught by group_status, and `describe --state`
    shows the history facts: the flapping group's rebalances, the worst lag in seconds."""
    base, _ = demo
    status = DeltaTable(str(base / "tables" / "group_status")).to_pyarrow_table().to_pylist()
    worst = {r["group_id"]: r["group_status"] for r in status}
    rules = {(r["group_id"], r["status"]) for r in status}
    assert worst["stall-app"] == "ERR" and ("stall-app", "STALL") in rules
    assert worst["stop-app"] == "ERR" and ("stop-app", "STOP") in rules
    assert worst["rewind-app"] == "ERR" and ("rewind-app", "REWIND") in rules
    assert worst["flapping-app"] == "OK"

    def state(group: str) -> list[str]:
        result = CliRunner().invoke(cli, ["describe", "--output", str(base / "tables"), "--group", group, "--state"])
        assert result.exit_code == 0, result.output
        lines = result.stdout.split("\n")
        assert lines[4].split() == ["LAST-REBALANCE", "REBALANCES-LAST-DAY", "STATUS", "MAX-LAG", "MAX-LAG-SECONDS"]
        return lines[5].split()

    stalled, flapping = state("stall-app"), state("flapping-app")
    assert stalled[2] == "ERR" and float(stalled[4]) > 0
    assert flapping[2] == "OK" and int(flapping[1]) >= 4 and flapping[0].endswith("Z")  # a rebalance every tick (5 h)
