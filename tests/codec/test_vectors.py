"""Every vector in ../shared/testdata/vectors: decode and compare with what its source asserts.

Each source writes its expectations in its own shape, so each file has a small adapter that maps
their names to Kafka's. Fragments without the int16 prefix get one, as their notes say, and vectors
marked ``kafka_conformant: false`` must fail with a DecodeError, since Kafka's own readers fail on them.
Values that decode to their last byte must also encode back to exactly the same bytes.
"""

from __future__ import annotations

import pytest

from offsets_codec import REGISTRY, DecodeError, decode_key, decode_record, decode_value, encode_key, encode_value
from offsets_codec.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, encode_subscription
from offsets_codec.wire import uuid_to_str

from codec_testdata import vector_indexes as _indexes


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def assert_reencodes(record_type: int, raw: bytes) -> None:
    """A value read to its last byte must be written back identically (its encoding is canonical)."""
    value = decode_value(record_type, raw)
    if value.consumed == len(raw):
        assert encode_value(record_type, value.version, value.data) == raw


def decode_error(fn, *args) -> DecodeError:
    with pytest.raises(DecodeError) as e:
        fn(*args)
    return e.value


def by_partition(tps: list[dict]) -> dict[str, list[int]]:
    return {tp["topic"]: tp["partitions"] for tp in tps}


# --- konsumer_offsets: real-cluster captures, expected = the Rust crate's Debug output --------------


def _strip_type(x):
    if isinstance(x, dict):
        return {k: _strip_type(v) for k, v in x.items() if k != "$type"}
    if isinstance(x, list):
        return [_strip_type(v) for v in x]
    return x


def _konsumer_subscription(raw: bytes) -> dict:
    s = decode_subscription(raw)
    return {"schema_version": s["version"], "subscribed_topics": s["topics"], "user_data": list(s["userData"] or b""),
            "owned_topic_partitions": s["ownedPartitions"], "generation_id": s["generationId"],
            "rack_id": s["rackId"] or ""}


def _konsumer_assignment(raw: bytes) -> dict:
    a = decode_assignment(raw)
    return {"schema_version": a["version"], "assigned_topic_partitions": a["assignedPartitions"],
            "user_data": list(a["userData"] or b"")}


def _konsumer_view(key: bytes, value: bytes) -> dict:
    """Our decode in the crate's shape: snake_case names, null strings as "", absent fields as defaults."""
    k = decode_key(key)
    v = decode_value(k.record_type, value)
    d = v.data
    view = {"message_version": k.record_type, **k.data, "is_tombstone": False, "schema_version": v.version}
    if REGISTRY[k.record_type].group_family == "offsets":
        view.update(offset=d["offset"], leader_epoch=d.get("leaderEpoch", -1), metadata=d["metadata"],
                    commit_timestamp=d["commitTimestamp"], expire_timestamp=d.get("expireTimestamp", -1))
    else:
        view.update(protocol_type=d["protocolType"], generation=d["generation"], protocol=d["protocol"] or "",
                    leader=d["leader"] or "", current_state_timestamp=d.get("currentStateTimestamp", -1),
                    members=[{"id": m["memberId"], "group_instance_id": m.get("groupInstanceId") or "",
                              "client_id": m["clientId"], "client_host": m["clientHost"],
                              "rebalance_timeout": m.get("rebalanceTimeout", -1), "session_timeout": m["sessionTimeout"],
                              "subscription": _konsumer_subscription(m["subscription"]),
                              "assignment": _konsumer_assignment(m["assignment"])} for m in d["members"]])
    return view


