"""Share groups (KIP-932): types 9-15 (spec §4.4). Every value is version 0 and flexible.

These follow the newest schemas. Records written by 4.0 early access differ for types 11 and 15
(untagged fields were added later without a version bump), so they fail to decode or misparse;
Kafka itself has no compatibility path for them.
"""

from ..layout import INT8, INT32, INT64, STRING, UUID, ArrayOf, Field, Layout, Struct
from .consumer_group import TOPIC_METADATA

_GROUP_ID = Field("GroupId", STRING, "0")
_MEMBER_ID = Field("MemberId", STRING, "0")


def _key(name: str, *fields: Field) -> Layout:
    return Layout(name, valid="0", flexible="none", fields=fields)


# Removed in 4.1 (written only by 4.0 early-access share groups); decoded with its last schema,
# which is the same as ConsumerGroupPartitionMetadataValue's.
SHARE_GROUP_PARTITION_METADATA_KEY = _key("ShareGroupPartitionMetadataKey", _GROUP_ID)
SHARE_GROUP_PARTITION_METADATA_VALUE = Layout(
    "ShareGroupPartitionMetadataValue",
    valid="0",
    flexible="0+",
    fields=(Field("Topics", ArrayOf(TOPIC_METADATA), "0+"),),
)

SHARE_GROUP_MEMBER_METADATA_KEY = _key("ShareGroupMemberMetadataKey", _GROUP_ID, _MEMBER_ID)
SHARE_GROUP_MEMBER_METADATA_VALUE = Layout(
    "ShareGroupMemberMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("RackId", STRING, "0+", nullable="0+"),
        Field("ClientId", STRING, "0+"),
        Field("ClientHost", STRING, "0+"),
        Field("SubscribedTopicNames", ArrayOf(STRING), "0+"),
    ),
)

SHARE_GROUP_METADATA_KEY = _key("ShareGroupMetadataKey", _GROUP_ID)
SHARE_GROUP_METADATA_VALUE = Layout(
    "ShareGroupMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("Epoch", INT32, "0+"),
        Field("MetadataHash", INT64, "0+"),  # untagged, added in 4.1: 4.0 records lack it
    ),
)

SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = _key("ShareGroupTargetAssignmentMetadataKey", _GROUP_ID)
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Layout(
    "ShareGroupTargetAssignmentMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("AssignmentEpoch", INT32, "0+"),
        Field("AssignmentTimestamp", INT64, "0+", tag=0, tagged="0+"),  # 4.3, KIP-1263
    ),
)

_TOPIC_PARTITION = Struct("TopicPartition", (Field("TopicId", UUID, "0+"), Field("Partitions", ArrayOf(INT32), "0+")))

SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = _key("ShareGroupTargetAssignmentMemberKey", _GROUP_ID, _MEMBER_ID)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Layout(
    "ShareGroupTargetAssignmentMemberValue",
    valid="0",
    flexible="0+",
    fields=(Field("TopicPartitions", ArrayOf(_TOPIC_PARTITION), "0+"),),
)

SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = _key("ShareGroupCurrentMemberAssignmentKey", _GROUP_ID, _MEMBER_ID)
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Layout(
    "ShareGroupCurrentMemberAssignmentValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("MemberEpoch", INT32, "0+"),
        Field("PreviousMemberEpoch", INT32, "0+"),
        Field("State", INT8, "0+"),  # same codes as consumer groups
        Field(
            "AssignedPartitions",
            ArrayOf(Struct("TopicPartitions", (Field("TopicId", UUID, "0+"), Field("Partitions", ArrayOf(INT32), "0+")))),
            "0+",
        ),
    ),
)

_TOPIC_PARTITIONS_INFO = Struct(
    "TopicPartitionsInfo",
    (Field("TopicId", UUID, "0+"), Field("TopicName", STRING, "0+"), Field("Partitions", ArrayOf(INT32), "0+")),
)
SHARE_GROUP_STATE_PARTITION_METADATA_KEY = _key("ShareGroupStatePartitionMetadataKey", _GROUP_ID)
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = Layout(
    "ShareGroupStatePartitionMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("InitializingTopics", ArrayOf(_TOPIC_PARTITIONS_INFO), "0+"),  # untagged first field, added in 4.1
        Field("InitializedTopics", ArrayOf(_TOPIC_PARTITIONS_INFO), "0+"),
        Field(
            "DeletingTopics",
            ArrayOf(Struct("TopicInfo", (Field("TopicId", UUID, "0+"), Field("TopicName", STRING, "0+")))),
            "0+",
        ),
    ),
)
