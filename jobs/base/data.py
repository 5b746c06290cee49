"""The package's data folders, schemas/ and conf/: edited beside jobs/ in a checkout, packaged inside jobs/ in a
wheel."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # jobs/
REPO_ROOT = PACKAGE_DIR.parent  # a checkout; in an installed wheel this is site-packages


def data_dir(name: str) -> Path:
    """`schemas` or `conf`: inside the package in an installed wheel (pyproject.toml maps them there as
    jobs/schemas and jobs/conf), beside jobs/ in a checkout, where they are edited."""
    packaged = PACKAGE_DIR / name
    return packaged if packaged.is_dir() else REPO_ROOT / name
