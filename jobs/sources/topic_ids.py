"""Topic id -> name map (`topic_id,topic` CSV, ids in Kafka's base64url text form). Small by construction."""
from __future__ import annotations

import base64
import binascii
import csv
import io

from jobs.base.errors import BadInput
from jobs.base.storage import Location


def read_topic_ids(location: str, storage: dict[str, str] | None = None) -> dict[str, str]:
    """Parse and validate the map; every id must be a 22-character base64url UUID."""
    path = Location.parse(location, storage, "--topic-ids")
    if not path.local:
        path.check_reachable("--topic-ids", location, folder=False)
    if not path.exists() or path.is_dir():
        raise BadInput(f"--topic-ids {location}: no such file")
    ids: dict[str, str] = {}
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"--topic-ids {location}: cannot read ({e})") from None
    for n, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if not row or (n == 1 and row[:2] == ["topic_id", "topic"]):
            continue
        if len(row) != 2 or not _is_uuid(row[0]) or not row[1]:
            raise BadInput(f"--topic-ids {location}: line {n}: expected topic_id,topic with a base64url id, got {row}")
        ids[row[0]] = row[1]
    return ids


def _is_uuid(text: str) -> bool:
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False
