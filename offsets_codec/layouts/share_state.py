"""The share coordinator's records (KIP-932), in ``__share_group_state``, not ``__consumer_offsets``: ShareSnapshot
(key type 0) and ShareUpdate (key type 1), from ``share-coordinator/src/main/resources/common/message/``.

Both values have one version, 0, flexible. Before 4.1 (early access) SnapshotEpoch was a uint16 and the
timestamps were missing; those records do not decode with these layouts, as in Kafka. DeliveryCompleteCount
(tag 0) was added in 4.2 (KIP-1226): absent, it is -1.
"""

from ..layout import INT8, INT16, INT32, INT64, STRING, UUID, ArrayOf, Field, Layout, Struct

# Both keys: GroupId, TopicId, Partition; never flexible.
_KEY_FIELDS = (Field("GroupId", STRING, "0"), Field("TopicId", UUID, "0"), Field("Partition", INT32, "0"))
SHARE_SNAPSHOT_KEY = Layout("ShareSnapshotKey", valid="0", flexible="none", fields=_KEY_FIELDS)
SHARE_UPDATE_KEY = Layout("ShareUpdateKey", valid="0", flexible="none", fields=_KEY_FIELDS)

# A range of offsets of the share partition in one delivery state (0 Available, 2 Acknowledged, 4 Archived).
_STATE_BATCH = Struct("StateBatch", (
    Field("FirstOffset", INT64, "0+"),
    Field("LastOffset", INT64, "0+"),
    Field("DeliveryState", INT8, "0+"),
    Field("DeliveryCount", INT16, "0+"),
))
_DELIVERY_COMPLETE_COUNT = Field("DeliveryCompleteCount", INT32, "0+", tag=0, tagged="0+", default=-1)

SHARE_SNAPSHOT_VALUE = Layout(
    "ShareSnapshotValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("SnapshotEpoch", INT32, "0+"),
        Field("StateEpoch", INT32, "0+"),
        Field("LeaderEpoch", INT32, "0+"),
        Field("StartOffset", INT64, "0+"),
        _DELIVERY_COMPLETE_COUNT,
        Field("CreateTimestamp", INT64, "0+"),
        Field("WriteTimestamp", INT64, "0+"),
        Field("StateBatches", ArrayOf(_STATE_BATCH), "0+"),
    ),
)

# The changes since the last snapshot: StartOffset and LeaderEpoch are -1 when not changed; no StateEpoch.
SHARE_UPDATE_VALUE = Layout(
    "ShareUpdateValue",
    valid="0",
    flexible="0+",
    fields=(
        Field("SnapshotEpoch", INT32, "0+"),
        Field("LeaderEpoch", INT32, "0+"),
        Field("StartOffset", INT64, "0+"),
        _DELIVERY_COMPLETE_COUNT,
        Field("StateBatches", ArrayOf(_STATE_BATCH), "0+"),
    ),
)
