"""Consumer Protocol subscription and assignment payloads (spec §5).

These are the ``subscription``/``assignment`` bytes of a ``GroupMetadataValue`` member whose group
has ``protocolType == "consumer"``. Each is an int16 version followed by a non-flexible struct.
Results use lowerCamel keys (``topics``, ``userData``, ``ownedPartitions`` with ``topic`` and
``partitions``…), derived mechanically from Kafka's field names.
"""

from __future__ import annotations

import struct
from typing import Any

from .errors import DecodeError, EncodeError, WireError
from .layout import Layout
from .layouts.consumer_protocol import ASSIGNMENT, SUBSCRIPTION
from .plan import Plan, plan_for
from .reader import reader_for
from .wire import as_bytes as _as_bytes
from .writer import encode_struct

_INT16 = struct.Struct(">h")


def _lower_camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _renamed(data: Any) -> Any:
    """Kafka names -> lowerCamel keys, recursively (``OwnedPartitions[].Topic`` -> ``ownedPartitions[].topic``)."""
    if isinstance(data, dict):
        return {_lower_camel(k): _renamed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_renamed(v) for v in data]
    return data


def _kafka_named(plan: Plan, data: dict[str, Any], what: str) -> dict[str, Any]:
    """lowerCamel keys -> the plan's Kafka names, recursively, for encoding."""
    if not isinstance(data, dict):
        raise EncodeError(f"{what} needs a dict, got {type(data).__name__}")
    unknown = sorted(set(data) - {_lower_camel(n) for n in plan.all_names})
    if unknown:
        raise EncodeError(f"{what}: unknown field(s) {', '.join(map(str, unknown))}")
    out: dict[str, Any] = {}
    for fp in plan.fields:
        key = _lower_camel(fp.name)
        if key not in data:
            continue
        value = data[key]
        if fp.struct_plan is not None and isinstance(value, list):
            value = [_kafka_named(fp.struct_plan, v, f"{what}.{key}[{i}]") for i, v in enumerate(value)]
        elif fp.struct_plan is not None and value is not None:
            value = _kafka_named(fp.struct_plan, value, f"{what}.{key}")
        out[fp.name] = value
    return out


def _read_version(buf: bytes, what: str) -> int:
    if not buf:
        raise DecodeError(f"empty {what}")
    try:
        return _INT16.unpack_from(buf, 0)[0]
    except struct.error:
        raise DecodeError("truncated at byte 0 reading int16 version", field="version", position=0) from None


def _layout_version(layout: Layout, version: int, what: str) -> int:
    """Kafka's check{Subscription,Assignment}Version: negative is an error, newer is read as the newest."""
    if version < layout.valid.lowest:
        raise DecodeError(f"unsupported {what} version {version}", version=version, field="version", position=0)
    return min(version, layout.valid.highest)


def _read(layout: Layout, version: int, buf: bytes) -> tuple[dict[str, Any], int]:
    return reader_for(plan_for(layout, version))(buf, 2)


def decode_subscription(payload: bytes) -> dict[str, Any]:
    """Decode a ConsumerProtocolSubscription.

    Returns ``version`` (as written), ``topics``, ``userData`` (bytes or None), ``ownedPartitions``
    (list of ``{"topic", "partitions"}``), ``generationId`` (-1 when absent), ``rackId`` (None when
    absent) and ``truncated``. A payload that claims version ≥ 1 but ends after an earlier version's
    fields (kafka-go and sarama-cluster write "v1" without OwnedPartitions) is read with the fields
    that are there and ``truncated`` set; Kafka's own client would reject it.
    """
    buf = _as_bytes(payload, "subscription")
    version = _read_version(buf, "subscription")
    layout_version = _layout_version(SUBSCRIPTION, version, "subscription")
    truncated = False
    try:
        data, _ = _read(SUBSCRIPTION, layout_version, buf)
    except WireError as first:
        data = _shorter_version(SUBSCRIPTION, layout_version, buf)
        if data is None:
            raise first.to_decode_error(None, version) from None
        truncated = True
    except Exception as e:  # pragma: no cover - defensive
        raise DecodeError(f"internal decoder error: {type(e).__name__}: {e}", version=version) from e
    return {
        "version": version,
        "topics": data["Topics"],
        "userData": data["UserData"],
        "ownedPartitions": _renamed(data.get("OwnedPartitions", [])),
        "generationId": data.get("GenerationId", -1),
        "rackId": data.get("RackId"),
        "truncated": truncated,
    }


