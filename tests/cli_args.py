"""The argument list most tests hand to `orchestrate`, in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest


def tune_args(
    model: Path,
    out: Path,
    config: Path,
    *options: object,
    budget: str = "8trials",
    target: str = "llvm",
) -> list[str]:
    """`--budget B --target T --config C --out O [OPTIONS...] MODEL`, every item a string."""
    args = (
        "--budget",
        budget,
        "--target",
        target,
        "--config",
        config,
        "--out",
        out,
        *options,
        model,
    )
    return [str(a) for a in args]


@contextlib.contextmanager
def both_builds() -> Iterator[None]:
    """Inside, a run's end builds, checks and compares the tuned and the untuned model, as it
    does where any task runs a tuned schedule. A tiny test model's default schedules often
    beat a few trials' candidates, and a model whose tasks all keep theirs is built once."""
    from tune_orchestrator.run import session

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session, "runs_tuned", lambda restored: True)
        yield
