"""Row-wise kernels: softmax, layernorm, rmsnorm and sum/max/mean over the last axis, with
elementwise ops before and after them fused in.

A row group of `tpr` threads (a multiple of 32) owns one row; `rows` groups share a block.
A thread holds `vpt` runs of `vec` elements (a 16-byte vector of the narrowest row tensor),
so a row of up to tpr * vpt * vec values is read once and kept in registers; longer rows
are read twice (see templates/include/ncdc_rowwise.cuh). The elementwise ops are unrolled
`ncdc::op_*` calls in `templates/rowwise.cu.j2`: those that make the row op's input run in
`source`, the rest in `finish` (per element) and `finish_row` (per row).

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.tiling import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("h200"))
    >>> render_rowwise(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'softmax_rowwise_bf16_r2_t128_v4'
"""

from __future__ import annotations

import math
from typing import Any

from ncdc.cost import KernelPlan, Plan
from ncdc.errors import PlanError
from ncdc.families import ELEMENTWISE_KINDS
from ncdc.kernels.elementwise import (
    Statement,
    check_dtypes,
    float_literal,
    needed_ops,
    offset_expr,
    op_statements,
    param_context,
    size_name,
    vector_width,
)
from ncdc.render import KernelSource, Launch, Param, cpp_type
from ncdc.spec import Op

KINDS = {
    "softmax": "kSoftmax",
    "layernorm": "kLayernorm",
    "rmsnorm": "kRmsnorm",
    "sum": "kSum",
    "max": "kMax",
    "mean": "kMean",
}
MAX_THREADS = 1024
RESIDENT_THREADS = 256  # threads per block when each holds 32 or more values of a row
VECTORS_PER_THREAD = 4  # runs a thread holds of one row: 32 fp32 registers for bf16
MAX_GRID = 65535 * 16


