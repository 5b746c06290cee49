"""The peer of `offsetlake bench`: what a user could script instead, in one pure-Python process.

    PEER_VENV/bin/python jobs/tools/bench_peer.py DUMP

PyPI's `prometheus-kafka-consumer-group-exporter` (0.5.x) parses `__consumer_offsets` in pure Python
(its `parsing.py`). This feeds every record of a Parquet dump to that module's `parse_key` / `parse_value`
exactly as the exporter's consume loop does, keeping the last value per (group, topic, partition) in a
dict and deleting on a tombstone. The package's own __init__ imports kafka-python APIs that recent
kafka-python releases removed, so `parsing.py` is loaded by file path. It knows offset-commit value
versions 0-3 only and ignores everything else (newer values, group metadata): its result is staler than
a rebuild's, and it is still the fastest thing a user could run.

Runs in the peer's own virtualenv (pyarrow and the peer only): imports nothing of offsetlake.
Prints one JSON line: records, parsed, skipped, keys.
"""
import importlib.util
import json
import logging
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq

PEER_PACKAGE = "prometheus_kafka_consumer_group_exporter"


def load_parsing():
    spec = importlib.util.find_spec(PEER_PACKAGE)  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"bench_peer: {PEER_PACKAGE} is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "parsing.py"
    module_spec = importlib.util.spec_from_file_location("peer_parsing", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def main(dump: str) -> None:
    logging.disable(logging.CRITICAL)  # the parsers log every version they do not know
    parsing = load_parsing()
    parse_key, parse_value = parsing.parse_key, parsing.parse_value
    dataset = ds.dataset(dump, format="parquet")
    control_column = "is_control" in dataset.schema.names
    columns = ["key", "value"] + (["is_control"] if control_column else [])
    offsets: dict = {}
    records = parsed = 0
    for path in sorted(dataset.files):
        with pq.ParquetFile(path) as f:
            for batch in f.iter_batches(batch_size=65536, columns=columns):
                records += batch.num_rows
                control = batch.column("is_control").to_pylist() if control_column else [None] * batch.num_rows
                for key, value, is_control in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                                                  control):
                    if is_control or not key:
                        continue
                    try:
                        k = parse_key(key)
                    except Exception:  # the exporter catches only struct.error itself
                        continue
                    if k is None or k["version"] not in (0, 1):
                        continue
                    ident = (k["group"], k["topic"], k["partition"])
                    if not value:
                        offsets.pop(ident, None)
                        parsed += 1
                        continue
                    try:
                        v = parse_value(value)
                    except Exception:
                        continue
                    if v is not None:
                        offsets[ident] = v
                        parsed += 1
    print(json.dumps({"records": records, "parsed": parsed, "skipped": records - parsed, "keys": len(offsets)}))


if __name__ == "__main__":
    main(sys.argv[1])
