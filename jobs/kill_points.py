"""Named moments of a rebuild where a test kills it as a crash would: SIGKILL to its whole process group (the
JVM and any worker processes go with it), or pauses it as a long GC pause or a frozen VM would: SIGSTOP to its
main process, which the test resumes with SIGCONT. Never set in production.

OFFSETLAKE_KILL_AT=<moment>, one of: `read` (the source planned, nothing replayed), `replayed` (the reduced log
and the counts computed), `staged` (every table staged, none committed), `committed:N` (right after the N-th
table commit), `recorded` (the run recorded, its staging area not yet removed); or `worker`: a local runner's
worker process alone, as the system kills one when memory runs out. OFFSETLAKE_PAUSE_AT=<moment>: the same
moments, to pause at.
"""
from __future__ import annotations

import os
import signal

KILL_AT = "OFFSETLAKE_KILL_AT"
PAUSE_AT = "OFFSETLAKE_PAUSE_AT"


def kill_point(moment: str) -> None:
    """Kill this process group (a `worker`: this process) now if a test asked for `moment`; or stop this process
    until it is continued."""
    if os.environ.get(PAUSE_AT) == moment:
        os.kill(os.getpid(), signal.SIGSTOP)
    if os.environ.get(KILL_AT) == moment:
        if moment == "worker":
            os.kill(os.getpid(), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)
