"""Kill rebuilds at random moments and check what readers see: `python -m jobs.tools.kill_drill [--kills N]`.

A sample dump is rebuilt twice, into two outputs, to learn what each run's readers answer (`sql`, `show`,
`describe`, `reset-offsets`). Then rebuilds of the two dumps, alternately, into one output are killed with
SIGKILL to their whole process group at a random moment of a normal run's duration. After each kill every Delta
table under the output must open and every reader must answer exactly as one of the two complete runs did: the
run recorded last. At the end a complete rebuild must succeed and leave no staging area and no lock behind.
Prints one JSON line; exits 1 at the first kill whose readers saw anything else.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobs.lake.output_lock import STAGING_DIR, holder_of
from jobs.lake.runs import unreferenced_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, help="Scratch folder (default: a new temporary one).")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="offsetlake-kill-drill-"))
    print(json.dumps(drill(work, args.kills, args.records, random.Random(args.seed))))


def drill(work: Path, kills: int, records: int, rnd: random.Random) -> dict:
    dumps, expected, took = alone(work, records)
    out = work / "killed"
    _offsetlake("rebuild", "--source", f"parquet:{dumps[0]}", "--output", str(out))
    current = dumps[0].name
    moments, landed = [], {"before the commit point": 0, "after it": 0}
    for kill in range(kills):
        dump = dumps[(kill + 1) % 2]
        delay = rnd.uniform(0, max(took) * 1.1)
        process = subprocess.Popen([*_command(), "rebuild", "--source", f"parquet:{dump}", "--output", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        seen = _readers(out)
        if seen == expected[dump.name]:
            current = dump.name
            landed["after it"] += 1
        elif seen == expected[current]:
            landed["before the commit point"] += 1
        else:
            return {"kills": kill + 1, "ok": False, "at_seconds": round(delay, 2), "seen": seen,
                    "expected_one_of": expected}
        moments.append(round(delay, 2))
    _offsetlake("rebuild", "--source", f"parquet:{dumps[0]}", "--output", str(out))
    clean = not (out / STAGING_DIR).exists() and holder_of(out) is None and not unreferenced_files(out)
    if not clean or _readers(out) != expected[dumps[0].name]:
        return {"kills": kills, "ok": False, "reason": "the run after the kills left files behind or differs"}
    shutil.rmtree(work, ignore_errors=True)
    return {"kills": kills, "ok": True, "readers_saw": landed, "normal_run_seconds": [round(t, 1) for t in took],
            "kill_moments_seconds": sorted(moments)}


def alone(work: Path, records: int) -> tuple[list[Path], dict[str, dict], list[float]]:
    """Two sample dumps, each rebuilt alone: the dumps, what readers answer after each (by dump name), and how
    long each run took."""
    dumps = [_sample(work / f"dump-{i}", records, seed=7 + i) for i in (0, 1)]
    expected, took = {}, []
    for dump in dumps:
        out = work / f"alone-{dump.name}"
        started = time.monotonic()
        _offsetlake("rebuild", "--source", f"parquet:{dump}", "--output", str(out))
        took.append(time.monotonic() - started)
        expected[dump.name] = _readers(out)
    return dumps, expected, took


def _command() -> list[str]:
    return [sys.executable, "-m", "jobs.cli", "--quiet"]


def _offsetlake(*args: str) -> str:
    done = subprocess.run([*_command(), *args], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"kill drill: offsetlake {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def _sample(dump: Path, records: int, seed: int) -> Path:
    if not dump.exists():
        _offsetlake("sample", "--output", str(dump), "--records", str(records), "--seed", str(seed))
    return dump


def _readers(out: Path) -> dict:
    """What every reader answers, without run ids and paths (two runs of one dump answer alike), after opening
    every Delta table's newest version."""
    from deltalake import DeltaTable

    from jobs.lake.runs import table_folders

    for path in table_folders(out):
        DeltaTable(str(path)).to_pyarrow_table()  # raises on a missing or damaged file
    offsets = _offsetlake("sql", "--output", str(out), "--format", "csv", "--limit", "0",
                          "SELECT group_id, topic, partition, committed_offset FROM committed_offsets ORDER BY 1, 2, 3")
    counts = _offsetlake("sql", "--output", str(out), "--format", "csv",
                         "SELECT (SELECT count(*) FROM consumer_groups) g, (SELECT count(*) FROM group_members) m, "
                         "(SELECT count(*) FROM offset_commits) c, (SELECT count(*) FROM group_status) s")
    show = [line.split("  ")[0] for line in _offsetlake("show", "--output", str(out), "--rows", "0").splitlines()[1:]]
    group = offsets.splitlines()[1].split(",")[0] if len(offsets.splitlines()) > 1 else "none"
    describe = _offsetlake("describe", "--output", str(out), "--group", group)
    reset = _offsetlake("reset-offsets", "--output", str(out), "--group", group) if group != "none" else ""
    return {"offsets": offsets, "counts": counts, "show": show, "describe": describe, "reset": reset}


if __name__ == "__main__":
    main()
