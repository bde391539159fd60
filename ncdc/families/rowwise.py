"""The row-wise family: softmax, log-softmax, layernorm, rmsnorm and sum/max/mean/logsumexp
over the last axis, with elementwise ops before and after them fused in.

A row group of `tpr` threads (a multiple of 32) owns one row; `rows` groups share a block.
A thread holds `vpt` runs of `vec` elements (a 16-byte vector of the narrowest row tensor,
aligned to each row's start, with a short head and tail run when the row length is not a
multiple of vec), so a row of up to tpr * vpt runs is read once and kept in registers; longer rows
are read twice (see templates/include/ncdc_rowwise.cuh). The elementwise ops are unrolled
`ncdc::op_*` calls in `templates/rowwise.cu.j2`: those that make the row op's input run in
`source`, the rest in `finish` (per element) and `finish_row` (per row). The grid strides
over the rows past MAX_GRID blocks, and the model prices the grid that is launched.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("h200"))
    >>> FAMILY.render(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'softmax_rowwise_bf16_r..._t..._v...'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ncdc.errors import PlanError
from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
    ones,
    options,
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    STATUS,
    Pointers,
    RowOpParts,
    Statement,
    computed_indirect,
    cpp_type,
    float_literal,
    needed_ops,
    offset_expr,
    op_statements,
    param_context,
    size_name,
    split_row_op,
    status_param,
    status_workspace,
    vector_width,
)
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "rows": (1, 2, 4, 8),  # rows per block; each row whole, read as 16-byte vectors
}
KINDS = {
    "softmax": "kSoftmax",
    "log_softmax": "kLogSoftmax",
    "logsumexp": "kLogsumexp",
    "layernorm": "kLayernorm",
    "rmsnorm": "kRmsnorm",
    "sum": "kSum",
    "max": "kMax",
    "mean": "kMean",
}
ROW_KINDS = ("softmax", "norm", "reduce")
MAX_THREADS = 1024
RESIDENT_THREADS = 256  # threads per block when each holds 32 or more values of a row
VECTORS_PER_THREAD = 4  # runs a thread holds of one row: 32 fp32 registers for bf16
RESIDENT_VALUES_AT_MAX_THREADS = 16  # values of a row a thread holds in a 1024-thread group
MAX_GRID = 65535 * 16
STAGE_BYTES = 48 * 1024  # most shared memory the weights of a row take (no opt-in needed)


class RowwiseFamily:
    """One softmax, norm or reduction over the last axis of its input, maps around it."""

    name = "rowwise"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = "rowwise"

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        if any(op.kind == "contract" for op in kernel.ops):
            return None
        rowops = [op for op in kernel.ops if op.kind in ROW_KINDS]
        if len(rowops) != 1:
            return None  # several: the row-stages family's, where they are reductions
        row = rowops[0].over
        for op in rowops:
            src = diagram.tensor(next(o for o in op.operands if isinstance(o, str)))
            if op.over != row or len(row) != 1 or src.axes[-1] != row[0]:
                return None
        if not rows_contiguous(diagram, kernel, row[0]):
            return None  # the reduction family's (strided over the row axis)
        # Every tensor lies over the rows and their row: a row's result combined with a
        # tensor over another axis (a per-row D of dO and O beside dP over the keys) is a
        # broadcast no row of the kernel holds.
        whole = set(diagram.tensor(next(o for o in rowops[0].operands if isinstance(o, str))).axes)
        names = {n for op in kernel.ops for n in (*op.inputs, op.out)}
        if any(not set(diagram.tensor(n).axes) <= whole for n in names):
            return None
        for op in kernel.ops:
            if op not in rowops and op.kind not in ELEMENTWISE_KINDS:
                return None
        if kernel.indirect_only or computed_indirect(kernel):
            return None  # rows it would gather or slice, not load: saved first
        rows = tuple(a for a in kernel.woven if a not in row)
        return Family(self.name, {"rows": rows, "row": row}, TILES)

    def candidates(
        self,
        model: KernelModel,
        family: Family,
        hw: Hardware,
        streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:
        from ncdc.model.cost import estimate_registers

        d, kernel = model.diagram, model.kernel
        (row,) = family.axes("row")
        rows_axes = family.axes("rows")
        rowop = _row_op(d, kernel, row)
        vec, tpr, vpt, max_threads, passes = _row_layout(d, kernel, row)
        # A row too long to hold is read for its statistics and again for its output (a
        # reduction, whose output has no row axis, needs no second pass).
        again = passes == 2 and any(row in d.tensor(n).axes for n in kernel.outputs)
        rereads = tuple((n, 1) for n in _source_inputs(kernel, rowop)) if again else ()
        last = rows_axes[-1] if rows_axes else None
        row_opts = options(last, TILES["rows"], model.sizes[last], fixed) if last else [1]
        total_rows = math.prod(d.axes[a] for a in rows_axes)
        registers = estimate_registers(vec * vpt * max(len(kernel.inputs), 1), 1, 0)
        smem = sum(size for _, _, size in _staged(d, kernel, row))
        out: dict[int, Candidate] = {}
        spilling: set[int] = set()
        for asked in row_opts:
            # A row held in registers takes vpt * vec of them per thread: keep blocks small
            # enough that the register file gives every thread what it needs.
            rows = max(1, min(asked, max(1, max_threads // tpr)))
            if rows in out:
                continue
            group = {**ones(rows_axes, fixed), **({last: rows} if last else {})}
            stream: dict[str, int] = {}
            if row in kernel.woven:
                group[row] = d.axes[row]
            elif passes == 2:
                stream[row] = min(d.axes[row], tpr * vpt * vec)  # one pass's chunk of the row
            grid = max(1, min(MAX_GRID, ceil_div(total_rows, rows)))
            shape = LaunchShape((grid, 1, 1), (rows * tpr, 1, 1), smem)
            # __launch_bounds__(threads, 1) makes ptxas fit one block in the register file:
            # a block whose threads cannot have the registers the held row needs would spill
            cap = hw.limits.regs_per_sm // shape.threads // 8 * 8
            params = (("rows", rows), ("tpr", tpr), ("vpt", vpt), ("vec", vec), ("passes", passes))
            out[rows] = Candidate(
                group, stream, group, stream, params, (shape,), 1, 1, min(registers, cap),
                rereads,
            )  # fmt: skip
            if registers > cap:
                spilling.add(rows)
        fits = [c for rows, c in out.items() if rows not in spilling]
        return fits or list(out.values())

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        rows = family.axes("rows")
        return [(rows[-1], TILES["rows"])] if rows else []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = RowwiseFamily()


def rows_contiguous(d: Diagram, kernel: Kernel, row: str) -> bool:
    """Every tensor of the kernel over the row axis has it last (read in 16-byte runs)."""
    names = (*kernel.inputs, *(op.out for op in kernel.ops))
    return all(d.tensor(n).axes[-1] == row for n in names if row in d.tensor(n).axes)


def _row_op(d: Diagram, kernel: Kernel, row: str) -> Op:
    """The kernel's one row operation; PlanError for what the template cannot run."""
    rowops = [op for op in kernel.ops if op.kind in ROW_KINDS]
    if len(rowops) != 1:
        raise PlanError(
            f"kernel {kernel.name} has {len(rowops)} row operations; the row-wise kernel runs one",
            hint=f"add {rowops[0].out} to schedule.materialize to save it from its own kernel",
        )
    for name in (*kernel.inputs, *(op.out for op in kernel.ops)):
        t_axes = d.tensor(name).axes
        if row in t_axes and t_axes[-1] != row:
            raise PlanError(
                f"tensor {name} {list(t_axes)} is not contiguous along the row axis {row}",
                hint=f"put {row} last in its axes",
            )
    return rowops[0]


