"""Offset-commit values for checking the reader that claims to accept only what the codec accepts
(jobs.decode.arrow_reader): valid ones of every version, and damaged and random bytes."""
from __future__ import annotations

import random

from offsets_codec import DecodeError, decode_value, encode_value
from offsets_codec.wire import uvarint_bytes

UUIDS = ["AQIDBAUGBwgJCgsMDQ4PEA", "AAAAAAAAAAAAAAAAAAAAAA", "_____________________w"]
TEXTS = ["", "m", "metadata-é", "😀" * 3, "x" * 200, "\u0000"]


def commit_values(rng: random.Random) -> list[bytes]:
    out = []
    for version in range(5):
        for text in TEXTS:
            data = {"offset": rng.choice([0, 1, 2**40, -1, 2**63 - 1, -(2**63)]), "metadata": text,
                    "commitTimestamp": rng.choice([0, 1_700_000_000_000, -1]), "leaderEpoch": rng.choice([-1, 0, 7]),
                    "expireTimestamp": rng.choice([-1, 1_800_000_000_000])}
            if version == 4:
                data["topicId"] = rng.choice(UUIDS)
            out.append(encode_value(1, version, {k: v for k, v in data.items() if _has(version, k)}))
    return out


def _has(version: int, name: str) -> bool:
    return {"leaderEpoch": version >= 3, "expireTimestamp": version == 1, "topicId": version >= 4}.get(name, True)


def damaged_values(rng: random.Random, good: list[bytes]) -> list[bytes]:
    out = []
    for raw in good:
        out += [raw[:n] for n in range(0, len(raw), max(1, len(raw) // 6))]  # truncations
        out.append(raw + b"\x00\x07")  # trailing bytes: accepted, as Kafka does
        for _ in range(4):  # flipped bytes
            b = bytearray(raw)
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
            out.append(bytes(b))
    v4 = encode_value(1, 4, {"offset": 5, "metadata": "", "commitTimestamp": 9})
    body = v4[:-1]  # everything before the tagged-field section
    out += [
        body + b"\x01\x00\x10" + bytes(range(16)),  # the topicId tag
        body + b"\x01\x00\x0f" + bytes(range(15)),  # a uuid tag of the wrong size
        body + b"\x01\x05\x02ab",  # an unknown tag: the codec skips it
        body + b"\x02\x00\x10" + bytes(16) + b"\x05\x00",  # two tags
        body[:14] + uvarint_bytes(201) + b"y" * 200 + body[15:] + b"\x00",  # a two-byte varint length
        body[:14] + b"\x00" + body[15:] + b"\x00",  # a null compact string (metadata is not nullable)
        body[:14] + b"\x03\xc3\x28" + body[15:] + b"\x00",  # invalid UTF-8
        b"\x00\x03" + bytes(8) + bytes(4) + b"\xff\xff" + bytes(8),  # v3 with a -1 (null) metadata length
        b"\x00\x03" + bytes(8) + bytes(4) + b"\xff\xfe" + bytes(8),  # a negative length
        b"\x00\x03" + bytes(8) + bytes(4) + b"\x00\x02\xed\xa0" + bytes(8),  # a UTF-16 surrogate in UTF-8
        b"\x00\x05" + bytes(30), b"\xff\xff" + bytes(30), b"", b"\x00",
    ]
    out += [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(300)]
    return out


def codec_accepts(value: bytes) -> bool:
    """The codec reads `value` as an offset-commit value."""
    try:
        decode_value(1, value)
        return True
    except DecodeError:
        return False
