"""What reaches people, from one demo run (`offsetlake demo`: the sample with its share groups, end offsets with log
start offsets, the report): `metrics` parsed with prometheus_client's parser and compared with the tables, `groups`,
and the report opened in a real browser (headless Chromium, tests/browser.py), its screenshot kept in
test-artifacts/."""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobs.cli import cli
from jobs.readers.metrics import BURROW_CODES
from runs import read_tables

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    result = invoke("demo", "--dir", str(base), "--records", "4000")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return base, summary, read_tables(base / "tables")


def test_the_demo_writes_the_report_and_prints_its_path(demo):
    base, summary, tables = demo
    assert summary["report"] == str(base / "report.html") and (base / "report.html").stat().st_size > 500_000
    assert summary["cluster"] == "demo"
    # Its history shows rates (a close watch of the last quarter hour) and a consumer that lost records.
    lag = tables["consumer_lag"]
    for column in ("consume_rate", "produce_rate", "catch_up_seconds", "log_start_offset"):
        assert any(r[column] is not None for r in lag), column
    assert {r["group_id"] for r in lag if (r["records_lost"] or 0) > 0} >= {"stop-app", "stall-app"}
    assert tables["share_partition_state"]  # the share coordinator's topic is in the sample


def parsed(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples}


def same(a: float, b: float | None) -> bool:
    return (b is None and math.isnan(a)) or (b is not None and a == pytest.approx(b))


def test_metrics_are_kafka_lag_exporters_and_burrows_with_the_tables_values(demo, tmp_path):
    base, summary, tables = demo
    result = invoke("metrics", "--output", str(base / "tables"))
    assert result.exit_code == 0, result.output
    got = parsed(result.stdout)
    members = {(m["group_id"], a["topic"], a["partition"]): m for m in tables["group_members"]
               for a in m["assigned_partitions"]}
    checked = 0
    for r in tables["consumer_lag"]:
        m = members.get((r["group_id"], r["topic"], r["partition"]))
        labels = tuple(sorted({"cluster_name": "demo", "group": r["group_id"], "topic": r["topic"],
                               "partition": str(r["partition"]), "member_host": m["client_host"] if m else "unknown",
                               "consumer_id": m["member_id"] if m else "unknown",
                               "client_id": m["client_id"] if m else "unknown"}.items()))
        assert got[("kafka_consumergroup_group_offset", labels)] == r["committed_offset"]
        assert got[("kafka_consumergroup_group_lag", labels)] == max(r["lag"], 0)  # as the exporter: never < 0
        assert same(got[("kafka_consumergroup_group_lag_seconds", labels)], r["lag_seconds"])
        lost = (("cluster_name", "demo"), ("group", r["group_id"]), ("partition", str(r["partition"])),
                ("topic", r["topic"]))
        assert got[("offsetlake_consumergroup_records_lost", lost)] == r["records_lost"]
        partition = (("cluster_name", "demo"), ("partition", str(r["partition"])), ("topic", r["topic"]))
        assert got[("kafka_partition_latest_offset", partition)] == r["log_end_offset"]
        assert got[("kafka_partition_earliest_offset", partition)] == r["log_start_offset"]
        checked += 1
    assert checked == len(tables["consumer_lag"]) > 100
    for group_id in {r["group_id"] for r in tables["consumer_lag"]}:
        rows = [r for r in tables["consumer_lag"] if r["group_id"] == group_id]
        key = (("cluster_name", "demo"), ("group", group_id))
        assert got[("kafka_consumergroup_group_max_lag", key)] == max(max(r["lag"], 0) for r in rows)
        assert got[("kafka_consumergroup_group_sum_lag", key)] == sum(max(r["lag"], 0) for r in rows)
        seconds = [r["lag_seconds"] for r in rows if r["lag_seconds"] is not None]
        assert same(got[("kafka_consumergroup_group_max_lag_seconds", key)], max(seconds) if seconds else None)
    for s in tables["group_status"]:
        key = (("cluster", "demo"), ("group", s["group_id"]), ("partition", str(s["partition"])), ("topic", s["topic"]))
        assert got[("kafka_burrow_partition_status", key)] == BURROW_CODES[s["status"]]
        assert got[("kafka_burrow_status", (("cluster", "demo"), ("group", s["group_id"])))] == \
            BURROW_CODES[s["group_status"]]
    health = {name: value for (name, labels), value in got.items() if name.startswith("offsetlake_run_")}
    assert health["offsetlake_run_records_read"] == summary["records_read"]
    assert health["offsetlake_run_records_quarantined"] == summary["records_quarantined"] == 2
    assert health["offsetlake_run_as_of_timestamp_seconds"] == pytest.approx(
        __import__("datetime").datetime.fromisoformat(summary["as_of"].replace("Z", "+00:00")).timestamp())
    assert 0 < health["offsetlake_run_duration_seconds"] < 600

    # --to: the same text, in a file replaced whole (no temporary file left beside it).
    target = tmp_path / "offsetlake.prom"
    target.write_text("old")
    written = invoke("metrics", "--output", str(base / "tables"), "--to", str(target))
    assert written.exit_code == 0 and written.stdout == ""
    assert target.read_text() == result.stdout and os.listdir(tmp_path) == ["offsetlake.prom"]


