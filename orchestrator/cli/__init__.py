"""The command line: `orchestrate` and its commands, their help, the reference page made from
it, and the printer of a run's progress."""

from .commands import main

__all__ = ["main"]
