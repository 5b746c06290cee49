"""`--source segments:DIR`: broker log dirs written by our own segment writer (every codec, old message
sets, transactions, damage, stray files) and the real segments in ../shared/testdata, each checked
against the record-by-record reference replay (tests/reference_replay.py)."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from offsets_log import CONTROL_NAMES, MINUTE, T0, OffsetsLog, ms
from reference_replay import LogEntry, replay_log
from replay.test_transactions import random_log
from runs import read_tables

from jobs.base.errors import BadInput
from jobs.cli import cli
from jobs.config import KafkaOptions, RebuildConfig, SourceSpec
from jobs.pipeline import run
from jobs.sources import tasks
from jobs.sources.plan import plan_source
from jobs.sources.segments import plan_segments, read_partition
from offsets_codec.segment_writer import encode_batch, segment_file_name, write_segment
from offsets_codec.segments import Batch, LogRecord, read_segment_file

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
AS_OF = "2030-01-01T00:00:00Z"
FOREVER = str(100 * 365 * 24 * 60)  # retention in minutes: nothing expires by age


def mixed_log() -> OffsetsLog:
    """A random transactional log over coordinator partitions 0-4, plus plain commits in partitions 5-6."""
    log = random_log(seed=7, records=1500, partitions=5)
    for i in range(60):
        log.commit(f"old-{i % 3}", "legacy", i % 4, offset=i, at=T0 + i * MINUTE, coordinator=5 + i % 2)
    return log


def write_log_dir(log: OffsetsLog, root: Path) -> Path:
    # Partition p gets codec p; partitions 5 and 6 are v0 and v1 message sets (gzip, lz4): pre-0.11 brokers.
    log.write_segments(root, compression={**CODECS, 5: "gzip", 6: "lz4"}, batch_records=7, segment_records=120,
                       magic={5: 0, 6: 1})
    return root


def run_cli(source: Path, output: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, ["rebuild", "--source", f"segments:{source}", "--output", str(output),
                                      "--as-of", AS_OF, "--retention-minutes", FOREVER, *extra],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def table(output: Path, name: str) -> list[dict]:
    return DeltaTable(str(output / name)).to_pyarrow_table().to_pylist()


def entries(log: OffsetsLog):
    return [LogEntry(r[3], r[4], r[7], CONTROL_NAMES[r[0][3]] if r[10] else None, r[0], r[1]) for r in log.rows]


def offsets_of(rows: list[dict]) -> dict:
    return {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"]):
            (r["committed_offset"], r["record_offset"]) for r in rows}


def pending_of(rows: list[dict]) -> dict:
    return {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"], r["producer_id"]):
            (r["offset"], r["record_offset"]) for r in rows}


@pytest.fixture(scope="module")
def segment_run(tmp_path_factory):
    log = mixed_log()
    root = write_log_dir(log, tmp_path_factory.mktemp("logdir") / "kafka-logs")
    output = tmp_path_factory.mktemp("tables")
    return log, root, output, run_cli(root, output)


def test_every_record_of_every_codec_and_format_is_read(segment_run):
    log, root, output, summary = segment_run
    assert summary["records_read"] == len(log.rows)
    assert summary["records_quarantined"] == 0 and summary["segment_errors"] == 0
    assert summary["records_by_type"]["TransactionMarker"] == sum(1 for r in log.rows if r[10])
    assert len(list(root.glob("*/*.log"))) > 14  # several segments per partition, read in base-offset order


def test_segments_give_the_brokers_offsets_and_open_transactions(segment_run):
    log, _, output, summary = segment_run
    want = replay_log(entries(log))
    assert offsets_of(table(output, "committed_offsets")) == {
        k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert pending_of(table(output, "pending_transactions")) == {
        k: (v.offset, v.record_offset) for k, v in want.pending.items()}
    assert summary["pending_transactions"] == len(want.pending) > 0


def test_segments_and_a_read_committed_dump_agree_except_for_open_transactions(segment_run, tmp_path):
    """A read_committed consumer skips markers and aborted commits and stops at the last stable offset,
    so only the partitions with open transactions can differ, and there only from that offset on."""
    log, _, output, _ = segment_run
    view = log.read_committed()
    view.write_parquet(tmp_path / "dump")
    dumped = CliRunner().invoke(cli, ["rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output",
                                      str(tmp_path / "out"), "--as-of", AS_OF, "--retention-minutes", FOREVER],
                                catch_exceptions=False)
    assert dumped.exit_code == 0, dumped.output
    from_segments = offsets_of(table(output, "committed_offsets"))
    from_dump = offsets_of(table(tmp_path / "out", "committed_offsets"))
    open_partitions = {k[0] for k in pending_of(table(output, "pending_transactions"))}
    assert open_partitions and open_partitions != set(range(7))
    same = {k: v for k, v in from_segments.items() if k[0] not in open_partitions}
    assert same == {k: v for k, v in from_dump.items() if k[0] not in open_partitions}
    groups = {name: {(g["coordinator_partition"], g["group_id"]): (g["state"], g["offset_count"])
                     for g in table(out, "consumer_groups") if g["coordinator_partition"] not in open_partitions}
              for name, out in (("segments", output), ("dump", tmp_path / "out"))}
    assert groups["segments"] == groups["dump"] and len(groups["dump"]) > 3
    # Where a transaction is open, the dump is the broker's state as of the last stable offset.
    stable = [r for r in view.rows if r[3] in open_partitions]
    assert {k: v for k, v in from_dump.items() if k[0] in open_partitions} == {
        k: (v.offset, v.record_offset) for k, v in replay_log(entries_of_rows(stable)).committed.items()}
    assert table(tmp_path / "out", "pending_transactions") == []


def entries_of_rows(rows):
    log = OffsetsLog()
    log.rows = rows
    return entries(log)


def test_segment_rows_keep_their_batch_metadata(segment_run):
    log, root, _, _ = segment_run
    plan = plan_source(SourceSpec("segments", str(root)), KafkaOptions(), cores=2)
    assert len(plan.tasks) == 7 and plan.ignored == ()  # a task per coordinator partition
    got = {}
    for task in plan.tasks:
        for batch in plan.read(task):
            assert batch.column("problem").null_count == batch.num_rows  # no damage here
            got.update({(p, o): (pid, tx, control) for p, o, pid, tx, control in zip(*(
                batch.column(c).to_pylist() for c in ("partition", "offset", "producer_id", "is_transactional",
                                                      "is_control")))})
    want = {(r[3], r[4]): (r[7], r[9], r[10]) for r in log.rows}
    assert got == want


# --- damage and stray files ------------------------------------------------------------------------

def batch_positions(path: Path) -> list[Batch]:
    return [b for b in read_segment_file(path) if isinstance(b, Batch)]


@pytest.fixture(scope="module")
def damaged_run(tmp_path_factory):
    log = mixed_log()
    root = write_log_dir(log, tmp_path_factory.mktemp("damaged") / "kafka-logs")
    lost: set[tuple[int, int]] = set()
    # A CRC error in the middle of partition 1's first segment: the rest of that segment is not read.
    first = sorted((root / "__consumer_offsets-1").glob("*.log"))[0]
    batches = batch_positions(first)
    hit = batches[len(batches) // 2]
    data = bytearray(first.read_bytes())
    data[hit.position + hit.size - 3] ^= 0xFF
    first.write_bytes(bytes(data))
    lost |= {(1, r.offset) for b in batches[len(batches) // 2:] for r in b.records}
    # A broker killed mid-write: partition 2's last segment ends inside its last batch.
    last = sorted((root / "__consumer_offsets-2").glob("*.log"))[-1]
    tail = batch_positions(last)[-1]
    last.write_bytes(last.read_bytes()[:tail.position + tail.size - 5])
    lost |= {(2, r.offset) for r in tail.records}
    # Files a log dir holds besides segments, and leftovers that must never be parsed as logs.
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex", "00000000000000000000.txnindex",
                 "00000000000000000120.snapshot", "partition.metadata"):
        (root / "__consumer_offsets-0" / name).write_bytes(b"\x00" * 16)
    (root / "__consumer_offsets-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    shutil.copy(first, root / "__consumer_offsets-3" / "00000000000000000999.log.deleted")
    shutil.copy(first, root / "__consumer_offsets-3" / "00000000000000000000.log.cleaned")
    (root / "__consumer_offsets-3" / "00000000000000000999.log.swap").write_bytes(b"junk")
    (root / "__consumer_offsets-4.0123abcd-delete").mkdir()
    output = tmp_path_factory.mktemp("damaged-tables")
    summary = run_cli(root, output)
    survivors = OffsetsLog()
    survivors.rows = [r for r in log.rows if (r[3], r[4]) not in lost]
    return survivors, root, output, summary, (first, hit.position), (last, tail.position)


def test_damage_is_reported_where_it_is(damaged_run):
    _, root, output, summary, (crc_file, crc_at), (cut_file, cut_at) = damaged_run
    errors = {(Path(e["file"]).name, e["action"]): e for e in table(output, "segment_errors")}
    crc = errors[(crc_file.name, "segment_truncated")]
    assert crc["coordinator_partition"] == 1 and crc["position"] == crc_at and "CRC" in crc["reason"]
    assert crc["bytes_not_read"] == crc_file.stat().st_size - crc_at
    cut = next(e for e in table(output, "segment_errors") if e["coordinator_partition"] == 2)
    assert cut["position"] == cut_at and cut["action"] == "segment_truncated" and "truncated" in cut["reason"]
    ignored = {(Path(e["file"]).name, e["action"]) for e in table(output, "segment_errors")
               if e["action"] in ("file_ignored", "folder_ignored")}
    assert ignored == {("00000000000000000999.log.deleted", "file_ignored"),
                       ("00000000000000000000.log.cleaned", "file_ignored"),
                       ("00000000000000000999.log.swap", "file_ignored"),
                       ("__consumer_offsets-4.0123abcd-delete", "folder_ignored")}
    assert summary["segment_errors"] == 6  # the two damaged segments and the four leftovers; companions are silent
    assert {(Path(d["file"]).name, d["position"]) for d in summary["segment_damage"]} >= {
        (crc_file.name, crc_at), (cut_file.name, cut_at)}


def test_a_partition_folder_without_segments_is_reported(tmp_path):
    """A partition folder with no `.log` file (only an index, or nothing) has no records to read, and is
    listed in segment_errors: a log dir copied without its segments is not taken for empty partitions."""
    log = OffsetsLog()
    log.commit("g", "t", 0, 5, T0, coordinator=0)
    root = tmp_path / "kafka-logs"
    log.write_segments(root)
    (root / "__consumer_offsets-1").mkdir()
    (root / "__consumer_offsets-1" / "00000000000000000000.index").write_bytes(b"\x00" * 16)
    (root / "__consumer_offsets-2").mkdir()
    plan = plan_segments(str(root))
    assert [(p.partition, p.segments) for p in plan.partitions][1:] == [(1, ()), (2, ())]
    assert [(i.partition, i.path, i.action) for i in plan.ignored] == [
        (p, str(root / f"__consumer_offsets-{p}"), "folder_ignored") for p in (1, 2)]
    summary = run_cli(root, tmp_path / "out")
    assert summary["records_read"] == 1 and summary["segment_errors"] == 2
    assert sorted((e["coordinator_partition"], Path(e["file"]).name, e["action"], e["reason"])
                  for e in table(tmp_path / "out", "segment_errors")) == [
        (p, f"__consumer_offsets-{p}", "folder_ignored", "a partition folder with no log segment (.log)")
        for p in (1, 2)]
    assert offsets_of(table(tmp_path / "out", "committed_offsets")) == {(0, "g", "t", 0): (5, 0)}
    decoded = CliRunner().invoke(cli, ["decode", "--source", f"segments:{root}"], catch_exceptions=False).output
    assert [json.loads(line) for line in decoded.splitlines()][:2] == [
        {"file": str(root / f"__consumer_offsets-{p}"), "ignored": "a partition folder with no log segment (.log)"}
        for p in (1, 2)]
    # Only such a folder: a run with no records, and the folder in segment_errors.
    alone = run_cli(root / "__consumer_offsets-2", tmp_path / "alone")
    assert alone["records_read"] == 0 and alone["segment_errors"] == 1


def test_damage_loses_only_what_follows_it_in_its_segment(damaged_run):
    survivors, _, output, summary, _, _ = damaged_run
    assert summary["records_read"] == len(survivors.rows) and summary["records_quarantined"] == 0
    want = replay_log(entries(survivors))
    assert offsets_of(table(output, "committed_offsets")) == {
        k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert pending_of(table(output, "pending_transactions")) == {
        k: (v.offset, v.record_offset) for k, v in want.pending.items()}


def test_spark_reads_a_damaged_log_dir_as_the_local_runner_does(spark, damaged_run, tmp_path):
    """The same log dir on Spark's tasks (a task per partition through the kernel): the same tables, the damage
    rows and the ignored files included."""
    _, root, output, summary, _, _ = damaged_run
    on_spark = run_cli(root, tmp_path / "spark", "--engine", "spark")
    assert (summary["runner"], on_spark["runner"]) == ("local", "spark")
    for key in ("records_read", "records_decoded", "records_quarantined", "segment_errors", "committed_offsets",
                "pending_transactions", "groups"):
        assert on_spark[key] == summary[key], key
    assert sorted(map(str, on_spark["segment_damage"])) == sorted(map(str, summary["segment_damage"]))
    local, by_spark = read_tables(output), read_tables(tmp_path / "spark")
    assert set(by_spark) == set(local) and local["segment_errors"]
    for name in local:
        assert by_spark[name] == local[name], name


def test_a_partition_streams_through_a_task_in_bounded_batches(tmp_path, monkeypatch):
    """A task holds at most BATCH_BYTES of keys and values (plus one log batch) before it yields, so a
    segment larger than the task's memory streams through; rows still come out in log order."""
    monkeypatch.setattr(tasks, "BATCH_BYTES", 1 << 20)
    folder = tmp_path / "__consumer_offsets-3"
    folder.mkdir()
    value, per_batch = bytes(20_000), 10  # group metadata values this size are ordinary
    records = [LogRecord(i, T0 + i, 0, b"key-%d" % i, value) for i in range(600)]  # a 12 MB segment
    write_segment(folder / segment_file_name(0), (encode_batch(records[i:i + per_batch])
                                                  for i in range(0, len(records), per_batch)))
    batches = list(read_partition(plan_segments(str(folder)).partitions[0]))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(600))
    # A task yields once it holds 1 MiB: after 6 log batches of 10 records (1.2 MB), without the byte
    # bound it would have held all 600 (BATCH_ROWS is 10,000).
    assert [b.num_rows for b in batches] == [60] * 10
    for b in batches:
        held = sum(len(k) + len(v) for k, v in zip(b.column("key").to_pylist(), b.column("value").to_pylist()))
        assert held < (1 << 20) + per_batch * (len(value) + 16)
    assert set(batches[0].column("partition").to_pylist()) == {3}


