"""Elementwise chains: maps, broadcast binaries, casts and causal masks fused into one pass.

One thread handles a run of V consecutive output elements along the innermost axis (16-byte
loads where every tensor allows), in a grid-stride loop over the output. Each operand's
offset is computed from the output index, so an operand over a subset of the output's axes
(in any order) is broadcast by name. The chain is an unrolled list of `ncdc::op_*` calls in
`templates/elementwise.cu.j2`; the row-wise family reuses the statement builder here.

    >>> from ncdc.spec import load_diagram_text
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.tiling import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: act
    ... axes: {m: 64, n: 256}
    ... inputs: {X: {axes: [m, n], dtype: bf16}, B: {axes: [n], dtype: bf16}}
    ... ops: ["H = add(X, B)", "Y = gelu(H)"]
    ... outputs: [Y]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> render_elementwise(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'act_elementwise_bf16_t..._v8'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ncdc.cost import KernelPlan, Plan
from ncdc.errors import PlanError
from ncdc.families import ELEMENTWISE_KINDS, VECTOR_BYTES
from ncdc.render import CPP_TYPES, KernelSource, Launch, Param, cpp_type
from ncdc.spec import DTYPE_BYTES, Diagram, Op

MAX_GRID = 65535 * 16  # enough blocks to fill any GPU; the loop strides over the rest


@dataclass(frozen=True)
class Statement:
    """`const float out = ncdc::fn(args...);` in the generated code."""

    out: str
    fn: str
    args: tuple[str, ...]


def float_literal(value: float) -> str:
    """A C++ float literal for a number from the spec (they are finite by construction)."""
    v = float(value)
    if not math.isfinite(v):
        raise PlanError(f"the constant {value} is not finite", hint="use a finite number")
    return f"{v!r}f"


def size_name(axis: str) -> str:
    """The kernel parameter that carries an axis size at run time. Every name the generated
    code makes up starts with ncdc_, which no diagram name may, so none meets a tensor's."""
    return f"ncdc_size_{axis}"


def offset_expr(axes: tuple[str, ...], index: Callable[[str], str]) -> str:
    """Offset of the element at the given axis indices in a row-major tensor over `axes`."""
    terms = []
    for i, a in enumerate(axes):
        stride = " * ".join(size_name(b) for b in axes[i + 1 :])
        terms.append(f"{index(a)} * {stride}" if stride else index(a))
    return " + ".join(terms) if terms else "0"


def op_statements(
    op: Op, value: Callable[[str], str], index: Callable[[str], str], out: str
) -> list[Statement]:
    """The statements computing `op` (an elementwise kind) into the variable `out`.

    `value(name)` is the C expression of a tensor's value for the current element and
    `index(axis)` that of an axis index there.
    """

    def arg(o: str | float) -> str:
        return value(o) if isinstance(o, str) else float_literal(o)

    args = tuple(arg(o) for o in op.operands)
    scaled = args[0]
    steps: list[Statement] = []
    if op.kind == "map":
        return [Statement(out, f"op_{op.fn}", args)]
    if op.kind == "binary":
        return [Statement(out, f"op_{op.fn}", args)]
    if op.kind == "mask":
        q, k = op.params["query"], op.params["key"]
        shift = f"{size_name(k)} - {size_name(q)}"
        return [Statement(out, "op_causal", (args[0], index(q), index(k), shift))]
    if op.kind == "cast":
        for i, factor in enumerate(op.scale):
            tmp = f"ncdc_scaled{i}_{op.out}"
            steps.append(Statement(tmp, "op_mul", (scaled, arg(factor))))
            scaled = tmp
        dtype = op.params["to"]
        if dtype not in CPP_TYPES or dtype == "int8":
            raise PlanError(
                f"no code for a cast to {dtype}", hint="cast to fp32, bf16, fp16 or fp8"
            )
        steps.append(Statement(out, f"op_cast<{cpp_type(dtype)}>", (scaled,)))
        return steps
    raise PlanError(f"{op.fn} ({op.out}) is not an elementwise operation")


def check_dtypes(diagram: Diagram, names: Iterable[str]) -> None:
    for name in names:
        dtype = diagram.tensor(name).dtype
        if dtype == "int8":
            raise PlanError(
                f"tensor {name} is int8, which the elementwise and row-wise kernels do not read",
                hint="cast it to a floating-point type first",
            )


