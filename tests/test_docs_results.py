"""A result file in benchmarks/results/ stays only while the docs or the code cite it, and a
result file the docs cite is there; the README's results table links to headings that exist.

Pure text: no package import, so it runs without TVM (`--noconftest` skips the fixtures)."""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ["README.md", "benchmarks/README.md", "docs/*.md"]
CODE = ["*.py", "benchmarks/*.sh", "measure/calibration/*.json"]
# Besides folders whose names start with a dot (.git, .venv).
NOT_SCANNED = {"venv", "build", "dist", "work", "results", "node_modules", "__pycache__"}
# A file name, its parts plain, globbed (* ?) or braced ({f,g,h}, {json,log}); `<model>` or
# `...` in a name marks a template for names to come, not a citation.
NAME = re.compile(r"(?:[\w.*?+-]|\{[\w.,-]+\}|<[\w|]+>)+\.(?:json|md|log|txt|csv|\{[\w,]+\})")
DATE = re.compile(r"20\d\d-\d\d-\d\d")
# A pattern the code globs for finds the files it writes; it cites none.
GLOB_CALL = re.compile(r"glob\(\s*[\"']\Z")


def files(patterns: list[str]) -> list[Path]:
    """The files whose path from the root matches one of `patterns` (`*` crosses folders)."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_SCANNED and d[0] != "."]
        for name in names:
            path = Path(folder) / name
            relative = path.relative_to(ROOT).as_posix()
            if any(fnmatch.fnmatchcase(relative, p) for p in patterns):
                found.append(path)
    return sorted(p for p in found if p != Path(__file__).resolve())


def expand(token: str) -> list[str]:
    """`a-{f,g}.{json,log}` -> the four names it stands for."""
    parts = re.split(r"(\{[^}]*\})", token)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def citations(path: Path, prefixes: set[str]) -> list[str]:
    """The result-file names and patterns `path` cites: after `results/`, or named like a
    result (a benchmark's or a result's prefix, or a date)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    cited = []
    for match in NAME.finditer(text):
        before = text[max(0, match.start() - 20) : match.start()]
        if "<" in match.group(0) or "..." in match.group(0) or GLOB_CALL.search(before):
            continue
        token = match.group(0).lstrip(".-")
        if before.endswith("results/") or token.split("-")[0] in prefixes or DATE.search(token):
            cited.extend(expand(token))
    return cited


def result_names() -> list[str]:
    return sorted(p.name for p in RESULTS.iterdir() if p.is_file())


def prefixes(names: list[str]) -> set[str]:
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.*") if p.suffix in {".py", ".sh"}}
    return scripts | {name.split("-")[0] for name in names}


def matched(pattern: str, names: list[str]) -> list[str]:
    return [name for name in names if fnmatch.fnmatchcase(name, pattern)]


def test_every_result_file_is_cited_by_the_docs_or_the_code():
    names = result_names()
    known = prefixes(names)
    cited = {c for path in files(DOCS + CODE) for c in citations(path, known)}
    uncited = [name for name in names if not any(fnmatch.fnmatchcase(name, c) for c in cited)]
    assert not uncited, f"cited nowhere (cite them or git rm them): {uncited}"


def test_every_result_file_the_docs_cite_is_there():
    names = result_names()
    known = prefixes(names)
    missing = [
        f"{path.relative_to(ROOT)}: {c}"
        for path in files(DOCS)
        for c in citations(path, known)
        if not matched(c, names)
    ]
    assert not missing, f"the docs cite result files that are not in benchmarks/results/: {missing}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_links_to_benchmark_sections_that_exist():
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    headings = {anchor(h) for h in re.findall(r"^#+ (.+)$", page, flags=re.MULTILINE)}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(docs/benchmarks\.md#([^)]+)\)", readme)
    assert links
    assert not [link for link in links if link not in headings], headings
