"""What source tasks share: a logger on the executor, and one-line errors that survive Spark's error text.

A failure inside a Spark task reaches the driver wrapped in Spark's long Java/Python error report. The
task raises its one-line message between markers; `task_errors` finds it there and raises it again as
the BadInput the CLI prints (exit status 2).
"""
from __future__ import annotations

import logging
import re
import sys
from contextlib import contextmanager
from typing import Iterator

from jobs.errors import BadInput

_TASK_ERROR = re.compile(r"<<offsetlake-task: (.*?)>>")


def task_logger() -> logging.Logger:
    """The executor's `offsetlake` logger (stderr), set up once per Python worker."""
    worker = logging.getLogger("offsetlake.task")
    if not worker.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("offsetlake: %(message)s"))
        worker.addHandler(handler)
        worker.setLevel(logging.INFO)
        worker.propagate = False
    return worker


def task_error(e: BadInput) -> RuntimeError:
    """The exception a task raises for a user-facing failure."""
    return RuntimeError(f"<<offsetlake-task: {e}>>")


@contextmanager
def task_errors() -> Iterator[None]:
    """Turn a failed source task (which Spark reports as a long error) back into its one-line BadInput."""
    try:
        yield
    except BadInput:
        raise
    except Exception as e:
        match = _TASK_ERROR.search(str(e))
        if match is None:
            raise
        raise BadInput(match.group(1)) from None
