"""The inputs of the output check: three random samples, or the user's own from an .npz file
(--check-inputs), read and checked against the model's inputs before any work."""

from __future__ import annotations

import dataclasses
import os
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (numpy knows "bfloat16" by name once it is imported)
import numpy as np

from tune_orchestrator.measure.base import floating

from ..errors import InputError
from ..model.loading import OnnxModel

SEEDS = 3  # random samples: seeds [tune] seed, seed + 1, seed + 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Samples:
    """One tuple of arrays per sample, in the model's input order, and where they came from."""

    arrays: tuple[tuple[np.ndarray, ...], ...]
    source: str
    path: str | None = None  # the user's own (--check-inputs): their file, absolute

    @property
    def given(self) -> bool:
        """The user's own samples, not random ones."""
        return self.path is not None


def for_run(model: OnnxModel, settings: Any, given: str | Path | None = None) -> Samples:
    """The user's samples from `given` (an .npz file), else random ones by `settings`."""
    if given is not None:
        return load_samples(Path(given), model)
    low, high = settings.check.int_min, settings.check.int_max
    return random_samples(model, seed=settings.tune.seed, int_range=(low, high))


def integer_inputs(model: OnnxModel) -> list[Any]:
    """The model's inputs of an integer type (their random values come from [check]'s range)."""
    return [item for item in model.inputs if np.issubdtype(np.dtype(item.dtype), np.integer)]


def random_samples(model: OnnxModel, *, seed: int, int_range: tuple[int, int]) -> Samples:
    """SEEDS samples: floats standard normal, booleans fair coins, integers uniform over
    `int_range` (both ends included; InputError where it does not fit an input's type), or
    over the rows of the table an input indexes where it has fewer (a text model's
    token_type_ids index 2 rows)."""
    low, high = int_range
    integers = integer_inputs(model)
    for item in integers:
        bounds = np.iinfo(item.dtype)
        if low < bounds.min or high > bounds.max:
            raise InputError(
                f"[check] int_min..int_max ({low}..{high}) does not fit input {item.name!r} "
                f"({item.dtype}: {bounds.min}..{bounds.max}); set them within it"
            )
    ranges = {item.name: (low, high) for item in integers}
    rows = table_rows(model.proto.graph, list(ranges)) if integers else {}
    for name, count in rows.items():
        if max(low, -count) <= min(high, count - 1):
            ranges[name] = (max(low, -count), min(high, count - 1))
    arrays = tuple(
        _random_sample(model, np.random.default_rng(seed + k), ranges) for k in range(SEEDS)
    )
    told = f"seeds {seed}-{seed + SEEDS - 1}"
    if integers:
        told += f", integers {low}..{high}"
    told += "".join(
        f", {name} {a}..{b} to index its table's {rows[name]} rows"
        for name, (a, b) in ranges.items()
        if (a, b) != (low, high)
    )
    return Samples(arrays=arrays, source=f"{SEEDS} random samples ({told})")


# Operators that pass an integer input's values on unchanged, to a Gather that reads them.
_PASSING = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"})


