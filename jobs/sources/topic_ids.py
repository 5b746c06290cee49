"""Topic id -> name map (`topic_id,topic` CSV, ids in Kafka's base64url text form). Small by construction."""
from __future__ import annotations

import base64
import binascii
import csv
from pathlib import Path

from jobs.errors import BadInput


def read_topic_ids(path: Path) -> dict[str, str]:
    """Parse and validate the map; every id must be a 22-character base64url UUID."""
    ids: dict[str, str] = {}
    try:
        with path.open(newline="") as f:
            for n, row in enumerate(csv.reader(f), start=1):
                if not row or (n == 1 and row[:2] == ["topic_id", "topic"]):
                    continue
                if len(row) != 2 or not _is_uuid(row[0]) or not row[1]:
                    raise BadInput(f"--topic-ids {path}: line {n}: expected topic_id,topic with a base64url id, got {row}")
                ids[row[0]] = row[1]
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"--topic-ids {path}: cannot read ({e})") from None
    return ids


def _is_uuid(text: str) -> bool:
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False
