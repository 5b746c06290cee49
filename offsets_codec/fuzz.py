"""Mutation fuzzing of the decoders: ``python -m offsets_codec.fuzz [--inputs N] [--seed S] [--max-ms 10] [--json]``.

The decoders promise that whatever bytes they get, only `DecodeError` escapes (and `read_segment`
yields damage as `SegmentDamage` instead of raising). This checks the promise on mutated copies of a
seed corpus written by the codec's own encoders: keys and values of every record type and value
version in ``REGISTRY``, group metadata whose members carry real consumer-protocol bytes, those
subscription and assignment payloads on their own, and small log segments (live and tombstone
records, a transaction marker, legacy message sets, gzip; snappy, lz4 and zstd when ``cramjam`` is
installed). Any other exception, or a DecodeError wrapping an internal one, is an escape
(`MissingCodecError` is not: it reports a missing package, not bad bytes). A decode slower than
``--max-ms``, or an input whose peak allocation exceeds what its length allows (every input is
measured unless ``--alloc-every`` says otherwise), is a finding too. Everything is drawn from one ``random.Random(seed)``, so a run is reproduced by its seed.
Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time
import tracemalloc
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from .bench import GROUP_METADATA, group_metadata_records, offset_commit_records
from .consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscribed_topics_v0,
)
from .compression import MissingCodecError
from .errors import DecodeError
from .formatter import to_kafka_json
from .layout import ArrayOf, Primitive, Struct
from .layouts.consumer_protocol import ASSIGNMENT, SUBSCRIPTION
from .plan import Plan, plan_for
from .records import decode_key, decode_value, encode_key, encode_value
from .registry import REGISTRY
from .segment_writer import encode_batch, encode_control_batch, encode_message_set
from .segments import Batch, LogRecord, read_segment
from .wire import uuid_to_str

# A decoded structure legitimately costs up to about 100 bytes of Python objects per input byte (a
# 3-byte array element becomes a dict of empty strings and lists); 256 leaves headroom. A length
# field trusted before checking the remaining bytes costs megabytes or more for these inputs.
ALLOC_BASE = 64 * 1024
ALLOC_PER_BYTE = 256
RETIMINGS = 3  # a slow decode counts only if the fastest of these re-timings (CPU time) is over the bound
_KEPT = 20  # findings of each kind kept in the report (all are counted)
_INTERNAL = "internal decoder error"


@dataclass(frozen=True)
class CorpusEntry:
    """One corpus entry: the bytes, the decoder they go to, and the record type a value belongs to."""

    target: str  # a key of DECODERS
    data: bytes
    record_type: int | None = None
    lengths: tuple[tuple[int, int], ...] = ()  # (position, width) of length-like fields; width 1 = uvarint


# --- decoders ---------------------------------------------------------------------------------------


def _segment(_: Any, data: bytes) -> None:
    """Read the batches (CRC unchecked, so that mutations reach the parsers) and format every record."""
    for item in read_segment(io.BytesIO(data), verify_crc=False):
        if isinstance(item, Batch) and item.control_type is None:  # a marker's records are no offsets records
            for r in item.records:
                try:
                    to_kafka_json(r.key, r.value)
                except DecodeError as e:
                    if e.reason.startswith(_INTERNAL):
                        raise


DECODERS: dict[str, Callable[[Any, bytes], Any]] = {
    "key": lambda _, data: decode_key(data),
    "value": decode_value,
    "subscription": lambda _, data: decode_subscription(data),
    "subscribed_topics_v0": lambda _, data: subscribed_topics_v0(data),
    "assignment": lambda _, data: decode_assignment(data),
    "segment": _segment,
}


# --- seed corpus ------------------------------------------------------------------------------------

_INTS = {"int8": -7, "int16": 300, "uint16": 65535, "int32": 123456, "int64": 2**40 + 1}


def sample(plan: Plan, nulls: bool = False) -> dict[str, Any]:
    """Every field of ``plan`` set away from its default (two elements per array); ``nulls``: nullable ones None."""
    out: dict[str, Any] = {}
    for fp in plan.fields:
        t = fp.type
        if nulls and fp.nullable:
            out[fp.name] = None
        elif isinstance(t, Struct):
            out[fp.name] = sample(fp.struct_plan, nulls)
        elif isinstance(t, ArrayOf) and isinstance(t.element, Struct):
            out[fp.name] = [sample(fp.struct_plan, nulls) for _ in range(2)]
        elif isinstance(t, ArrayOf):
            out[fp.name] = [_primitive(t.element, fp.name), _primitive(t.element, fp.name + "2")]
        else:
            out[fp.name] = _primitive(t, fp.name)
    return out


def _primitive(t: Primitive, name: str) -> Any:
    if t.fixed:
        return _INTS[t.name]
    if t.name == "uuid":
        return uuid_to_str(bytes(range(1, 17)))
    return f"{name}-é" if t.name == "string" else b"\x00\xff" + name.encode()


def build_corpus() -> list[CorpusEntry]:
    """The seeds, all written by the codec's own encoders."""
    seeds: list[CorpusEntry] = []
    for t, rt in sorted(REGISTRY.items()):
        key_plan = plan_for(rt.key, rt.key.valid.lowest)
        seeds += [CorpusEntry("key", encode_key(t, sample(key_plan))), CorpusEntry("key", encode_key(t, {}))]
        for v in rt.value.versions:
            plan = plan_for(rt.value, v)
            for data in ({}, sample(plan), sample(plan, nulls=True)):
                seeds.append(CorpusEntry("value", encode_value(t, v, data), t))
    # group metadata at every version, with the members' real subscription and assignment bytes
    gm_key, gm_value = group_metadata_records(1, members=2)[0]
    gm = decode_value(GROUP_METADATA, gm_value).data
    seeds += [CorpusEntry("value", encode_value(GROUP_METADATA, v, gm), GROUP_METADATA)
              for v in REGISTRY[GROUP_METADATA].value.versions]
    payloads = [(m["subscription"], m["assignment"]) for m in gm["members"]]
    partitions = [{"topic": "orders.v1", "partitions": [0, 3]}, {"topic": "payments-é", "partitions": [7]}]
    for v in SUBSCRIPTION.versions:
        for user_data in (None, b"\x00\x01sticky"):
            payloads.append((
                encode_subscription({"topics": ["orders.v1", "payments-é"], "userData": user_data,
                                     "ownedPartitions": partitions, "generationId": 41, "rackId": "rack-a"}, v),
                encode_assignment({"assignedPartitions": partitions, "userData": user_data},
                                  min(v, ASSIGNMENT.valid.highest)),
            ))
    for subscription, assignment in payloads:
        seeds += [CorpusEntry("subscription", subscription), CorpusEntry("subscribed_topics_v0", subscription),
                  CorpusEntry("assignment", assignment)]
    seeds += [CorpusEntry("segment", s) for s in _segments(gm_key, gm_value)]
    return [CorpusEntry(s.target, s.data, s.record_type, _length_positions(s.data)) for s in seeds]


