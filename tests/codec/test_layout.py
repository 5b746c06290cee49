"""Declarations: the registry covers every record type, and bad layouts are refused when declared."""

import pytest

from offsets_codec import REGISTRY
from offsets_codec.errors import LayoutError
from offsets_codec.layout import INT32, INT64, STRING, UUID, ArrayOf, Field, Layout, RecordType, Struct
from offsets_codec.plan import plan_for

# spec §3: type -> (name, group family, value versions, flexible versions)
SPEC_REGISTRY = {
    0: ("LegacyOffsetCommit", "offsets", range(0, 5), {4}),
    1: ("OffsetCommit", "offsets", range(0, 5), {4}),
    2: ("GroupMetadata", "classic", range(0, 5), {4}),
    **{t: (n, "consumer", range(0, 1), {0}) for t, n in [
        (3, "ConsumerGroupMetadata"), (4, "ConsumerGroupPartitionMetadata"), (5, "ConsumerGroupMemberMetadata"),
        (6, "ConsumerGroupTargetAssignmentMetadata"), (7, "ConsumerGroupTargetAssignmentMember"),
        (8, "ConsumerGroupCurrentMemberAssignment"), (16, "ConsumerGroupRegularExpression")]},
    **{t: (n, "share", range(0, 1), {0}) for t, n in [
        (9, "ShareGroupPartitionMetadata"), (10, "ShareGroupMemberMetadata"), (11, "ShareGroupMetadata"),
        (12, "ShareGroupTargetAssignmentMetadata"), (13, "ShareGroupTargetAssignmentMember"),
        (14, "ShareGroupCurrentMemberAssignment"), (15, "ShareGroupStatePartitionMetadata")]},
    **{t: (n, "streams", range(0, 1), {0}) for t, n in [
        (17, "StreamsGroupMetadata"), (18, "StreamsGroupPartitionMetadata"), (19, "StreamsGroupMemberMetadata"),
        (20, "StreamsGroupTargetAssignmentMetadata"), (21, "StreamsGroupTargetAssignmentMember"),
        (22, "StreamsGroupCurrentMemberAssignment"), (23, "StreamsGroupTopology")]},
}


def test_registry_has_exactly_the_spec_record_types():
    assert sorted(REGISTRY) == list(range(24))
    for t, (name, family, versions, flexible) in SPEC_REGISTRY.items():
        rt = REGISTRY[t]
        assert (rt.record_type, rt.name, rt.group_family) == (t, name, family)
        assert list(rt.value.versions) == list(versions)
        assert {v for v in versions if v in rt.value.flexible} == flexible
        assert rt.key.flexible.empty, "keys are never flexible"


def test_type_0_reads_values_with_the_offset_commit_layout():
    assert REGISTRY[0].value is REGISTRY[1].value
    assert REGISTRY[0].key.fields == REGISTRY[1].key.fields


def test_registry_is_read_only():
    with pytest.raises(TypeError):
        REGISTRY[99] = REGISTRY[1]  # type: ignore[index]


def test_key_field_names_are_kafkas():
    assert [f.name for f in REGISTRY[1].key.fields] == ["group", "topic", "partition"]
    assert [f.name for f in REGISTRY[2].key.fields] == ["group"]
    assert [f.name for f in REGISTRY[5].key.fields] == ["GroupId", "MemberId"]
    assert [f.name for f in REGISTRY[16].key.fields] == ["GroupId", "RegularExpression"]


def test_plans_know_which_fields_each_version_has():
    value = REGISTRY[1].value
    names = {v: [fp.name for fp in plan_for(value, v).fields] for v in value.versions}
    assert names == {
        0: ["offset", "metadata", "commitTimestamp"],
        1: ["offset", "metadata", "commitTimestamp", "expireTimestamp"],
        2: ["offset", "metadata", "commitTimestamp"],
        3: ["offset", "leaderEpoch", "metadata", "commitTimestamp"],
        4: ["offset", "leaderEpoch", "metadata", "commitTimestamp", "topicId"],
    }
    assert [fp.name for fp in plan_for(value, 4).tagged] == ["topicId"]
    assert plan_for(value, 3) is plan_for(value, 3), "plans are cached"


def test_plan_for_rejects_versions_outside_the_layout():
    with pytest.raises(ValueError):
        plan_for(REGISTRY[1].value, 5)


def _layout(*fields, valid="0-2", flexible="2+"):
    return Layout("Test", valid=valid, flexible=flexible, fields=tuple(fields))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: _layout(Field("a", INT32, "3+")), "lie outside the valid versions"),
        (lambda: _layout(Field("a", INT32, "0+", tag=0, tagged="0+")), "are not all flexible"),
        (lambda: _layout(Field("a", INT32, "2+", tag=0)), "without tagged versions"),
        (lambda: _layout(Field("a", INT32, "2+", tagged="2+")), "without a tag"),
        (lambda: _layout(Field("a", INT32, "2+", tag=0, tagged="2")), "must be open-ended"),
        (lambda: _layout(Field("a", INT32, "2+", tag=1, tagged="2+"), Field("b", INT64, "2+", tag=1, tagged="2+")),
         "tag 1 already used by a"),
        (lambda: _layout(Field("a", INT32), Field("a", INT64)), "duplicate field name"),
        (lambda: _layout(Field("a", INT32, nullable="0+")), "cannot be nullable"),
        (lambda: _layout(Field("a", STRING, "1+", nullable="0+")), "not a subset of versions"),
        (lambda: _layout(Field("a", STRING, "0+", nullable="1+", default=None)), "null default"),
        (lambda: _layout(Field("a", INT32, default=2**31)), "does not fit int32"),
        (lambda: _layout(Field("a", UUID, default="nope")), "is not a uuid"),
        (lambda: _layout(Field("a", ArrayOf(INT32), default=[1])), "can only default to empty or null"),
        (lambda: _layout(Field("a", STRING, "2+", nullable="3+", tag=0, tagged="2+")), "all tagged versions"),
        (lambda: _layout(Field("a", INT32), flexible="2"), "must be open-ended"),
        (lambda: _layout(Field("a", INT32, "x")), "invalid version range"),
        (lambda: _layout(Field("s", Struct("S", (Field("b", INT32, "5+"),)))), "Test.s.b"),
        (lambda: RecordType(99, "X", _layout(Field("a", INT32)), _layout(Field("a", INT32)), "offsets"),
         "must not be flexible"),
    ],
)
def test_bad_declarations_are_refused(make, message):
    with pytest.raises(LayoutError, match=message):
        make()


def test_a_good_declaration_with_every_feature_is_accepted():
    layout = _layout(
        Field("a", INT32),
        Field("b", STRING, "1+", nullable="1+", default=None),
        Field("c", ArrayOf(Struct("C", (Field("x", INT64),))), "0+"),
        Field("d", UUID, "2+", tag=0, tagged="2+"),
    )
    assert [fp.name for fp in plan_for(layout, 2).tagged] == ["d"]
