"""Offset-commit keys and values proven valid in bulk, with numpy over an Arrow column: no per-record Python.

The second reader of the same layouts (after the codec), and the more conservative: a record proven here may
be folded into its key's newest record (jobs.replay.reduction) and never checked on its own. So "proven" must
imply that the codec accepts it; whatever this reader is unsure of is left unproven and checked by the codec
(jobs.decode.check):
* strings: non-null, with text that is all ASCII (a subset of valid UTF-8);
* compact lengths and tagged-field counts of one byte; tagged sections either empty or every declared tagged
  field once, in tag order (the two shapes brokers write);
* no trailing bytes: the value ends where its last field does.

A version whose layout holds a type this reader does not read (arrays, structs, bytes) is never proven.
Positions are per-row numpy arrays, so a string's length moves each row's later fields on its own. `read` also
gives the proven rows' fields (the offsets and the history read them: jobs.replay.offsets, jobs.replay.history).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from offsets_codec.layout import Layout, Primitive
from offsets_codec.plan import Plan, plan_for

_WIDTHS = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "uuid": 16}


class _Bytes:
    """Rows of a binary Arrow array as numpy: their starts and lengths in the array's data buffer.

    Reads at a position past a row's end return a neighbour's byte (or the buffer's last), never fail: every
    read is paired with a length check."""

    def __init__(self, data: np.ndarray, start: np.ndarray, length: np.ndarray, shared: dict | None = None) -> None:
        self.data, self.start, self.length = data, start, length
        self.shared = {} if shared is None else shared  # per buffer, for every subset of its rows

    @classmethod
    def of(cls, array: pa.Array) -> tuple["_Bytes", np.ndarray]:
        """The array's rows, and which of them are non-null."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        _, offsets, data = array.buffers()
        n = len(array)
        bounds = np.frombuffer(offsets, dtype=offset_type)[array.offset:array.offset + n + 1].astype(np.int64)
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else np.zeros(1, np.uint8)
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return cls(raw, bounds[:-1], bounds[1:] - bounds[:-1]), valid

    def rows(self, which: np.ndarray) -> "_Bytes":
        return _Bytes(self.data, self.start[which], self.length[which], self.shared)

    def byte(self, pos: np.ndarray) -> np.ndarray:
        return self.data[np.minimum(self.start + pos, len(self.data) - 1)].astype(np.int64)

    def int16(self, pos: np.ndarray) -> np.ndarray:
        value = (self.byte(pos) << 8) | self.byte(pos + 1)
        return np.where(value >= 0x8000, value - 0x10000, value)

    def ascii(self, pos: np.ndarray, n: np.ndarray, check: np.ndarray) -> np.ndarray:
        """Where `check` holds (and [pos, pos + n) fits the row): every byte of that range is below 0x80."""
        result = np.ones(len(pos), dtype=bool)
        if "high" not in self.shared:  # where the buffer's bytes >= 0x80 are, found once: few, or none
            self.shared["high"] = np.flatnonzero(self.data >= 0x80)
        high = self.shared["high"]
        rows = np.nonzero(check & (n > 0))[0]
        if len(high) and len(rows):  # a range holds one when one lies between its ends
            first = self.start[rows] + pos[rows]
            result[rows] = np.searchsorted(high, first) == np.searchsorted(high, first + n[rows])
        return result


def last_bytes(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row of a binary array: its last byte (0 for a null or empty row)."""
    buf, valid = _Bytes.of(array)
    return np.where(valid & (buf.length > 0), buf.byte(buf.length - 1), 0)


@dataclass(frozen=True)
class BulkRead:
    ok: np.ndarray  # per row: proven (see `proven`)
    fields: dict[str, pa.Array]  # integer, string and uuid fields; null where not ok or the row lacks one
    prefix: np.ndarray  # per row: its first two bytes as a signed number (a value's version), -1 with fewer


def proven(values: pa.Array, layout: Layout) -> np.ndarray:
    """Per row: the value is non-null and the codec reads it as `layout`, at the version in its first two
    bytes, completely and without error. False where unsure."""
    return read(values, layout, ()).ok


def read(values: pa.Array, layout: Layout, fields: Sequence[str], heads: Mapping[int, int] | None = None,
         checked: bool = False) -> BulkRead:
    """`proven`, and the named fields of the proven rows (ints as int64, strings as strings, uuids in Kafka's
    text form); a tagged field is null where the row's tagged section is empty.

    `heads`: which first two bytes are read as which version of `layout` (default: each of its versions as
    itself, as a value's are). A key's first two bytes are its record type: {type: the key layout's version}.
    `checked`: the values passed the check (jobs.decode.check) already, so their strings are valid UTF-8 and
    need not be ASCII to be read here."""
    buf, valid = _Bytes.of(values)
    rows = len(buf.length)
    ok = np.zeros(rows, dtype=bool)
    at = {name: np.full(rows, -1, np.int64) for name in fields}  # where each field starts (-1: absent)
    size = {name: np.zeros(rows, np.int64) for name in fields}  # strings: their length
    head = np.where(valid & (buf.length >= 2), buf.int16(np.zeros(rows, np.int64)), -1)
    for first, version in ({v: v for v in layout.versions} if heads is None else heads).items():
        which = np.nonzero(head == first)[0]
        if len(which):
            ok[which], positions, lengths = _reads(buf.rows(which), plan_for(layout, version), checked)
            for name in fields:
                if name in positions:
                    at[name][which] = positions[name]
                    size[name][which] = lengths.get(name, 0)
    types = {f.name: f.type for f in layout.fields}
    return BulkRead(ok, {name: _decoded(buf, types[name], at[name], size[name], ok & (at[name] >= 0))
                         for name in fields}, head)


def _decoded(buf: _Bytes, t: Primitive, at: np.ndarray, size: np.ndarray, present: np.ndarray) -> pa.Array:
    """One field's values where `present`, null elsewhere."""
    first = buf.start + np.where(present, at, 0)
    if t.name == "uuid":
        return _uuid_text(buf, first, present)
    if t.name == "string":
        n = np.where(present, size, 0)
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
        spans = np.repeat(first - offsets[:-1], n) + np.arange(offsets[-1])  # every byte of every string
        text = buf.data[np.minimum(spans, len(buf.data) - 1)] if len(spans) else np.zeros(0, np.uint8)
        strings = pa.StringArray.from_buffers(len(n), pa.py_buffer(offsets), pa.py_buffer(text.tobytes()))
        return pc.if_else(pa.array(present), strings, pa.scalar(None, pa.string()))
    width = _WIDTHS[t.name]
    raw = _gather(buf.data, first, width)
    numbers = raw.view(">u2" if t.name == "uint16" else f">i{width}").ravel().astype(np.int64)
    return pa.array(numbers, pa.int64(), mask=~present)


def _gather(data: np.ndarray, first: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes at each of `first` in `data`, as rows of a (len(first), width) array (a start too near the
    end reads the last `width` bytes: only rows known to fit are kept). Through a view of `data` whose row i is
    its bytes from i on: one copy of each row, no index per byte."""
    if len(data) < width:
        data = np.concatenate([data, np.zeros(width, np.uint8)])
    windows = np.lib.stride_tricks.as_strided(data, shape=(len(data) - width + 1, width), strides=(1, 1),
                                              writeable=False)
    return windows[np.minimum(first, len(data) - width)]


_BASE64URL = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", np.uint8)


def _uuid_text(buf: _Bytes, first: np.ndarray, present: np.ndarray) -> pa.Array:
    """16 bytes at `first` per row, in Kafka's text form (base64url without padding: 22 characters)."""
    n = len(first)
    raw = np.zeros((n, 18), np.uint32)  # two zero bytes: six whole 3-byte groups
    raw[:, :16] = _gather(buf.data, first, 16)
    groups = raw.reshape(n, 6, 3)
    bits = (groups[:, :, 0] << 16) | (groups[:, :, 1] << 8) | groups[:, :, 2]
    sextets = np.stack([(bits >> shift) & 0x3F for shift in (18, 12, 6, 0)], axis=-1).reshape(n, 24)[:, :22]
    text = _BASE64URL[sextets]
    offsets = np.arange(0, 22 * (n + 1), 22, dtype=np.int32)
    strings = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text.tobytes()))
    return pc.if_else(pa.array(present), strings, pa.scalar(None, pa.string()))


def _reads(buf: _Bytes, plan: Plan, checked: bool = False
           ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(rows whose bytes after the version hold `plan` exactly, where each untagged field starts, the length of
    each string field); `checked`: strings need not be ASCII (`read`)."""
    pos = np.full(len(buf.length), 2, np.int64)
    ok = np.ones(len(buf.length), dtype=bool)
    positions: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    nothing = np.zeros_like(ok), positions, lengths
    for fp in plan.untagged:
        t = fp.type
        if not isinstance(t, Primitive):
            return nothing
        if t.name in _WIDTHS:
            positions[fp.name] = pos
            pos = pos + _WIDTHS[t.name]
        elif t.name == "string":
            if fp.compact:  # uvarint length + 1 in one byte; 0 (null) and longer varints unproven
                n = buf.byte(pos) - 1
                ok &= (pos < buf.length) & (n >= 0) & (n < 0x7F)
                pos = pos + 1
            else:
                n = buf.int16(pos)
                ok &= (pos + 2 <= buf.length) & (n >= 0)
                pos = pos + 2
            ok &= (pos + n <= buf.length)
            if not checked:
                ok &= buf.ascii(pos, n, ok)
            positions[fp.name], lengths[fp.name] = pos, np.maximum(n, 0)
            pos = pos + np.maximum(n, 0)
        else:
            return nothing
    if plan.flexible:
        count = buf.byte(pos)
        ok &= pos < buf.length
        every = count == len(plan.tagged)
        after = pos + 1
        for fp in plan.tagged:
            width = _WIDTHS.get(fp.type.name) if isinstance(fp.type, Primitive) else None
            if width is None or fp.tag >= 0x80 or width >= 0x80:
                every = np.zeros_like(ok)
                break
            every = every & (buf.byte(after) == fp.tag) & (buf.byte(after + 1) == width)
            positions[fp.name] = after + 2
            after = after + 2 + width
        empty = count == 0
        for fp in plan.tagged:  # absent from an empty section (read where `ok` holds, so every tag is there)
            if fp.name in positions:
                positions[fp.name] = np.where(empty, -1, positions[fp.name])
        pos = np.where(empty, pos + 1, after)
        ok &= empty | (every if plan.tagged else False)
    return ok & (pos == buf.length), positions, lengths