@pytest.mark.parametrize("i", _indexes("konsumer_offsets.jsonl"))
def test_konsumer_offsets(vectors, i):
    v = vectors("konsumer_offsets.jsonl")[i]
    raw = h(v["hex"])
    expected = _strip_type(v["expected"])
    if v["kind"].endswith("_key"):
        key = decode_key(raw)
        assert {"message_version": key.record_type, **key.data} == expected
        assert key.consumed == len(raw) and encode_key(key.record_type, key.data) == raw
        return
    assert _konsumer_view(h(v["key_hex"]), raw) == expected
    assert_reencodes(decode_key(h(v["key_hex"])).record_type, raw)
    # real brokers write every byte the layout describes
    assert decode_value(decode_key(h(v["key_hex"])).record_type, raw).consumed == len(raw)


# --- redpanda_kafka_oracle_kip848: bytes from Kafka's own serializer -----------------------------------

_VALUE_TYPES = {rt.value.name: t for t, rt in REGISTRY.items() if t != 0}


def _kafka_json_to_ours(x):
    """The vector writes uuids and bytes as hex; we use uuid text and bytes."""
    if isinstance(x, dict):
        out = {}
        for k, val in x.items():
            if k == "TopicId":
                out[k] = uuid_to_str(h(val))
            elif k == "Metadata":
                out[k] = h(val)
            else:
                out[k] = _kafka_json_to_ours(val)
        return out
    if isinstance(x, list):
        return [_kafka_json_to_ours(v) for v in x]
    return x


@pytest.mark.parametrize("i", _indexes("redpanda_kafka_oracle_kip848.jsonl"))
def test_redpanda_kafka_oracle_kip848(vectors, i):
    v = vectors("redpanda_kafka_oracle_kip848.jsonl")[i]
    raw = h(v["hex"])
    expected = dict(v["expected"])
    name = expected.pop("record")
    if v["subkind"] == "kip848_key":
        key = decode_key(raw)
        assert (key.record_type, key.name) == (expected.pop("recordType"), name)
        assert key.data == expected
        assert encode_key(key.record_type, key.data) == raw
    else:
        record_type = _VALUE_TYPES[name]
        value = decode_value(record_type, raw)
        assert (value.name, value.version, value.consumed) == (name, expected.pop("version"), len(raw))
        assert value.data == _kafka_json_to_ours(expected)
        assert encode_value(record_type, value.version, value.data) == raw


# --- burrow: hand-made fragments and negative cases ----------------------------------------------------

GROUP_HEADER_V1 = "0001" "0000" "00000001" "ffff" "ffff"  # protocolType "", generation 1, null protocol/leader
GROUP_HEADER_V3 = "0003" "0000" "00000001" "ffff" "ffff" "ffffffffffffffff"  # + currentStateTimestamp -1


def _member_value(header: str, member_hex: str) -> bytes:
    """Wrap a MemberMetadata fragment in a one-member GroupMetadataValue."""
    return h(header + "00000001" + member_hex)


# Burrow's error_at names -> the field our error names. Some differ on purpose: we check an array's
# count against the bytes left (count x smallest element) before reading any element, so a short
# array fails at the array rather than inside its first element, as Kafka's own readers also do.
BURROW_ERROR_FIELDS = {
    "protocol_type": "protocolType", "generation": "generation", "protocol": "protocol", "leader": "leader",
    "member_id": "members",  # 10 bytes left, a v1 member needs at least 22
    "client_id": "members[0].clientId", "client_host": "members[0].clientHost",
    "rebalance_timeout": "members[0].rebalanceTimeout", "session_timeout": "members[0].sessionTimeout",
    "subscription_bytes": "members[0].subscription", "assignment_bytes": "members[0].assignment",
    "assignment_topic_count": "AssignedPartitions",
    "topic_name": "AssignedPartitions",  # 5 bytes left, an element needs at least 6
    "assignment_partition_count": "AssignedPartitions[0].Partitions",
    "assignment_partition_id": "AssignedPartitions[0].Partitions",  # 1 int32 announced, 2 bytes left
    "group": "group", "topic": "topic", "partition": "partition",
    "errOffset": "offset", "errLeaderEpoch": "leaderEpoch", "errMetadata": "metadata", "errTimestamp": "commitTimestamp",
}


