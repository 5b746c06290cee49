"""A pure-Python codec for Kafka's internal ``__consumer_offsets`` topic.

Standard library only: importing it never pulls in Spark or Arrow, so it can run inside any worker.
Layouts are declared as data (``offsets_codec.layouts``) and read and written by one generic reader
and writer; ``REGISTRY`` maps record type ids to them.
"""

from .errors import DecodeError, EncodeError
from .formatter import to_kafka_json
from .partitioner import java_string_hash, partition_for
from .records import Key, Record, Value, decode_key, decode_record, decode_value, encode_key, encode_value
from .registry import REGISTRY, record_type_named

__all__ = [
    "DecodeError",
    "EncodeError",
    "Key",
    "REGISTRY",
    "Record",
    "Value",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
    "record_type_named",
    "to_kafka_json",
]
