"""The shape each input of a model takes: the model's, its dynamic dimensions given by
--input-shape.

A named dynamic dimension (ONNX's dim_param, "batch_size") takes one size in every input that
shares it, so one input's shape sets it for all. A dimension named by arithmetic on others
follows from them: optimum's decoder exports name the attention mask's length
"past_sequence_length + sequence_length". Where a dimension is still unknown, one InputError
names the inputs left and the fewest --input-shape options that cover them all.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError

# The arithmetic a dimension's name may hold and still be worked out from the others.
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_LISTED = 3  # the inputs a refusal names before "and N more"


def resolve(declared: Sequence[Any], given: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
    """Each input's shape by name, from the model's `declared` inputs (graph.input less the
    weights) and the shapes `given` by input name; InputError where one is missing or wrong."""
    names = [value.name for value in declared]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InputError(
            f"--input-shape names {', '.join(unknown)}, which the model does not have; "
            f"its inputs are: {', '.join(names) or 'none'}"
        )
    sizes = _named_sizes(declared, given)
    _derive(declared, sizes)
    shapes, missing = {}, []
    for value in declared:
        dims = [_size(dim, sizes) for dim in value.type.tensor_type.shape.dim]
        if value.name in given:
            shapes[value.name] = _checked(value, dims, given[value.name])
        elif any(size is None for size in dims):
            missing.append((value, dims))
        else:
            shapes[value.name] = tuple(dims)
    if missing:
        raise InputError(_ask(missing, sizes))
    return shapes


def show(tensor_type: Any) -> str:
    """A declared shape as the refusals write it: 1x3x224x224, batch x 3 x height x width."""
    parts = [str(_size(d, {}) or d.dim_param or "?") for d in tensor_type.shape.dim]
    numbers = all(part.isdigit() for part in parts)
    return ("x" if numbers else " x ").join(parts) or "scalar"


def _size(dim: Any, sizes: Mapping[str, int]) -> int | None:
    """The dimension's fixed size, else the one `sizes` gives its name (None: unknown)."""
    if dim.HasField("dim_value") and dim.dim_value > 0:
        return dim.dim_value
    return sizes.get(dim.dim_param)


