"""Coordinator partitions replayed at once (jobs.replay.partition.partition_sets): what each table holds is what the
replay of each partition alone gives, whether their group ids are their own (one replay of all of them) or some
id is in two partitions (those partitions then alone). Offsets repeat across partitions, as they do in Kafka."""
from __future__ import annotations

from datetime import timezone

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from offsets_log import MINUTE, random_log, utc
from offsets_log import T0 as LOG_T0

from jobs.decode.check import check
from jobs.derive.stage import DeriveSettings, derive_partition
from jobs.pipeline import _derive_kernel, _replay_kernel
from jobs.replay.counts import total
from jobs.replay.partition import ReplaySettings, partition_sets, replay_partition
from jobs.replay.records import RECORD_SCHEMA, records
from jobs.replay.reduction import whole

_OPERATION = st.tuples(
    st.sampled_from([0, 1, 2]),
    st.sampled_from(["commit", "commit", "commit", "tombstone", "marker", "marker", "group", "group_tombstone",
                     "modern"]),
    st.sampled_from(("g0", "g1")), st.sampled_from("ab"), st.just(0),
    st.sampled_from([-1, 201, 202]),
    st.sampled_from(["COMMIT", "ABORT"]),
)
_SUMMED = ("counts", "duplicates")  # totals of what a call saw: compared summed


def _rows(operations: list[tuple], own_ids: bool, as_of_us: int) -> pa.Table:
    if own_ids:  # each partition's groups under ids of their own, as Kafka places them
        operations = [(p, kind, f"{group}-{p}", *rest) for p, kind, group, *rest in operations]
    return whole(check(records(random_log(operations).table())), as_of_us)


def _outputs(calls) -> dict[str, list]:
    found: dict[str, list] = {}
    for name, table in calls:
        found.setdefault(name, []).extend(table.to_pylist())
    summed = {name: total(pa.Table.from_pylist(found.pop(name))) if name == "counts" else
              [sum(r["duplicates"] for r in found.pop(name)), 0] for name in _SUMMED if name in found}
    return {**{name: sorted(map(repr, rows)) for name, rows in found.items()}, **summed}


@settings(max_examples=30, deadline=None)
@given(operations=st.lists(_OPERATION, min_size=2, max_size=40), own_ids=st.booleans(), as_of=st.integers(0, 50),
       history=st.booleans(), keep_log=st.booleans())
@example(operations=[(0, "commit", "g0", "a", 0, -1, "COMMIT")] * 2 + [(0, "commit", "g0", "a", 0, 201, "COMMIT"),
                                                                      (1, "marker", "g0", "a", 0, 201, "COMMIT")],
         own_ids=False, as_of=3, history=False, keep_log=True)  # a marker alone in its partition stays whole
def test_partitions_replayed_together_give_what_each_alone_gives(operations, own_ids, as_of, history, keep_log):
    as_of_us = (LOG_T0 + as_of * MINUTE) * 1000
    rows = _rows(operations, own_ids, as_of_us)
    assume(rows.num_rows > 0)
    replay = ReplaySettings(utc(LOG_T0 + as_of * MINUTE).replace(tzinfo=timezone.utc), retention_ms=30 * MINUTE,
                            history=history, keep_log=keep_log and not history)
    partition = rows.column("coordinator_partition")
    alone = [item for p in pc.unique(partition).to_pylist()
             for item in replay_partition(rows.filter(pc.equal(partition, p)), replay)]
    inputs = {"log": rows, "share_log": RECORD_SCHEMA.empty_table()}
    at_once = list(_replay_kernel(inputs, replay, as_of_us))
    assert _outputs(at_once) == _outputs(alone)

    derive = DeriveSettings(replay.as_of, {}, None, None, None, history=False)
    replayed = {name: pa.concat_tables([_schema_of(name).empty_table(), *(t for n, t in at_once if n == name)])
                for name in ("committed_offsets", "group_rows")}
    empty = {"commit_windows": None, "consume_rates": None, "share_state": None}
    derive_inputs = {**replayed, **{name: _schema_of(name).empty_table() for name in empty}}
    by_partition = [item for p in pc.unique(partition).to_pylist()
                    for item in derive_partition({n: t.filter(pc.equal(t.column("coordinator_partition"), p))
                                                  for n, t in derive_inputs.items()}, derive)]
    assert _outputs(_derive_kernel(derive_inputs, derive)) == _outputs(by_partition)


def _schema_of(name: str) -> pa.Schema:
    from jobs.replay.partition import OUTPUTS
    from jobs.replay.share_state import OUTPUTS as SHARE_OUTPUTS

    return {**OUTPUTS, **SHARE_OUTPUTS}[name]


def test_a_group_id_in_two_partitions_sends_them_alone():
    """g is in partitions 0 and 1: they go one at a time; partition 2's own group goes with the rest."""
    table = pa.table({"coordinator_partition": pa.array([0, 1, 2, 3, None], pa.int32()),
                      "group_id": ["g", "g", "h", "i", "g"]})
    parts = [sorted(set(t["log"].column("coordinator_partition").to_pylist()), key=str)
             for t in partition_sets({"log": table}, keyed=["log"])]
    assert parts == [[2, 3, None], [0], [1]]
    assert [t["log"].num_rows for t in partition_sets({"log": table.slice(2)}, keyed=["log"])] == [3]
