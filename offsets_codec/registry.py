"""Record type id -> `RecordType`. The only place the type numbers of ``__consumer_offsets`` live (spec §3)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .layout import RecordType
from .layouts import classic_group as cg, consumer_group as kc, offsets as oc, share_group as sg, share_state as ss
from .layouts import streams_group as st

# Spec §3 and §4.4: the 3.7 early-access KIP-848 layout of type 8 (TargetMemberEpoch, PartitionsPendingAssignment,
# Error, MetadataVersion, MetadataBytes) and the 4.0 early-access share layouts of types 11 and 15 (fields added
# untagged in 4.1) cannot be read with today's declarations.
_KIP848_EARLY_ACCESS = "Kafka 3.7 early-access KIP-848 brokers wrote an older, incompatible layout of this record"
_SHARE_EARLY_ACCESS = "Kafka 4.0 early-access share groups wrote an older, incompatible layout of this record"

_TYPES = (
    # Type 0 is the 0.8.2 key type. Kafka <= 4.0 decoded its values with OffsetCommitValue at any
    # version; 4.1+ accepts only v0 (LegacyOffsetCommitValue, the same bytes). We keep the wider rule.
    RecordType(0, "LegacyOffsetCommit", oc.LEGACY_OFFSET_COMMIT_KEY, oc.OFFSET_COMMIT_VALUE, "offsets",
               "read-only legacy, written only by 0.8.2"),
    RecordType(1, "OffsetCommit", oc.OFFSET_COMMIT_KEY, oc.OFFSET_COMMIT_VALUE, "offsets", "active"),
    RecordType(2, "GroupMetadata", cg.GROUP_METADATA_KEY, cg.GROUP_METADATA_VALUE, "classic", "active"),
    RecordType(3, "ConsumerGroupMetadata", kc.CONSUMER_GROUP_METADATA_KEY, kc.CONSUMER_GROUP_METADATA_VALUE,
               "consumer", "active"),
    RecordType(4, "ConsumerGroupPartitionMetadata", kc.CONSUMER_GROUP_PARTITION_METADATA_KEY,
               kc.CONSUMER_GROUP_PARTITION_METADATA_VALUE, "consumer", "written up to 4.0, only tombstoned since 4.1"),
    RecordType(5, "ConsumerGroupMemberMetadata", kc.CONSUMER_GROUP_MEMBER_METADATA_KEY,
               kc.CONSUMER_GROUP_MEMBER_METADATA_VALUE, "consumer", "active"),
    RecordType(6, "ConsumerGroupTargetAssignmentMetadata", kc.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
               kc.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, "consumer", "active"),
    RecordType(7, "ConsumerGroupTargetAssignmentMember", kc.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
               kc.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, "consumer", "active"),
    RecordType(8, "ConsumerGroupCurrentMemberAssignment", kc.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
               kc.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, "consumer", "active",
               early_access=_KIP848_EARLY_ACCESS),
    RecordType(9, "ShareGroupPartitionMetadata", sg.SHARE_GROUP_PARTITION_METADATA_KEY,
               sg.SHARE_GROUP_PARTITION_METADATA_VALUE, "share", "removed in 4.1 (4.0 early access only)"),
    RecordType(10, "ShareGroupMemberMetadata", sg.SHARE_GROUP_MEMBER_METADATA_KEY,
               sg.SHARE_GROUP_MEMBER_METADATA_VALUE, "share", "active"),
    RecordType(11, "ShareGroupMetadata", sg.SHARE_GROUP_METADATA_KEY, sg.SHARE_GROUP_METADATA_VALUE, "share",
               "active; 4.0 records are incompatible", early_access=_SHARE_EARLY_ACCESS),
    RecordType(12, "ShareGroupTargetAssignmentMetadata", sg.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
               sg.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, "share", "active"),
    RecordType(13, "ShareGroupTargetAssignmentMember", sg.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
               sg.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, "share", "active"),
    RecordType(14, "ShareGroupCurrentMemberAssignment", sg.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
               sg.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, "share", "active"),
    RecordType(15, "ShareGroupStatePartitionMetadata", sg.SHARE_GROUP_STATE_PARTITION_METADATA_KEY,
               sg.SHARE_GROUP_STATE_PARTITION_METADATA_VALUE, "share", "active; 4.0 records are incompatible",
               early_access=_SHARE_EARLY_ACCESS),
    RecordType(16, "ConsumerGroupRegularExpression", kc.CONSUMER_GROUP_REGULAR_EXPRESSION_KEY,
               kc.CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE, "consumer", "active (4.0+)"),
    RecordType(17, "StreamsGroupMetadata", st.STREAMS_GROUP_METADATA_KEY, st.STREAMS_GROUP_METADATA_VALUE,
               "streams", "active"),
    RecordType(18, "StreamsGroupPartitionMetadata", st.STREAMS_GROUP_PARTITION_METADATA_KEY,
               st.STREAMS_GROUP_PARTITION_METADATA_VALUE, "streams", "never released (trunk Dec 2024 - Jun 2025)"),
    RecordType(19, "StreamsGroupMemberMetadata", st.STREAMS_GROUP_MEMBER_METADATA_KEY,
               st.STREAMS_GROUP_MEMBER_METADATA_VALUE, "streams", "active"),
    RecordType(20, "StreamsGroupTargetAssignmentMetadata", st.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
               st.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, "streams", "active"),
    RecordType(21, "StreamsGroupTargetAssignmentMember", st.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
               st.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, "streams", "active"),
    RecordType(22, "StreamsGroupCurrentMemberAssignment", st.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
               st.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, "streams", "active"),
    RecordType(23, "StreamsGroupTopology", st.STREAMS_GROUP_TOPOLOGY_KEY, st.STREAMS_GROUP_TOPOLOGY_VALUE,
               "streams", "active"),
)

REGISTRY: Mapping[int, RecordType] = MappingProxyType({rt.record_type: rt for rt in _TYPES})


# Offset commits and their tombstones (types 0 and 1): one key layout and one value layout between them.
OFFSET_COMMIT_TYPES = tuple(rt.record_type for rt in _TYPES if rt.group_family == "offsets")


def record_type_named(name: str) -> int:
    """The type id of a record type by its name (e.g. "ConsumerGroupMetadata"); KeyError if unknown."""
    return _BY_NAME[name]


_BY_NAME = {rt.name: rt.record_type for rt in _TYPES}


OFFSETS_TOPIC = "__consumer_offsets"
SHARE_STATE_TOPIC = "__share_group_state"

# ``__share_group_state``, the share coordinator's topic (spec §3, "Not in this topic"): its own type ids, which
# overlap the ones above, so its records are never decoded with REGISTRY.
_SHARE_STATE_TYPES = (
    RecordType(0, "ShareSnapshot", ss.SHARE_SNAPSHOT_KEY, ss.SHARE_SNAPSHOT_VALUE, "share_state",
               "active (4.1+; 4.0 early-access records are incompatible)", early_access=_SHARE_EARLY_ACCESS),
    RecordType(1, "ShareUpdate", ss.SHARE_UPDATE_KEY, ss.SHARE_UPDATE_VALUE, "share_state",
               "active (4.1+; 4.0 early-access records are incompatible)", early_access=_SHARE_EARLY_ACCESS),
)
SHARE_STATE_REGISTRY: Mapping[int, RecordType] = MappingProxyType({rt.record_type: rt for rt in _SHARE_STATE_TYPES})
SHARE_SNAPSHOT, SHARE_UPDATE = (rt.record_type for rt in _SHARE_STATE_TYPES)