def test_source_errors_are_one_line(tmp_path):
    with pytest.raises(BadInput, match="no such directory"):
        plan_segments(str(tmp_path / "missing"))
    with pytest.raises(BadInput, match="no __consumer_offsets-N folder"):
        plan_segments(str(tmp_path))
    for log_dir in ("a", "b"):
        (tmp_path / log_dir / "__consumer_offsets-7").mkdir(parents=True)
    with pytest.raises(BadInput, match="partition 7 is in two folders"):
        plan_segments(str(tmp_path))
    one = plan_segments(str(tmp_path / "a" / "__consumer_offsets-7"))  # a single partition folder
    assert [p.partition for p in one.partitions] == [7]
    (tmp_path / "b" / "__consumer_offsets-7").rename(tmp_path / "b" / "__consumer_offsets-8")
    for name in ("00000000000000000100.log", "00000000000000000020.log", "00000000000000000003.log"):
        (tmp_path / "b" / "__consumer_offsets-8" / name).write_bytes(b"")
    several = plan_segments(str(tmp_path))  # a folder holding several log dirs (JBOD)
    assert [p.partition for p in several.partitions] == [7, 8]
    assert several.partitions[1].segments == ("00000000000000000003.log", "00000000000000000020.log",
                                              "00000000000000000100.log")


