"""Pause rebuilds and skew clocks, and check that the lock fences: `python -m jobs.tools.lock_drill [--tries N]`.

Beside the kill drill (jobs.tools.kill_drill, whose helpers it uses): two sample dumps are rebuilt alone to learn
what each run's readers answer; then, into one output, each try is one of:

* `pause`: a rebuild of one dump with a short `--lock-lease`, its whole process group stopped (SIGSTOP) at a
  random moment for longer than its lease; a rebuild of the other dump takes the output over; the first one is
  continued. The paused run must exit 0 (it had finished before the pause) or 1 with one line naming the taker.
* `skew`: a rebuild of one dump, and while it runs a rebuild of the other whose clock is 400 s ahead
  (libfaketime's `faketime`, where installed): the heartbeat looks older than the lease (300 s) to it, so it
  takes a live run's output over. The first run must exit 0 (done before) or 1 in one line.
* `ahead`: a rebuild whose clock is a day ahead, with a short lease, killed (SIGKILL); a rebuild of the other
  dump retried until it takes over: within the lease (the storage's time of the heartbeat counts, not the time
  the holder wrote in it).

After each try the taker must have succeeded, readers must answer exactly as the newest recorded run's dump
alone does (the taker's, unless the first run finished too), and every version of every table must open. Prints one JSON line; exits 1 at the first try that breaks this.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from jobs.tools.kill_drill import _command, _offsetlake, _readers, alone

SKEW = "+400s"  # ahead of the storage by more than the default lease (300 s)
SHORT_LEASE = 3.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=12)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, help="Scratch folder (default: a new temporary one).")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="offsetlake-lock-drill-"))
    result = drill(work, args.tries, args.records, random.Random(args.seed))
    print(json.dumps(result))
    if not result["ok"]:
        raise SystemExit(1)


def drill(work: Path, tries: int, records: int, rnd: random.Random) -> dict:
    dumps, expected, took = alone(work, records)
    out = work / "drilled"
    _offsetlake("rebuild", "--source", f"parquet:{dumps[0]}", "--output", str(out))
    kinds = ["pause", "skew", "ahead"] if shutil.which("faketime") else ["pause"]
    outcomes: list[dict] = []
    for n in range(tries):
        kind = kinds[n % len(kinds)]
        first, taker = dumps[n % 2], dumps[(n + 1) % 2]
        outcome = {"pause": _pause, "skew": _skew, "ahead": _ahead}[kind](out, first, taker, max(took), rnd)
        outcome["kind"] = kind
        problem = outcome.pop("problem", None) or _check(out, expected, taker.name if outcome["holder"] != "finished"
                                                          else None)
        outcomes.append(outcome)
        if problem:
            return {"ok": False, "tries": n + 1, "problem": problem, "outcomes": outcomes}
    shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, dict[str, int]] = {}
    for o in outcomes:
        kind = summary.setdefault(o["kind"], {})
        kind[o["holder"]] = kind.get(o["holder"], 0) + 1
    return {"ok": True, "tries": tries, "first_runs": summary, "normal_run_seconds": [round(t, 1) for t in took],
            "skewed": "skew" in kinds, "outcomes": outcomes}


def _start(dump: Path, out: Path, *extra: str, clock: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(_rebuild_command(dump, out, extra, clock), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=_clock_env())


def _rebuild(dump: Path, out: Path, clock: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_rebuild_command(dump, out, (), clock), capture_output=True, text=True, timeout=900,
                          env=_clock_env())


def _rebuild_command(dump: Path, out: Path, extra: tuple[str, ...], clock: str | None) -> list[str]:
    command = [*_command(), "rebuild", "--source", f"parquet:{dump}", "--output", str(out), *extra]
    return command if clock is None else ["faketime", "-f", clock, *command]


def _clock_env() -> dict[str, str]:
    """libfaketime moves the times stat() reports too, by default: a host whose clock is off still reads the
    modification times the storage (here, the kernel's true clock) set."""
    return {**os.environ, "NO_FAKE_STAT": "1"}


def _ended(process: subprocess.Popen) -> tuple[str, str]:
    """How a first run ended: `finished`, `fenced` (exit 1, one line naming the taker), `refused` (exit 2: the
    other run held the output first), or what else."""
    _, err = process.communicate(timeout=900)
    lines = err.strip().splitlines()
    if process.returncode == 0:
        return "finished", ""
    if process.returncode == 1 and len(lines) == 1 and "taken over by run" in lines[0]:
        return "fenced", ""
    if process.returncode == 2 and len(lines) == 1 and "is writing these tables" in lines[0]:
        return "refused", ""  # the other run held the output first
    return f"exit {process.returncode}", f"the first run ended otherwise: exit {process.returncode}: {err.strip()}"


def _pause(out: Path, first: Path, taker: Path, normal: float, rnd: random.Random) -> dict:
    process = _start(first, out, "--lock-lease", str(SHORT_LEASE))
    at = rnd.uniform(0.2 * normal, 0.95 * normal)  # a run's first fifth is its imports, before the lock
    time.sleep(at)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGSTOP)
    stopped = SHORT_LEASE + rnd.uniform(1, 3)
    time.sleep(stopped)
    took = _rebuild(taker, out)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGCONT)
    holder, problem = _ended(process)
    if took.returncode != 0:
        problem = problem or f"the taker failed: {took.stderr.strip()}"
    return {"holder": holder, "paused_at": round(at, 2), "paused_for": round(stopped, 2), "problem": problem}


