"""Kafka's record compression codecs, as Kafka's Java client writes and reads them.

``compress`` / ``decompress`` take Kafka's codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) and
the magic (message format version) of the batch, because two codecs depend on it:

* lz4: Kafka uses the LZ4 *frame* format, but before message format v1 (Kafka < 0.10) it computed
  the frame descriptor checksum over the magic number too (KAFKA-3160). Kafka still reads magic-0
  frames without checking that byte and writes them with the old checksum, so this module parses
  frames itself and only checks the descriptor checksum for magic >= 1.
* zstd exists only from magic v2 on.

snappy: the Java client writes snappy-java's "xerial" framing (a 16-byte header, then blocks each
prefixed by a big-endian int32 length); other clients (librdkafka, …) may write one raw snappy
block. Both are read; xerial is written.

gzip is the standard library's; snappy, lz4 and zstd use the ``cramjam`` package, imported on first
use so that importing ``offsets_codec`` loads only the standard library.
"""

from __future__ import annotations

import struct
import zlib
from types import ModuleType

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}


class CompressionError(ValueError):
    """The compressed bytes cannot be decoded (or the codec is not valid for the magic)."""


class MissingCodecError(ImportError):
    """The optional package that implements a codec is not installed (an environment problem, not bad data)."""


def _cramjam(codec_name: str) -> ModuleType:
    try:
        import cramjam
    except ImportError:
        raise MissingCodecError(f"{codec_name} needs the cramjam package (pip install cramjam)") from None
    return cramjam


def _check_codec(codec: int, magic: int) -> None:
    if codec not in CODEC_NAMES:
        raise CompressionError(f"unknown compression codec {codec}")
    if codec == ZSTD and magic < 2:
        raise CompressionError(f"zstd compression needs magic v2, not v{magic}")


def decompress(codec: int, data: bytes | bytearray | memoryview, *, magic: int) -> bytes:
    """Decompress a batch's records section (magic 2) or a wrapper message's value (magic 0/1)."""
    _check_codec(codec, magic)
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return _gunzip(data)
    cramjam = _cramjam(CODEC_NAMES[codec])
    try:
        if codec == SNAPPY:
            return _unsnappy(cramjam, data)
        if codec == LZ4:
            return _lz4_frame_decode(cramjam, data, check_descriptor=magic > 0)
        # zstd-jni's streaming reader also takes frames without a content size (as Kafka writes
        # them) and concatenated frames; cramjam's decompress does both.
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        name, detail = CODEC_NAMES[codec], str(e)
        raise CompressionError(detail if detail.startswith(name) else f"{name}: {detail}") from None


def compress(codec: int, data: bytes | bytearray | memoryview, *, magic: int) -> bytes:
    """Compress the way Kafka's Java producer does (for the fixtures writer)."""
    _check_codec(codec, magic)
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return _gzip(data)
    cramjam = _cramjam(CODEC_NAMES[codec])
    if codec == SNAPPY:
        return _snappy_xerial(cramjam, data)
    if codec == LZ4:
        if magic == 0:
            return _lz4_frame_encode(cramjam, data, kafka_v0_checksum=True)
        # A standard frame, but with independent blocks: cramjam links blocks by default, and
        # Kafka's reader rejects linked blocks.
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    # Streaming, like zstd-jni's ZstdOutputStream: the frame header carries no content size.
    compressor = cramjam.zstd.Compressor()
    compressor.compress(bytes(data))
    return bytes(compressor.finish())


# --- gzip -----------------------------------------------------------------------------------------


def _gunzip(data: bytes | bytearray | memoryview) -> bytes:
    """Read gzip members one after another, like java.util.zip.GZIPInputStream.

    As Java does, bytes after the last member that do not start another member are ignored.
    """
    out: list[bytes] = []
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(rest))
        except zlib.error as e:
            raise CompressionError(f"gzip: {e}") from None
        if not d.eof:
            raise CompressionError("gzip: stream ends before the end of the member")
        rest = d.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(out)


def _gzip(data: bytes | bytearray | memoryview) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(data) + c.flush()


