"""The one exception for bad arguments and unreadable input (contract: one stderr line, exit 2)."""


class BadInput(Exception):
    """A problem with what the user gave us; the CLI prints it on one line and exits with status 2."""
