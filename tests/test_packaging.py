"""The installed package is what users and CI run: one import name, every sub-package in it."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def shipped_folders() -> dict[str, Path]:
    """Each package the wheel lists, and the folder it is built from (package-dir mapping)."""
    mapping = CONFIG["package-dir"]
    folders = {}
    for package in CONFIG["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):  # the longest mapped prefix decides
            prefix = ".".join(parts[:cut])
            if prefix in mapping:
                folders[package] = ROOT / mapping[prefix] / Path(*parts[cut:])
                break
    return folders


def test_the_wheel_has_one_top_level_import_name():
    assert {package.split(".")[0] for package in CONFIG["packages"]} == {"tune_orchestrator"}
    assert set(shipped_folders()) == set(CONFIG["packages"])


def test_every_subpackage_of_ours_is_in_the_wheel():
    folders = shipped_folders()
    assert all((folder / "__init__.py").is_file() for folder in folders.values())
    ours = {
        init.parent
        for top in set(CONFIG["package-dir"].values())
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert ROOT / "orchestrator" / "search" in ours
    missing = ours - set(folders.values())
    assert not missing, f"missing from the wheel: {sorted(str(p) for p in missing)}"


def test_the_installed_package_is_importable_by_its_one_name():
    import tune_orchestrator
    from tune_orchestrator import configs

    assert "[tune]" in configs.read_text("default.toml")
    assert Path(tune_orchestrator.__file__).parent.name in {"orchestrator", "tune_orchestrator"}