def _segments(gm_key: bytes, gm_value: bytes) -> list[bytes]:
    """Small segments: live and tombstone records in v2 batches (plain and gzip), a marker, legacy sets."""
    commits = offset_commit_records(2)
    records = [LogRecord(10 + i, 1_700_000_000_000 + i, 0, k, v) for i, (k, v) in enumerate(commits)]
    records += [LogRecord(12, 1_700_000_000_005, 0, gm_key, gm_value),
                LogRecord(13, 1_700_000_000_009, 0, commits[0][0], None)]  # a tombstone
    small = records[:2] + records[3:]
    segments = [
        encode_batch(records) + encode_control_batch(14, "COMMIT", producer_id=7),
        encode_batch(small, compression="gzip", producer_id=7, is_transactional=True),
        encode_message_set(small, magic=0),
        encode_message_set(small, magic=1, compression="gzip", timestamp_type=1),
    ]
    if _has_cramjam():
        segments += [encode_batch(small, compression=c) for c in ("snappy", "lz4", "zstd")]
        # magic 0 lz4 frames skip the descriptor checksum, so mutations of the descriptor get through
        segments += [encode_message_set(small, magic=0, compression="lz4"),
                     encode_message_set(small, magic=1, compression="snappy")]
    return segments


def _has_cramjam() -> bool:
    """Import cramjam now if it is installed, so that its one-time import is not counted against an input."""
    try:
        import cramjam  # noqa: F401
    except ImportError:
        return False
    return True