def _row_layout(d: Diagram, kernel: Kernel, row: str) -> tuple[int, int, int, int, int]:
    """(vec, tpr, vpt, most threads per block, passes) of a row: 16-byte runs of the
    narrowest row tensor; the power-of-two row group that holds the row in
    VECTORS_PER_THREAD runs per thread (fewer at MAX_THREADS, whose register budget is 64);
    RESIDENT_THREADS per block once a thread holds 32 or more values. A row longer than a
    group of MAX_THREADS holds is streamed in two passes over global memory (statistics,
    then output), with nothing held but one run."""
    per_element = [n for n in (*kernel.inputs, *kernel.outputs) if row in d.tensor(n).axes]
    vec = vector_width(d, per_element)
    n = d.axes[row]
    # Whole runs of vec, and a short head and tail when n is not a multiple of vec (the
    # runs are aligned to each row's start; ncdc_rowwise.cuh's Layout::runs).
    runs = n // vec + (2 if n % vec else 0)
    widest = max(1, RESIDENT_VALUES_AT_MAX_THREADS // vec)
    if runs > MAX_THREADS * widest:
        return vec, MAX_THREADS, VECTORS_PER_THREAD, MAX_THREADS, 2
    tpr = min(
        MAX_THREADS, max(32, 1 << max(0, math.ceil(math.log2(ceil_div(runs, VECTORS_PER_THREAD)))))
    )
    most = widest if tpr == MAX_THREADS else VECTORS_PER_THREAD
    vpt = min(most, max(1, ceil_div(runs, tpr)))
    return vec, tpr, vpt, RESIDENT_THREADS if vpt * vec >= 32 else MAX_THREADS, 1


def _source_inputs(kernel: Kernel, rowop: Op) -> list[str]:
    """The inputs the row op's operand is computed from (what a second pass reads again)."""
    src = rowop.operands[0]
    assert isinstance(src, str)
    elem = [op for op in kernel.ops if op is not rowop]
    ops = needed_ops(elem, [src], kernel.inputs)
    used = {src} | {n for op in ops for n in op.inputs}
    return [n for n in kernel.inputs if n in used]


def _staged(d: Diagram, kernel: Kernel, row: str) -> list[tuple[str, int, int]]:
    """(name, byte offset, bytes) in shared memory of each input over the row axis alone
    (a norm's weight and bias), which a block loads once and every row of it reads, as the
    model counts them: once per group. None when they would take more than STAGE_BYTES."""
    out, at = [], 0
    for name in kernel.inputs:
        t = d.tensor(name)
        if t.axes == (row,):
            size = ceil_div(d.axes[row] * DTYPES[t.dtype].bytes, 16) * 16
            out.append((name, at, size))
            at += size
    return out if at <= STAGE_BYTES else []


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The row-wise kernel of `kp.candidate`: its template context and launch."""
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    r = _RowKernel(kp, plan.graph.diagram)
    d, kernel, rowop, row = r.d, r.kernel, r.rowop, r.row
    src = rowop.operands[0]
    assert isinstance(src, str)
    parts = split_row_op(
        kernel, rowop, r.elem_ops, r.per_element, r.after, r.value, r.statements,
        "ncdc_y[ncdc_j]",
    )  # fmt: skip
    source_stmts = r.statements(parts.source_ops)
    source_loads = r.loads(source_stmts, r.value(src))
    finish_loads = r.loads(parts.finish_stmts, *(r.value(t) for t in parts.outputs_elem))
    touched = [n for n in (*kernel.inputs, *kernel.outputs)]
    passes = c.param("passes")
    name = (
        f"{kernel.name}_rowwise_{d.tensor(kernel.outputs[0]).dtype.replace('_', '')}"
        f"_r{c.param('rows')}_t{c.param('tpr')}_v{c.param('vpt')}{'_p2' if passes == 2 else ''}"
    )
    gathers = any(op.kind == "gather" for op in kernel.ops)
    params = (
        [Param(t, "tensor", d.tensor(t).dtype, writes=t in kernel.outputs) for t in touched]
        + ([status_param()] if gathers else [])
        + [Param(size_name(a), "int64", value=d.axes[a]) for a in (*r.rows_axes, row)]
    )
    uses_indices = _uses_indices(r, parts, touched, source_stmts)
    eps = rowop.params.get("eps", 1e-5) if rowop.kind == "norm" else 0.0
    staged = _staged(d, kernel, row)
    context: dict[str, Any] = {
        "kernel": name,
        "doc": "; ".join(op.text for op in kernel.ops),
        "params": param_context(params),
        "kind": KINDS[rowop.fn],
        "eps": float_literal(eps),
        "rows": c.param("rows"),
        "tpr": c.param("tpr"),
        "vpt": c.param("vpt"),
        "vec": c.param("vec"),
        "streamed": passes == 2,
        "whole": d.axes[row] % c.param("vec") == 0,
        "threads": c.threads,
        "per_element": bool(parts.outputs_elem),
        "per_row": bool(parts.outputs_row),
        "rows_axes": [{"index": r.index[a], "size": size_name(a)} for a in reversed(r.rows_axes)]
        if uses_indices
        else [],
        "row_size": size_name(row),
        "rows_count": " * ".join(size_name(a) for a in r.rows_axes) or "1",
        "offsets": [{"name": t, "expr": r.offset(t)} for t in touched],
        "aligned": [t for t in touched if t in r.per_element],
        "row_inputs": [t for t in kernel.inputs if t not in r.per_element],
        "row_statements": r.statements(parts.row_pre),
        "source_loads": source_loads,
        "raw_loads": list(dict.fromkeys(source_loads + finish_loads)),
        "ctypes": {t: cpp_type(d.tensor(t).dtype) for t in kernel.inputs},
        "source_statements": source_stmts,
        "source_value": r.value(src),
        "finish_hoisted": r.statements(parts.hoisted),
        "finish_loads": finish_loads,
        "finish_statements": parts.finish_stmts,
        "stores": [
            {"name": t, "value": r.value(t), "ctype": cpp_type(d.tensor(t).dtype)}
            for t in parts.outputs_elem
        ],
        "finish_row_statements": r.statements(parts.finish_row_ops),
        "row_stores": [{"name": t, "value": r.value(t)} for t in parts.outputs_row],
        "staged": [
            {"name": t, "ctype": cpp_type(d.tensor(t).dtype), "at": at} for t, at, _ in staged
        ],
        "staged_names": [t for t, _, _ in staged],
        "stage_cols": d.axes[row],
    }
    assert all(op.kind in ELEMENTWISE_KINDS for op in r.elem_ops)
    workspace = (status_workspace(),) if gathers else ()
    return KernelSource("rowwise.cu.j2", context, (Launch.of(name, c.main, params),), workspace)


def _uses_indices(
    r: _RowKernel, parts: RowOpParts, touched: list[str], source_stmts: list[Statement]
) -> bool:
    """Whether the kernel needs its row's axis indices (64-bit divisions): only where an
    offset, a statement or a mask reads them."""
    per_row = r.statements(parts.row_pre) + r.statements(parts.finish_row_ops)
    generated = [r.offset(t) for t in touched] + [
        a for st in (*source_stmts, *parts.finish_stmts, *per_row) for a in st.args
    ]
    return any("ncdc_i_" in g for g in generated) or any(op.kind == "mask" for op in r.kernel.ops)


class _RowKernel:
    """One row-wise kernel as its template sees it: which tensors run along the row and
    which are one value per row, and the C names of their values, indices and offsets."""

    def __init__(self, kp: KernelPlan, d: Diagram):
        self.d, self.kernel = d, kp.kernel
        (self.row,) = kp.family.axes("row")
        self.rows_axes = kp.family.axes("rows")
        self.rowop = _row_op(d, self.kernel, self.row)
        names = (*self.kernel.inputs, *(op.out for op in self.kernel.ops))
        self.per_element = {n for n in names if self.row in d.tensor(n).axes}
        self.after = {self.rowop.out}
        for op in self.kernel.ops:
            if set(op.inputs) & self.after:
                self.after.add(op.out)
        self.elem_ops = [op for op in self.kernel.ops if op is not self.rowop]
        self.index = {a: f"ncdc_i_{a}" for a in self.rows_axes}
        self.index[self.row] = "(ncdc_c.c0 + ncdc_j * ncdc_c.step)"

    def value(self, name: str) -> str:
        if name == self.rowop.out:
            return "ncdc_stat" if self.rowop.kind == "reduce" else f"ncdc_e_{name}"
        if name in self.per_element:
            return f"ncdc_a_{name}[ncdc_j]" if name in self.kernel.inputs else f"ncdc_e_{name}"
        return f"ncdc_r_{name}"

    def statements(self, ops: list[Op]) -> list[Statement]:
        out: list[Statement] = []
        pointers = Pointers(
            lambda n: f"ncdc_t.{n}", f"ncdc_t.{STATUS}", frozenset(self.kernel.inputs)
        )
        for op in ops:
            out += op_statements(
                op, self.value, lambda a: self.index[a], self.value(op.out), pointers, self.d
            )
        return out

    def loads(self, stmts: list[Statement], *extra: str) -> list[str]:
        used = " ".join([*(" ".join(s.args) for s in stmts), *extra])
        return [n for n in self.kernel.inputs if n in self.per_element and self.value(n) in used]

    def offset(self, name: str) -> str:
        row = self.row
        t_axes = self.d.tensor(name).axes
        mine = tuple(a for a in t_axes if a != row)
        if mine == tuple(self.rows_axes):
            return f"ncdc_r * {size_name(row)}" if row in t_axes else "ncdc_r"
        return offset_expr(mine, lambda a: self.index[a] if a != row else "0") + (
            f" * {size_name(row)}" if row in t_axes and mine else ""
        )