def _shorter_version(layout: Layout, failed_version: int, buf: bytes) -> dict[str, Any] | None:
    """The newest older layout that reads the payload to its last byte, if any."""
    for v in range(failed_version - 1, layout.valid.lowest - 1, -1):
        try:
            data, end = _read(layout, v, buf)
        except WireError:
            continue
        if end == len(buf):
            return data
    return None


def decode_assignment(payload: bytes) -> dict[str, Any]:
    """Decode a ConsumerProtocolAssignment: ``version``, ``assignedPartitions``, ``userData``.

    Empty bytes are an error: callers check the length first, as Kafka's admin client does.
    """
    buf = _as_bytes(payload, "assignment")
    version = _read_version(buf, "assignment")
    layout_version = _layout_version(ASSIGNMENT, version, "assignment")
    try:
        data, _ = _read(ASSIGNMENT, layout_version, buf)
    except WireError as e:
        raise e.to_decode_error(None, version) from None
    except Exception as e:  # pragma: no cover - defensive
        raise DecodeError(f"internal decoder error: {type(e).__name__}: {e}", version=version) from e
    return {"version": version, "assignedPartitions": _renamed(data["AssignedPartitions"]), "userData": data["UserData"]}


def subscribed_topics_v0(payload: bytes) -> list[str]:
    """The topics as the broker's ``ClassicGroup.computeSubscribedTopics`` parses them.

    Kafka reads (and ignores) the int16 version, then parses the rest with the v0 layout only
    (Topics, UserData), whatever the version says, so that it depends on no newer version. Trailing
    bytes are ignored. Raises `DecodeError` where Kafka would get a ``SchemaException``.
    """
    buf = _as_bytes(payload, "subscription")
    version = _read_version(buf, "subscription")
    try:
        data, _ = _read(SUBSCRIPTION, 0, buf)
    except WireError as e:
        raise e.to_decode_error(None, version) from None
    except Exception as e:  # pragma: no cover - defensive
        raise DecodeError(f"internal decoder error: {type(e).__name__}: {e}", version=version) from e
    return data["Topics"]


def _encode(layout: Layout, data: dict[str, Any], version: int | None, what: str) -> bytes:
    if version is None:
        version = data.get("version", layout.valid.highest)
    if not isinstance(version, int) or version < layout.valid.lowest or version > 0x7FFF:
        raise EncodeError(f"unsupported {what} version {version!r}")
    version = min(version, layout.valid.highest)  # Kafka's serializer clamps too
    plan = plan_for(layout, version)
    if not isinstance(data, dict):
        raise EncodeError(f"{what} needs a dict, got {type(data).__name__}")
    fields = {k: v for k, v in data.items() if k not in ("version", "truncated")}  # what decoding adds
    return _INT16.pack(version) + encode_struct(plan, _kafka_named(plan, fields, what))


def encode_subscription(subscription: dict[str, Any], version: int | None = None) -> bytes:
    """Encode a subscription dict (as `decode_subscription` returns) at ``version`` or its ``"version"``."""
    return _encode(SUBSCRIPTION, subscription, version, "subscription")


def encode_assignment(assignment: dict[str, Any], version: int | None = None) -> bytes:
    """Encode an assignment dict (as `decode_assignment` returns) at ``version`` or its ``"version"``."""
    return _encode(ASSIGNMENT, assignment, version, "assignment")