def _length_positions(data: bytes) -> tuple[tuple[int, int], ...]:
    """Positions whose int16, int32 or one-byte uvarint could be a length or count: it fits the bytes after it."""
    n = len(data)
    found = []
    for i in range(n):
        b = data[i]
        if 0 < b < 0x80 and b - 1 <= n - i - 1:
            found.append((i, 1))
        for width in (2, 4):
            if i + width <= n and -1 <= int.from_bytes(data[i:i + width], "big", signed=True) <= n - i - width:
                found.append((i, width))
    return tuple(found)


# --- mutators ---------------------------------------------------------------------------------------

_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
_HUGE = {
    2: (0x7FFF, -0x8000, -2, -1, 0x4000),
    4: (0x7FFFFFFF, -0x80000000, -2, -1, 0x10000000),
    1: (b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x01", b"\x81\x80\x02",
        b"\xff\xff\xff\xff\xff\x01", b"\x00"),  # 2**31-1, 2**32-1, 2**28, 0x7fff+2, a 6-byte varint, 0 (null)
}


def _flip_bits(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    for _ in range(rng.randint(1, 8)):
        bit = rng.randrange(len(buf) * 8)
        buf[bit >> 3] ^= 1 << (bit & 7)


def _overwrite(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    for _ in range(rng.randint(1, 4)):
        buf[rng.randrange(len(buf))] = rng.choice(_BYTES) if rng.random() < 0.5 else rng.randrange(256)


def _truncate(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    del buf[rng.randrange(len(buf)):]


def _insert(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    at = rng.randint(0, len(buf))
    buf[at:at] = rng.randbytes(rng.randint(1, 8))


def _delete(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    at = rng.randrange(len(buf))
    del buf[at:at + rng.randint(1, 16)]


def _duplicate(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    start = rng.randrange(len(buf))
    span = buf[start:start + rng.randint(1, 32)]
    at = rng.randint(0, len(buf))
    buf[at:at] = span


def _huge_length(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    """Set a length-like field of the entry to a huge, negative or just-too-large value."""
    candidates = entry.lengths or ((rng.randrange(len(buf)), 4),)
    at, width = rng.choice(candidates)
    if at + width > len(buf):
        return  # an earlier mutation shortened the input
    if width == 1:
        buf[at:at + 1] = rng.choice(_HUGE[1])
    else:
        value = rng.choice(_HUGE[width] + (len(buf) - at - width + 1,))  # one byte more than remains
        buf[at:at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big")


def _splice(rng: random.Random, buf: bytearray, entry: CorpusEntry, corpus: list[CorpusEntry]) -> None:
    other = corpus[rng.randrange(len(corpus))].data
    buf[rng.randint(0, len(buf)):] = other[rng.randrange(len(other)):]


MUTATORS = (_flip_bits, _overwrite, _truncate, _insert, _delete, _duplicate, _huge_length, _splice)
_STACK = (1, 1, 1, 2, 2, 3, 4)  # mutations per input


Mutated = tuple[CorpusEntry, bytes, tuple[str, ...]]  # the entry, the mutated bytes, the mutators applied


def mutated_inputs(corpus: list[CorpusEntry], seed: int, count: int) -> Iterator[Mutated]:
    """``count`` (corpus entry, mutated bytes, mutator names), all drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    for _ in range(count):
        entry = corpus[rng.randrange(len(corpus))]
        buf = bytearray(entry.data)
        ops = []
        for _ in range(rng.choice(_STACK)):
            op = MUTATORS[rng.randrange(len(MUTATORS))] if buf else _insert
            op(rng, buf, entry, corpus)
            ops.append(op.__name__[1:])
        yield entry, bytes(buf), tuple(ops)


# --- the run ----------------------------------------------------------------------------------------


@dataclass
class FuzzReport:
    """Counts and the first findings of a run; ``ok`` when nothing escaped, ran too long or allocated too much."""

    inputs: int
    seed: int
    corpus: int
    max_ms: float
    seconds: float = 0.0
    escape_count: int = 0
    escapes: list[dict] = field(default_factory=list)
    slowest_ms: float = 0.0  # CPU ms: the fastest of RETIMINGS re-timings of the slowest input
    slowest: dict | None = None
    over_bound: int = 0
    slow: list[dict] = field(default_factory=list)
    alloc_measured: int = 0
    alloc_breach_count: int = 0
    alloc_breaches: list[dict] = field(default_factory=list)
    worst_alloc_ratio: float = 0.0  # peak allocation / (ALLOC_BASE + ALLOC_PER_BYTE * length)
    worst_alloc: dict | None = None

    @property
    def ok(self) -> bool:
        return not (self.escape_count or self.over_bound or self.alloc_breach_count)

    @property
    def inputs_per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def _escape(fn: Callable, record_type: Any, data: bytes) -> BaseException | None:
    """Decode; return the exception that escaped the codec's promise, or None."""
    try:
        fn(record_type, data)
    except DecodeError as e:
        if e.reason.startswith(_INTERNAL):
            return e.__cause__ or e
    except MissingCodecError:
        pass
    except Exception as e:  # MemoryError and RecursionError included
        return e
    return None


def _cpu_time(fn: Callable, record_type: Any, data: bytes) -> float:
    """The fastest of RETIMINGS decodes, in CPU seconds of this thread: on a shared machine wall time
    also counts the time other processes ran, which says nothing about the input."""
    best = float("inf")
    for _ in range(RETIMINGS):
        start = time.thread_time()
        _escape(fn, record_type, data)
        best = min(best, time.thread_time() - start)
    return best


def _measure_allocations(items: list[Mutated], decoders: dict[str, Callable], report: FuzzReport) -> None:
    """Peak allocation of each (entry, data, mutations), against ALLOC_BASE + ALLOC_PER_BYTE * length.

    tracemalloc is started once per batch: starting and stopping it per input grows the process
    (by about 0.4 KB a time on CPython 3.11), and leaving it on would slow every timed decode.
    """
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        for entry, data, ops in items:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            _escape(decoders[entry.target], entry.record_type, data)
            peak = tracemalloc.get_traced_memory()[1] - base
            ratio = peak / (ALLOC_BASE + ALLOC_PER_BYTE * len(data))
            report.alloc_measured += 1
            if ratio > report.worst_alloc_ratio:
                report.worst_alloc_ratio, report.worst_alloc = ratio, _about(entry, data, ops, peak_bytes=peak)
            if ratio > 1:
                report.alloc_breach_count += 1
                if len(report.alloc_breaches) < _KEPT:
                    report.alloc_breaches.append(_about(entry, data, ops, peak_bytes=peak))
    finally:
        if started:
            tracemalloc.stop()


def _about(entry: CorpusEntry, data: bytes, ops: tuple[str, ...], **detail: Any) -> dict:
    return {"decoder": entry.target, "record_type": entry.record_type, "length": len(data), "mutations": "+".join(ops),
            **detail, "hex": data.hex()}


def run(inputs: int, seed: int = 1, max_ms: float = 10.0, alloc_every: int = 1,
        decoders: dict[str, Callable] | None = None) -> FuzzReport:
    """Decode ``inputs`` mutated inputs, timing each. An input slower than ``max_ms`` (or than the slowest
    so far) is re-timed in CPU time. Peak allocation is measured apart from the timing, for every
    ``alloc_every``-th input, every input with a huge length and every slow one."""
    decoders = DECODERS if decoders is None else decoders
    corpus = build_corpus()
    report = FuzzReport(inputs, seed, len(corpus), max_ms)
    bound = max_ms / 1000
    perf = time.perf_counter
    to_measure: list[Mutated] = []
    started = perf()
    for n, (entry, data, ops) in enumerate(mutated_inputs(corpus, seed, inputs)):
        fn, rt = decoders[entry.target], entry.record_type
        t0 = perf()
        escaped = _escape(fn, rt, data)
        elapsed = perf() - t0  # wall time >= CPU time: only a candidate, confirmed by _cpu_time
        if escaped is not None:
            report.escape_count += 1
            if len(report.escapes) < _KEPT:
                tb = traceback.extract_tb(escaped.__traceback__)
                where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else "?"
                error = traceback.format_exception_only(type(escaped), escaped)[-1].strip()
                report.escapes.append(_about(entry, data, ops, error=error, where=where))
        slow = False
        if elapsed > bound or elapsed * 1000 > report.slowest_ms:
            ms = _cpu_time(fn, rt, data) * 1000
            if ms > report.slowest_ms:
                report.slowest_ms, report.slowest = ms, _about(entry, data, ops)
            if ms > max_ms:
                slow = True
                report.over_bound += 1
                if len(report.slow) < _KEPT:
                    report.slow.append(_about(entry, data, ops, ms=round(ms, 3)))
        if n % alloc_every == 0 or slow or "huge_length" in ops:
            to_measure.append((entry, data, ops))
            if len(to_measure) == 1000:
                _measure_allocations(to_measure, decoders, report)
                to_measure.clear()
    _measure_allocations(to_measure, decoders, report)
    report.seconds = perf() - started
    return report


def _short(about: dict | None) -> str:
    if about is None:
        return "-"
    text = ", ".join(f"{k} {v}" for k, v in about.items() if k != "hex" and v is not None)
    return f"{text}, hex {about['hex'][:96]}{'…' if len(about['hex']) > 96 else ''}"


def summary(r: FuzzReport) -> str:
    lines = [
        f"inputs      {r.inputs} (seed {r.seed}, {r.corpus} corpus entries) in {r.seconds:.1f} s, "
        f"{r.inputs_per_second:,.0f} inputs/s",
        f"escapes     {r.escape_count}",
        *(f"  {e['error']} at {e['where']}: {_short(e)}" for e in r.escapes),
        f"slowest     {r.slowest_ms:.3f} ms ({_short(r.slowest)})",
        f"over {r.max_ms:g} ms  {r.over_bound}",
        *(f"  {_short(e)}" for e in r.slow),
        f"allocation  {r.alloc_measured} inputs measured, {r.alloc_breach_count} over {ALLOC_BASE} + "
        f"{ALLOC_PER_BYTE} x length; worst {r.worst_alloc_ratio:.1%} of its allowance ({_short(r.worst_alloc)})",
        *(f"  {_short(e)}" for e in r.alloc_breaches),
        "OK" if r.ok else "FAILED",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-ms", type=float, default=10.0, help="time bound of one decode")
    parser.add_argument("--alloc-every", type=int, default=1,
                        help="measure the allocation of every Nth input (and of every slow or huge-length one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.inputs < 0 or args.alloc_every < 1 or args.max_ms <= 0:
        parser.error("--inputs must be >= 0, --alloc-every >= 1 and --max-ms > 0")
    report = run(args.inputs, args.seed, args.max_ms, args.alloc_every)
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok, "inputs_per_second": round(report.inputs_per_second)}))
    else:
        print(summary(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