def render_rowwise(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The row-wise kernel of `kp`: its template context and launch (see module doc)."""
    d = plan.graph.diagram
    kernel = kp.kernel
    (row,) = kp.family.axes("row")
    rows_axes = kp.family.axes("rows")
    rowops = [op for op in kernel.ops if op.kind in ("softmax", "norm", "reduce")]
    if len(rowops) != 1:
        raise PlanError(
            f"kernel {kernel.name} has {len(rowops)} row operations; the row-wise kernel runs one",
            hint="materialize the result of the first in schedule.materialize",
        )
    (rowop,) = rowops
    check_dtypes(d, (*kernel.inputs, *kernel.outputs))
    names = (*kernel.inputs, *(op.out for op in kernel.ops))
    for name in names:
        t_axes = d.tensor(name).axes
        if row in t_axes and t_axes[-1] != row:
            raise PlanError(
                f"tensor {name} {list(t_axes)} is not contiguous along the row axis {row}",
                hint=f"put {row} last in its axes",
            )
    per_element = {n for n in names if row in d.tensor(n).axes}
    after = {rowop.out}
    for op in kernel.ops:
        if set(op.inputs) & after:
            after.add(op.out)
    elem_ops = [op for op in kernel.ops if op is not rowop]

    def value(name: str) -> str:
        if name == rowop.out:
            return "ncdc_stat" if rowop.kind == "reduce" else f"ncdc_e_{name}"
        if name in per_element:
            return f"ncdc_a_{name}[ncdc_j]" if name in kernel.inputs else f"ncdc_e_{name}"
        return f"ncdc_r_{name}"

    index = {a: f"ncdc_i_{a}" for a in rows_axes}
    index[row] = "(ncdc_c.c0 + ncdc_j * ncdc_c.step)"

    def statements(ops: list[Op]) -> list[Statement]:
        out: list[Statement] = []
        for op in ops:
            out += op_statements(op, value, lambda a: index[a], value(op.out))
        return out

    src = rowop.operands[0]
    assert isinstance(src, str)
    inputs = set(kernel.inputs)
    # Per-row values that do not need the row op: once per row, in begin_row.
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
        y = "ncdc_y[ncdc_j]"
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

    def loads(stmts: list[Statement], *extra: str) -> list[str]:
        used = " ".join([*(" ".join(s.args) for s in stmts), *extra])
        return [n for n in kernel.inputs if n in per_element and value(n) in used]

    source_stmts = statements(source_ops)
    rows_order = tuple(a for a in rows_axes)

    def offset(name: str) -> str:
        t_axes = d.tensor(name).axes
        mine = tuple(a for a in t_axes if a != row)
        if mine == rows_order:
            return f"ncdc_r * {size_name(row)}" if row in t_axes else "ncdc_r"
        return offset_expr(mine, lambda a: index[a] if a != row else "0") + (
            f" * {size_name(row)}" if row in t_axes and mine else ""
        )

    touched = [n for n in (*kernel.inputs, *kernel.outputs)]
    vec = vector_width(d, [n for n in touched if n in per_element])
    n = d.axes[row]
    tpr = min(
        MAX_THREADS, max(32, 1 << max(0, math.ceil(math.log2(-(-n // (vec * VECTORS_PER_THREAD))))))
    )
    vpt = min(VECTORS_PER_THREAD, max(1, -(-n // (tpr * vec))))
    rows_per_block = kp.block_tile.get(rows_axes[-1], 1) if rows_axes else 1
    # A row held in registers takes vpt * vec of them per thread: keep blocks small enough
    # that the register file gives every thread what it needs without spilling.
    max_threads = RESIDENT_THREADS if vpt * vec >= 32 else MAX_THREADS
    rows_per_block = max(1, min(rows_per_block, max(1, max_threads // tpr)))
    threads = rows_per_block * tpr
    total_rows = math.prod(d.axes[a] for a in rows_axes)
    grid = max(1, min(MAX_GRID, -(-total_rows // rows_per_block)))
    out_dtype = d.tensor(kernel.outputs[0]).dtype.replace("_", "")
    name = f"{kernel.name}_rowwise_{out_dtype}_r{rows_per_block}_t{tpr}_v{vpt}"
    params = [
        Param(t, "tensor", d.tensor(t).dtype, writes=t in kernel.outputs) for t in touched
    ] + [Param(size_name(a), "int64", value=d.axes[a]) for a in (*rows_axes, row)]
    # Axis indices of the row (64-bit divisions) only where an offset or a mask needs them.
    generated = [offset(t) for t in touched] + [
        a for st in (*source_stmts, *finish_stmts) for a in st.args
    ]
    uses_indices = any("ncdc_i_" in g for g in generated) or any(
        op.kind == "mask" for op in kernel.ops
    )
    eps = rowop.params.get("eps", 1e-5) if rowop.kind == "norm" else 0.0
    context: dict[str, Any] = {
        "kernel": name,
        "doc": "; ".join(op.text for op in kernel.ops),
        "params": param_context(params),
        "kind": KINDS[rowop.fn],
        "eps": float_literal(eps),
        "rows": rows_per_block,
        "tpr": tpr,
        "vpt": vpt,
        "vec": vec,
        "threads": threads,
        "per_element": bool(outputs_elem),
        "per_row": bool(outputs_row),
        "rows_axes": [{"index": index[a], "size": size_name(a)} for a in reversed(rows_axes)]
        if uses_indices
        else [],
        "row_size": size_name(row),
        "rows_count": " * ".join(size_name(a) for a in rows_axes) or "1",
        "offsets": [{"name": t, "expr": offset(t)} for t in touched],
        "aligned": [t for t in touched if t in per_element],
        "row_inputs": [t for t in kernel.inputs if t not in per_element],
        "row_statements": statements(row_pre),
        "source_loads": loads(source_stmts, value(src)),
        "source_statements": source_stmts,
        "source_value": value(src),
        "finish_hoisted": statements(hoisted),
        "finish_loads": loads(finish_stmts, *(value(t) for t in outputs_elem)),
        "finish_statements": finish_stmts,
        "stores": [
            {"name": t, "value": value(t), "ctype": cpp_type(d.tensor(t).dtype)}
            for t in outputs_elem
        ],
        "finish_row_statements": statements(finish_row_ops),
        "row_stores": [{"name": t, "value": value(t)} for t in outputs_row],
    }
    assert all(op.kind in ELEMENTWISE_KINDS for op in elem_ops)
    launch = Launch(name, (grid, 1, 1), (threads, 1, 1), 0, tuple(params))
    return KernelSource("rowwise.cu.j2", context, (launch,))
