"""CUDA kernels checked on a host that cannot run them: the generated source, compiled by nvcc.

Without a GPU driver TVM exports CUDA source, which is compiled only when a GPU host loads the
library; a kernel the compiler rejects would fail there, on the user's GPU. So a CUDA library
built here is compiled for the target's architecture before it is reported as built.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')
_ERROR_AT = re.compile(r"\((\d+)\): error")
_TIMEOUT_S = 1800.0


class KernelError(RuntimeError):
    """Generated CUDA kernels that do not compile: a bug here or in TVM, never the user's."""


@dataclasses.dataclass(frozen=True)
class KernelCheck:
    """What the check found: `checked` False says why (`reason`); `error` holds the
    compiler's first complaints when the kernels failed to compile."""

    checked: bool
    kernels: int
    arch: str | None
    compiler: str | None = None
    error: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    failed: tuple[str, ...] = ()  # the kernels the compiler's errors point into
    reverted: tuple[str, ...] = ()  # tasks built with their default schedule instead (fallback)

    @property
    def ok(self) -> bool:
        return self.checked and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def cuda_sources(module: Any) -> list[str]:
    """The CUDA source of every CUDA module imported by `module` (an executable or library)."""
    found: list[str] = []
    root = getattr(module, "mod", module)

    def walk(mod: Any) -> None:
        if mod.kind == "cuda":
            found.append(mod.inspect_source(""))
        for sub in mod.imports:
            walk(sub)

    walk(root)
    return [s for s in found if s]


def kernel_names(source: str) -> list[str]:
    return list(dict.fromkeys(_KERNEL.findall(source)))


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(Path(root, "bin", "nvcc"), os.X_OK):
            return str(Path(root, "bin", "nvcc"))
    return None


def nvcc_archs() -> list[str]:
    """The compute capabilities the nvcc here compiles for ("90", ...; none without one)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return []
    try:
        listed = subprocess.run(
            [nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return re.findall(r"compute_(\d+)", listed)


def nvcc_version(nvcc: str) -> str:
    try:
        text = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "nvcc"
    match = re.search(r"release (\d+\.\d+)", text)
    return f"nvcc {match.group(1)}" if match else "nvcc"


def check_cuda(
    module: Any, arch: str | None, *, nvcc: str | None = None, keep: Path | None = None
) -> KernelCheck:
    """Compile the CUDA source of `module` for `arch` (e.g. sm_90a) to a cubin.

    `nvcc` defaults to `find_nvcc()`; `keep` is where the source is written when it fails.
    """
    sources = cuda_sources(module)
    count = sum(len(kernel_names(s)) for s in sources)
    nvcc = nvcc or find_nvcc()
    if not sources:
        return KernelCheck(False, 0, arch, reason="the library holds no CUDA source")
    if not arch:
        return KernelCheck(False, count, arch, reason="the target names no CUDA architecture")
    if nvcc is None:
        reason = "no CUDA compiler here (nvcc not on PATH nor under CUDA_HOME)"
        return KernelCheck(False, count, arch, reason=reason)
    compiler = nvcc_version(nvcc)
    started = time.monotonic()
    checked, error, reason, failed = True, None, None, ()
    with tempfile.TemporaryDirectory(prefix="orchestrate-kernels-") as tmp:
        for i, source in enumerate(sources):
            src = Path(tmp, f"kernels{i}.cu")
            src.write_text(source)
            cubin = str(src.with_suffix(".cubin"))
            try:
                done = subprocess.run(
                    [nvcc, f"-arch={arch}", "-cubin", "-w", "-o", cubin, str(src)],
                    capture_output=True,
                    text=True,
                    timeout=_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                checked, reason = False, f"{compiler} took over {_TIMEOUT_S:.0f} s"
                break
            if done.returncode == 0:
                continue
            if "Unsupported gpu architecture" in done.stderr:
                checked, reason = False, f"{compiler} cannot compile for {arch}"
            else:
                error = _first_errors(done.stderr or done.stdout, str(src))
                failed = failing_kernels(done.stderr, source)
                if keep is not None:
                    keep.write_text(source)
            break
    seconds = time.monotonic() - started
    return KernelCheck(checked, count, arch, compiler, error, reason, seconds, failed)


def failing_kernels(output: str, source: str) -> tuple[str, ...]:
    """The kernels of `source` that the compiler's errors (`output`, "file(LINE): error")
    point into, in order: each line belongs to the last kernel that starts before it."""
    starts = [(source.count("\n", 0, m.start()) + 1, m.group(1)) for m in _KERNEL.finditer(source)]
    found: list[str] = []
    for line in (int(n) for n in _ERROR_AT.findall(output)):
        names = [name for start, name in starts if start <= line]
        if names and names[-1] not in found:
            found.append(names[-1])
    return tuple(found)


def _first_errors(output: str, filename: str, limit: int = 3) -> str:
    lines = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    shown = "; ".join(line.replace(filename, "kernels.cu") for line in lines[:limit])
    more = f" (and {len(lines) - limit} more)" if len(lines) > limit else ""
    return (shown or output.strip()[-500:] or "the compiler failed without a message") + more
