"""Upkeep of the tables that grow by appends (`rebuild --archive`): raw_records, and with the history
offset_commits, group_events and end_offsets_history gain a few small files every run (a file per folder and
source task), which would make every later run's commit, and every reader, open more of them. So a run compacts
the folders that hold SMALL_FILES files below SMALL_FILE_BYTES: a Delta commit per table (delta-rs's optimize)
holding the same rows in fewer files. Only files below TARGET_FILE_BYTES are merged, into files of at most that:
a big file (a whole replay's) is never rewritten, and what one compaction rewrites stays bounded however large
the archive grows. Each run looks at the folders of its turn, one in TURNS (`turn`: the run's number; a numbered
folder's turn is its number's remainder, any other's a hash of its value, an unpartitioned table being one folder
with a turn by its name), and compacts those that hold SMALL_FILES small files, fewer than a folder gains between
two of its turns: as every folder of raw_records gains a file a run, every run compacts about the same share, a
folder's files of the last TURNS runs, where a threshold met by all folders at once would leave one run all of them.

A compaction never breaks a version a reader may open: it removes the small files from the table's newest version
only; they stay on disk for every earlier version (the runs recorded in `_runs` still name those), until
`--keep-runs` deletes what only older runs' versions use. It comes after the run is recorded, tagged with its id,
so a run that dies during it has lost nothing and leaves no table to restore; its Delta log is checkpointed like
any other commit's (jobs.lake.runs.TABLE_PROPERTIES).
"""
from __future__ import annotations

import logging
import zlib
from typing import Any, Callable

from jobs.base.arrow import numbers
from jobs.base.storage import Location
from jobs.base.tables import partition_columns
from jobs.lake.runs import add_actions, commit_metadata, delta_table, fenced_commit, is_table

log = logging.getLogger("offsetlake")
TURNS = 16  # a folder is looked at by one run in this many
TARGET_FILE_BYTES = 1 << 20  # what a compaction writes (it merges the files below this: delta-rs's target size)
SMALL_FILE_BYTES = TARGET_FILE_BYTES // 8  # a file below this is small (a run's share of a folder, at most)
SMALL_FILES = TURNS // 2  # a folder's small files past which it is compacted on its turn


def upkeep(output: Location, run_id: str, tables: list[str], turn: int, guard: Callable[[], None] | None = None
           ) -> dict[str, int]:
    """Compact, in each of `tables` under `output`, the folders of this `turn` (the run's number: one folder in
    TURNS; an unpartitioned table on one run in TURNS) that hold SMALL_FILES small files; returns per table the
    files a compaction replaced. `guard`: the lock's check, which fences each commit (jobs.lake.runs.fenced_commit:
    a run that lost its output compacts nothing more)."""
    from deltalake.transaction import CommitProperties

    properties = CommitProperties(custom_metadata=commit_metadata(run_id), max_commit_retries=0)
    done = {}
    for table in tables:
        where = output.child(table)
        if not is_table(where):
            continue
        filters = _crowded(delta_table(where), table, partition_columns(table), turn % TURNS)
        if filters is None:
            continue
        metrics = fenced_commit(where, lambda delta: delta.optimize.compact(
            partition_filters=filters or None, target_size=TARGET_FILE_BYTES, commit_properties=properties), guard)
        done[table] = int(metrics.get("numFilesRemoved", 0))
        log.info("compacted %d small files of %s", done[table], table)
    return done


def _crowded(table: Any, name: str, columns: list[str], turn: int) -> list[tuple[str, str, list[str]]] | None:
    """The partition filters that select the folders of `table` (named `name`) of this `turn` with SMALL_FILES
    small files ([] for an unpartitioned table's, on its turn), or None when there is none."""
    adds = add_actions(table)
    small = numbers(adds.column("size_bytes")) < SMALL_FILE_BYTES
    if not columns:
        return [] if turn_of(name) == turn and small.sum() >= SMALL_FILES else None
    column = columns[0]  # the grown tables have one partition column
    counts: dict[str, int] = {}
    for value, is_small in zip(adds.column(f"partition.{column}").to_pylist(), small.tolist()):
        if is_small and value is not None:  # a null folder has no filter form: left as it is
            counts[str(value)] = counts.get(str(value), 0) + 1
    crowded = sorted(v for v, n in counts.items() if n >= SMALL_FILES and turn_of(v) == turn)
    return [(column, "in", crowded)] if crowded else None


def turn_of(folder: str) -> int:
    """The turn of a folder (its partition value), or of an unpartitioned table (its name): numbered folders (the
    coordinator partitions of raw_records) take turns in order, so that each turn has as many."""
    return int(folder) % TURNS if folder.isdigit() else zlib.crc32(folder.encode()) % TURNS
