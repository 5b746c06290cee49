"""Property tests: arbitrary and damaged bytes only ever raise DecodeError, and generated data for
every layout round-trips.

OFFSETS_CODEC_EXAMPLES raises the example count for a longer local run (the default keeps the suite fast).
"""

import os

import pytest
from codec_samples import KEY_CASES, VALUE_CASES, key_plan, struct_strategy, value_plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offsets_codec import DecodeError, decode_key, decode_value, encode_key, encode_value, to_kafka_json
from offsets_codec.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscribed_topics_v0,
)

EXAMPLES = int(os.environ.get("OFFSETS_CODEC_EXAMPLES", "150"))
# database=None: nothing is written into the checkout
FAST = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
RECORD_TYPES = st.sampled_from(sorted({t for t, _ in VALUE_CASES}) + [-1, 24, 1000])
DECODERS = [decode_key, decode_subscription, decode_assignment, subscribed_topics_v0]


def only_decode_errors(fn, *args):
    """Call fn; a DecodeError is fine (and must say what went wrong), anything else fails the test."""
    try:
        return fn(*args)
    except DecodeError as e:
        assert e.reason and "\n" not in e.reason
        assert not e.reason.startswith("internal decoder error"), e.reason
        return None


# biased towards bytes that look like records: small types/versions first, then anything
def _prefixed(body: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(body, st.tuples(st.integers(0, 24), body).map(lambda p: p[0].to_bytes(2, "big") + p[1]))


ANY_BYTES = _prefixed(st.binary(max_size=80))


@FAST
@given(st.one_of(ANY_BYTES, st.none()), RECORD_TYPES)
def test_arbitrary_bytes_raise_only_decode_error(raw, record_type):
    for fn in DECODERS:
        only_decode_errors(fn, raw)
    value = only_decode_errors(decode_value, record_type, raw)
    if value is not None:
        assert 2 <= value.consumed <= len(raw)


@FAST
@given(ANY_BYTES, st.one_of(ANY_BYTES, st.none()))
def test_arbitrary_records_format_or_raise_decode_error(key, value):
    only_decode_errors(to_kafka_json, key, value)


@st.composite
def encoded_values(draw):
    record_type, version = draw(st.sampled_from(VALUE_CASES))
    data = draw(struct_strategy(value_plan(record_type, version)))
    return record_type, version, data, encode_value(record_type, version, data)


@settings(max_examples=EXAMPLES * 3, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoded_values())
def test_generated_values_round_trip(case):
    record_type, version, data, raw = case
    value = decode_value(record_type, raw)
    assert (value.version, value.consumed, value.data) == (version, len(raw), data)
    assert encode_value(record_type, version, value.data) == raw


@FAST
@given(st.sampled_from(KEY_CASES).flatmap(lambda t: st.tuples(st.just(t), struct_strategy(key_plan(t)))))
def test_generated_keys_round_trip(case):
    record_type, data = case
    raw = encode_key(record_type, data)
    key = decode_key(raw)
    assert (key.record_type, key.data, key.consumed) == (record_type, data, len(raw))


@FAST
@given(encoded_values(), st.data())
def test_every_proper_prefix_of_a_value_is_a_truncation(case, data):
    record_type, _, _, raw = case
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DecodeError) as e:
        decode_value(record_type, raw[:cut])
    assert e.value.reason.startswith("truncated at byte") or e.value.reason == "empty value"
    assert e.value.position is None or e.value.position <= cut


@FAST
@given(encoded_values(), st.data())
def test_damaged_values_raise_only_decode_error(case, data):
    record_type, _, _, raw = case
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        at = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if op == "flip" and buf:
            buf[at] = data.draw(st.integers(0, 255))
        elif op == "insert":
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif buf:
            del buf[at]
    value = only_decode_errors(decode_value, record_type, bytes(buf))
    if value is not None:
        assert value.consumed <= len(buf)
    key = encode_key(record_type, {})
    only_decode_errors(to_kafka_json, key, bytes(buf))


_TOPIC_PARTITIONS = st.lists(st.fixed_dictionaries({"topic": st.text(max_size=8),
                                                    "partitions": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)}),
                             max_size=3)
_USER_DATA = st.one_of(st.none(), st.binary(max_size=8))


@FAST
@given(st.integers(0, 3), st.lists(st.text(max_size=8), max_size=4), _USER_DATA, _TOPIC_PARTITIONS,
       st.integers(-(2**31), 2**31 - 1), st.one_of(st.none(), st.text(max_size=6)))
def test_generated_subscriptions_round_trip(version, topics, user_data, owned, generation, rack):
    sub = {"version": version, "topics": topics, "userData": user_data, "ownedPartitions": owned if version >= 1 else [],
           "generationId": generation if version >= 2 else -1, "rackId": rack if version >= 3 else None,
           "truncated": False}
    raw = encode_subscription(sub)
    assert decode_subscription(raw) == sub
    assert subscribed_topics_v0(raw) == topics
    assert encode_subscription(decode_subscription(raw)) == raw


@FAST
@given(st.integers(0, 3), _TOPIC_PARTITIONS, _USER_DATA)
def test_generated_assignments_round_trip(version, assigned, user_data):
    asg = {"version": version, "assignedPartitions": assigned, "userData": user_data}
    raw = encode_assignment(asg)
    assert decode_assignment(raw) == asg
