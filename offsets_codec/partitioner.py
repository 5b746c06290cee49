"""Which ``__consumer_offsets`` partition coordinates a group (spec §9)."""

from __future__ import annotations

import struct

_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed 32-bit int.

    Characters outside the BMP count as two surrogates; lone surrogates (possible in both Java and
    Python strings) are hashed as themselves.
    """
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (cu,) in struct.iter_unpack(">H", units):
        h = (31 * h + cu) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for(group_id: str, num_partitions: int = 50) -> int:
    """``Utils.abs(groupId.hashCode()) % numPartitions``, where ``Utils.abs(MIN_VALUE)`` is 0.

    ``num_partitions`` must be the real partition count of ``__consumer_offsets``; 50 is only the
    broker default (``offsets.topic.num.partitions``).
    """
    if not isinstance(num_partitions, int) or num_partitions <= 0:
        raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")
    h = java_string_hash(group_id)
    return (0 if h == _INT_MIN else abs(h)) % num_partitions
