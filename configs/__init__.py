"""Default settings (`default.toml`) shipped with tune-orchestrator, read as package data."""

from importlib import resources


def read_text(name: str) -> str:
    """The text of a bundled configuration file, e.g. ``read_text("default.toml")``."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
