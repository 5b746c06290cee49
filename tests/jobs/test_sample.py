"""The sample dump: deterministic, realistic, and rebuilt into every kind of group the issue names."""
from __future__ import annotations

import json
from pathlib import Path
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.cli import cli
from jobs.decode import group_id_of
from jobs.sample import write_sample
from offsets_codec import decode_key, decode_value, partition_for


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
    for p, o in zip(first["partition"], first["offset"]):
        assert o == per_partition.get(p, -1) + 1  # offsets are dense per coordinator partition
        per_partition[p] = o
    for key, p in zip(first["key"][:500], first["partition"][:500]):
        assert p == partition_for(group_id_of(decode_key(key).data), 50)  # groups live in their Kafka partition


def test_sample_has_what_the_issue_asks_for(sample):
    base, _ = sample
    table = pq.read_table(base / "dump").to_pydict()
    kinds = Counter()
    for key, value in zip(table["key"], table["value"]):
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
                 "protocol-consumer-empty", "protocol-connect-members"):
        assert kinds[kind] > 0, (kind, kinds)


def test_demo_rebuilds_the_sample_into_every_table(spark, tmp_path):
    result = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path), "--records", "20000"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["records_quarantined"] == 2 and len(summary["orphan_groups"]) == 1
    assert summary["expired_offsets"] > 0 and summary["consumer_lag"] > 0
    groups = DeltaTable(str(tmp_path / "tables" / "consumer_groups")).to_pyarrow_table().to_pylist()
    seen = Counter((g["group_type"], g["protocol_type"], g["state"]) for g in groups)
    assert seen[("classic", "consumer", "Stable")] and seen[("classic", "consumer", "Empty")]
    assert seen[("classic", "connect", "Stable")] and seen[("classic", None, "Empty")]  # Connect and simple groups
    assert seen[("consumer", "consumer", "Stable")] and seen[("streams", "streams", "Stable")]  # KIP-848, KIP-1071
    assert seen[("share", "share", "Stable")]
    assert summary["modern_group_records"] > 0 and summary["replay_violations"] == []
    for table in ("committed_offsets", "group_members", "group_target_assignments", "streams_topologies", "quarantine"):
        assert f"{table}: " in result.stdout


def test_the_notebook_runs_locally(spark, tmp_path, monkeypatch, capsys):
    import runpy

    monkeypatch.setenv("OFFSETLAKE_TOUR_DIR", str(tmp_path))
    monkeypatch.setenv("OFFSETLAKE_TOUR_RECORDS", "5000")
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "notebooks" / "offsetlake_tour.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "protocol_type" in out and "total_lag" in out and "unknown value version 9 for record type 1" in out
