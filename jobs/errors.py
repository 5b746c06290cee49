"""The exceptions the command line turns into one stderr line: bad arguments and unreadable input exit 2 (the
contract), a refusal or a check that failed exits 1."""


class BadInput(Exception):
    """A problem with what the user gave us; the CLI prints it on one line and exits with status 2."""


class Refused(Exception):
    """The work was tried and the world said no (a cluster refused a commit, what was read back differs); the CLI
    prints it on one line, without the traceback hint of an internal error, and exits with status 1."""
