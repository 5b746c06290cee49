"""The exceptions whose message is all a user needs: the CLI prints it as one stderr line, without a traceback."""


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