def needed_ops(ops: Iterable[Op], targets: Iterable[str], known: Iterable[str]) -> list[Op]:
    """The ops (in order) that compute `targets` from values already `known`."""
    by_out = {op.out: op for op in ops}
    have = set(known)
    need: set[str] = set()

    def visit(name: str) -> None:
        if name in have or name in need or name not in by_out:
            return
        need.add(name)
        for n in by_out[name].inputs:
            visit(n)

    for t in targets:
        visit(t)
    return [op for op in ops if op.out in need]


def vector_width(diagram: Diagram, names: Iterable[str]) -> int:
    """Elements per run: a 16-byte vector of the narrowest tensor read or written in runs."""
    sizes = [DTYPE_BYTES[diagram.tensor(n).dtype] for n in names]
    return VECTOR_BYTES // min(sizes) if sizes else 1


def render_elementwise(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The elementwise kernel of `kp`: its template context and launch (see module doc)."""
    d = plan.graph.diagram
    kernel = kp.kernel
    axes = kp.family.axes("all") or kernel.woven
    for op in kernel.ops:
        if op.kind not in ELEMENTWISE_KINDS:
            raise PlanError(f"{op.fn} ({op.out}) in an elementwise kernel")
    check_dtypes(d, (*kernel.inputs, *kernel.outputs))
    inner = axes[-1]
    for name in kernel.outputs:
        if set(d.tensor(name).axes) != set(axes):
            raise PlanError(
                f"output {name} of kernel {kernel.name} is not over every axis {list(axes)}",
                hint="save it from a kernel of its own (schedule.materialize)",
            )
    index: dict[str, str] = {a: f"ncdc_i_{a}" for a in axes}

    def mode(name: str) -> str:
        t_axes = d.tensor(name).axes
        if inner not in t_axes:
            return "scalar"
        return "run" if t_axes[-1] == inner else "strided"

    runs = [n for n in (*kernel.inputs, *kernel.outputs) if mode(n) == "run"]
    vec = vector_width(d, runs)
    elem_index = dict(index)
    elem_index[inner] = f"(ncdc_i_{inner} + ncdc_j)"

    def value(name: str) -> str:
        if name in kernel.inputs:
            return f"ncdc_r_{name}" if mode(name) == "scalar" else f"ncdc_a_{name}[ncdc_j]"
        return f"ncdc_e_{name}"

    statements: list[Statement] = []
    for op in kernel.ops:
        statements += op_statements(op, value, lambda a: elem_index[a], value(op.out))

    def access(name: str) -> dict[str, Any]:
        t = d.tensor(name)
        inner_stride = (
            " * ".join(size_name(b) for b in t.axes[t.axes.index(inner) + 1 :])
            if inner in t.axes
            else ""
        )
        return {
            "name": name,
            "ctype": cpp_type(t.dtype),
            "mode": mode(name),
            "offset": "ncdc_e" if t.axes == axes else offset_expr(t.axes, lambda a: index[a]),
            "stride": inner_stride or "1",
        }

    threads = kp.warps * 32 if kp.warps else 256
    tile = kp.block_tile.get(inner, threads * vec)
    vpt = max(1, min(8, tile // (threads * vec)))
    total = math.prod(d.axes[a] for a in axes)
    grid = max(1, min(MAX_GRID, -(-total // (threads * vec * vpt))))
    dtype = d.tensor(kernel.outputs[0]).dtype
    name = f"{kernel.name}_elementwise_{dtype.replace('_', '')}_t{threads}_v{vec}"
    params = [
        Param(n, "tensor", d.tensor(n).dtype, writes=n in kernel.outputs)
        for n in (*kernel.inputs, *kernel.outputs)
    ] + [Param(size_name(a), "int64", value=d.axes[a]) for a in axes]
    context = {
        "kernel": name,
        "threads": threads,
        "vec": vec,
        "axes": [{"name": a, "size": size_name(a), "index": index[a]} for a in reversed(axes)],
        "inner": inner,
        "inputs": [access(n) for n in kernel.inputs],
        "outputs": [access(n) for n in kernel.outputs],
        "statements": statements,
        "result": {n: value(n) for n in kernel.outputs},
        "params": param_context(params),
        "doc": "; ".join(op.text for op in kernel.ops),
    }
    launch = Launch(name, (grid, 1, 1), (threads, 1, 1), 0, tuple(params))
    return KernelSource("elementwise.cu.j2", context, (launch,))


def param_context(params: Iterable[Param]) -> list[dict[str, Any]]:
    """The kernel parameters as the templates declare them: tensors, then sizes."""
    return [
        {"name": p.name, "tensor": p.kind == "tensor", "writes": p.writes,
         "ctype": cpp_type(p.dtype) if p.kind == "tensor" else "long long"}
        for p in params
    ]  # fmt: skip
