"""The applied sequence (spec §7.2): the order in which the coordinator applied offset records to a key, computed
once, from which both the committed offsets (jobs.replay.offsets) and offset_commits (jobs.replay.history) follow.

Each record is placed by its fate (jobs.replay.transactions): a plain record and a tombstone apply where they are,
a transactional commit at its COMMIT marker; an aborted one never applies. Then, per key in application order
(position, then the record's own offset): a commit followed by one at the same position (the same transaction's
later commit on the key) was replaced before it applied, and a commit applies only when every earlier record of
its key is older than it (the broker keeps the committed offset with the greater record offset; a tombstone in
between removed the pending commit). So a key's last applied record is its newest effective one: the state's.
A transactional commit whose transaction is still open is pending, the newest per key and producer, unless a
tombstone came after it (a tombstone, from anyone, removes every producer's pending commit on its key).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask, numbers
from jobs.replay.transactions import fates


def offset_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Offset-commit keys' bytes after their type: types 0 and 1 share the key layout and the broker converts type
    0 to type 1 before replay, so these bytes identify (group, topic, partition) whichever type wrote them."""
    if not len(keys):
        return keys
    # An explicit end: pyarrow sizes its output by it.
    return pc.binary_slice(keys, 2, max(pc.max(pc.binary_length(keys)).as_py() or 2, 2))


@dataclass(frozen=True)
class AppliedSequence:
    """Coordinator partitions' valid offset records (checked rows, reduced or whole) placed by their fate. Keys
    are (coordinator partition, offset key) pairs, numbered: `keys` holds each one's bytes after the type and
    `key_partition` its coordinator partition. Per record that takes part in "the newest record per key wins"
    (a plain record or tombstone, a committed transactional commit): `rows`, its row of the records, `key`, its
    key, `position`, where it applies, and `source`, its own offset. `still_open`: the rows of transactional
    commits with no marker after them (`open_*`: their key, producer and offset). `tombstone_key`,
    `tombstone_source`: every tombstone's key and offset."""

    keys: pa.Array
    key_partition: np.ndarray
    rows: np.ndarray
    key: np.ndarray
    position: np.ndarray
    source: np.ndarray
    still_open: np.ndarray
    open_key: np.ndarray
    open_producer: np.ndarray
    open_source: np.ndarray
    tombstone_key: np.ndarray
    tombstone_source: np.ndarray

    def applies(self, head_source: np.ndarray | None = None) -> np.ndarray:
        """Per record of `rows`: it applied (the module's rule). `head_source`, per key: the source offset of its
        last applied record before these (a run that resumes: jobs.replay.resume), -1 for none; applied records'
        sources rise. Plain records always apply."""
        key, position, source = self.key, self.position, self.source
        result = np.ones(len(key), bool)
        moved = position != source  # transactional commits: only their keys' rows can be ruled out
        if not moved.any():
            return result
        if head_source is None:
            head_source = np.full(len(self.keys), -1, np.int64)
        has_moved = np.zeros(int(key.max()) + 1, bool)
        has_moved[key[moved]] = True
        ruled = np.flatnonzero(has_moved[key])
        k, p, s = key[ruled], position[ruled], source[ruled]
        order = np.lexsort((s, p, k))
        k, p, s = k[order], p[order], s[order]
        n = len(k)
        same_key = np.zeros(n, bool)  # the row follows another of its key
        same_key[1:] = k[1:] == k[:-1]
        superseded = np.zeros(n, bool)
        superseded[:-1] = same_key[1:] & (p[1:] == p[:-1])
        newest_before = np.full(n, -1, np.int64)
        newest_before[1:] = np.where(same_key[1:], running_max(s, same_key)[:-1], -1)
        applies = ~superseded & (np.maximum(newest_before, head_source[k]) < s)
        ruled_applies = np.empty(n, bool)
        ruled_applies[order] = applies
        result[ruled] = ruled_applies
        return result

    @cached_property
    def applied(self) -> np.ndarray:
        """`applies()` of a replay that continues none: the state and offset_commits both read it."""
        return self.applies()

    def newest(self) -> np.ndarray:
        """The rows of each key's last applied record (its newest effective one), tombstones too, in key order."""
        applied = self.applied
        key, source = self.key[applied], self.source[applied]
        if not len(key):
            return self.rows[applied]
        order = np.lexsort((source, key))
        last = np.ones(len(order), bool)
        last[:-1] = key[order][1:] != key[order][:-1]
        return self.rows[applied][order[last]]

    def pending(self) -> np.ndarray:
        """The rows of the open transactional commits still pending: the newest per key and producer, unless a
        tombstone of the key came after it."""
        if not len(self.still_open):
            return self.still_open
        order = np.lexsort((self.open_source, self.open_producer, self.open_key))
        k, producer = self.open_key[order], self.open_producer[order]
        last = np.ones(len(order), bool)
        last[:-1] = (k[1:] != k[:-1]) | (producer[1:] != producer[:-1])
        newest = order[last]
        removed_through = np.full(len(self.keys), -1, np.int64)
        np.maximum.at(removed_through, self.tombstone_key, self.tombstone_source)
        after = self.open_source[newest] > removed_through[self.open_key[newest]]
        return self.still_open[newest[after]]


def applied_sequence(offset_records: pa.Table, found: pa.Table) -> AppliedSequence:
    """The AppliedSequence of coordinator partitions' valid offset records (coordinator_partition, record_offset,
    key, value, producer_id, and `reduced` when reduced), given their markers `found` (transactions.markers)."""
    effective, still_open, position = fates(offset_records, found)
    encoded = pc.dictionary_encode(offset_keys(offset_records.column("key")).combine_chunks())
    code = numbers(encoded.indices)
    partition = numbers(offset_records.column("coordinator_partition"), -1)
    width = max(len(encoded.dictionary), 1)
    if len(partition) and partition.min() == partition.max():  # one coordinator partition (a replay task's):
        # every code occurs, so the pairs' sorted numbering is the codes' own
        pairs, key = (partition[0] + 1) * width + np.arange(len(encoded.dictionary)), code.astype(np.int64)
    else:
        pairs, key = np.unique((partition + 1) * width + code, return_inverse=True)
        key = key.reshape(-1).astype(np.int64)
    source = numbers(offset_records.column("record_offset"))
    rows = np.flatnonzero(effective)
    opened = np.flatnonzero(still_open)
    tombstones = np.flatnonzero(~mask(pc.is_valid(offset_records.column("value"))))
    return AppliedSequence(
        keys=encoded.dictionary.take(pa.array(pairs % width)) if len(encoded.dictionary) else encoded.dictionary,
        key_partition=pairs // width - 1, rows=rows, key=key[rows], position=position[rows], source=source[rows],
        still_open=opened, open_key=key[opened], open_producer=numbers(offset_records.column("producer_id"))[opened],
        open_source=source[opened], tombstone_key=key[tombstones], tombstone_source=source[tombstones])


def running_max(values: np.ndarray, continues: np.ndarray) -> np.ndarray:
    """The running maximum of `values`, restarting where `continues` is False."""
    starts = np.flatnonzero(~continues)
    ends = np.append(starts[1:], len(values))
    low, width = int(values.min()), int(values.max() - values.min()) + 1
    if len(starts) * width < 1 << 62:  # one pass: each run lifted above the ones before it
        run = np.repeat(np.arange(len(starts), dtype=np.int64), ends - starts) * width
        return np.maximum.accumulate(run + (values - low)) - run + low
    return np.concatenate([np.maximum.accumulate(values[a:b]) for a, b in zip(starts, ends)])