def _named_sizes(declared: Sequence[Any], given: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The size --input-shape gives each named dynamic dimension; InputError where two given
    shapes disagree on one."""
    sizes: dict[str, int] = {}
    told: dict[str, str] = {}
    for value in declared:
        shape = given.get(value.name)
        dims = value.type.tensor_type.shape.dim
        if shape is None or len(shape) != len(dims):
            continue  # _checked says what is wrong with it
        for dim, size in zip(dims, shape, strict=True):
            if not dim.dim_param or _size(dim, {}) is not None:
                continue
            if sizes.setdefault(dim.dim_param, int(size)) != int(size):
                raise InputError(
                    f"--input-shape gives dimension {dim.dim_param!r} two sizes: "
                    f"{sizes[dim.dim_param]} for {told[dim.dim_param]!r}, {size} for "
                    f"{value.name!r}; inputs that share a dimension's name share its size"
                )
            told.setdefault(dim.dim_param, value.name)
    return sizes


def _derive(declared: Sequence[Any], sizes: dict[str, int]) -> None:
    """Add to `sizes` each dimension named by arithmetic on known ones; InputError where one
    was given a size its arithmetic contradicts."""
    for value in declared:
        for dim in value.type.tensor_type.shape.dim:
            formula = _formula(dim.dim_param)
            if formula is None:
                continue
            size = _evaluate(formula, sizes)
            if size is None:
                continue
            if sizes.setdefault(dim.dim_param, size) != size:
                known = ", ".join(f"{n} {sizes[n]}" for n in sorted(_names_in(formula)))
                raise InputError(
                    f"--input-shape gives dimension {dim.dim_param!r} of {value.name!r} the size "
                    f"{sizes[dim.dim_param]}, but by the sizes given ({known}) it is {size}"
                )


def _formula(name: str) -> ast.expr | None:
    """The arithmetic a dimension's name holds ("past_sequence_length + sequence_length"), or
    None for a plain name."""
    try:
        body = ast.parse(name, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    return body if isinstance(body, ast.BinOp) else None


def _evaluate(node: ast.expr, sizes: Mapping[str, int]) -> int | None:
    """The value of `node` given `sizes` (None where a name in it is unknown, or it holds
    more than the integer arithmetic of _OPERATORS, or comes out below 1)."""
    if isinstance(node, ast.Name):
        return sizes.get(node.id)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if not (isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS):
        return None
    left, right = _evaluate(node.left, sizes), _evaluate(node.right, sizes)
    if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
        return None
    size = _OPERATORS[type(node.op)](left, right)
    return size if size > 0 else None


def _names_in(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _checked(value: Any, dims: Sequence[int | None], given: Sequence[int]) -> tuple[int, ...]:
    """The shape given for `value`, where it fits the model's (its rank, its fixed sizes)."""
    name, tensor_type = value.name, value.type.tensor_type
    shape = tuple(int(d) for d in given)
    if len(dims) != len(shape):
        raise InputError(
            f"--input-shape for {name!r} has {len(shape)} dimensions but the model's input "
            f"has {len(dims)} ({show(tensor_type)})"
        )
    fixed = [_size(dim, {}) for dim in tensor_type.shape.dim]
    if any(f is not None and f != g for f, g in zip(fixed, shape, strict=True)):
        raise InputError(
            f"--input-shape {name}:{'x'.join(map(str, shape))} contradicts the model's "
            f"fixed shape {show(tensor_type)}; only dynamic dimensions can be set"
        )
    return shape


def _ask(missing: Sequence[tuple[Any, list[int | None]]], sizes: Mapping[str, int]) -> str:
    """The refusal for inputs whose shape is not known yet: each named with its declared
    shape, and the fewest --input-shape options that give every dimension left."""
    picks = _picks(missing, sizes)
    options = " ".join(f"--input-shape {value.name}:{example}" for value, example in picks)
    choose = (
        "" if all(e.replace("x", "").isdigit() for _, e in picks) else ", the sizes it will run at"
    )
    if len(missing) == 1:
        value = missing[0][0]
        return (
            f"input {value.name!r} has dynamic dimensions ({show(value.type.tensor_type)}); "
            f"give them with {options}{choose}"
        )
    listed = ", ".join(f"{v.name!r} ({show(v.type.tensor_type)})" for v, _ in missing[:_LISTED])
    more = f" and {len(missing) - _LISTED} more" if len(missing) > _LISTED else ""
    return (
        f"inputs {listed}{more} have dynamic dimensions; give them with {options}{choose} "
        "(inputs that share a dimension's name share its size)"
    )


def _picks(
    missing: Sequence[tuple[Any, list[int | None]]], sizes: Mapping[str, int]
) -> list[tuple[Any, str]]:
    """The inputs to give, in the model's order, each with an example shape: one wherever a
    named dimension is new, a dimension has no name, or its arithmetic names one no input
    gives plainly."""
    plain = set(sizes) | {
        d.dim_param
        for value, _ in missing
        for d in value.type.tensor_type.shape.dim
        if d.dim_param and _formula(d.dim_param) is None
    }
    covered, picks = set(sizes), []
    for value, dims in missing:
        need = False
        for dim, size in zip(value.type.tensor_type.shape.dim, dims, strict=True):
            if size is not None:
                continue
            formula = _formula(dim.dim_param)
            if formula is not None:
                need |= not _names_in(formula) <= plain
            else:
                need |= not dim.dim_param or dim.dim_param not in covered
        if need:
            picks.append((value, _example(value.type.tensor_type, dims)))
            covered |= {d.dim_param for d in value.type.tensor_type.shape.dim if d.dim_param}
    return picks


def _example(tensor_type: Any, dims: Sequence[int | None]) -> str:
    """A shape to give: a batch (the first dimension, or one named so) of 1; any other dynamic
    one by its name in capitals (HEIGHT, SEQUENCE_LENGTH), for the user to choose: a 1 there
    (a 1x1 image, a one-token sequence) tunes another model."""
    parts = []
    for at, (size, dim) in enumerate(zip(dims, tensor_type.shape.dim, strict=True)):
        named = re.sub(r"\W+", "_", dim.dim_param).strip("_").upper()
        if size is not None:
            parts.append(str(size))
        elif at == 0 or "BATCH" in named:
            parts.append("1")
        else:
            parts.append(named or f"DIM{at}")
    return "x".join(parts)
