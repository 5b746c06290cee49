"""One progress line that updates in place, on a terminal only (a log file or a pipe gets no progress lines), and
only when offsetlake's log shows progress (not with -q)."""
from __future__ import annotations

import logging
import sys
import time


class Progress:
    """`offsetlake: LABEL: done/total` rewritten in place at most every `every` seconds; the line is cleared when
    done, so the next message starts on an empty line."""

    def __init__(self, label: str, total: int, every: float = 0.2) -> None:
        self.label, self.total, self.every = label, total, every
        self.done = 0
        self._shown = 0.0
        stream = sys.stderr
        self.active = (total > 1 and hasattr(stream, "isatty") and stream.isatty()
                       and logging.getLogger("offsetlake").isEnabledFor(logging.INFO))

    def __enter__(self) -> "Progress":
        return self

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.active and time.monotonic() - self._shown >= self.every:
            self._shown = time.monotonic()
            sys.stderr.write(f"\roffsetlake: {self.label}: {self.done}/{self.total}\x1b[K")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self.active and self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