def _burrow_case(v: dict) -> None:  # noqa: C901 - one branch per Burrow test, kept flat to read like the file
    name = v["source"].split()[-1]
    kind = v["kind"]
    expected = v["expected"]

    if name == "TestKafkaClient_decodeMetadataValueHeader":
        for version in ("0000", "0001"):  # header only, same in v0 and v1; members added as an empty array
            d = decode_value(2, h(version + v["hex"] + "00000000")).data
            assert {k: d[k] for k in expected} == expected
    elif name in ("TestKafkaClient_decodeMetadataValueHeaderV2", "TestKafkaClient_decodeMetadataValueHeaderV3"):
        value = decode_value(2, h(v["hex"]))
        assert {"version": value.version, **{k: value.data[k] for k in expected if k != "version"}} == expected
        assert value.consumed == len(h(v["hex"]))
        assert_reencodes(2, h(v["hex"]))
        member = value.data["members"][0]
        sub = decode_subscription(member["subscription"])
        if name.endswith("V3"):  # "v1" without OwnedPartitions, as kafka-go writes it
            assert (sub["version"], sub["topics"], sub["truncated"]) == (1, ["topic1"], True)
            assert by_partition(decode_assignment(member["assignment"])["assignedPartitions"]) == {"topic1": [0]}
        else:
            assert (sub["version"], sub["topics"], sub["truncated"]) == (0, ["testtopic"], False)
    elif name == "TestKafkaClient_decodeMetadataMember":
        m = decode_value(2, _member_value(GROUP_HEADER_V1, v["hex"])).data["members"][0]
        assert {k: m[k] for k in expected} == expected
        assert by_partition(decode_assignment(m["assignment"])["assignedPartitions"]) == {"topic1": [0]}
    elif name == "TestKafkaClient_decodeMetadataMemberV3":
        m = decode_value(2, _member_value(GROUP_HEADER_V3, v["hex"])).data["members"][0]
        got = {k: m[k] for k in expected if k != "assignment"}
        got["groupInstanceId"] = got["groupInstanceId"] or ""  # Burrow shows null as ""
        assert m["groupInstanceId"] is None
        assert got == {k: val for k, val in expected.items() if k != "assignment"}
        assert by_partition(decode_assignment(m["assignment"])["assignedPartitions"]) == expected["assignment"]
        assert decode_subscription(m["subscription"])["truncated"] is True
    elif name == "TestKafkaClient_decodeMemberAssignmentV0":
        a = decode_assignment(h("0000" + v["hex"]))
        assert by_partition(a["assignedPartitions"]) == expected["assignment"]
        assert encode_assignment(a) == h("0000" + v["hex"])
    elif kind == "offset_commit_key":
        key = decode_key(h("0001" + v["hex"]))
        assert key.data == expected
    elif kind == "offset_commit_value" and not v["version_prefix_present"]:
        raw = h(f"{v['body_version']:04x}" + v["hex"])
        if v.get("kafka_conformant") is False:
            assert decode_error(decode_value, 1, raw).field == "_tagged_fields"
        else:
            d = decode_value(1, raw).data
            assert {k: d[k] for k in expected} == expected and d["metadata"] == "testdata"
            assert_reencodes(1, raw)
    elif kind == "offset_commit_value":  # version-prefixed, with a reconstructed key
        key, raw = h(v["key_hex"]), h(v["hex"])
        if v.get("kafka_conformant") is False:
            assert decode_key(key).data == {k: expected[k] for k in ("group", "topic", "partition")}
            # offset 2-9, leaderEpoch 10-13, metadata 14-22, commitTimestamp 23-30: the tag count would be at 31
            assert decode_error(decode_record, key, raw).reason == "truncated at byte 31 reading uvarint _tagged_fields"
        else:
            r = decode_record(key, raw)
            assert {"version": r.value.version, **r.key.data, **r.value.data} == {**expected, "metadata": "testdata"}
            assert_reencodes(1, raw)
    elif name.startswith("decodeKeyAndOffsetErrors") or name.startswith("decodeGroupMetadataErrors"):
        record_type = 1 if name.startswith("decodeKeyAndOffset") else 2
        key, raw = h(f"{record_type:04x}" + v["key_hex"]), h(v["value_hex"])
        if "kafka_schema_decode" in expected:  # Burrow refuses v2; Kafka's schema reads it
            want = dict(expected["kafka_schema_decode"])
            value = decode_record(key, raw).value
            assert value is not None and value.version == want.pop("version") and value.data == want
        else:
            decode_error(decode_record, key, raw)
    elif name == "TestKafkaClient_decodeGroupMetadata" and kind == "group_metadata_key":
        assert decode_key(h("0002" + v["hex"])).data == expected
    elif name == "TestKafkaClient_decodeGroupMetadata":
        r = decode_record(h(v["key_hex"]), h(v["hex"]))
        m = r.value.data["members"][0]
        assert (r.value.version, r.key.data["group"], m["clientId"], m["clientHost"]) == (
            expected["version"], expected["group"], expected["members[0].clientId"], expected["members[0].clientHost"])
        assert by_partition(decode_assignment(m["assignment"])["assignedPartitions"]) == expected["assignment"]
        assert_reencodes(2, h(v["hex"]))
    elif name.startswith("decodeMetadataValueHeaderErrors"):
        e = decode_error(decode_value, 2, h("0001" + v["hex"]))
        assert e.field == BURROW_ERROR_FIELDS[expected["error_at"]] and e.reason.startswith("truncated at byte")
    elif name.startswith("decodeMetadataMemberErrors"):
        raw = _member_value(GROUP_HEADER_V1, v["hex"])
        if expected["error_at"] in ("consumer_protocol_version", "assignment"):
            # the member itself is well formed; its embedded assignment is not
            m = decode_value(2, raw).data["members"][0]
            e = decode_error(decode_assignment, m["assignment"])
            want = "unsupported assignment version -1" if expected["error_at"] == "consumer_protocol_version" else \
                "truncated at byte 15 reading array AssignedPartitions[0].Partitions"
            assert e.reason.startswith(want)
        else:
            e = decode_error(decode_value, 2, raw)
            assert e.field == BURROW_ERROR_FIELDS[expected["error_at"]]
    elif name.startswith("decodeMemberAssignmentV0Errors"):
        e = decode_error(decode_assignment, h("0000" + v["hex"]))
        assert e.field == BURROW_ERROR_FIELDS[expected["error_at"]]
    elif name.startswith("decodeOffsetKeyV0Errors"):
        assert decode_error(decode_key, h("0001" + v["hex"])).field == BURROW_ERROR_FIELDS[expected["error_at"]]
    elif name.startswith("decodeOffsetValueV"):
        version = int(name[len("decodeOffsetValueV")])
        e = decode_error(decode_value, 1, h(f"{version:04x}" + v["hex"]))
        assert e.field == BURROW_ERROR_FIELDS[expected["error_at"]] and e.version == version
    else:  # pragma: no cover - a new vector needs an adapter
        raise AssertionError(f"no adapter for burrow vector {name} ({kind})")