def test_groups_lists_every_group_with_its_lag_and_status(demo):
    base, _, tables = demo
    result = invoke("groups", "--output", str(base / "tables"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("run ") and "as of " in lines[0]
    assert lines[1].split() == ["group", "type", "protocol", "state", "members", "lag", "lag_seconds", "status",
                                "records_lost"]
    rows = {line.split()[0]: line.split() for line in lines[3:-1]}
    assert set(rows) == {g["group_id"] for g in tables["consumer_groups"]}
    stall = rows["stall-app"]
    assert stall[1:4] == ["classic", "consumer", "Stable"] and stall[7] == "ERR"
    assert int(stall[5]) == sum(r["lag"] for r in tables["consumer_lag"] if r["group_id"] == "stall-app")
    assert int(stall[8]) == sum(r["records_lost"] for r in tables["consumer_lag"] if r["group_id"] == "stall-app") > 0


def test_describe_flags_records_lost_and_describes_share_groups(demo):
    base, _, _ = demo
    stall = invoke("describe", "--output", str(base / "tables"), "--group", "stall-app")
    assert stall.exit_code == 0 and "Warning: retention deleted" in stall.stderr and "lagging-0-0: " in stall.stderr
    share = next(g["group_id"] for g in read_tables(base / "tables")["consumer_groups"] if g["group_type"] == "share")
    described = invoke("describe", "--output", str(base / "tables"), "--group", share)
    assert described.exit_code == 0 and described.stdout.split("\n")[1].split() == [
        "GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]


def test_the_report_is_one_offline_file(demo, tmp_path):
    base, _, _ = demo
    page = (base / "report.html").read_text()
    markup = re.sub(r"(?s)<script( type=\"module\")?>.*?</script>", "", page)  # the markup, not the inline scripts
    assert markup.count("<script") == 0 and page.count("<script") == 2  # both scripts inline
    assert not re.search(r"<link[^>]+href=|<img[^>]+src=|@import|https?://", markup)  # nothing fetched
    one = tmp_path / "one.html"
    result = invoke("report", "--output", str(base / "tables"), "--to", str(one), "--group", "stall-app",
                    "--since", "2026-11-15T00:00:00Z")
    assert result.exit_code == 0 and result.stdout.strip() == str(one)
    text = one.read_text()
    assert text.count('<section class="group"') == 1 and 'id="group-stall-app"' in text
    unknown = CliRunner().invoke(cli, ["report", "--output", str(base / "tables"), "--to", str(one), "--group", "nope"])
    assert unknown.exit_code == 2 and "--group nope: no such group" in unknown.stderr


def test_the_report_renders_in_chromium_without_errors(demo):
    from browser import Browser, chromium_missing

    reason = chromium_missing()
    if reason:
        pytest.skip(reason)
    base, _, _ = demo
    page = base / "report.html"
    expected = len(re.findall(r'<div class="chart" id="chart-', page.read_text()))
    with Browser(width=1280, height=1000) as browser:
        browser.open(page.as_uri())
        rendered = browser.wait_until("document.body.dataset.charts")
        assert rendered == str(expected) and expected >= 10
        drawn = browser.evaluate("""[...document.querySelectorAll('.chart')].filter(
            c => c.querySelector('svg.marks') && c.querySelectorAll('svg.marks path, svg.marks rect').length > 5
        ).length""")
        assert drawn == expected  # every chart has its marks drawn
        assert browser.errors == []
        ARTIFACTS.mkdir(exist_ok=True)
        shot = browser.screenshot(ARTIFACTS / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
