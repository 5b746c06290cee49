"""How a task finds its rows among the files an earlier run left (jobs.engine.stages, stage EARLIER), and what
each pass hands the next (jobs.engine.handoffs)."""
from __future__ import annotations

import pyarrow as pa
import pytest
import pyarrow.parquet as pq

from jobs.base.storage import Location
from jobs.engine.handoffs import CHUNKS, DERIVE_READS, DERIVED, REPLAYED, Chunks, Staged, _of
from jobs.engine.stages import EARLIER, StagingLayout, earlier_files

SCHEMA = pa.schema([("coordinator_partition", pa.int32()), ("row", pa.int64())])


def test_a_task_reads_the_rows_of_its_group_from_the_files_that_hold_them(tmp_path, monkeypatch):
    """An earlier run in 2 groups left one file per group; this run makes 3 groups of the same 6 partitions. Each
    group gets exactly its partitions' rows, and only files that hold some of them are read."""
    files = []
    for group in range(2):
        rows = [(p, 10 * p + i) for p in range(6) if p % 2 == group for i in range(3)]
        path = tmp_path / f"g{group:05d}.parquet"
        pq.write_table(pa.table({"coordinator_partition": pa.array([r[0] for r in rows], pa.int32()),
                                 "row": [r[1] for r in rows]}), path)
        files.append(Location.parse(str(path)))
    earlier = earlier_files(tuple(files))
    assert [sorted(partitions) for _, partitions in earlier] == [[0, 2, 4], [1, 3, 5]]
    state = Staged(EARLIER, "state", SCHEMA)
    layout = StagingLayout(Location.parse(str(tmp_path / "out")), "run", 3, {"state": earlier})
    for group in range(3):
        found = layout.group_dataset(state, group).to_table()
        assert sorted(found.column("coordinator_partition").to_pylist()) == sorted(
            p for p in range(6) if p % 3 == group for _ in range(3))
    import jobs.engine.stages as module

    opened: list = []
    read = module._files
    monkeypatch.setattr(module, "_files", lambda files, schema: opened.append(files) or read(files, schema))
    one = StagingLayout(layout.output, "run", 2, {"state": earlier})  # the same groups: one file each
    assert one.group_dataset(state, 1).to_table().column("row").to_pylist() == [
        10 * p + i for p in (1, 3, 5) for i in range(3)]
    assert opened == [[files[1]]]


def test_each_pass_names_exactly_its_kernels_outputs():
    """A pass's fields are its kernel's outputs (a missing or extra one fails at import); each carries its pass and
    schema, and what the derivation reads is among the replay's outputs."""
    assert (CHUNKS.log.stage, CHUNKS.log.name) == ("chunks", "log")
    assert (REPLAYED.replay_state.stage, REPLAYED.replay_state.name) == ("replay", "_replay_state")
    assert DERIVED.stage == "derive" and "lag" in DERIVED.consumer_lag.schema.names
    assert {s.name for s in DERIVE_READS} <= {s.name for s in REPLAYED.all()}
    assert REPLAYED.named("group_rows") is REPLAYED.group_rows
    with pytest.raises(TypeError):
        _of(Chunks, {"log": SCHEMA})  # the others are missing
    with pytest.raises(TypeError):
        _of(Chunks, {**{s.name: s.schema for s in CHUNKS.all()}, "logs": SCHEMA})  # a misspelt extra one
