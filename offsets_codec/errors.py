"""The codec's exceptions.

`DecodeError` is the only exception a decode function lets escape, whatever bytes it is given.
Its text is one line that names what failed, where and why, in the style of Kafka's
`Schema.read` ("Error reading field 'x': ..."), so it can go straight into a quarantine row.
"""

from __future__ import annotations


class DecodeError(ValueError):
    """The bytes are not a valid record (or payload) for the declared layouts.

    Attributes:
        reason: the one-line message, identical to ``str(error)``.
        record_type: the record type from the key, when it was known.
        version: the value (or payload) version, when it was known.
        field: dotted path of the field being read, e.g. ``members[2].clientHost``.
        position: byte offset in the input (including any 2-byte prefix) where the field starts.
    """

    def __init__(
        self,
        reason: str,
        *,
        record_type: int | None = None,
        version: int | None = None,
        field: str | None = None,
        position: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.record_type = record_type
        self.version = version
        self.field = field
        self.position = position

    def __str__(self) -> str:
        return self.reason

    def __reduce__(self):  # keep attributes when pickled to or from Spark workers
        return (_rebuild, (self.reason, self.record_type, self.version, self.field, self.position))


def _rebuild(reason, record_type, version, field, position) -> DecodeError:
    return DecodeError(reason, record_type=record_type, version=version, field=field, position=position)


class EncodeError(ValueError):
    """The data cannot be written with the requested layout and version."""


class LayoutError(ValueError):
    """A layout declaration breaks the rules Kafka's message generator enforces."""


class WireError(Exception):
    """Internal: a low-level read failure, turned into a `DecodeError` at the top level.

    It is separate from `DecodeError` so that enclosing structs and arrays can cheaply
    prefix the field path (``members[2].``) while the exception travels up.
    """

    __slots__ = ("kind", "type_name", "position", "field", "detail")

    # kinds
    TRUNCATED = "truncated"
    NULL = "null"
    LENGTH = "length"
    UTF8 = "utf8"
    VARINT = "varint"
    MARKER = "marker"
    TAG_SIZE = "tag_size"

    def __init__(self, kind: str, type_name: str, position: int, field: str, detail: object = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.type_name = type_name
        self.position = position
        self.field = field
        self.detail = detail

    def prefixed(self, prefix: str) -> "WireError":
        """Return self with ``prefix`` put in front of the field path (``members[2]`` + ``.clientId``)."""
        self.field = f"{prefix}.{self.field}" if self.field else prefix
        return self

    def message(self) -> str:
        k, t, pos, f, d = self.kind, self.type_name, self.position, self.field, self.detail
        if k == self.TRUNCATED:
            text = f"truncated at byte {pos} reading {t} {f}"
            return f"{text}: {d}" if d else text
        if k == self.NULL:
            return f"null {t} in non-nullable field {f}"
        if k == self.LENGTH:
            return f"invalid length {d} for {t} {f}"
        if k == self.UTF8:
            return f"invalid UTF-8 in string {f}"
        if k == self.VARINT:
            return f"invalid varint at byte {pos} reading {t} {f}: more than 5 bytes"
        if k == self.MARKER:
            return f"invalid presence marker {d} at byte {pos} for {t} {f}"
        if k == self.TAG_SIZE:
            tag, size, used = d
            return f"tagged field {f} (tag {tag}) declares {size} bytes but its value used {used}"
        return f"{k} at byte {pos} reading {t} {f}"  # pragma: no cover - every kind is listed above

    def to_decode_error(self, record_type: int | None, version: int | None) -> DecodeError:
        return DecodeError(
            self.message(), record_type=record_type, version=version, field=self.field, position=self.position
        )
