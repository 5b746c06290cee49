"""Offset commits: ``OffsetCommitKey`` / ``OffsetCommitValue`` (spec §4.1)."""

from ..layout import INT32, INT64, STRING, UUID, Field, Layout

_OFFSET_KEY_FIELDS = (
    Field("group", STRING, "0"),
    Field("topic", STRING, "0"),  # always the topic *name*
    Field("partition", INT32, "0"),
)

OFFSET_COMMIT_KEY = Layout("OffsetCommitKey", valid="0", flexible="none", fields=_OFFSET_KEY_FIELDS)

# Written only by 0.8.2 brokers. Kafka 4.1+ names it LegacyOffsetCommitKey; the bytes are the same.
LEGACY_OFFSET_COMMIT_KEY = Layout("LegacyOffsetCommitKey", valid="0", flexible="none", fields=_OFFSET_KEY_FIELDS)

# Version 0: 0.8.2 (key type 0). Version 1: adds expireTimestamp (0.9 to 2.0, and later whenever the
# commit asked for an explicit retention). Version 2: IBP 2.1-IV0 drops it again. Version 3: adds
# leaderEpoch (KIP-320). Version 4: first flexible version; written since 4.1, with the topicId tag
# (KAFKA-19141). Type 0 records are decoded with this layout too, whatever their version (spec §6).
OFFSET_COMMIT_VALUE = Layout(
    "OffsetCommitValue",
    valid="0-4",
    flexible="4+",
    fields=(
        Field("offset", INT64, "0+"),
        Field("leaderEpoch", INT32, "3+", default=-1),
        Field("metadata", STRING, "0+"),
        Field("commitTimestamp", INT64, "0+"),
        Field("expireTimestamp", INT64, "1", default=-1),
        Field("topicId", UUID, "4+", tag=0, tagged="4+"),
    ),
)
