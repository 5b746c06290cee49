"""A dump's plan: its records cut into tasks of the same count, whatever its row groups, each read once."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings, strategies as st

from jobs.base.storage import Location
from jobs.sources.parquet import plan_row_groups, read_row_groups


def _dump(folder, files: list[list[int]]) -> list[tuple[Location, dict]]:
    """Parquet files with row groups of the given sizes; the offsets number every record in order."""
    written, offset = [], 0
    for index, sizes in enumerate(files):
        path = folder / f"part-{index}.parquet"
        with pq.ParquetWriter(path, pa.schema([("offset", pa.int64())])) as writer:
            for size in sizes:
                writer.write_table(pa.table({"offset": pa.array(range(offset, offset + size), pa.int64())}))
                offset += size
        written.append((Location.parse(str(path)), {}))
    return written


@settings(max_examples=30, deadline=None)
@given(files=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=5), min_size=1, max_size=3),
       cores=st.integers(1, 4), task_bytes=st.sampled_from([1, 1 << 30]))
def test_every_record_is_read_once_by_tasks_of_the_same_count(tmp_path_factory, files, cores, task_bytes):
    dump = _dump(tmp_path_factory.mktemp("dump"), files)
    tasks, _ = plan_row_groups(dump, cores, task_bytes)
    read = [pa.concat_tables([pa.table({"offset": pa.array([], pa.int64())}),
                              *read_row_groups(task, ["offset"])]).column("offset").to_pylist() for task in tasks]
    assert [o for task in read for o in task] == list(range(sum(map(sum, files))))
    if read:  # as many records each, the last task the rest; as many tasks as cores at least, where records are
        assert {len(r) for r in read[:-1]} <= {len(read[0])} and 0 < len(read[-1]) <= len(read[0])
        assert len(read[0]) == -(-sum(map(sum, files)) // cores) or task_bytes == 1  # a task per core


def test_a_single_large_row_group_is_shared_by_every_core(tmp_path):
    tasks, _ = plan_row_groups(_dump(tmp_path, [[10], [90]]), cores=4, task_bytes=1 << 30)
    assert [sum(len(t) for t in read_row_groups(task, ["offset"])) for task in tasks] == [25, 25, 25, 25]
    assert [[(r.groups, r.start, r.stop) for r in task] for task in tasks] == \
        [[((0,), 0, None), ((0,), 0, 15)], [((0,), 15, 40)], [((0,), 40, 65)], [((0,), 65, None)]]
