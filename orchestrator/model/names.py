"""ONNX names every TVM target can carry: valid, unique C identifiers, made once at import.

TVM turns a graph input's name into a kernel parameter name (`gpu_0/data_0` becomes
`float* gpu_0/data_0_ptr` in CUDA source, which NVRTC rejects); `from_onnx` only replaces '.'
and a leading digit. So TVM is given a copy of the graph in which every tensor name (inputs,
outputs, initializers, value infos, the tensors between nodes, in subgraphs too) and every
node name is one; the user's own names stay wherever the user sees them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")
# C, C++ and CUDA keywords: valid-looking, yet no identifier.
_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast else
    enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires restrict return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef
    typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    __global__ __device__ __host__ __shared__ __constant__ __restrict__""".split()
)


def is_c_identifier(name: str) -> bool:
    """ASCII letters, digits and '_', not starting with a digit, and no keyword."""
    return bool(_IDENTIFIER.match(name)) and name not in _KEYWORDS


def safe_names(names: Iterable[str]) -> dict[str, str]:
    """{name: identifier} for each name that is no C identifier (empty names stay empty).

    Valid names keep themselves; the others get their unsafe characters replaced by '_', a
    prefix before a leading digit, and a numeric suffix where that name is taken. The result
    depends only on the names and their order.
    """
    ordered = list(dict.fromkeys(n for n in names if n))
    taken = {n for n in ordered if is_c_identifier(n)}
    renamed: dict[str, str] = {}
    for name in ordered:
        if name in taken and is_c_identifier(name):
            continue
        base = _UNSAFE.sub("_", name)
        if not base or base[0].isdigit():
            base = "t_" + base
        if base in _KEYWORDS:
            base += "_"
        candidate, n = base, 0
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        renamed[name] = candidate
    return renamed


def for_tvm(proto: Any) -> tuple[Any, dict[str, str]]:
    """(a ModelProto whose names are all C identifiers, {original tensor name: new name}).

    The model itself is returned, uncopied, when every name is one already.
    """
    tensors = safe_names(_tensor_names(proto.graph))
    nodes = safe_names(n.name for n in all_nodes(proto.graph))
    if not tensors and not nodes:
        return proto, {}
    copy = copied(proto)
    _rename(copy.graph, tensors, nodes)
    return copy, tensors


def copied(proto: Any) -> Any:
    """A copy of the ModelProto `proto`, for a rewrite that must leave it as it is."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def all_nodes(graph: Any) -> Iterator[Any]:
    """Every node of `graph`, including those of the subgraphs of If, Loop and Scan."""
    for node in graph.node:
        yield node
        for sub in subgraphs(node):
            yield from all_nodes(sub)


def subgraphs(node: Any) -> Iterator[Any]:
    """The graphs `node` holds: an If's branches, a Loop's or Scan's body."""
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _tensor_names(graph: Any) -> Iterator[str]:
    """Every tensor name of the graph and its subgraphs, in graph order."""
    yield from (v.name for v in graph.input)
    yield from (t.name for t in graph.initializer)
    for sparse in graph.sparse_initializer:
        yield sparse.values.name
        yield sparse.indices.name
    for node in graph.node:
        yield from node.input
        for sub in subgraphs(node):
            yield from _tensor_names(sub)
        yield from node.output
    yield from (v.name for v in graph.output)
    yield from (v.name for v in graph.value_info)


def _rename(graph: Any, tensors: Mapping[str, str], nodes: Mapping[str, str]) -> None:
    def new(name: str) -> str:
        return tensors.get(name, name)

    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = new(value.name)
    for tensor in graph.initializer:
        tensor.name = new(tensor.name)
    for sparse in graph.sparse_initializer:
        sparse.values.name = new(sparse.values.name)
        sparse.indices.name = new(sparse.indices.name)
    for annotation in graph.quantization_annotation:
        annotation.tensor_name = new(annotation.tensor_name)
    for node in graph.node:
        node.name = nodes.get(node.name, node.name)
        node.input[:] = [new(n) for n in node.input]
        node.output[:] = [new(n) for n in node.output]
        for sub in subgraphs(node):
            _rename(sub, tensors, nodes)
