"""The installed package is what users and CI run: every sub-package in the tree must ship."""

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_of_ours_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(where=str(ROOT), include=include))
    ours = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("orchestrator", "filters", "measure", "budget", "configs")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert "orchestrator.search" in ours
    assert ours <= shipped, f"missing from the wheel: {sorted(ours - shipped)}"
    assert not {p for p in shipped if p.split(".")[0] in {"tests", "benchmarks", "examples"}}
