"""The argument list most tests hand to `orchestrate`, in one place."""

from __future__ import annotations

from pathlib import Path


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
