"""How a task finds its rows among the files an earlier run left (jobs.engine.stages, stage EARLIER)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.base.storage import Location
from jobs.engine.stages import EARLIER, Stages, earlier_files

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
    stages = Stages(Location.parse(str(tmp_path / "out")), "run", {"state": SCHEMA}, 3, {"state": earlier})
    for group in range(3):
        found = stages.group_dataset(EARLIER, "state", group).to_table()
        assert sorted(found.column("coordinator_partition").to_pylist()) == sorted(
            p for p in range(6) if p % 3 == group for _ in range(3))
    import jobs.engine.stages as module

    opened: list = []
    read = module._files
    monkeypatch.setattr(module, "_files", lambda files, schema: opened.append(files) or read(files, schema))
    one = Stages(stages.output, "run", {"state": SCHEMA}, 2, {"state": earlier})  # the same groups: one file each
    assert one.group_dataset(EARLIER, "state", 1).to_table().column("row").to_pylist() == [
        10 * p + i for p in (1, 3, 5) for i in range(3)]
    assert opened == [[files[1]]]
