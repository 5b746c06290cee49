"""The reduction (jobs.replay.reduction) on small Arrow logs: what it folds across a task's batches and what it
keeps whole, and what the run counts of the rows it gives (jobs.replay.counts)."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from offsets_log import MINUTE, OffsetsLog, member, random_log, utc
from offsets_log import T0 as LOG_T0

from jobs.base.arrow import TIMESTAMP
from jobs.base.tables import FOLD_STATE, REPLAY_STATE, arrow_schema
from jobs.decode.check import check
from jobs.replay.counts import count_rows, total
from jobs.replay.partition import ReplaySettings, replay_partition
from jobs.replay.records import records
from jobs.replay.reduction import combine, prefold, whole
from jobs.replay.resume import from_state
from offsets_codec import encode_key, encode_value

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0_US = int(T0.timestamp() * 1_000_000)
COMMIT, ABORT = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"


def _key(group: str, partition: int = 0) -> bytes:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition})


def _commit(offset: int) -> bytes:
    return encode_value(1, 3, {"offset": offset, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})


def _log(rows: list[tuple]) -> pa.Table:
    """(key, value, offset, seconds after T0, producer_id, is_control) as raw columns, coordinator partition 0."""
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()), "value": pa.array([r[1] for r in rows], pa.binary()),
        "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([T0_US + r[3] * 1_000_000 for r in rows], TIMESTAMP),
        "producer_id": pa.array([r[4] for r in rows], pa.int64()), "is_control": pa.array([r[5] for r in rows]),
    })


def _checked(log: pa.Table, *cuts: int) -> list[pa.Table]:
    """The log checked in batches cut at `cuts`, as a task reads it."""
    bounds = [0, *cuts, log.num_rows]
    return [check(records(log.slice(a, b - a))) for a, b in zip(bounds, bounds[1:])]


def test_a_task_keeps_each_keys_newest_plain_commit_and_every_other_record_whole():
    a, b = _key("a"), _key("b")
    log = _log([
        (a, _commit(1), 0, 0, -1, False),
        (a, b"\x00\x03broken", 1, 1, -1, False),  # fails the check: kept whole, never folded into a's newest
        (a, _commit(3), 2, 2, -1, False),
        (b, _commit(1), 3, 3, 7, False),  # transactional: kept whole
        (COMMIT, None, 4, 4, 7, True),  # a COMMIT marker
        (b, None, 5, 5, -1, False),  # a tombstone: reducible
        (a, _commit(9), 6, 100, -1, False),  # after as_of: its own fold
    ])
    batches = _checked(log, 3)  # a key's records span batches: folded across them
    out = pa.concat_tables(prefold(batches, T0_US + 50_000_000)).sort_by("record_offset").to_pylist()
    got = [(r["record_offset"], r["records"], r["reduced"], r["after_as_of"]) for r in out]
    assert got == [(1, 1, False, False), (2, 2, True, False), (3, 1, False, False), (4, 1, False, False),
                   (5, 1, True, False), (6, 1, True, True)]
    assert out[1]["newest_timestamp"] == datetime.fromtimestamp(T0.timestamp() + 2, timezone.utc)
    assert out[0]["error"] is not None


def test_the_counts_of_a_reduced_log_are_the_records_it_stands_for():
    """What the run summary counts, from a log reduced in two batches and combined: a malformed control key (an
    error), a marker of an unknown type (transactional, not an error), a bad key's two records (each its own error:
    the check comes before the fold, so they are never folded), an undecodable group record, a record after as_of."""
    bad_key = b"\x00\x01\x00\x03ab"  # an offset-commit key cut short: its values look right
    log = _log([
        (_key("a"), _commit(1), 0, 0, -1, False),
        (_key("a"), _commit(2), 1, 1, -1, False),
        (_key("b"), _commit(1), 2, 2, 7, False),
        (COMMIT, None, 3, 3, 7, True),
        (b"\x80\x00\x00\x01", None, 4, 4, 7, True),  # malformed
        (b"\x00\x00\x00\x05", None, 5, 5, 7, True),  # an unknown marker type
        (bad_key, _commit(1), 6, 6, -1, False),
        (bad_key, _commit(2), 7, 7, -1, False),
        (encode_key(2, {"group": "g"}), b"\x00\x03junk", 8, 8, -1, False),  # undecodable group metadata
        (_key("a"), _commit(3), 9, 9, -1, False),
        (_key("a"), _commit(4), 10, 10, -1, False),  # after as_of
    ])
    as_of_us = T0_US + 9 * 1_000_000
    rows = combine([pa.concat_tables(prefold(_checked(log, 7), as_of_us))])
    folded = {r["record_offset"]: r["records"] for r in rows.to_pylist()}
    assert folded == {2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 3, 10: 1}
    summary = total(count_rows(rows, as_of_us))
    assert (summary["records_read"], summary["records_quarantined"], summary["records_after_as_of"]) == (11, 4, 1)
    assert summary["transactional_records"] == 4
    assert summary["records_by_type"] == {"OffsetCommit": 5, "TransactionMarker": 2}


# --- fold_decided: a kept log with its decided transactions folded replays as the whole log -----------------------

_OPERATION = st.tuples(
    st.just(0),  # one coordinator partition: what a partition's replay sees
    st.sampled_from(["commit", "commit", "commit", "tombstone", "marker", "marker", "marker", "group",
                     "group_tombstone"]),
    st.sampled_from(("g0", "g1")), st.sampled_from("ab"), st.just(0),
    st.sampled_from([-1, 201, 202]),  # producer: -1 plain
    st.sampled_from(["COMMIT", "ABORT"]),
)
_TABLES = ("committed_offsets", "expired_offsets", "consumer_groups", "pending_transactions", "quarantine", "group_rows")


def _settings(as_of_minutes: int, keep_log: bool) -> ReplaySettings:
    return ReplaySettings(utc(LOG_T0 + as_of_minutes * MINUTE).replace(tzinfo=timezone.utc), retention_ms=30 * MINUTE, history=False,
                          keep_log=keep_log)


def _replayed(rows: pa.Table, as_of_minutes: int, keep_log: bool = False, folded: pa.Table | None = None
              ) -> dict[str, list]:
    found: dict[str, list] = {}
    for name, table in replay_partition(rows, _settings(as_of_minutes, keep_log), folded):
        found.setdefault(name, []).extend(table.to_pylist())
    return found


def _whole(raw: pa.Table, as_of_minutes: int) -> pa.Table:
    return whole(check(records(raw)), (LOG_T0 + as_of_minutes * MINUTE) * 1000)


def _state(raw: pa.Table, as_of_minutes: int) -> pa.Table:
    return _kept(raw, as_of_minutes)[0]


def _kept(raw: pa.Table, as_of_minutes: int) -> tuple[pa.Table, pa.Table]:
    """What a run keeps of `raw` for the next one: its state and its group fold."""
    kept = _replayed(_whole(raw, as_of_minutes), as_of_minutes, keep_log=True)
    return (pa.Table.from_pylist(kept[REPLAY_STATE], arrow_schema(REPLAY_STATE)),
            pa.Table.from_pylist(kept.get(FOLD_STATE, []), arrow_schema(FOLD_STATE)))


def test_a_kept_log_folds_the_transactions_it_has_decided():
    """Producer 7 commits three times to one key and commits; 8 aborts; 9 is still open. The kept log holds one
    row for 7's commits, which also counts 8's aborted commit (it never applies), 9's commit whole, and the COMMIT
    and ABORT markers folded (they decide nothing left): the counts are those of the whole log."""
    log = OffsetsLog()
    for i in range(3):
        log.commit("g", "a", 0, 10 + i, LOG_T0 + i * MINUTE, producer_id=7)
    log.marker(7, "COMMIT", LOG_T0 + 3 * MINUTE)
    log.commit("g", "b", 0, 5, LOG_T0 + 4 * MINUTE, producer_id=8)
    log.marker(8, "ABORT", LOG_T0 + 5 * MINUTE)
    log.commit("g", "c", 0, 6, LOG_T0 + 6 * MINUTE, producer_id=9)
    state = _state(log.table(), 10)
    rows = sorted((r["record_offset"], r["producer_id"], r["transaction_marker"], r["reduced"], r["records"])
                  for r in state.to_pylist())
    assert rows == [(2, 7, None, True, 4), (3, 7, "COMMIT", True, 1), (5, 8, "ABORT", True, 1),
                    (6, 9, None, False, 1)]
    assert _replayed(from_state(state, (LOG_T0 + 10 * MINUTE) * 1000)["log"], 10)["counts"] == \
        _replayed(_whole(log.table(), 10), 10)["counts"]
    assert _replayed(from_state(state, (LOG_T0 + 10 * MINUTE) * 1000)["log"], 10)["committed_offsets"] == \
        _replayed(_whole(log.table(), 10), 10)["committed_offsets"]


@settings(max_examples=60, deadline=None)
@given(operations=st.lists(_OPERATION, min_size=2, max_size=50), split=st.floats(0, 1),
       first_as_of=st.integers(0, 50), as_of=st.integers(0, 60))
def test_a_kept_log_and_the_records_after_it_replay_as_the_whole_log(operations, split, first_as_of, as_of):
    """A run keeps its log (folded, decided transactions too) as its state, and its group fold; the next one
    replays state + the rest at a later as_of, folding again only the groups whose records differ. Every state
    table and the fold equal the replay of the whole log; so do the kept run's own."""
    raw = random_log(operations).table()
    assume(raw.num_rows > 0)
    cut = max(1, int(raw.num_rows * split))
    as_of = max(as_of, first_as_of)  # an earlier as_of replays the archive (jobs.sources.replay_state)
    state, fold = _kept(raw.slice(0, cut), first_as_of)
    cutoff = (LOG_T0 + as_of * MINUTE) * 1000
    resumed = pa.concat_tables([_whole(raw.slice(cut), as_of), from_state(state, cutoff)["log"]])
    expected = _replayed(_whole(raw, as_of), as_of)
    for found in (_replayed(resumed, as_of, keep_log=True, folded=fold),
                  _replayed(_whole(raw, as_of), as_of, keep_log=True)):
        for table in _TABLES:
            assert _sorted(found.get(table, [])) == _sorted(expected.get(table, [])), table


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=repr)


