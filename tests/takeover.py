"""Whole rebuilds that pause and lose their output to another run, as a long GC pause or a frozen VM would make
them, for tests of the lock's fencing (tests/cli/test_lock_takeover.py, tests/lake/test_object_store.py).

    result = paused_takeover(output, holder_args, taker_args, env=env, cwd=cwd)
    result["holder"]   # (exit status, stderr) of the run that was paused, then resumed after the takeover
    result["taker"]    # the CompletedProcess of the run that took the output over
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jobs.kill_points import PAUSE_AT

OFFSETLAKE = str(Path(sys.executable).with_name("offsetlake"))


def wait_until_stopped(process: subprocess.Popen) -> None:
    """Until `process` stopped itself (OFFSETLAKE_PAUSE_AT), as a paused run would be."""
    while process.poll() is None:
        with open(f"/proc/{process.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.05)
    raise AssertionError(f"the run ended instead of pausing: {process.communicate()[1]}")


def paused_takeover(output: str, holder: list[str], taker: list[str], *, env: dict[str, str], cwd: Path,
                    moment: str = "committed:2", lease: float = 2) -> dict[str, Any]:
    """A rebuild (`holder`'s arguments) paused at `moment` with a lock lease of `lease` seconds; once its lease
    has passed, another rebuild (`taker`'s arguments) into the same output; then the first one resumed."""
    base = [OFFSETLAKE, "--quiet", "rebuild", "--output", output]
    paused = subprocess.Popen([*base, *holder, "--lock-lease", str(lease)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**env, PAUSE_AT: moment}, cwd=cwd,
                              start_new_session=True)
    try:
        wait_until_stopped(paused)
        time.sleep(lease + 1)
        took = subprocess.run([*base, *taker], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
        os.kill(paused.pid, signal.SIGCONT)
        _, err = paused.communicate(timeout=300)
    finally:
        if paused.poll() is None:
            os.killpg(paused.pid, signal.SIGKILL)
            paused.communicate()
    return {"holder": (paused.returncode, err), "taker": took}
