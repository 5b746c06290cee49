"""Hive-style folders, as Spark writes and reads them: the data files under a folder and the partition values
their `name=value` folders give."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # Spark's folder name for a null partition value


def data_files(root: Path) -> Iterator[tuple[Path, dict[str, str | None]]]:
    """The files Spark reads under `root`, in name order, each with the values of its partition folders
    (unescaped; None for a null value).

    Spark skips names starting with `_` or `.` (`_SUCCESS`, `.crc` files, `_temporary`), except `_` folders
    that name a partition value."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        here = Path(folder)
        values: dict[str, str | None] = {}
        for part in here.relative_to(root).parts:
            name, eq, value = part.partition("=")
            if eq:
                values[name] = None if value == NULL_PARTITION else unquote(value)
        for name in sorted(names):
            if not _hidden(name):
                yield here / name, values


def _hidden(name: str) -> bool:
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")