@pytest.mark.parametrize("i", _indexes("burrow.jsonl"))
def test_burrow(vectors, i):
    _burrow_case(vectors("burrow.jsonl")[i])


# --- sarama: consumer-protocol payloads ----------------------------------------------------------------


@pytest.mark.parametrize("i", _indexes("sarama.jsonl"))
def test_sarama(vectors, i):
    v = vectors("sarama.jsonl")[i]
    raw = h(v["hex"])
    expected = v["expected"]
    if v["kind"] == "assignment":
        a = decode_assignment(raw)
        assert (a["version"], by_partition(a["assignedPartitions"]), a["userData"]) == (
            expected["version"], expected["topics"], h(expected["userData"]))
        assert encode_assignment(a) == raw
        return
    s = decode_subscription(raw)
    fields = expected.get("fields_from_comments", expected)
    assert (s["version"], s["topics"], s["userData"]) == (fields["version"], fields["topics"], h(fields["userData"]))
    if fields.get("ownedPartitions") == "MISSING":  # "v1" without OwnedPartitions: read as far as it goes
        assert s["truncated"] is True and s["ownedPartitions"] == []
        return
    assert s["truncated"] is False
    assert s["ownedPartitions"] == fields.get("ownedPartitions", [])
    assert (s["generationId"], s["rackId"]) == (fields.get("generationId", -1), fields.get("rackId"))
    assert encode_subscription(s) == raw


