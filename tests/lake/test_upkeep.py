"""Upkeep (jobs.lake.upkeep): a run compacts the folders of its turn that hold many small files, in one commit
per table: the newest version holds the same rows in fewer files, and every earlier version stays readable."""
from __future__ import annotations


import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from jobs.base.storage import Location
from jobs.lake import upkeep as upkeep_module
from jobs.lake.runs import RUN_ID_KEY, TABLE_PROPERTIES


def appended(path, partitions: dict[int, int]) -> None:
    """A raw_records-like table partitioned by `partition`: `n` small appends to each partition of `partitions`."""
    for partition, n in partitions.items():
        for i in range(n):
            write_deltalake(str(path), pa.table({"partition": pa.array([partition], pa.int32()), "offset": [i]}),
                            mode="append", partition_by=["partition"], configuration=TABLE_PROPERTIES)


def rows(table: DeltaTable) -> list[tuple]:
    found = table.to_pyarrow_table()
    return sorted(zip(found.column("partition").to_pylist(), found.column("offset").to_pylist()))


def turn_of(partition: int) -> int:
    return upkeep_module.turn_of(str(partition))


def test_the_crowded_folders_of_a_runs_turn_are_compacted_and_older_versions_stay_readable(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep_module, "SMALL_FILES", 5)
    other = next(p for p in range(4, 100) if turn_of(p) != turn_of(3))
    appended(tmp_path / "raw_records", {3: 7, other: 6, 2: 3})
    before = DeltaTable(str(tmp_path / "raw_records"))
    version, was = before.version(), rows(before)
    output = Location.parse(str(tmp_path))
    done = upkeep_module.upkeep(output, "r1", ["raw_records", "offset_commits"], turn_of(3) + upkeep_module.TURNS)
    assert done == {"raw_records": 7}  # partition 3's turn; offset_commits is not there
    after = DeltaTable(str(tmp_path / "raw_records"))
    assert after.version() == version + 1 and after.history(1)[0][RUN_ID_KEY] == "r1"
    assert rows(after) == was and len(after.file_uris()) == 1 + 6 + 3
    assert rows(DeltaTable(str(tmp_path / "raw_records"), version=version)) == was  # its files are all there
    assert upkeep_module.upkeep(output, "r2", ["raw_records"], turn_of(other)) == {"raw_records": 6}


def test_folders_with_few_small_files_and_unpartitioned_tables_off_their_turn_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep_module, "SMALL_FILES", 5)
    appended(tmp_path / "raw_records", {3: 4})
    for i in range(6):
        write_deltalake(str(tmp_path / "group_events"), pa.table({"n": [i]}), mode="append")
    output = Location.parse(str(tmp_path))
    own = upkeep_module.turn_of("group_events")  # an unpartitioned table's turn: by its name, as a folder's
    off = next(t for t in range(upkeep_module.TURNS) if t not in (own, turn_of(3)))
    assert upkeep_module.upkeep(output, "r1", ["raw_records", "group_events"], turn_of(3)) == {}
    assert upkeep_module.upkeep(output, "r1", ["group_events"], off) == {}
    assert upkeep_module.upkeep(output, "r1", ["group_events"], own) == {"group_events": 6}
