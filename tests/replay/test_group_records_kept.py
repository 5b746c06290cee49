"""The group records a run keeps for the next one (jobs.replay.groups.PartitionReplay.superseded): the group replay
of the records it keeps gives the rows of the replay of them all, whatever the records: identities, incarnations
and the violations a group tombstone leaves all read older records than each key's newest."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings, strategies as st
from offsets_log import MINUTE, T0, OffsetsLog, member

from jobs.decode.check import check
from jobs.replay.groups import GROUP_TYPES, replay_groups
from jobs.replay.records import records


def _record(log: OffsetsLog, kind: str, group: str, who: str, at: int, i: int) -> None:
    """One group record of `kind` for `group` (member `who`), or, for "delete", a family's group tombstone."""
    if kind == "classic":
        log.group(group, at, members=[member(who, ["orders"], {"orders": [0]})] if who == "a" else [], generation=i)
    elif kind == "classic_delete":
        log.delete_group(group, at)
    elif kind in ("member", "leave"):
        log.record("ConsumerGroupMemberMetadata", {"GroupId": group, "MemberId": who}, None if kind == "leave" else {
            "InstanceId": None, "RackId": None, "ClientId": who, "ClientHost": "/10.0.0.7",
            "SubscribedTopicNames": ["orders"], "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 30_000,
            "ServerAssignor": "uniform", "ClassicMemberMetadata": None}, at)
    elif kind in ("epoch", "delete"):
        log.record("ConsumerGroupMetadata", {"GroupId": group},
                   None if kind == "delete" else {"Epoch": i, "MetadataHash": 0}, at)
    elif kind in ("target", "untarget"):
        log.record("ConsumerGroupTargetAssignmentMember", {"GroupId": group, "MemberId": who},
                   None if kind == "untarget" else {"TopicPartitions": []}, at)
    elif kind in ("target_epoch", "target_delete"):
        log.record("ConsumerGroupTargetAssignmentMetadata", {"GroupId": group},
                   None if kind == "target_delete" else {"AssignmentEpoch": i}, at)
    elif kind in ("current", "uncurrent"):
        log.record("ConsumerGroupCurrentMemberAssignment", {"GroupId": group, "MemberId": who}, None
                   if kind == "uncurrent" else {"MemberEpoch": i, "PreviousMemberEpoch": i - 1, "State": 0,
                                                "AssignedPartitions": [], "PartitionsPendingRevocation": []}, at)
    elif kind in ("share", "share_delete"):
        log.record("ShareGroupMetadata", {"GroupId": group},
                   None if kind == "share_delete" else {"Epoch": i, "MetadataHash": 0}, at)


def _group_records(log: OffsetsLog) -> pa.Table:
    checked = check(records(log.table()))
    assert checked.column("error").null_count == checked.num_rows
    return checked.filter(pc.is_in(checked.column("record_type"), pa.array(GROUP_TYPES, pa.int16())))


def _rows(group_records: pa.Table) -> list[str]:
    """The replay's rows but its events (the history's: a run keeps no record for them), comparable."""
    rows = replay_groups(group_records, events=False).to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows if r["kind"] != "event")


def _kept(group_records: pa.Table) -> tuple[pa.Table, int]:
    superseded: list[tuple[int, int]] = []
    replay_groups(group_records, events=False, superseded=superseded)
    gone = pc.is_in(group_records.column("record_offset"), pa.array([o for _, o in superseded], pa.int64()))
    return group_records.filter(pc.invert(gone)), len(superseded)


KINDS = ["classic", "classic_delete", "member", "leave", "epoch", "delete", "target", "untarget", "target_epoch",
         "target_delete", "current", "uncurrent", "share", "share_delete"]


@settings(max_examples=200, deadline=None)
@given(operations=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["g", "h"]), st.sampled_from(["a", "b"])),
                           min_size=1, max_size=40))
def test_the_records_kept_replay_to_the_rows_of_them_all(operations):
    log = OffsetsLog()
    for i, (kind, group, who) in enumerate(operations):
        _record(log, kind, group, who, T0 + i * MINUTE, i)
    group_records = _group_records(log)
    kept, dropped = _kept(group_records)
    assert _rows(kept) == _rows(group_records)
    assert kept.num_rows + dropped == group_records.num_rows


def test_a_key_rewritten_many_times_keeps_its_newest_record_only():
    log = OffsetsLog()
    for i in range(10):
        _record(log, "epoch", "g", "a", T0 + i * MINUTE, i)
    kept, dropped = _kept(_group_records(log))
    assert (kept.num_rows, dropped) == (1, 9)


def test_the_newest_event_of_a_family_stays_when_a_newer_record_of_its_key_is_no_event():
    """A consumer member's record made the id a consumer group's after a classic one; the member's tombstone, its key's
    newest, is no identity event: without the record before it the classic group would hold the id again."""
    log = OffsetsLog()
    for i, kind in enumerate(["classic", "member", "leave"]):
        _record(log, kind, "g", "a", T0 + i * MINUTE, i)
    group_records = _group_records(log)
    kept, dropped = _kept(group_records)
    assert dropped == 0 and _rows(kept) == _rows(group_records)


def test_a_member_that_left_is_forgotten_once_its_group_has_other_records():
    log = OffsetsLog()
    for i, kind in enumerate(["epoch", "member", "current", "uncurrent", "leave", "epoch"]):
        _record(log, kind, "g", "a", T0 + i * MINUTE, i)
    group_records = _group_records(log)
    kept, _ = _kept(group_records)
    assert kept.column("record_type").to_pylist() == [3]  # the group's newest epoch alone
    assert _rows(kept) == _rows(group_records)


def test_a_group_tombstone_still_sees_the_records_before_it():
    """A member's record and its tombstone before the group's tombstone, and another tombstone after: the violation
    the group tombstone leaves reads the member's newest record before it, so the key keeps it."""
    log = OffsetsLog()
    for i, kind in enumerate(["member", "leave", "delete", "leave"]):
        _record(log, kind, "g", "a", T0 + i * MINUTE, i)
    group_records = _group_records(log)
    kept, _ = _kept(group_records)
    assert _rows(kept) == _rows(group_records)
