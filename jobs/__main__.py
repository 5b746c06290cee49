"""spark-submit entry; takes the same arguments as `offsetlake rebuild`.

    spark-submit jobs/__main__.py --source parquet:/dumps/offsets --output /lake/offsets [--debug] [-q]
    python -m jobs --source parquet:/dumps/offsets --output /lake/offsets

On a cluster, install the wheel (`python -m build --wheel`: it holds schemas/ and conf/ too) in a Python every
node runs and submit this file from the installed package (README: Where it runs; conf/spark-submit-daily.sh).
"""
import sys
from pathlib import Path

if not __package__:
    # Run as a script (spark-submit): Python put jobs/ itself first on sys.path, where its modules could
    # shadow other top-level names; the repository root is what makes `jobs` and `offsets_codec` importable.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from jobs.cli import GLOBAL_OPTIONS, main  # noqa: E402


def rebuild_arguments(arguments: list[str]) -> list[str]:
    """The command line of `offsetlake rebuild` with `arguments`."""
    return [*(a for a in arguments if a in GLOBAL_OPTIONS), "rebuild",
            *(a for a in arguments if a not in GLOBAL_OPTIONS)]


if __name__ == "__main__":
    sys.argv[1:] = rebuild_arguments(sys.argv[1:])
    main()