# --- real broker log dirs (../shared/testdata) -----------------------------------------------------

def real_log_dirs(testdata: Path) -> list[Path]:
    return sorted({p.parent for p in (testdata / "broker-segments").glob("**/__consumer_offsets-*")})


def test_real_log_dirs_rebuild_as_the_reference_replay_says(shared_testdata, tmp_path):
    """All 26 real log dirs in one read of the segments source and one rebuild: dir i's coordinator
    partitions become 1000*i + p (one log dir of links to their folders), so the clusters stay apart (state
    never crosses coordinator partitions). The reference replay folds the same files, read by the codec, one
    record at a time."""
    manifest = json.loads((shared_testdata / "broker-segments" / "MANIFEST.json").read_text())
    root = tmp_path / "all-log-dirs"
    root.mkdir()
    expected_entries = []
    for i, log_dir in enumerate(real_log_dirs(shared_testdata)):
        for folder in plan_segments(str(log_dir)).partitions:
            p = 1000 * i + folder.partition
            (root / f"__consumer_offsets-{p}").symlink_to(folder.directory, target_is_directory=True)
            for name in folder.segments:
                for batch in read_segment_file(Path(folder.directory) / name):
                    assert isinstance(batch, Batch)  # every CRC verified, nothing truncated
                    expected_entries += [LogEntry(p, r.offset, batch.producer_id, batch.control_type, r.key, r.value)
                                         for r in batch.records]
    summary = run(RebuildConfig.build(source=f"segments:{root}", output=str(tmp_path / "out"),
                                      retention_minutes=int(FOREVER), engine="local", workers=0))
    assert summary["segment_errors"] == 0
    assert summary["records_read"] == sum(e["records"] for e in manifest) == len(expected_entries)
    assert summary["records_quarantined"] == 0
    tables = read_tables(tmp_path / "out")
    newest = datetime.fromisoformat(summary["as_of"].replace("Z", "+00:00"))  # the newest record's time
    assert newest == max(datetime.fromtimestamp(t / 1000, timezone.utc) for t in (
        r.timestamp for f in root.glob("*/*.log") for b in read_segment_file(f) for r in b.records))
    want = replay_log(expected_entries)
    live = tables["committed_offsets"] + tables["expired_offsets"]
    assert {(r["coordinator_partition"], r["group_id"], r["topic"], r["partition"]): (r["committed_offset"],
                                                                                        r["record_offset"])
            for r in live} == {k: (v.offset, v.record_offset) for k, v in want.committed.items()}
    assert tables["pending_transactions"] == [] == list(want.pending)
    groups = {(r["coordinator_partition"], r["group_id"]): r for r in tables["consumer_groups"]}
    members: dict = {}
    for m in tables["group_members"]:
        members.setdefault((m["coordinator_partition"], m["group_id"]), set()).add(m["member_id"])
    committed, expired = tables["committed_offsets"], tables["expired_offsets"]
    # The commit history too: every offset record applied, in log order, with what it replaced.
    history = sorted((r["coordinator_partition"], r["record_offset"], (r["group_id"], r["topic"], r["partition"]),
                      r["committed_offset"], r["previous_offset"], r["producer_id"])
                     for r in tables["offset_commits"])
    # With a century of retention only an explicit expireTimestamp (value v1) can expire an offset, and
    # then only outside a Stable group (spec §8.2-8.3); these logs have such offsets.
    assert expired and all(r["expire_timestamp"] is not None and r["expire_timestamp"] <= newest for r in expired)
    for r in committed:
        if r["expire_timestamp"] is not None and r["expire_timestamp"] <= newest:
            assert want.groups[(r["coordinator_partition"], r["group_id"])].state == "Stable", r
    # Groups: the broker's groups, minus Empty ones left without live offsets (the cleanup deletes those, §8.4).
    offset_counts = Counter((r["coordinator_partition"], r["group_id"]) for r in committed)
    for key, g in want.groups.items():
        if key not in groups:
            assert g.state == "Empty" and key not in offset_counts, key
            continue
        got = groups[key]
        assert (got["state"], got["generation"], got["protocol_type"], got["protocol"], got["leader_id"],
                got["offset_count"]) == (g.state, g.generation, g.protocol_type, g.protocol, g.leader,
                                         offset_counts.get(key, 0)), key
        stamp = None if got["current_state_timestamp"] is None else ms(got["current_state_timestamp"])
        assert stamp == g.current_state_timestamp or g.is_simple, key
        assert (got["member_count"], members.get(key, set())) == (len(g.member_ids), set(g.member_ids)), key
    assert set(groups) <= set(want.groups) and len(groups) > 20
    assert history == sorted(tuple(a) for a in want.history) and len(history) > 1000


