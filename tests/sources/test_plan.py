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


def _partitioned(folder, partitions: list[list[int]]) -> list[tuple[Location, dict]]:
    """One Parquet file whose row groups hold records of the given partitions (the offsets number them in order),
    with a record without a partition at the end."""
    path, offset = folder / "part-0.parquet", 0
    schema = pa.schema([("partition", pa.int32()), ("offset", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for group in [*partitions, [None]]:
            writer.write_table(pa.table({"partition": pa.array(group, pa.int32()),
                                         "offset": pa.array(range(offset, offset + len(group)), pa.int64())}))
            offset += len(group)
    return [(Location.parse(str(path)), {})]


@settings(max_examples=30, deadline=None)
@given(partitions=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=20), min_size=1, max_size=4),
       cores=st.integers(2, 4))
def test_a_small_dump_is_read_whole_by_each_task_keeping_its_share_of_the_partitions(tmp_path_factory, partitions,
                                                                                     cores):
    dump = _partitioned(tmp_path_factory.mktemp("dump"), partitions)
    tasks, _ = plan_row_groups(dump, cores, task_bytes=1, shared_below=1 << 30)
    assert len(tasks) == cores  # however many records: a task per core
    read = [pa.concat_tables(read_row_groups(task, ["partition", "offset"])).to_pylist() for task in tasks]
    every = [(r["partition"], r["offset"]) for task in read for r in task]
    assert sorted(every, key=lambda r: r[1]) == [(p, o) for o, p in enumerate([*sum(partitions, []), None])]
    owners = {}  # each partition's records all in one task: a partitioned table gains one file a folder a run
    for index, task in enumerate(read):
        for r in task:
            assert owners.setdefault(r["partition"], index) == index


def test_only_a_dump_below_the_shared_size_is_read_whole_by_each_task(tmp_path):
    dump = _partitioned(tmp_path, [[0, 1, 2, 3], [4, 5]])
    shared, _ = plan_row_groups(dump, 2, task_bytes=1 << 30, shared_below=1 << 30)
    cut, _ = plan_row_groups(dump, 2, task_bytes=1 << 30, shared_below=1)
    assert [[(r.groups, r.share) for r in task] for task in shared] == [[((0, 1, 2), (0, 2))], [((0, 1, 2), (1, 2))]]
    assert all(r.share is None for task in cut for r in task) and len(cut) == 2
