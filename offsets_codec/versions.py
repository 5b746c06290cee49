"""Version ranges as Kafka's message schemas write them: ``"2"``, ``"0-2"``, ``"3+"`` and ``"none"``."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_VERSION = 32767  # versions are int16 on the wire; "3+" is open-ended up to here, as in Kafka

_RANGE = re.compile(r"^(\d+)(?:(\+)|-(\d+))?$")


@dataclass(frozen=True)
class VersionRange:
    """An inclusive range of versions; empty when ``lowest > highest``."""

    lowest: int
    highest: int

    @staticmethod
    def parse(text: "str | VersionRange") -> "VersionRange":
        """Parse ``"none"``, ``"2"``, ``"0-2"`` or ``"3+"`` (a `VersionRange` is returned unchanged)."""
        if isinstance(text, VersionRange):
            return text
        s = text.strip()
        if s == "none":
            return NONE
        m = _RANGE.match(s)
        if not m:
            raise ValueError(f"invalid version range {text!r}")
        low = int(m.group(1))
        if m.group(2):
            high = MAX_VERSION
        elif m.group(3) is not None:
            high = int(m.group(3))
        else:
            high = low
        if low > high or high > MAX_VERSION:
            raise ValueError(f"invalid version range {text!r}")
        return VersionRange(low, high)

    @property
    def empty(self) -> bool:
        return self.lowest > self.highest

    def contains(self, version: int) -> bool:
        return self.lowest <= version <= self.highest

    __contains__ = contains

    def intersect(self, other: "VersionRange") -> "VersionRange":
        low, high = max(self.lowest, other.lowest), min(self.highest, other.highest)
        return VersionRange(low, high) if low <= high else NONE

    def issubset(self, other: "VersionRange") -> bool:
        """True when every version here is also in ``other`` (the empty range is a subset of anything)."""
        return self.empty or (other.lowest <= self.lowest and self.highest <= other.highest)

    def __iter__(self):
        """The versions in the range; open-ended ranges are not iterable."""
        if self.highest == MAX_VERSION and not self.empty:
            raise ValueError(f"cannot iterate over open-ended range {self}")
        return iter(range(self.lowest, self.highest + 1))

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.highest == MAX_VERSION:
            return f"{self.lowest}+"
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"


NONE = VersionRange(0, -1)
ALL = VersionRange(0, MAX_VERSION)
