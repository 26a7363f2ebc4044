"""The exception types for the user's mistakes, and for a run aborted at once."""


class InputError(Exception):
    """Bad input or configuration: the message names the problem and the fix, in one line.

    The CLI prints it as ``error: <message>`` and exits with code 2; nothing the user already
    had has been modified when it is raised.
    """


class BudgetTooSmall(Exception):
    """The budget cannot cover the run's fixed phases (untuned baseline, compiling, checking)
    and a first round: refused before any work. The CLI prints the message and exits with
    code 3."""

    def __init__(self, message: str, *, minimum: str, needed_s: float) -> None:
        super().__init__(message)
        self.minimum = minimum  # the smallest budget that would do, e.g. "4min"
        self.needed_s = needed_s  # the wall seconds the run needs in all, unrounded


class Aborted(KeyboardInterrupt):
    """A second SIGINT, SIGTERM or SIGHUP stopped a run at once, mid-round (the first one asks
    it to stop after the round): its run directory holds what was measured, to resume."""
