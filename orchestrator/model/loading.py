"""ONNX models from disk: read and checked (operators, external data, input shapes), with the
names every TVM target can carry (names.py)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.measure.base import short_error

from ..errors import InputError
from . import (
    constants,
    folding,
    functions,
    input_shapes,
    integer,
    loops,
    names,
    normal_form,
    padding,
    recurrent,
    resize,
    reverse,
    upgrade,
)

_SUPPORTED_DOMAINS = ("", "ai.onnx")
_QUANTIZING = frozenset({"QuantizeLinear", "DynamicQuantizeLinear"})
_DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)


@dataclasses.dataclass(frozen=True)
class ModelInput:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True, eq=False)
class OnnxModel:
    """A checked ONNX model with fully known input shapes.

    `proto`, `inputs` and `outputs` carry the user's names; TVM imports `tvm_proto`, the same
    graph with every name a C identifier (`tvm_names` maps the tensor names that changed),
    what it computes from the inputs' shapes folded into constants (folding.py) and its LSTM
    and GRU nodes unrolled (recurrent.py).
    """

    path: Path
    name: str  # safe to use in a file name
    sha256: str
    proto: Any  # onnx.ModelProto
    inputs: tuple[ModelInput, ...]
    outputs: tuple[str, ...]
    tvm_proto: Any  # `proto` itself when no name needed changing
    tvm_names: Mapping[str, str]
    external_weights: bool = False  # its weights sit in files beside it (read into `proto`)
    # It computes in float16 or bfloat16 anywhere: an input, output, weight, constant or cast
    # of it (its outputs are then checked within [check] rtol_half).
    half_precision: bool = False
    # It computes in bfloat16 anywhere (onnxruntime, whose CPU kernels cover few bfloat16
    # operators, then checks it on a float32 copy: deploy/upcast.py).
    bfloat16: bool = False
    # It rounds values to 8-bit integers as it runs (QuantizeLinear, DynamicQuantizeLinear...):
    # a value at a rounding boundary may land a step apart in TVM and onnxruntime, and later
    # layers carry the step (its outputs are then checked within [check] rtol_quantized).
    quantized: bool = False
    given_shapes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # Its file defines local functions, inlined into `proto` (normal_form.py): onnxruntime,
    # which runs them itself, checks the outputs on the file as written.
    inlined_functions: bool = False

    def tvm_name(self, name: str) -> str:
        return self.tvm_names.get(name, name)

    def input_bytes(self) -> int:
        """Bytes of one sample of its inputs, by their shapes and element types."""
        import ml_dtypes  # noqa: F401  (numpy knows "bfloat16" by name once it is imported)
        import numpy as np

        return sum(math.prod(i.shape) * np.dtype(i.dtype).itemsize for i in self.inputs)

    def largest_value_bytes(self) -> int:
        """Bytes of its largest tensor computed as it runs, by onnx's shape inference (0 where
        it gives up): a lower bound of what running it holds beside its inputs and weights."""
        from onnx.helper import tensor_dtype_to_np_dtype

        from .folding import fixed_shape, value_types

        shapes = {i.name: i.shape for i in self.inputs}
        weights = {init.name for init in self.proto.graph.initializer}
        sizes = [0]
        for name, value in value_types(self.proto, shapes).items():
            shape = fixed_shape(value) if value.HasField("tensor_type") else None
            if name in weights or name in shapes or shape is None:
                continue
            itemsize = tensor_dtype_to_np_dtype(value.tensor_type.elem_type).itemsize
            sizes.append(math.prod(shape) * itemsize)
        return max(sizes)

    def weight_bytes(self) -> int:
        """Bytes of its initializers (its weights), by their shapes and element types."""
        from onnx.helper import tensor_dtype_to_np_dtype

        return sum(
            math.prod(t.dims) * tensor_dtype_to_np_dtype(t.data_type).itemsize
            for t in self.proto.graph.initializer
        )

    def op_counts(self) -> collections.Counter[str]:
        """How many nodes of each op type the graph has, subgraphs included."""
        return collections.Counter(node.op_type for node in names.all_nodes(self.proto.graph))

    def describe(self) -> dict[str, Any]:
        return {
            "path": os.path.abspath(self.path),  # a resume from elsewhere names it so
            "name": self.name,
            "sha256": self.sha256,
            "inputs": [
                {"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in self.inputs
            ],
            "outputs": list(self.outputs),
            "renamed_for_tvm": len(self.tvm_names),
            # --input-shape as given: a resume or a rebuild of the run gives them again
            "input_shapes": {name: list(shape) for name, shape in self.given_shapes.items()},
        }


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`name:1x3x224x224` -> ("name", (1, 3, 224, 224)); the name may itself hold colons."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name or not dims:
        raise InputError(
            f"--input-shape {text!r} is not NAME:DIMS; write it like input:1x3x224x224"
        )
    try:
        shape = tuple(int(d) for d in re.split(r"[x,]", dims.strip()))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise InputError(
            f"--input-shape {text!r}: dimensions must be positive integers joined by 'x', "
            f"like {name}:1x3x224x224"
        )
    return name, shape


def safe_name(text: str) -> str:
    """A name usable as a path component: letters, digits, '.', '_' and '-' only."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")
    return cleaned[:64] or "model"