# --- the group fold a run keeps: the next run folds again only the groups with other records ----------------------

def test_a_resumed_replay_folds_again_only_the_groups_whose_records_changed(monkeypatch):
    """Three groups in the first run; the second adds a record of one and deletes another. Only those two are
    decoded and folded again; the third's rows are the kept ones, and every output equals the whole log's."""
    import jobs.replay.resume as resume

    log = OffsetsLog()
    for name in ("kept", "joined", "deleted"):
        log.group(name, LOG_T0, members=[member(f"{name}-1", ["a"], {"a": [0]})])
    first = len(log.rows)
    log.group("joined", LOG_T0 + MINUTE, members=[member("joined-1", ["a"], {"a": [0]}),
                                                  member("joined-2", ["a"], {"a": [0]})], generation=2)
    log.delete_group("deleted", LOG_T0 + MINUTE)
    raw = log.table()
    state, fold = _kept(raw.slice(0, first), 5)
    assert sorted(set(fold.column("group_id").to_pylist())) == ["deleted", "joined", "kept"]
    folded: list[str] = []
    replay_groups = resume.replay_groups

    def counted(records: pa.Table, *args, **kwargs) -> pa.Table:
        folded.extend(set(records.column("group_id").to_pylist()))
        return replay_groups(records, *args, **kwargs)

    monkeypatch.setattr(resume, "replay_groups", counted)
    resumed = pa.concat_tables([_whole(raw.slice(first), 10), from_state(state, (LOG_T0 + 10 * MINUTE) * 1000)["log"]])
    found = _replayed(resumed, 10, keep_log=True, folded=fold)
    assert sorted(folded) == ["deleted", "joined"]
    expected = _replayed(_whole(raw, 10), 10)
    for table in (*_TABLES, "group_rows"):
        assert _sorted(found.get(table, [])) == _sorted(expected.get(table, [])), table
    members = {r["member"]["member_id"] for r in found["group_rows"] if r["kind"] == "member"}
    assert members == {"kept-1", "joined-1", "joined-2"}


