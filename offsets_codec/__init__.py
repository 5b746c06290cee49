"""A pure-Python codec for Kafka's internal ``__consumer_offsets`` topic.

Standard library only: importing it never pulls in Spark or Arrow, so it can run inside any worker.
Layouts are declared as data (``offsets_codec.layouts``) and read and written by one generic reader
and writer; ``REGISTRY`` maps record type ids to them. The share coordinator's ``__share_group_state`` reuses
type ids 0 and 1 for other records: ``SHARE_STATE`` (a `RecordCodec` over ``SHARE_STATE_REGISTRY``) reads them. ``read_segment_file`` streams the batches of a
Kafka log segment (``offsets_codec.segments``); snappy, lz4 and zstd batches need the ``cramjam``
package, imported only when such a batch is met.
"""

from .compression import CompressionError, MissingCodecError
from .errors import DecodeError, EncodeError
from .formatter import to_kafka_json
from .partitioner import java_string_hash, partition_for
from .records import (SHARE_STATE, Key, Record, RecordCodec, Value, decode_key, decode_record, decode_value, encode_key,
                      encode_value)
from .registry import REGISTRY, SHARE_STATE_REGISTRY, record_type_named
from .segments import Batch, LogRecord, SegmentDamage, control_marker, read_segment, read_segment_file

__all__ = [
    "Batch",
    "CompressionError",
    "DecodeError",
    "EncodeError",
    "Key",
    "LogRecord",
    "MissingCodecError",
    "REGISTRY",
    "Record",
    "RecordCodec",
    "SHARE_STATE",
    "SHARE_STATE_REGISTRY",
    "SegmentDamage",
    "Value",
    "control_marker",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
    "read_segment",
    "read_segment_file",
    "record_type_named",
    "to_kafka_json",
]
