"""The wheel and a fresh virtualenv that holds it alone, built once per test run and shared by every test that
runs the installed package (tests/cli/test_wheel.py, tests/cli/test_cluster.py), across xdist workers too.

`python -m build` makes the wheel from a copy of the checkout (the build's own folders never land in the work
tree); the virtualenv holds only the wheel (`--no-deps`), and a .pth file lends it the running interpreter's
site-packages for pyspark, pyarrow, deltalake and the rest, so nothing is downloaded.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["pyproject.toml", "README.md", "jobs", "offsets_codec", "schemas", "conf"]


@dataclass(frozen=True)
class WheelEnv:
    wheel: Path  # dist/offsetlake-*.whl
    python: Path  # the virtualenv's interpreter, with the wheel installed


def site_packages() -> list[str]:
    """Where the running interpreter's dependencies are (never a hard-coded path)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def run(args: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{args[:4]}...: {result.stderr[-3000:]}"
    return result


def build_wheel(base: Path) -> Path:
    """`python -m build` (sdist, then the wheel from it) from a copy of the checkout, into base/dist."""
    source = base / "src"
    source.mkdir(parents=True)
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    # --no-isolation: the build backend comes from this environment (setuptools is a test extra), not a download.
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", base / "dist", source])
    wheels = list((base / "dist").glob("offsetlake-*.whl"))
    assert len(wheels) == 1 and len(list((base / "dist").glob("offsetlake-*.tar.gz"))) == 1
    return wheels[0]


def install_wheel(wheel: Path, venv: Path) -> Path:
    """A fresh virtualenv at `venv` with the wheel alone; returns its python."""
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "offsetlake-deps.pth").write_text("\n".join(site_packages()) + "\n")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel])
    return python


def shared_root(tmp_path_factory) -> Path:
    """A folder every process of this test run sees: the run's base temp folder, which under xdist is the
    parent of each worker's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """An exclusive lock on the file `lock` (between processes; released when the block ends)."""
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wheel_env(tmp_path_factory) -> WheelEnv:
    """The run's wheel and virtualenv: built by the first process that asks, then reused by every other one."""
    root = shared_root(tmp_path_factory)
    base = root / "offsetlake-wheel"
    with held(root / "offsetlake-wheel.lock"):
        done = base / "done"
        if not done.exists():
            shutil.rmtree(base, ignore_errors=True)  # a half-built one (its builder failed)
            wheel = build_wheel(base)
            python = install_wheel(wheel, base / "venv")
            done.write_text(f"{wheel}\n{python}\n")
        wheel, python = done.read_text().split()
    return WheelEnv(Path(wheel), Path(python))