# --- snappy ---------------------------------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_BLOCK_INPUT = 32 * 1024  # snappy-java SnappyOutputStream's default block size
_I32BE = struct.Struct(">i")


def _unsnappy(cramjam: ModuleType, data: bytes | bytearray | memoryview) -> bytes:
    buf = memoryview(data)
    if bytes(buf[:8]) != XERIAL_MAGIC:
        return _unsnappy_raw(cramjam, buf)  # one raw block (librdkafka and others)
    out: list[bytes] = []
    pos, end = _XERIAL_HEADER.size, len(buf)
    while pos < end:
        if bytes(buf[pos:pos + 8]) == XERIAL_MAGIC:  # snappy-java reads concatenated streams too
            pos += _XERIAL_HEADER.size
            continue
        if end - pos < 4:
            raise CompressionError(f"snappy: {end - pos} stray bytes after the last xerial block")
        (n,) = _I32BE.unpack_from(buf, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CompressionError(f"snappy: xerial block of {n} bytes, {end - pos} remain")
        out.append(_unsnappy_raw(cramjam, buf[pos:pos + n]))
        pos += n
    return b"".join(out)


def _unsnappy_raw(cramjam: ModuleType, block: memoryview) -> bytes:
    # A raw block starts with its uncompressed length. Snappy cannot compress better than about
    # 22:1, so a larger claim is damage, refused before anything is allocated for it.
    claimed = cramjam.snappy.decompress_raw_len(block)
    if claimed > 32 * len(block) + 64:
        raise CompressionError(f"snappy: a {len(block)}-byte block claims {claimed} bytes uncompressed")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_xerial(cramjam: ModuleType, data: bytes | bytearray | memoryview) -> bytes:
    buf = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for i in range(0, len(buf), _XERIAL_BLOCK_INPUT):
        block = bytes(cramjam.snappy.compress_raw(buf[i:i + _XERIAL_BLOCK_INPUT]))
        out += _I32BE.pack(len(block))
        out += block
    return bytes(out)


# --- lz4 frame ------------------------------------------------------------------------------------

LZ4_FRAME_MAGIC = 0x184D2204
_U32LE = struct.Struct("<I")
_INCOMPRESSIBLE = 0x80000000
_FLG_VERSION_1 = 0x40
_FLG_BLOCK_INDEPENDENT = 0x20
_FLG_BLOCK_CHECKSUM = 0x10
_FLG_CONTENT_SIZE = 0x08
_FLG_CONTENT_CHECKSUM = 0x04
_FLG_DICT_ID = 0x01
_BD_64KB = 4 << 4


def _lz4_frame_decode(cramjam: ModuleType, data: bytes | bytearray | memoryview, *, check_descriptor: bool) -> bytes:
    """Decode one LZ4 frame as Kafka's Lz4BlockInputStream does (independent blocks only)."""
    buf = memoryview(data)
    end = len(buf)
    if end < 7:
        raise CompressionError("lz4: frame shorter than its header")
    if _U32LE.unpack_from(buf, 0)[0] != LZ4_FRAME_MAGIC:
        raise CompressionError("lz4: not an LZ4 frame (bad magic number)")
    flg, bd = buf[4], buf[5]
    if flg & 0xC0 != _FLG_VERSION_1:
        raise CompressionError(f"lz4: frame version {flg >> 6} is not supported")
    if not flg & _FLG_BLOCK_INDEPENDENT:
        raise CompressionError("lz4: dependent blocks are not supported (Kafka never writes them)")
    if flg & (_FLG_DICT_ID | 0x02) or bd & 0x8F:
        raise CompressionError(f"lz4: reserved or dictionary bits set in the frame descriptor ({flg:#04x} {bd:#04x})")
    size_code = (bd >> 4) & 7
    if size_code < 4:
        raise CompressionError(f"lz4: invalid block maximum size code {size_code}")
    max_block = 1 << (2 * size_code + 8)
    pos = 6 + (8 if flg & _FLG_CONTENT_SIZE else 0)
    if pos >= end:
        raise CompressionError("lz4: frame shorter than its header")
    # Kafka before 0.10 hashed the magic number too; it reads magic-0 frames without checking this byte.
    if check_descriptor and buf[pos] != (xxh32(buf[4:pos]) >> 8) & 0xFF:
        raise CompressionError("lz4: frame descriptor checksum mismatch")
    pos += 1
    block_checksum = flg & _FLG_BLOCK_CHECKSUM
    scratch = bytearray()  # grown to the blocks met, not to the maximum the descriptor claims
    out: list[bytes] = []
    while True:
        if end - pos < 4:
            raise CompressionError("lz4: frame ends before its end mark")
        (word,) = _U32LE.unpack_from(buf, pos)
        pos += 4
        size = word & ~_INCOMPRESSIBLE
        if size == 0:
            # The content checksum, if any, follows; Kafka does not verify it either.
            return b"".join(out)
        if size > max_block:
            raise CompressionError(f"lz4: block of {size} bytes exceeds the frame's maximum {max_block}")
        if size + (4 if block_checksum else 0) > end - pos:
            raise CompressionError(f"lz4: block of {size} bytes, {end - pos} remain")
        block = buf[pos:pos + size]
        pos += size
        if block_checksum:
            if _U32LE.unpack_from(buf, pos)[0] != xxh32(block):
                raise CompressionError("lz4: block checksum mismatch")
            pos += 4
        if word & _INCOMPRESSIBLE:
            out.append(bytes(block))
        else:
            # An lz4 block expands at most 255-fold (each extra length byte adds 255), so a block of
            # ``size`` bytes never needs more room than this, whatever maximum the frame declares.
            need = min(max_block, 255 * size + 64)
            if len(scratch) < need:
                scratch = bytearray(need)
            # decompress_block pads its result to output_len; the _into form says how much it wrote.
            n = cramjam.lz4.decompress_block_into(block, scratch)
            out.append(bytes(scratch[:n]))


def _lz4_frame_encode(cramjam: ModuleType, data: bytes | bytearray | memoryview, *, kafka_v0_checksum: bool) -> bytes:
    """An LZ4 frame as Kafka's Lz4BlockOutputStream writes it: 64 KB independent blocks, no checksums."""
    header = bytearray(_U32LE.pack(LZ4_FRAME_MAGIC))
    header += bytes((_FLG_VERSION_1 | _FLG_BLOCK_INDEPENDENT, _BD_64KB))
    hashed = header if kafka_v0_checksum else header[4:]  # the pre-0.10 bug: magic number included
    header.append((xxh32(hashed) >> 8) & 0xFF)
    out = header
    buf = memoryview(data)
    for i in range(0, len(buf), 64 * 1024):
        chunk = buf[i:i + 64 * 1024]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            out += _U32LE.pack(len(chunk) | _INCOMPRESSIBLE)
            out += chunk
        else:
            out += _U32LE.pack(len(block))
            out += block
    out += _U32LE.pack(0)  # end mark
    return bytes(out)


# --- xxHash32 (lz4 frame checksums) ------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M32
    return (((acc << 13) | (acc >> 19)) & _M32) * _P1 & _M32


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """xxHash32 (pure Python: only used for lz4 frame descriptors and the rare block checksums)."""
    buf = bytes(data)
    n = len(buf)
    pos = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32
        stripes = n // 16
        lanes = struct.unpack_from(f"<{stripes * 4}I", buf)
        for i in range(0, stripes * 4, 4):
            v1 = _round(v1, lanes[i])
            v2 = _round(v2, lanes[i + 1])
            v3 = _round(v3, lanes[i + 2])
            v4 = _round(v4, lanes[i + 3])
        h = (((v1 << 1) | (v1 >> 31)) + ((v2 << 7) | (v2 >> 25)) + ((v3 << 12) | (v3 >> 20)) + ((v4 << 18) | (v4 >> 14))) & _M32
        pos = stripes * 16
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        h = (h + _U32LE.unpack_from(buf, pos)[0] * _P3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * _P4 & _M32
        pos += 4
    while pos < n:
        h = (h + buf[pos] * _P5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _P1 & _M32
        pos += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    return h ^ (h >> 16)
