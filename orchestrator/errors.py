"""The one exception type for the user's mistakes."""


class InputError(Exception):
    """Bad input or configuration: the message names the problem and the fix, in one line.

    The CLI prints it as ``error: <message>`` and exits with code 2; nothing the user already
    had has been modified when it is raised.
    """
