"""CRC-32C (Castagnoli), the checksum of Kafka's magic-v2 record batches.

Uses the ``crc32c`` package (hardware-accelerated) when it is installed, else a table-driven
pure-Python version that gives the same results, only slower. The package is imported on the
first call, never when ``offsets_codec`` is imported, so the codec keeps loading only the
standard library.
"""

from __future__ import annotations

from typing import Callable

_POLY = 0x82F63B78  # CRC-32C polynomial, bit-reversed


def _make_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c_pure(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data`` in pure Python, continuing from ``value`` (a previous result), like ``zlib.crc32``."""
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for b in memoryview(data).cast("B"):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_impl: Callable[[bytes, int], int] | None = None


def _load() -> Callable[[bytes, int], int]:
    try:
        import crc32c as package
    except ImportError:
        return crc32c_pure
    return package.crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (a previous result)."""
    global _impl
    if _impl is None:
        _impl = _load()
    return _impl(data, value)