def test_a_real_log_dir_through_the_cli(shared_testdata, tmp_path):
    log_dir = max(real_log_dirs(shared_testdata), key=lambda d: sum(f.stat().st_size for f in d.glob("*/*.log")))
    result = CliRunner().invoke(cli, ["rebuild", "--source", f"segments:{log_dir}", "--output", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    records = sum(len(b.records) for f in log_dir.glob("*/*.log") for b in read_segment_file(f))
    assert summary["records_read"] == summary["records_decoded"] == records
    assert summary["segment_errors"] == 0 and summary["groups"] > 0
    assert summary["as_of"].startswith("20")  # the newest record's time, not now
    assert datetime.fromisoformat(summary["as_of"].replace("Z", "+00:00")) < datetime.now(timezone.utc)


# --- dump and decode -------------------------------------------------------------------------------

def test_a_dump_of_segments_keeps_the_batch_metadata(segment_run, tmp_path):
    _, root, output, _ = segment_run
    dumped = CliRunner().invoke(cli, ["dump", "--source", f"segments:{root}", "--output", str(tmp_path / "dump")],
                                catch_exceptions=False)
    assert dumped.exit_code == 0, dumped.output
    assert json.loads(dumped.output.strip().splitlines()[-1])["segment_errors"] == 0
    run_cli_parquet = CliRunner().invoke(cli, [
        "rebuild", "--source", f"parquet:{tmp_path / 'dump'}", "--output", str(tmp_path / "out"), "--as-of", AS_OF,
        "--retention-minutes", FOREVER], catch_exceptions=False)
    assert run_cli_parquet.exit_code == 0, run_cli_parquet.output
    for name, key in (("committed_offsets", offsets_of), ("pending_transactions", pending_of)):
        assert key(table(tmp_path / "out", name)) == key(table(output, name))


def test_decode_prints_records_markers_and_damage(segment_run, tmp_path):
    log, root, _, _ = segment_run
    result = CliRunner().invoke(cli, ["decode", "--source", f"segments:{root}"], catch_exceptions=False)
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert len(lines) == len(log.rows)
    assert sum(1 for x in lines if "marker" in x) == sum(1 for r in log.rows if r[10])
    assert all(x["key"]["type"] == 1 for x in lines if "marker" not in x)
    broken = tmp_path / "__consumer_offsets-0"
    shutil.copytree(root / "__consumer_offsets-0", broken)
    segment = sorted(broken.glob("*.log"))[0]
    segment.write_bytes(segment.read_bytes()[:-3])
    tail = [json.loads(line) for line in CliRunner().invoke(cli, ["decode", "--source", f"segments:{broken}"],
                                                             catch_exceptions=False).output.splitlines()]
    assert [x for x in tail if "damage" in x][0]["damage"].startswith("truncated")
