"""Classic group metadata: ``GroupMetadataKey`` / ``GroupMetadataValue`` (spec §4.2)."""

from ..layout import BYTES, INT32, INT64, STRING, ArrayOf, Field, Layout, Struct

GROUP_METADATA_KEY = Layout("GroupMetadataKey", valid="0", flexible="none", fields=(Field("group", STRING, "0"),))

# Version 1 adds rebalanceTimeout (KIP-62); version 3 adds groupInstanceId (KIP-345).
# subscription/assignment are opaque here; for protocolType "consumer" they hold Consumer Protocol
# payloads (see consumer_protocol.py).
MEMBER_METADATA = Struct(
    "MemberMetadata",
    (
        Field("memberId", STRING, "0+"),
        Field("groupInstanceId", STRING, "3+", nullable="3+", default=None),
        Field("clientId", STRING, "0+"),
        Field("clientHost", STRING, "0+"),
        Field("rebalanceTimeout", INT32, "1+", default=-1),
        Field("sessionTimeout", INT32, "0+"),
        Field("subscription", BYTES, "0+"),
        Field("assignment", BYTES, "0+"),
    ),
)

# Version 2 adds currentStateTimestamp; version 3 is what every broker since 2.3 writes; version 4
# (flexible) is readable since 3.5 but has never been written.
GROUP_METADATA_VALUE = Layout(
    "GroupMetadataValue",
    valid="0-4",
    flexible="4+",
    fields=(
        Field("protocolType", STRING, "0+"),
        Field("generation", INT32, "0+"),
        Field("protocol", STRING, "0+", nullable="0+"),
        Field("leader", STRING, "0+", nullable="0+"),
        Field("currentStateTimestamp", INT64, "2+", default=-1),
        Field("members", ArrayOf(MEMBER_METADATA), "0+"),
    ),
)
