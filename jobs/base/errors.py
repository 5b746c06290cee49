"""The exceptions whose message is all a user needs: the CLI prints it as one stderr line, without a traceback; and
`redact`, which keeps the secrets of settings out of such lines."""
from __future__ import annotations

import re
from typing import Iterable, Mapping

# The settings whose values are secrets: Kafka clients' (sasl.jaas.config, ssl.key.password, ...) and the storage
# options delta-rs names (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AZURE_STORAGE_SAS_KEY, ...).
SECRET_KEY = re.compile(r"password|secret|jaas|token|credential|\.pem$|ssl\.key\.|key(_|$)|(^|_)sas(_|$)",
                        re.IGNORECASE)
MASK = "***"


class BadInput(Exception):
    """A problem with what the user gave us; the CLI prints it on one line and exits with status 2."""


class RunFailed(Exception):
    """A run that could not finish for a reason its message states (the output taken over by another run, a
    full disk): one line, exit status 1."""


class LockLost(RunFailed):
    """This run no longer holds its output (jobs.lake.output_lock): it must not commit anything more."""


class Refused(RunFailed):
    """The work was tried and the world said no (a cluster refused a commit, what was read back differs); the CLI
    prints it on one line, without the traceback hint of an internal error, and exits with status 1."""


def redact(text: str, *settings: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """`text` with the value of every secret setting (SECRET_KEY) of `settings` replaced by MASK, the longest first
    (so a secret inside another is scrubbed too)."""
    secrets = {value for pairs in settings for key, value in dict(pairs).items() if value and SECRET_KEY.search(key)}
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
