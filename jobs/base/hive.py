"""Hive-style folders, as Spark writes and reads them: the data files under a folder and the partition values
their `name=value` folders give."""
from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote

from jobs.base.storage import Location, located

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # Spark's folder name for a null partition value


def data_files(root: Location | Path | str) -> Iterator[tuple[Location, dict[str, str | None]]]:
    """The files Spark reads under `root`, in name order, each with the values of its partition folders
    (unescaped; None for a null value).

    Spark skips names starting with `_` or `.` (`_SUCCESS`, `.crc` files, `_temporary`), except `_` folders
    that name a partition value."""
    from pyarrow.fs import FileSelector, FileType

    root = located(root)
    if not root.is_dir():
        return
    infos = root.fs.get_file_info(FileSelector(root.path, recursive=True))
    for info in sorted((i for i in infos if i.type == FileType.File), key=lambda i: i.path):
        parts = info.path[len(root.path):].strip("/").split("/")
        if any(_hidden(part) for part in parts):
            continue
        values: dict[str, str | None] = {}
        for part in parts[:-1]:
            name, eq, value = part.partition("=")
            if eq:
                values[name] = None if value == NULL_PARTITION else unquote(value)
        yield root.child(*parts), values


def relative(root: Location, file: Location) -> str:
    """`file`'s path under `root`, with `/`."""
    return posixpath.relpath(file.path, root.path)


def _hidden(name: str) -> bool:
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")
