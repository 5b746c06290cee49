"""What each pass of a rebuild hands the next, by name: a field per output of the pass's kernel, so that a reader
sees what pass 1 (the source, read, checked and reduced), pass 2 (the replay) and pass 3 (the derivation) leave,
and a misspelt output is an error at import (each pass is built from its kernel's own list of outputs, which must
name exactly its fields) or an AttributeError where it is read, never an empty table.

    layout.read(REPLAYED.committed_offsets, columns=["topic", "partition"])
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, TypeVar

import pyarrow as pa

from jobs.derive.stage import INPUTS as DERIVE_INPUTS, OUTPUTS as DERIVE_OUTPUTS
from jobs.replay.chunk import OUTPUTS as CHUNK_OUTPUTS
from jobs.replay.partition import OUTPUTS as REPLAY_OUTPUTS
from jobs.replay.share_state import OUTPUTS as SHARE_OUTPUTS
from jobs.sources.archive import OUTPUTS as ARCHIVE_OUTPUTS


@dataclass(frozen=True)
class Staged:
    """One output of a pass: the pass (`stage`) that writes it, its name (a contract table's, whose rows go to
    the table's run folder, else a folder of the run's staging area: jobs.engine.stages) and its schema."""

    stage: str
    name: str
    schema: pa.Schema


@dataclass(frozen=True)
class Pass:
    """A pass's outputs, a Staged field each (named as the output, without a leading `_`)."""

    stage: ClassVar[str]

    def named(self, name: str) -> Staged:
        """The output called `name` (KeyError for none)."""
        found = {s.name: s for s in self.all()}
        return found[name]

    def all(self) -> tuple[Staged, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


P = TypeVar("P", bound=Pass)


def _of(kind: type[P], outputs: dict[str, pa.Schema]) -> P:
    """`kind`'s instance of `outputs` (its kernel's): a TypeError when they are not exactly its fields."""
    return kind(**{name.lstrip("_"): Staged(kind.stage, name, schema) for name, schema in outputs.items()})


@dataclass(frozen=True)
class Chunks(Pass):
    """Pass 1, each task of the source's plan (jobs.replay.chunk.read_chunk; with --archive, jobs.sources.archive):
    its records by group of coordinator partitions, and what the driver reads of them."""

    stage: ClassVar[str] = "chunks"
    log: Staged  # the `__consumer_offsets` records, checked and reduced: the replay's input
    share_log: Staged  # the `__share_group_state` records
    spans: Staged  # offset spans per partition: whether some records were read twice
    moments: Staged  # the newest plausible timestamps, and the implausible ones: the default as_of
    segment_errors: Staged
    foreign_records: Staged  # records of other topics, counted
    raw_records: Staged  # --archive: the records new to the archive
    archive_spans: Staged
    archive_ranges: Staged
    archive_reads: Staged  # records read from the source


@dataclass(frozen=True)
class Replayed(Pass):
    """Pass 2, each group of coordinator partitions replayed (jobs.replay.partition, jobs.replay.share_state):
    contract tables, and what the derivation, the summary and the next run (--archive) read."""

    stage: ClassVar[str] = "replay"
    committed_offsets: Staged
    expired_offsets: Staged
    consumer_groups: Staged
    pending_transactions: Staged
    quarantine: Staged
    offset_commits: Staged
    group_events: Staged
    group_rows: Staged  # the group replay's members, target assignments, topologies, topic names (jobs.derive.members)
    offset_topics: Staged  # the topic ids and names offset commits carry
    commit_windows: Staged  # each partition's last commits (group_status)
    consume_rates: Staged
    violations: Staged
    counts: Staged
    duplicates: Staged
    replay_state: Staged  # --archive: the reduced log the next run starts from
    group_fold: Staged
    history_state: Staged
    share_state: Staged
    share_counts: Staged


@dataclass(frozen=True)
class Derived(Pass):
    """Pass 3, each group's replayed state derived once topic names and end offsets are known (jobs.derive.stage)."""

    stage: ClassVar[str] = "derive"
    group_members: Staged
    group_target_assignments: Staged
    streams_topologies: Staged
    consumer_lag: Staged
    group_status: Staged
    share_partition_state: Staged


CHUNKS = _of(Chunks, {**CHUNK_OUTPUTS, **ARCHIVE_OUTPUTS})
REPLAYED = _of(Replayed, {**REPLAY_OUTPUTS, **SHARE_OUTPUTS})
DERIVED = _of(Derived, DERIVE_OUTPUTS)
DERIVE_READS = tuple(REPLAYED.named(name) for name in DERIVE_INPUTS)  # what pass 3 reads of pass 2's