def _skew(out: Path, first: Path, taker: Path, normal: float, rnd: random.Random) -> dict:
    process = _start(first, out)
    at = rnd.uniform(0, 0.6 * normal)  # the taker takes a second to start
    time.sleep(at)
    took = _rebuild(taker, out, clock=SKEW)
    holder, problem = _ended(process)
    if took.returncode != 0:
        problem = problem or f"the taker ({SKEW}) failed: {took.stderr.strip()}"
    return {"holder": holder, "taker_started_at": round(at, 2), "problem": problem}


def _ahead(out: Path, first: Path, taker: Path, normal: float, rnd: random.Random) -> dict:
    process = _start(first, out, "--lock-lease", str(SHORT_LEASE), clock="+1d")
    at = rnd.uniform(0.2, normal)
    time.sleep(at)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    killed = time.monotonic()
    while True:
        took = _rebuild(taker, out)
        waited = time.monotonic() - killed
        if took.returncode != 2 or waited > 10 * SHORT_LEASE:
            break
        time.sleep(0.5)
    problem = "" if took.returncode == 0 else f"the taker failed after {waited:.0f} s: {took.stderr.strip()}"
    return {"holder": "killed" if process.returncode == -signal.SIGKILL else "finished",
            "taken_over_after_s": round(waited, 1), "problem": problem}


def _check(out: Path, expected: dict[str, dict], last: str | None) -> str:
    """Every version of every table opens, and readers answer as the dump of the newest recorded run alone, which
    is `last` (the taker's) unless the first run finished too (then whichever of the two finished later)."""
    from deltalake import DeltaTable

    from jobs.lake.runs import finished_runs, table_folders

    newest = finished_runs(out)[-1]["source"].removeprefix("parquet:").rsplit("/", 1)[-1]
    if last is not None and newest != last:
        return f"the newest recorded run is of {newest}, not the taker's {last}"

    for path in table_folders(out):
        for version in range(DeltaTable(path.path).version() + 1):
            try:
                DeltaTable(path.path, version=version).to_pyarrow_table()
            except Exception as e:  # noqa: BLE001 - the drill's finding
                return f"{path.name} version {version} does not open: {e}"
    return "" if _readers(out) == expected[newest] else f"readers answer otherwise than a run of {newest} alone"


if __name__ == "__main__":
    main()
