"""C++ expression helpers every family's renderer shares: names, offsets, literals and the
unrolled `ncdc::op_*` statements of elementwise chains.

Every name the generated code makes up starts with `ncdc_`, which no diagram name may, so
none meets a tensor's name: sizes are `ncdc_size_<axis>`, values `ncdc_e_<tensor>`.

    >>> size_name("m"), offset_expr(("m", "n"), lambda a: f"i_{a}")
    ('ncdc_size_m', 'i_m * ncdc_size_n + i_n')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ncdc.errors import PlanError
from ncdc.families.base import VECTOR_BYTES, Param, Workspace
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.model.graph import Kernel

ELEMENTWISE_KINDS = ("map", "binary", "cast", "mask", "index", "gather", "permute", "slice")
# ops that read their first operand from memory at positions of their own (an index's, an
# offset's), not at the element's: the kernel never loads that operand per element
INDIRECT_KINDS = ("gather", "slice")


def indirect_sources(ops: Iterable[Op]) -> list[str]:
    """The tensors `ops` read at positions of their own (gathers' and slices' sources, a
    paged gather's block table)."""
    return list(dict.fromkeys(n for op in ops for n in op.read_apart))


def computed_indirect(kernel: Kernel, held: Iterable[str] = ()) -> list[str]:
    """The tensors the kernel reads at positions of their own (a gather's or a slice's
    source) but computes itself: the code reads such a source from memory, so the kernel
    cannot run until it is saved (the kernel-break search then saves it). `held`: sources a
    family has at hand anyway (a selection's operand, at its picks)."""
    made = {op.out for op in kernel.ops}
    return [n for n in indirect_sources(kernel.ops) if n in made and n not in set(held)]


def cpp_type(dtype: str) -> str:
    """The C++ type of an ncdc dtype: 'bf16' -> '__nv_bfloat16'."""
    return DTYPES[dtype].cpp


STATUS = "ncdc_status"  # the int32 word a kernel sets when an index is out of range
GATHER_LIMIT = 2**24  # an index travels as fp32, exact up to here


def status_param() -> Param:
    """The index status word of a kernel that gathers (a workspace its launches share)."""
    return Param(STATUS, "workspace", "int32", writes=True)


def status_workspace() -> Workspace:
    return Workspace(STATUS, "int32", 1, zeroed=True)


@dataclass(frozen=True)
class Pointers:
    """Where a family's generated code finds a tensor's buffer (`tensor(name)`, a C pointer
    expression) and the index status word (`status`): what a gather reads through."""

    tensor: Callable[[str], str]
    status: str
    buffers: frozenset[str]  # the tensors it has a buffer of: the kernel's inputs


def struct_pointers(kernel: Kernel) -> Pointers:
    """The pointers of a kernel whose template keeps its tensors, the status word among
    them, in a struct of their own, `ncdc_t` (elementwise, scatter, scan, select)."""
    return Pointers(lambda n: f"ncdc_t.{n}", f"ncdc_t.{STATUS}", frozenset(kernel.inputs))


def element_value(kernel: Kernel) -> Callable[[str], str]:
    """The C name of a tensor's value at the current element: `ncdc_r_<name>` for an input
    the template loads, `ncdc_e_<name>` for one a statement computes."""
    return lambda name: f"ncdc_r_{name}" if name in kernel.inputs else f"ncdc_e_{name}"


@dataclass(frozen=True)
class Statement:
    """`const float out = ncdc::fn(args...);` in the generated code."""

    out: str
    fn: str
    args: tuple[str, ...]


def float_literal(value: float) -> str:
    """A C++ float for a number from the spec: a literal, or an infinity (an elementwise
    operand may be `inf` or `-inf`, a mask's value); NaN never reaches here.

        >>> float_literal(0.5), float_literal(float("-inf"))
        ('0.5f', '(-ncdc::infinity())')
    """
    v = float(value)
    if math.isinf(v):
        return "ncdc::infinity()" if v > 0 else "(-ncdc::infinity())"
    if v != v:
        raise PlanError(f"the constant {value} is not a number", hint="use a number")
    return f"{v!r}f"


def size_name(axis: str) -> str:
    """The kernel parameter that carries an axis size at run time. Every name the generated
    code makes up starts with ncdc_, which no diagram name may, so none meets a tensor's."""
    return f"ncdc_size_{axis}"


def axis_pitch(t: Tensor, axis: str) -> list[str] | None:
    """Elements between neighbours along `axis` in `t`, as size parameters to multiply;
    None when `t` lacks the axis (it is broadcast along it)."""
    if axis not in t.axes:
        return None
    return [size_name(a) for a in t.axes[t.axes.index(axis) + 1 :]]


def offset_expr(axes: tuple[str, ...], index: Callable[[str], str]) -> str:
    """Offset of the element at the given axis indices in a row-major tensor over `axes`."""
    terms = []
    for i, a in enumerate(axes):
        stride = " * ".join(size_name(b) for b in axes[i + 1 :])
        terms.append(f"{index(a)} * {stride}" if stride else index(a))
    return " + ".join(terms) if terms else "0"


def op_statements(
    op: Op, value: Callable[[str], str], index: Callable[[str], str], out: str,
    pointers: Pointers | None = None, diagram: Diagram | None = None,
) -> list[Statement]:  # fmt: skip
    """The statements computing `op` (an elementwise kind) into the variable `out`.

    `value(name)` is the C expression of a tensor's value for the current element and
    `index(axis)` that of an axis index there; a gather reads its source through
    `pointers` (the diagram gives the source's axes).
    """

    if diagram is not None and read_as_stored(op, diagram):
        # a result stored in a narrower type that later ops read: they read what is stored
        # (the reference rounds it before they do), so it is rounded here, in registers
        exact = f"{out}_exact"
        made = _statements(op, value, index, exact, pointers, diagram)
        ctype = cpp_type(diagram.tensor(op.out).dtype)
        return [*made, Statement(out, f"op_cast<{ctype}>", (exact,))]
    return _statements(op, value, index, out, pointers, diagram)


def _statements(
    op: Op, value: Callable[[str], str], index: Callable[[str], str], out: str,
    pointers: Pointers | None, diagram: Diagram | None,
) -> list[Statement]:  # fmt: skip
    def arg(o: str | float) -> str:
        return value(o) if isinstance(o, str) else float_literal(o)

    if op.kind == "index":
        return [Statement(out, "op_id", (f"float({index(op.params['axis'])})",))]
    if op.kind == "gather":
        return [gather_statement(op, value, index, out, pointers, diagram)]
    if op.kind == "slice":
        return [slice_statement(op, index, out, pointers, diagram)]
    args = tuple(arg(o) for o in op.operands)
    scaled = args[0]
    steps: list[Statement] = []
    if op.kind == "map":
        return [Statement(out, f"op_{op.fn}", args)]
    if op.kind == "permute":  # the element's value; only where it is stored differs
        return [Statement(out, "op_id", args)]
    if op.kind == "binary":
        return [Statement(out, f"op_{op.fn}", args)]
    if op.kind == "mask" and op.fn == "causal":
        q, k = op.params["query"], op.params["key"]
        shift = f"{size_name(k)} - {size_name(q)}" if op.params.get("align") != "start" else "0"
        return [Statement(out, "op_causal", (args[0], index(q), index(k), shift))]
    if op.kind == "mask":
        raise PlanError(
            f"no code for {op.fn} ({op.out}) outside fused attention",
            hint=f"feed {op.out} to softmax over {op.params['key']} and a contraction over "
            f"{op.params['key']} in the same kernel (remove it from schedule.materialize), "
            "or write a causal mask",
        )
    if op.kind == "cast":
        for i, factor in enumerate(op.scale):
            tmp = f"ncdc_scaled{i}_{op.out}"
            steps.append(Statement(tmp, "op_mul", (scaled, arg(factor))))
            scaled = tmp
        dtype = op.params["to"]
        steps.append(Statement(out, f"op_cast<{cpp_type(dtype)}>", (scaled,)))
        return steps
    raise PlanError(f"{op.fn} ({op.out}) is not an elementwise operation")


def read_as_stored(op: Op, diagram: Diagram) -> bool:
    """`op`'s result is saved (an output, or materialised) in a type narrower than fp32 and
    a later op reads it: that op must read the rounded value, as the reference does."""
    saved = op.out in diagram.outputs or op.out in diagram.schedule.materialize
    return (saved and diagram.tensor(op.out).dtype != "fp32" and op.kind != "cast"
            and bool(diagram.consumers(op.out)))  # fmt: skip


def gather_statement(
    op: Op, value: Callable[[str], str], index: Callable[[str], str], out: str,
    pointers: Pointers | None, diagram: Diagram | None,
) -> Statement:  # fmt: skip
    """`out = ncdc::op_gather(source at this element with the gathered axis at 0, index,
    axis size, pitch along it, status)`."""
    source, indices = (str(o) for o in op.operands)
    axis = op.params["axis"]
    if pointers is None or diagram is None:
        raise PlanError(
            f"no code for gather ({op.out}) in this kernel",
            hint=f"save {op.out} in a kernel of its own: schedule: {{materialize: [{op.out}]}}",
        )
    if diagram.axes[axis] > GATHER_LIMIT:
        raise PlanError(
            f"gather ({op.out}) along {axis} of {diagram.axes[axis]} values; the kernels take "
            f"indices up to {GATHER_LIMIT} (exact in fp32)",
            hint=f"split {axis} into parts of at most {GATHER_LIMIT}",
        )
    if source not in pointers.buffers:
        raise PlanError(
            f"gather ({op.out}) from {source}, which this kernel computes; a gather reads its "
            "source from memory",
            hint=f"save {source}: schedule: {{materialize: [{source}]}}",
        )
    t = diagram.tensor(source)
    picked = value(indices)
    if "into" in op.params:  # paged: the row in its page, the page from the block table
        within, into = op.params["within"], op.params["into"]
        index = _paged_index(index, within, into, op.params["pages"])
        table = diagram.tensor(indices)
        row = offset_expr(table.axes, index)
        picked = f"float(ncdc::ld_global({pointers.tensor(indices)} + {row}))"
    at = row_start(t, axis, index)
    pitch = " * ".join(size_name(a) for a in t.axes[t.axes.index(axis) + 1 :]) or "1"
    base = f"{pointers.tensor(source)} + {at}" if at != "0" else pointers.tensor(source)
    return Statement(out, "op_gather", (base, picked, size_name(axis), pitch, pointers.status))


def _paged_index(
    index: Callable[[str], str], within: str, into: str, pages: str
) -> Callable[[str], str]:
    """The element's index along a paged gather's source and block table: its position
    along `into` split into a page (`pages`) and a row in it (`within`)."""
    position = f"(long long)({index(into)})"
    split = {pages: f"({position} / {size_name(within)})",
             within: f"({position} % {size_name(within)})"}  # fmt: skip
    return lambda a: split.get(a) or index(a)


def slice_statement(
    op: Op, index: Callable[[str], str], out: str, pointers: Pointers | None,
    diagram: Diagram | None,
) -> Statement:  # fmt: skip
    """`out = ncdc::op_slice(source at this element with the sliced axis at 0, position, axis
    size, pitch along it)`: the position is the element's along `into` plus the start
    (wrapped around the axis for a roll)."""
    source, axis, into = str(op.operands[0]), op.params["axis"], op.params["into"]
    if pointers is None or diagram is None or source not in pointers.buffers:
        raise PlanError(
            f"{op.fn} ({op.out}) of {source}, which this kernel computes; a {op.fn} reads its "
            "operand from memory",
            hint=f"save {source}: schedule: {{materialize: [{source}]}}",
        )
    try:
        walked = {a: index(a) for a in op.axes}
    except KeyError:  # a slice another offset read takes apart, in the same kernel
        raise PlanError(
            f"{op.fn} ({op.out}) runs over {list(op.axes)}, which this kernel does not walk: "
            f"{op.out} is read at offsets of its own",
            hint=f"save {op.out}: schedule: {{materialize: [{op.out}]}}",
        ) from None
    t = diagram.tensor(source)
    at = row_start(t, axis, walked.__getitem__)
    pitch = " * ".join(size_name(a) for a in t.axes[t.axes.index(axis) + 1 :]) or "1"
    base = f"{pointers.tensor(source)} + {at}" if at != "0" else pointers.tensor(source)
    position = f"(long long){walked[into]} + {int(op.params['start'])}LL"
    if op.params.get("wrap"):
        position = f"ncdc::wrap_index({position}, {size_name(axis)})"
    return Statement(out, "op_slice", (base, position, size_name(axis), pitch))


def value_reads(ops: Iterable[Op], inputs: Iterable[str]) -> list[str]:
    """The `inputs` that `ops` read by value, at each element (a gather's or a slice's
    source is read at positions of its own), in order of first use."""
    known = set(inputs)
    return list(dict.fromkeys(
        n for o in ops for n in o.inputs
        if n in known and n not in o.read_apart
    ))  # fmt: skip


def address_along(t: Tensor, axis: str, position: str) -> str:
    """The address of an element of `t` at `position` along `axis`, from `ncdc_p_<name>`,
    where its row (or column) of that axis starts: that start alone where `t` lacks the
    axis. Kernels that walk one axis (ncdc.families.scan, select) set the start once per
    row and step along it."""
    pitch = axis_pitch(t, axis)
    if pitch is None:
        return f"ncdc_p_{t.name}"
    step = " * ".join(pitch)
    return f"ncdc_p_{t.name} + {position}" + (f" * {step}" if step else "")


def row_start(t: Tensor, axis: str, index: Callable[[str], str]) -> str:
    """The offset in `t` where the row along `axis` through the current element starts."""
    return offset_expr(t.axes, lambda a: "0" if a == axis else index(a))


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


@dataclass(frozen=True)
class RowOpParts:
    """A row-wise kernel's elementwise ops split around its row op (softmax, norm or
    reduction): once per row before it (`row_pre`), per element into it (`source_ops`), and
    after it per element (`finish_ops`, as `finish_stmts` with the norm's weight and bias)
    and per row (`finish_row_ops`); `hoisted`, the finishing ops that are per row."""

    row_pre: list[Op]
    source_ops: list[Op]
    outputs_elem: list[str]
    outputs_row: list[str]
    finish_row_ops: list[Op]
    finish_stmts: list[Statement]
    hoisted: list[Op]


def split_row_op(
    kernel: Kernel,
    rowop: Op,
    elem_ops: list[Op],
    per_element: set[str],
    after: set[str],
    value: Callable[[str], str],
    statements: Callable[[list[Op]], list[Statement]],
    y: str,
) -> RowOpParts:
    """`RowOpParts` of `kernel`; `y` is the generated name of the row op's result."""
    src = rowop.operands[0]
    assert isinstance(src, str)
    inputs = set(kernel.inputs)
    # per-row values that do not need the row op: once per row, before it
    row_pre = [op for op in elem_ops if op.out not in per_element and op.out not in after]
    source_ops = needed_ops(elem_ops, [src], inputs | {op.out for op in row_pre})
    outputs_elem = [n for n in kernel.outputs if n in per_element]
    outputs_row = [n for n in kernel.outputs if n not in per_element]
    known = inputs | {op.out for op in row_pre} | {rowop.out}
    finish_ops = needed_ops(elem_ops, outputs_elem, known)
    finish_row_ops = needed_ops(elem_ops, outputs_row, known)
    weight = rowop.params.get("weight") if rowop.kind == "norm" else None
    bias = rowop.params.get("bias") if rowop.kind == "norm" else None
    finish_stmts: list[Statement] = []
    if rowop.kind != "reduce":
        if weight:
            finish_stmts.append(
                Statement(f"ncdc_weighted_{rowop.out}", "op_mul", (y, value(weight)))
            )
            y = f"ncdc_weighted_{rowop.out}"
        if bias:
            finish_stmts.append(Statement(f"ncdc_biased_{rowop.out}", "op_add", (y, value(bias))))
            y = f"ncdc_biased_{rowop.out}"
        finish_stmts.append(Statement(value(rowop.out), "op_id", (y,)))
    hoisted = [op for op in finish_ops if op.out not in per_element]
    finish_stmts += statements([op for op in finish_ops if op.out in per_element])
    return RowOpParts(
        row_pre, source_ops, outputs_elem, outputs_row, finish_row_ops, finish_stmts, hoisted
    )


def vector_width(diagram: Diagram, names: Iterable[str]) -> int:
    """Elements per run: a 16-byte vector of the narrowest tensor read or written in runs."""
    sizes = [DTYPES[diagram.tensor(n).dtype].bytes for n in names]
    return VECTOR_BYTES // min(sizes) if sizes else 1


def param_context(params: Iterable[Param]) -> list[dict[str, Any]]:
    """The kernel parameters as the templates declare them: tensors, then sizes."""
    buffers = ("tensor", "workspace")
    return [
        {"name": p.name, "tensor": p.kind in buffers, "writes": p.writes,
         "ctype": cpp_type(p.dtype) if p.kind in buffers else "long long"}
        for p in params
    ]  # fmt: skip