def test_a_fingerprint_is_the_set_of_records():
    """The same records in any order give the same fingerprint; one more, or another offset, another."""
    from jobs.replay.resume import fingerprints

    def of(offsets: list[int]) -> tuple:
        table = pa.table({"group_id": ["g"] * len(offsets), "record_offset": pa.array(offsets, pa.int64())})
        return tuple(fingerprints(table).to_pylist()[0].values())

    assert of([1, 5, 9]) == of([9, 1, 5])
    assert len({of([1, 5, 9]), of([1, 5, 9, 12]), of([1, 5, 10]), of([2, 4, 9])}) == 4


def test_the_group_records_a_kept_log_no_longer_holds_are_still_counted():
    """A consumer group's epoch rewritten, a member that stays and one that joined and left: the kept log holds the
    newest epoch and the member that stays, which count the others (the newest epoch its key's, the member the
    records of its type), so its counts by record type and its newest moments are those of the whole log."""
    def joined(member_id: str, minute: int) -> None:
        log.record("ConsumerGroupMemberMetadata", {"GroupId": "g", "MemberId": member_id}, {
            "InstanceId": None, "RackId": None, "ClientId": "c", "ClientHost": "/10.0.0.7",
            "SubscribedTopicNames": ["a"], "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 30_000,
            "ServerAssignor": "uniform", "ClassicMemberMetadata": None}, LOG_T0 + minute * MINUTE)

    log = OffsetsLog()
    for i in range(4):
        log.record("ConsumerGroupMetadata", {"GroupId": "g"}, {"Epoch": i, "MetadataHash": 0}, LOG_T0 + i * MINUTE)
    joined("stays", 4)
    joined("leaves", 5)
    log.record("ConsumerGroupMemberMetadata", {"GroupId": "g", "MemberId": "leaves"}, None, LOG_T0 + 6 * MINUTE)
    log.record("ConsumerGroupMetadata", {"GroupId": "g"}, {"Epoch": 9, "MetadataHash": 0}, LOG_T0 + 7 * MINUTE)
    state = _state(log.table(), 10)
    assert sorted((r["record_offset"], r["records"]) for r in state.to_pylist()) == [(4, 3), (7, 5)]
    resumed = _replayed(from_state(state, (LOG_T0 + 10 * MINUTE) * 1000)["log"], 10)
    whole_log = _replayed(_whole(log.table(), 10), 10)
    for table in ("counts", "consumer_groups", "group_rows"):
        assert _sorted(resumed[table]) == _sorted(whole_log[table]), table
