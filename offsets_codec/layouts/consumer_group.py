"""Consumer groups (KIP-848): types 3-8 and 16 (spec §4.3). Every value is version 0 and flexible.

A note on ``"default": null`` in Kafka's schemas (ClassicMemberMetadata, AssignmentEpochs): a JSON
null is *no* default to Kafka's generator, so the effective default is the empty struct or array,
and these fields are declared here without a default. An explicit null is therefore written (tag
payload 0x00) and an absent tag decodes to the empty value (spec §4.3, confirmed by the KIP-848
vectors written by Kafka's own serializer).
"""

from ..layout import BYTES, INT8, INT32, INT64, STRING, UUID, ArrayOf, Field, Layout, Struct

_GROUP_ID = Field("GroupId", STRING, "0")
_MEMBER_ID = Field("MemberId", STRING, "0")


def _key(name: str, *fields: Field) -> Layout:
    return Layout(name, valid="0", flexible="none", fields=fields)


CONSUMER_GROUP_METADATA_KEY = _key("ConsumerGroupMetadataKey", _GROUP_ID)
CONSUMER_GROUP_METADATA_VALUE = Layout(
    "ConsumerGroupMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("Epoch", INT32, "0+"),
        Field("MetadataHash", INT64, "0+", tag=0, tagged="0+"),  # 4.1, KIP-1101
    ),
)

# Written up to 4.0; 4.1+ only tombstones it (replaced by MetadataHash).
TOPIC_METADATA = Struct(
    "TopicMetadata",
    (
        Field("TopicId", UUID, "0+"),
        Field("TopicName", STRING, "0+"),
        Field("NumPartitions", INT32, "0+"),
        Field(
            "PartitionMetadata",
            ArrayOf(Struct("PartitionMetadata", (Field("Partition", INT32, "0+"), Field("Racks", ArrayOf(STRING), "0+")))),
            "0+",
        ),
    ),
)
CONSUMER_GROUP_PARTITION_METADATA_KEY = _key("ConsumerGroupPartitionMetadataKey", _GROUP_ID)
CONSUMER_GROUP_PARTITION_METADATA_VALUE = Layout(
    "ConsumerGroupPartitionMetadataValue",
    valid="0",
    flexible="0+",
    fields=(Field("Topics", ArrayOf(TOPIC_METADATA), "0+"),),
)

CLASSIC_MEMBER_METADATA = Struct(
    "ClassicMemberMetadata",
    (
        Field("SessionTimeoutMs", INT32, "0+"),
        Field(
            "SupportedProtocols",
            ArrayOf(Struct("ClassicProtocol", (Field("Name", STRING, "0+"), Field("Metadata", BYTES, "0+")))),
            "0+",
        ),
    ),
)
CONSUMER_GROUP_MEMBER_METADATA_KEY = _key("ConsumerGroupMemberMetadataKey", _GROUP_ID, _MEMBER_ID)
CONSUMER_GROUP_MEMBER_METADATA_VALUE = Layout(
    "ConsumerGroupMemberMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("InstanceId", STRING, "0+", nullable="0+"),
        Field("RackId", STRING, "0+", nullable="0+"),
        Field("ClientId", STRING, "0+"),
        Field("ClientHost", STRING, "0+"),
        Field("SubscribedTopicNames", ArrayOf(STRING), "0+"),
        Field("SubscribedTopicRegex", STRING, "0+", nullable="0+"),
        Field("RebalanceTimeoutMs", INT32, "0+", default=-1),
        Field("ServerAssignor", STRING, "0+", nullable="0+"),
        # null for members on the consumer protocol; set for classic-protocol members of the group.
        # Schema default is JSON null = the empty struct (see the module docstring).
        Field("ClassicMemberMetadata", CLASSIC_MEMBER_METADATA, "0+", nullable="0+", tag=0, tagged="0+"),
    ),
)

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = _key("ConsumerGroupTargetAssignmentMetadataKey", _GROUP_ID)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Layout(
    "ConsumerGroupTargetAssignmentMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("AssignmentEpoch", INT32, "0+"),
        Field("AssignmentTimestamp", INT64, "0+", tag=0, tagged="0+"),  # 4.3, KIP-1263
    ),
)

_TOPIC_PARTITION = Struct("TopicPartition", (Field("TopicId", UUID, "0+"), Field("Partitions", ArrayOf(INT32), "0+")))
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = _key("ConsumerGroupTargetAssignmentMemberKey", _GROUP_ID, _MEMBER_ID)
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Layout(
    "ConsumerGroupTargetAssignmentMemberValue",
    valid="0",
    flexible="0+",
    fields=(Field("TopicPartitions", ArrayOf(_TOPIC_PARTITION), "0+"),),
)

TOPIC_PARTITIONS = Struct(
    "TopicPartitions",
    (
        Field("TopicId", UUID, "0+"),
        Field("Partitions", ArrayOf(INT32), "0+"),
        # 4.3, KIP-1251: same length as Partitions. Schema default JSON null = empty array.
        Field("AssignmentEpochs", ArrayOf(INT32), "0+", nullable="0+", tag=0, tagged="0+"),
    ),
)
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = _key("ConsumerGroupCurrentMemberAssignmentKey", _GROUP_ID, _MEMBER_ID)
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Layout(
    "ConsumerGroupCurrentMemberAssignmentValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("MemberEpoch", INT32, "0+"),
        Field("PreviousMemberEpoch", INT32, "0+"),
        Field("State", INT8, "0+"),  # 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS, 127 UNKNOWN
        Field("AssignedPartitions", ArrayOf(TOPIC_PARTITIONS), "0+"),
        Field("PartitionsPendingRevocation", ArrayOf(TOPIC_PARTITIONS), "0+"),
    ),
)

CONSUMER_GROUP_REGULAR_EXPRESSION_KEY = _key(
    "ConsumerGroupRegularExpressionKey", _GROUP_ID, Field("RegularExpression", STRING, "0")
)
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE = Layout(
    "ConsumerGroupRegularExpressionValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("Topics", ArrayOf(STRING), "0+"),
        Field("Version", INT64, "0+"),  # metadata image version used for the resolution
        Field("Timestamp", INT64, "0+"),
    ),
)
