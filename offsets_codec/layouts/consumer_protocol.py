"""The Consumer Protocol payloads carried inside ``GroupMetadataValue`` members (spec §5).

Both are int16-version-prefixed and never flexible. Newer versions must only append fields, which is
why readers parse a newer version with the newest layout they know.
"""

from ..layout import BYTES, INT32, STRING, ArrayOf, Field, Layout, Struct

_TOPIC_PARTITION = Struct("TopicPartition", (Field("Topic", STRING, "0+"), Field("Partitions", ArrayOf(INT32), "0+")))

# Version 1 adds OwnedPartitions (KIP-429, 2.4); version 2 GenerationId (3.4); version 3 RackId (KIP-881, 3.5).
SUBSCRIPTION = Layout(
    "ConsumerProtocolSubscription",
    valid="0-3",
    flexible="none",
    fields=(
        Field("Topics", ArrayOf(STRING), "0+"),
        Field("UserData", BYTES, "0+", nullable="0+", default=None),
        Field("OwnedPartitions", ArrayOf(_TOPIC_PARTITION), "1+"),
        Field("GenerationId", INT32, "2+", default=-1),
        Field("RackId", STRING, "3+", nullable="3+", default=None),
    ),
)

# The layout is the same in every version; 1-3 were bumped only to stay in step with the subscription.
ASSIGNMENT = Layout(
    "ConsumerProtocolAssignment",
    valid="0-3",
    flexible="none",
    fields=(
        Field("AssignedPartitions", ArrayOf(_TOPIC_PARTITION), "0+"),
        Field("UserData", BYTES, "0+", nullable="0+", default=None),
    ),
)
