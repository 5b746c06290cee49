"""offsets_codec must import nothing but the standard library (no Spark, no Arrow) in a fresh interpreter."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
before = set(sys.modules)
import offsets_codec, offsets_codec.consumer_protocol, offsets_codec.bench, offsets_codec.fuzz
new = sorted({m.split(".")[0] for m in set(sys.modules) - before})
print(json.dumps({"new": new, "stdlib": sorted(sys.stdlib_module_names),
                  "loaded": [m for m in ("pyspark", "pyarrow", "pandas", "numpy") if m in sys.modules]}))
"""


def test_import_loads_only_the_standard_library():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    new = set(result["new"])
    assert result["loaded"] == []
    assert new - set(result["stdlib"]) == {"offsets_codec"}


def test_bench_runs_and_reports_both_figures():
    out = subprocess.run([sys.executable, "-m", "offsets_codec.bench", "--records", "200", "--repeat", "1"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["offset-commit", "group-metadata"]
    assert all("µs/record" in line for line in lines)