def table_rows(graph: Any, names: list[str]) -> dict[str, int]:
    """{input name: the rows of the smallest weight table a Gather reads it as indices into
    (along its axis)}, for those of `names` that index one, directly or through operators
    that keep its values."""
    tables = {t.name: list(t.dims) for t in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for value in node.input:
            readers.setdefault(value, []).append(node)
    rows: dict[str, int] = {}
    for name in names:
        reached, values, seen = [], [name], {name}
        while values:
            value = values.pop()
            for node in readers.get(value, []):
                if node.op_type in _PASSING and node.input[0] == value:
                    values += [out for out in node.output[:1] if out not in seen]
                    seen.update(node.output[:1])
                elif node.op_type == "Gather" and node.input[1] == value:
                    dims = tables.get(node.input[0]) or []
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    reached += [dims[axis]] if -len(dims) <= axis < len(dims) else []
        if reached:
            rows[name] = min(reached)
    return rows


def _random_sample(
    model: OnnxModel, rng: np.random.Generator, ranges: dict[str, tuple[int, int]]
) -> tuple[np.ndarray, ...]:
    arrays = []
    for item in model.inputs:
        if floating(item.dtype):
            arrays.append(rng.standard_normal(item.shape).astype(item.dtype))
        elif item.dtype == "bool":
            arrays.append(rng.integers(0, 2, size=item.shape).astype(bool))
        else:
            low, high = ranges[item.name]
            arrays.append(rng.integers(low, high, size=item.shape, dtype=item.dtype, endpoint=True))
    return tuple(arrays)


def load_samples(path: Path, model: OnnxModel) -> Samples:
    """--check-inputs: one array per model input, named after it, of its dtype and its shape
    (one sample) or with a leading axis of samples; InputError, in one line, otherwise."""
    arrays = _read_npz(path)
    names = [item.name for item in model.inputs]
    listed = ", ".join(names) or "none"
    missing = [n for n in names if n not in arrays]
    if missing:
        raise InputError(
            f"--check-inputs {path} has no array for input {', '.join(map(repr, missing))}; "
            f"name one array after each input of the model: {listed}"
        )
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise InputError(
            f"--check-inputs {path} holds {', '.join(map(repr, extra))}, which the model does "
            f"not take; its inputs are: {listed}"
        )
    arrays = {item.name: _typed(path, item, arrays[item.name]) for item in model.inputs}
    counts = {item.name: _count(path, item, arrays[item.name]) for item in model.inputs}
    if len(set(counts.values())) > 1:
        told = ", ".join(f"{n!r} {c}" for n, c in counts.items())
        raise InputError(
            f"--check-inputs {path}: its arrays hold different numbers of samples ({told})"
        )
    count = next(iter(counts.values()), 1)
    stacked = [
        arrays[item.name].reshape((count, *item.shape)) for item in model.inputs
    ]  # one sample given bare gets its leading axis
    samples = tuple(tuple(a[k] for a in stacked) for k in range(count))
    source = f"{count} sample(s) from {path}"
    return Samples(arrays=samples, source=source, path=os.path.abspath(path))


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by name, without unpickling anything."""
    hint = "save one with numpy.savez(FILE, **{input_name: array})"
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"--check-inputs {path} does not exist; check the path") from None
    except (OSError, ValueError, EOFError):
        raise InputError(f"--check-inputs {path} is not an .npz file; {hint}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputError(f"--check-inputs {path} holds one array without a name; {hint}")
    try:
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"--check-inputs {path} cannot be read ({exc}); {hint}") from None


def _typed(path: Path, item: Any, array: np.ndarray) -> np.ndarray:
    """`array` as the type of `item`, the input it is for. numpy saves a bfloat16 array as
    2-byte raw values, and a bfloat16 input may be given as float32 (rounded to it)."""
    if item.dtype == "bfloat16":
        if array.dtype == np.dtype("V2"):
            return array.view(ml_dtypes.bfloat16)
        if array.dtype == np.float32:
            return array.astype(ml_dtypes.bfloat16)
    if array.dtype != np.dtype(item.dtype):
        also = " or float32" if item.dtype == "bfloat16" else ""
        raise InputError(
            f"--check-inputs {path}: {item.name!r} is {array.dtype} but the model's input is "
            f"{item.dtype}; save it as {item.dtype}{also}"
        )
    return array


def _count(path: Path, item: Any, array: np.ndarray) -> int:
    """How many samples `array` holds for `item`: 1 at its shape, N at (N, *its shape)."""
    shape = tuple(item.shape)
    if array.shape == shape:
        return 1
    if array.shape[1:] == shape and array.shape[0] > 0:
        return array.shape[0]
    raise InputError(
        f"--check-inputs {path}: {item.name!r} has shape {array.shape} but the model's input "
        f"is {shape} (or N samples of it, ({', '.join(['N', *map(str, shape)])}))"
    )
