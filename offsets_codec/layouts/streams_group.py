"""Streams groups (KIP-1071): types 17-23 (spec §4.5). Every value is version 0 and flexible.

``LastAssignmentConfigs`` and ``AssignmentEpochs`` have ``"default": null`` in Kafka's schemas, which
means the empty array (see layouts/consumer_group.py).
"""

from ..layout import INT8, INT16, INT32, INT64, STRING, UINT16, UUID, ArrayOf, Field, Layout, Struct

_GROUP_ID = Field("GroupId", STRING, "0")
_MEMBER_ID = Field("MemberId", STRING, "0")


def _key(name: str, *fields: Field) -> Layout:
    return Layout(name, valid="0", flexible="none", fields=fields)


def _key_value(name: str) -> Struct:
    return Struct(name, (Field("Key", STRING, "0+"), Field("Value", STRING, "0+")))


STREAMS_GROUP_METADATA_KEY = _key("StreamsGroupMetadataKey", _GROUP_ID)
STREAMS_GROUP_METADATA_VALUE = Layout(
    "StreamsGroupMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("Epoch", INT32, "0+"),
        Field("MetadataHash", INT64, "0+"),
        Field("ValidatedTopologyEpoch", INT32, "0+", tag=0, tagged="0+", default=-1),  # 4.2
        Field(
            "LastAssignmentConfigs",
            ArrayOf(_key_value("LastAssignmentConfig")),
            "0+",
            nullable="0+",
            tag=1,
            tagged="0+",
        ),  # 4.2
        Field("StoredDescriptionTopologyEpoch", INT32, "0+", tag=2, tagged="0+", default=-1),  # 4.4; -2 = uncertain
        Field("FailedDescriptionTopologyEpoch", INT32, "0+", tag=3, tagged="0+", default=-1),  # 4.4
    ),
)

# Existed on trunk only from Dec 2024 to Jun 2025, never released; decoded with that schema.
STREAMS_GROUP_PARTITION_METADATA_KEY = _key("StreamsGroupPartitionMetadataKey", _GROUP_ID)
STREAMS_GROUP_PARTITION_METADATA_VALUE = Layout(
    "StreamsGroupPartitionMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field(
            "Topics",
            ArrayOf(
                Struct(
                    "TopicMetadata",
                    (Field("TopicId", UUID, "0+"), Field("TopicName", STRING, "0+"), Field("NumPartitions", INT32, "0+")),
                )
            ),
            "0+",
        ),
    ),
)

STREAMS_GROUP_MEMBER_METADATA_KEY = _key("StreamsGroupMemberMetadataKey", _GROUP_ID, _MEMBER_ID)
STREAMS_GROUP_MEMBER_METADATA_VALUE = Layout(
    "StreamsGroupMemberMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("InstanceId", STRING, "0+", nullable="0+"),
        Field("RackId", STRING, "0+", nullable="0+"),
        Field("ClientId", STRING, "0+"),
        Field("ClientHost", STRING, "0+"),
        Field("RebalanceTimeoutMs", INT32, "0+", default=-1),
        Field("TopologyEpoch", INT32, "0+"),
        Field("ProcessId", STRING, "0+"),
        # untagged nullable struct: int8 presence marker
        Field(
            "UserEndpoint",
            Struct("Endpoint", (Field("Host", STRING, "0+"), Field("Port", UINT16, "0+"))),
            "0+",
            nullable="0+",
            default=None,
        ),
        Field("ClientTags", ArrayOf(_key_value("KeyValue")), "0+"),
    ),
)

STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = _key("StreamsGroupTargetAssignmentMetadataKey", _GROUP_ID)
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Layout(
    "StreamsGroupTargetAssignmentMetadataValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("AssignmentEpoch", INT32, "0+"),
        Field("AssignmentTimestamp", INT64, "0+", tag=0, tagged="0+"),  # 4.3, KIP-1263
    ),
)

_TASK_IDS = Struct("TaskIds", (Field("SubtopologyId", STRING, "0+"), Field("Partitions", ArrayOf(INT32), "0+")))
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = _key("StreamsGroupTargetAssignmentMemberKey", _GROUP_ID, _MEMBER_ID)
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Layout(
    "StreamsGroupTargetAssignmentMemberValue",
    valid="0",
    flexible="0+",
    fields=tuple(Field(name, ArrayOf(_TASK_IDS), "0+") for name in ("ActiveTasks", "StandbyTasks", "WarmupTasks")),
)

_TASK_IDS_WITH_EPOCHS = Struct(
    "TaskIds",
    (
        Field("SubtopologyId", STRING, "0+"),
        Field("Partitions", ArrayOf(INT32), "0+"),
        Field("AssignmentEpochs", ArrayOf(INT32), "0+", nullable="0+", tag=0, tagged="0+"),  # 4.2
    ),
)
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = _key("StreamsGroupCurrentMemberAssignmentKey", _GROUP_ID, _MEMBER_ID)
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Layout(
    "StreamsGroupCurrentMemberAssignmentValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("MemberEpoch", INT32, "0+"),
        Field("PreviousMemberEpoch", INT32, "0+"),
        Field("State", INT8, "0+"),  # 1 STABLE, 2 UNREVOKED_TASKS, 3 UNRELEASED_TASKS, 127 UNKNOWN (not the consumer codes)
        *(
            Field(name, ArrayOf(_TASK_IDS_WITH_EPOCHS), "0+")
            for name in (
                "ActiveTasks",
                "StandbyTasks",
                "WarmupTasks",
                "ActiveTasksPendingRevocation",
                "StandbyTasksPendingRevocation",
                "WarmupTasksPendingRevocation",
            )
        ),
    ),
)

_TOPIC_INFO = Struct(
    "TopicInfo",
    (
        Field("Name", STRING, "0+"),
        Field("Partitions", INT32, "0+"),
        Field("ReplicationFactor", INT16, "0+"),
        Field("TopicConfigs", ArrayOf(Struct("TopicConfig", (Field("key", STRING, "0+"), Field("value", STRING, "0+")))), "0+"),
    ),
)
STREAMS_GROUP_TOPOLOGY_KEY = _key("StreamsGroupTopologyKey", _GROUP_ID)
STREAMS_GROUP_TOPOLOGY_VALUE = Layout(
    "StreamsGroupTopologyValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("Epoch", INT32, "0+"),
        Field(
            "Subtopologies",
            ArrayOf(
                Struct(
                    "Subtopology",
                    (
                        Field("SubtopologyId", STRING, "0+"),
                        Field("SourceTopics", ArrayOf(STRING), "0+"),
                        Field("SourceTopicRegex", ArrayOf(STRING), "0+"),
                        Field("StateChangelogTopics", ArrayOf(_TOPIC_INFO), "0+"),
                        Field("RepartitionSinkTopics", ArrayOf(STRING), "0+"),
                        Field("RepartitionSourceTopics", ArrayOf(_TOPIC_INFO), "0+"),
                        # int16 indexes into the subtopology's topic arrays
                        Field(
                            "CopartitionGroups",
                            ArrayOf(
                                Struct(
                                    "CopartitionGroup",
                                    (
                                        Field("SourceTopics", ArrayOf(INT16), "0+"),
                                        Field("SourceTopicRegex", ArrayOf(INT16), "0+"),
                                        Field("RepartitionSourceTopics", ArrayOf(INT16), "0+"),
                                    ),
                                )
                            ),
                            "0+",
                        ),
                    ),
                )
            ),
            "0+",
        ),
    ),
)