# --- kminion, franz_lua, misc_issues_docs ----------------------------------------------------------------


@pytest.mark.parametrize("i", _indexes("kminion.jsonl"))
def test_kminion(vectors, i):
    v = vectors("kminion.jsonl")[i]
    expected = v["expected"]
    if "value_hex" in v:  # a key paired with an EMPTY (not null) value
        key = h(v["hex"])
        assert decode_error(decode_record, key, h(v["value_hex"])).reason == "empty value"  # Kafka fails too
        r = decode_record(key, None)  # a real tombstone
        assert r.value is None and {"version": r.key.record_type, **r.key.data} == {
            k: expected[k] for k in ("version", "group", "topic", "partition")}
    elif v["kind"] == "offset_commit_key":
        assert decode_key(h("0001" + v["hex"])).data == expected
    else:
        r = decode_record(h(v["key_hex"]), h(v["hex"]))
        got = {"version": r.value.version, **r.key.data, "offset": r.value.data["offset"],
               "commitTimestampMs": r.value.data["commitTimestamp"]}
        assert got == expected
        assert (r.value.data["leaderEpoch"], r.value.data["metadata"]) == (-1, "")
        assert_reencodes(1, h(v["hex"]))


@pytest.mark.parametrize("i", _indexes("franz_lua.jsonl"))
def test_franz_lua(vectors, i):
    v = vectors("franz_lua.jsonl")[i]
    expected = v["expected"]
    if v["kind"] == "offset_commit_key":
        key = decode_key(h(v["hex"]))
        assert (key.data["group"], key.data["topic"], key.data["partition"]) == (
            expected["group"], expected["topic"], expected["partition_id"])
    else:
        assert v["kafka_conformant"] is False
        e = decode_error(decode_record, h(v["key_hex"]), h(v["hex"]))
        assert (e.reason, e.record_type, e.version) == ("truncated at byte 10 reading string metadata", 1, 1)


@pytest.mark.parametrize("i", _indexes("misc_issues_docs.jsonl"))
def test_misc_issues_docs(vectors, i):
    v = vectors("misc_issues_docs.jsonl")[i]
    expected = v["expected"]
    if v.get("producer") == "Redpanda":  # an extra int16 before each member: must fail cleanly inside members[0]
        e = decode_error(decode_value, 2, h(v["hex"]))
        assert e.field.startswith("members[0].") and e.record_type == 2 and e.version == 3
    elif v.get("subkind") == "control_record_key":  # a transaction marker is not a record of this topic
        e = decode_error(decode_key, h(v["hex"]))
        assert e.reason == "truncated at byte 2 reading string group"
    elif v["kind"] == "offset_commit_key":
        key = decode_key(h(v["hex"]))
        assert {"version": key.record_type, **key.data} == expected
    else:
        r = decode_record(h(v["key_hex"]), h(v["hex"]))
        assert (r.value.version, r.value.data["offset"], r.value.data["leaderEpoch"], r.value.data["metadata"]) == (
            expected["version"], expected["offset"], expected["leaderEpoch"], expected["metadata"])
        assert r.value.data["commitTimestamp"] == int(expected["commitTimestamp_hex"], 16)
        assert_reencodes(1, h(v["hex"]))