def load_model(
    path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> OnnxModel:
    """Load and check an ONNX file; raise InputError with one line on anything TVM cannot take."""
    import onnx

    path = as_path("model", path)
    data = _read_bytes(path)
    try:
        proto = onnx.load_from_string(data)
        files = _external_files(proto)
        if files:
            # Beside the file itself, not beside a link to it.
            _load_external(proto, path.resolve().parent, files, path)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(
            f"{path} is not an ONNX model or is truncated (cannot parse it: {short_error(exc)}); "
            "export it again"
        ) from None
    if proto.ir_version <= 0 or not proto.graph.node:
        raise InputError(f"{path} is not an ONNX model (no graph in it); check the file")
    normal_form.checkable(path, proto, input_shapes or {})
    try:
        onnx.checker.check_model(proto if proto.ByteSize() < 2**31 - 1 else str(path.resolve()))
    except Exception as exc:
        # One line of the checker's message, which may name a node across several.
        why = short_error(" ".join(str(exc).split()))
        raise InputError(f"{path} is not a valid ONNX model: {why}") from None
    inlined = normal_form.inlined(path, proto)
    inlined_functions, proto = inlined is not proto, inlined
    _check_operators(path, proto)
    _check_inference_mode(path, proto.graph)
    inputs = _resolve_inputs(proto.graph, dict(input_shapes or {}))
    tvm_proto, tvm_names = _for_tvm(proto, inputs)
    left = reverse.left(tvm_proto)
    if left:
        raise InputError(
            f"{path} uses operator(s) TVM's ONNX importer does not support: {left}; replace "
            "them in the exporter or simplify the model"
        )
    return OnnxModel(
        path=path,
        name=safe_name(path.stem),
        sha256=hashlib.sha256(data).hexdigest(),
        proto=proto,
        inputs=inputs,
        outputs=tuple(o.name for o in proto.graph.output),
        tvm_proto=tvm_proto,
        tvm_names=tvm_names,
        external_weights=bool(files),
        half_precision=_computes_in(
            proto.graph, (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
        ),
        bfloat16=_computes_in(proto.graph, (onnx.TensorProto.BFLOAT16,)),
        quantized=any(node.op_type in _QUANTIZING for node in names.all_nodes(proto.graph)),
        given_shapes={name: tuple(shape) for name, shape in (input_shapes or {}).items()},
        inlined_functions=inlined_functions,
    )


def _for_tvm(proto: Any, inputs: Sequence[ModelInput]) -> tuple[Any, dict[str, str]]:
    """(the graph TVM imports, {the user's tensor name: its name there}): `proto` itself where
    nothing needs rewriting, else a copy, each step in its own module. Names made C
    identifiers; an old opset upgraded; operators defined as functions expanded (before the
    folding, as bodies compute from shapes too); Constants as tensors, one axis as a list;
    ConvInteger in int32; Loops their constants count unrolled; shape arithmetic folded;
    Resizes TVM gets wrong as matrix products, SAME_LOWER pools as explicit pads and whole
    sequences' ReverseSequence as a Slice (their input shapes known once folded); LSTM and GRU
    unrolled."""
    tvm_proto, tvm_names = names.for_tvm(proto)
    shapes = {tvm_names.get(i.name, i.name): i.shape for i in inputs}
    tvm_proto = upgrade.upgrade(tvm_proto)
    tvm_proto = functions.expand(tvm_proto, shapes, copy=tvm_proto is proto)
    tvm_proto = constants.as_tensors(tvm_proto, copy=tvm_proto is proto)
    tvm_proto = constants.axes_as_lists(tvm_proto, copy=tvm_proto is proto)
    tvm_proto = integer.widen(tvm_proto, copy=tvm_proto is proto)
    tvm_proto = loops.unroll(tvm_proto, copy=tvm_proto is proto)
    tvm_proto = folding.fold_shapes(tvm_proto, shapes, copy=tvm_proto is proto)
    tvm_proto = resize.as_matmuls(tvm_proto, shapes, copy=tvm_proto is proto)
    tvm_proto = padding.explicit(tvm_proto, shapes, copy=tvm_proto is proto)
    tvm_proto = reverse.as_slices(tvm_proto, shapes, copy=tvm_proto is proto)
    if any(node.op_type in recurrent.OPS for node in tvm_proto.graph.node):
        known = folding.static_shapes(tvm_proto, shapes)
        tvm_proto = recurrent.unroll(tvm_proto, known, copy=tvm_proto is proto)
    return tvm_proto, tvm_names


def unexpanded_tilde(path: Path) -> Path | None:
    """Where `path` starts with a ~ no shell expanded (no such folder here: `--out "~/runs/m"`
    made one named ~ in the current directory), the path meant; else None."""
    if not path.parts or not path.parts[0].startswith("~") or path.exists():
        return None
    try:
        expanded = path.expanduser()
    except RuntimeError:  # ~name of no user here
        return None
    return expanded if expanded != path else None


def as_path(name: str, value: Any) -> Path:
    """`value`, given to the Python API as `name`, as a Path; TypeError, naming the fix, for
    anything else (an onnx.ModelProto, a number); InputError for an empty one, which Path
    would read as the current directory."""
    if isinstance(value, (str, os.PathLike)):
        if not os.fspath(value):
            raise InputError(f"{name} is an empty path (an unset variable?); give a path")
        expanded = unexpanded_tilde(Path(value))
        if expanded is not None:
            raise InputError(
                f"{name} {value}: ~ is a shell's, not expanded inside quotes or by the Python "
                f"API; give {expanded}"
            )
        return Path(value)
    fix = ""
    if hasattr(value, "graph") and hasattr(value, "SerializeToString"):
        fix = "; save it first, e.g. onnx.save(model, 'model.onnx'), and give that path"
    raise TypeError(f"{name} must be a path (str or os.PathLike), not {type(value).__name__}{fix}")


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        if path.is_symlink():  # `ls` lists it: say why it cannot be read
            raise InputError(
                f"model file {path} is a symbolic link to {os.readlink(path)}, which cannot be "
                "followed (missing, or a loop of links); point it at the .onnx file"
            )
        url = re.match(r"([a-z][a-z0-9+.-]+):/+(.*)", str(path), re.IGNORECASE)
        if url:  # a path collapses the // of https://
            raise InputError(
                f"model {url.group(1)}://{url.group(2)} is a URL; tune-orchestrator reads a local "
                "file: download it first (curl -LO URL) and give its path"
            )
        raise InputError(f"model file {path} does not exist; check the path")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give the path of an .onnx file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    if not data:
        raise InputError(f"{path} is empty (0 bytes); export the model again")
    return data


def _external_files(proto: Any) -> list[str]:
    """The files the model's weights stored outside it are in, as the model names them."""
    import onnx

    return sorted(
        {
            entry.value
            for tensor in proto.graph.initializer
            if tensor.data_location == onnx.TensorProto.EXTERNAL
            for entry in tensor.external_data
            if entry.key == "location"
        }
    )


def _load_external(proto: Any, folder: Path, files: Sequence[str], path: Path) -> None:
    import onnx

    missing = [name for name in files if not (folder / name).is_file()]
    if missing:
        raise InputError(
            f"{path}: its weights are in {', '.join(missing)}, missing from {folder}; keep "
            "the weight files beside the model"
        )
    try:
        onnx.load_external_data_for_model(proto, str(folder))
    except OSError as exc:
        raise InputError(f"{path}: cannot read its weights ({exc}); check the files") from None


def type_attribute(attr: Any) -> bool:
    """Whether a node's attribute names an element type: Cast's `to`, a generator's `dtype`."""
    return attr.name in ("to", "dtype") and attr.type == attr.INT


def _computes_in(graph: Any, types: Sequence[int]) -> bool:
    """Whether the model holds a value of one of the ONNX element `types`: an input, output,
    intermediate, weight or constant, or a node that makes one (a Cast to it)."""
    values = [*graph.input, *graph.output, *graph.value_info]
    if any(v.type.tensor_type.elem_type in types for v in values):
        return True
    if any(t.data_type in types for t in graph.initializer):
        return True
    for node in names.all_nodes(graph):
        for attr in node.attribute:
            if type_attribute(attr) and attr.i in types:
                return True
            tensors = [attr.t] if attr.HasField("t") else []  # a Constant's value
            if any(t.data_type in types for t in [*tensors, *attr.tensors]):
                return True
    return False


def _check_operators(path: Path, proto: Any) -> None:
    graph = proto.graph
    nodes = list(names.all_nodes(graph))
    custom = sorted(
        {f"{n.domain}.{n.op_type}" for n in nodes if n.domain not in _SUPPORTED_DOMAINS}
    )
    if custom:
        raise InputError(
            f"{path} uses operator(s) from custom domains that TVM cannot import: "
            f"{', '.join(custom)}; export the model with standard ONNX operators only"
        )
    known, opset = functions.importable(), functions.opset_of(proto)
    unrolled = {tuple(node.output) for node in graph.node if node.op_type in recurrent.OPS}
    held = recurrent.held_or_computed(graph) if unrolled else set()
    expanded = {  # written for TVM in other operators (functions.py, integer.py, loops.py)
        tuple(node.output)
        for node in graph.node
        if functions.expandable(node, opset)
        or node.op_type in integer.OPS
        or (node.op_type == "Loop" and loops.unrollable(proto, node))
        or node.op_type in reverse.OPS  # known once the shapes are folded: refused then
    }
    missing: dict[str, str] = {}
    for node in nodes:
        if node.op_type in known or tuple(node.output) in expanded:
            continue
        why = recurrent.refusal(node, held) if tuple(node.output) in unrolled else ""
        if why is not None:  # None: unrolled for TVM (recurrent.py)
            op = f"{node.op_type} with {why}" if why else node.op_type
            missing.setdefault(op, node.name or "unnamed")
    if missing:
        listed = ", ".join(f"{op} (node {name!r})" for op, name in sorted(missing.items()))
        raise InputError(
            f"{path} uses operator(s) TVM's ONNX importer does not support: {listed}; "
            "replace them in the exporter or simplify the model"
        )


def _check_inference_mode(path: Path, graph: Any) -> None:
    """InputError where the model computes as in training (torch.onnx.export with
    training=TrainingMode.TRAINING): a Dropout told to drop, at random, or a
    BatchNormalization normalizing by the batch's own statistics (TVM's importer uses the
    running ones). No build matches onnxruntime on such a model, which a run then tuned for
    its whole budget to ship nothing (exit 4)."""
    told = constants.held(
        graph, {name for n in graph.node if n.op_type == "Dropout" for name in n.input[1:3]}
    )
    training = []
    for node in names.all_nodes(graph):
        if node.op_type == "BatchNormalization":
            mode = any(a.name == "training_mode" and a.i for a in node.attribute)
        elif node.op_type == "Dropout" and len(node.input) > 2 and node.input[2] in told:
            ratio = told.get(node.input[1])  # None: 0.5, not given or not a constant
            drops = ratio is None or bool(ratio.any())
            mode = drops and bool(told[node.input[2]].all())
        else:
            continue
        if mode:
            training.append(f"{node.op_type} (node {node.name or node.output[0]!r})")
    if training:
        more = f" and {len(training) - 2} more" if len(training) > 2 else ""
        raise InputError(
            f"{path} computes as in training: {', '.join(training[:2])}{more} (a Dropout "
            "drops at random, a BatchNormalization normalizes by the batch's statistics where "
            "TVM uses the running ones), so no build matches onnxruntime; export it for "
            "inference (model.eval(), torch.onnx.export's default training=TrainingMode.EVAL)"
        )


def _resolve_inputs(graph: Any, given: dict[str, Sequence[int]]) -> tuple[ModelInput, ...]:
    """The model's inputs with their shapes (input_shapes.py) and dtypes."""
    initializers = {t.name for t in graph.initializer}
    # Older exporters list weights as graph inputs too; those are not inputs of the model.
    declared = [i for i in graph.input if i.name not in initializers]
    dtypes = [_dtype_name(v.name, v.type.tensor_type.elem_type) for v in declared]
    # Every input has a shape by now, the model's or --input-shape's (normal_form).
    shapes = input_shapes.resolve(declared, given)
    return tuple(
        ModelInput(v.name, shapes[v.name], t) for v, t in zip(declared, dtypes, strict=True)
    )


def _dtype_name(name: str, elem_type: int) -> str:
    import onnx

    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except Exception:
        dtype = f"ONNX type {elem_type}"
    if dtype not in _DTYPES:
        raise InputError(
            f"input {name!r} has element type {dtype}, which cannot be tuned; "
            f"supported: {', '.join(_DTYPES)}"
        )
    return dtype
