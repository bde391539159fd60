"""The row-stages family: several reductions over a row, each reading what the ones before it
gave, and sums down the columns, in one pass over the rows (the backward of a norm).

A norm's backward needs the row's statistics (its mean, then its variance about it), then
two more row means of values computed from them, then per element dX; the gradients of the
norm's weight and bias are sums over the rows. The row-wise family runs one row operation;
this one runs the kernel's row reductions (sum, mean, max over the row axis) in stages, a
stage for the reductions whose operands need only the ones before it, each stage a loop
over the row's columns that recomputes its operands from the inputs (the row is read again
from the L1 or L2, not from device memory), then the per-element outputs. Sums and means
down the columns (over every other axis, to a vector over the row axis) are added per block
in shared memory, then by each block into a zeroed fp32 workspace with atomics, and
written in their dtype by a second launch.

A row group of `tpr` threads (a multiple of 32) owns one row, `rows` groups a block; the
grid strides over the rows. Reductions go through ncdc::rowwise::reduce_row.

    >>> from ncdc.language.load import load_diagram_text
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: centred
    ... axes: {m: 256, n: 1024}
    ... inputs: {X: {axes: [m, n], dtype: bf16}}
    ... ops: ["u = mean(X, over=n)", "C = sub(X, u)", "Q = mul(C, C)", "v = mean(Q, over=n)",
    ...       "Y = div(C, v)", "s = sum(Y, over=m)"]
    ... outputs: [Y, s]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> [launch.kernel for launch in FAMILY.render(plan.kernels[0], plan).launches]
    ... # doctest: +ELLIPSIS
    ['centred_rowstages_bf16_s2_r..._t...', 'centred_rowstages_bf16_s2_r..._t..._store']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    Workspace,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
    ones,
    options,
)
from ncdc.families.codegen import (
    Statement,
    cpp_type,
    needed_ops,
    offset_expr,
    op_statements,
    param_context,
    read_as_stored,
    size_name,
)
from ncdc.language.diagram import Diagram, Op
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {"rows": (1, 2, 4), "tpr": (128, 256)}
MAX_GRID = 65535 * 16
STORE_THREADS = 256
CHAIN_KINDS = ("map", "binary", "cast", "index")  # what the stages recompute per element
ROW_FNS = {"sum": "Sum", "mean": "Sum", "max": "MaxNan"}  # reduce_row's combine
COLUMN_FNS = ("sum", "mean")
COLUMN_SMEM_LIMIT = 96 * 1024  # bytes of column partials a block keeps in shared memory


@dataclass(frozen=True)
class Stages:
    """A kernel read as row stages: the row axis, the other axes (`rows`), the row
    reductions by stage, the column reductions, and which values are per row."""

    row: str
    rows: tuple[str, ...]
    stages: tuple[tuple[Op, ...], ...]
    columns: tuple[Op, ...]
    per_row: frozenset[str]  # results and inputs with no row axis (once per row)


def read_stages(diagram: Diagram, kernel: Kernel) -> Stages | None:
    """`kernel` as row stages, or None where it is not one: reductions over one row axis
    (two or more, or one beside sums down the columns), elementwise ops, and every tensor
    over that axis and the others the outputs have."""
    ops = kernel.ops
    reduces = [op for op in ops if op.kind == "reduce"]
    if any(op.kind not in (*CHAIN_KINDS, "reduce") for op in ops) or not reduces:
        return None
    axes = dict.fromkeys(op.over[0] for op in reduces if len(op.over) == 1)
    for row in sorted(axes, key=lambda a: a not in kernel.woven[-1:]):  # the last axis first
        found = _stages_along(diagram, kernel, row)
        if found is not None:
            return found
    return None


def _stages_along(diagram: Diagram, kernel: Kernel, row: str) -> Stages | None:
    ops = kernel.ops
    rows = tuple(a for a in kernel.woven if a != row)
    whole = {*rows, row}
    names = {n for op in ops for n in (*op.inputs, op.out)}
    if not rows or any(not set(diagram.tensor(n).axes) <= whole for n in names):
        return None
    reduces = [op for op in ops if op.kind == "reduce"]
    rowred = [op for op in reduces if op.over == (row,) and op.fn in ROW_FNS]
    columns = [op for op in reduces if op not in rowred]
    if not rowred or any(
        op.fn not in COLUMN_FNS or set(op.over) != set(rows) or op.axes != (row,)
        or op.out not in kernel.outputs
        for op in columns
    ):  # fmt: skip
        return None
    if len(rowred) < 2 and not columns:
        return None  # one row operation alone: the row-wise family's
    if any(c.out in op.inputs for c in columns for op in ops):
        return None  # a column sum read again in the kernel: not known until every row is done
    per_row = {n for n in names if row not in diagram.tensor(n).axes} - {c.out for c in columns}
    stage: dict[str, int] = {}  # per-row value -> the stage after which it is known
    for op in ops:
        if op in rowred:
            below = needed_ops(ops, [str(op.operands[0])], kernel.inputs)
            stage[op.out] = 1 + max((stage[b.out] for b in below if b.out in stage), default=0)
        elif op.out in per_row:
            stage[op.out] = max((stage.get(n, 0) for n in op.inputs if n in per_row), default=0)
    count = max(stage[op.out] for op in rowred)
    by_stage = tuple(tuple(op for op in rowred if stage[op.out] == s) for s in range(1, count + 1))
    return Stages(row, rows, by_stage, tuple(columns), frozenset(per_row))


class RowStagesFamily:
    """Row reductions in stages and sums down the columns, in one pass over the rows."""

    name = "rowstages"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        s = read_stages(diagram, kernel)
        if s is None:
            return None
        return Family(self.name, {"rows": s.rows, "row": (s.row,)}, TILES)

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
        s = read_stages(d, kernel)
        assert s is not None, "classified as row stages"
        last = s.rows[-1]
        total_rows = math.prod(d.axes[a] for a in s.rows)
        n = d.axes[s.row]
        smem = _column_smem(d, s)
        # a loop a stage and one for the outputs over the row (none where every output is
        # per row): each after the first reads the row again, from the L1 or L2
        elementwise = any(s.row in d.tensor(o).axes for o in kernel.outputs)
        loops = len(s.stages) + elementwise
        again = tuple((i, loops - 1) for i in kernel.inputs if s.row in d.tensor(i).axes)
        again = again if loops > 1 else ()
        registers = estimate_registers(16 + 4 * len(kernel.inputs) + 2 * len(kernel.ops), 1, 0)
        out = []
        for rows in options(last, TILES["rows"], d.axes[last], fixed):
            for tpr in TILES["tpr"]:
                if tpr > TILES["tpr"][0] and tpr > n:
                    continue  # a group wider than the row leaves threads without columns
                group = {**ones(s.rows, fixed), last: rows, s.row: n}
                groups = ceil_div(total_rows, rows)
                # column sums: fewer blocks, fewer partials added into device memory
                cap = 4 * hw.limits.sms if s.columns else MAX_GRID
                grid = max(1, min(MAX_GRID, cap, groups))
                shapes = [LaunchShape((grid, 1, 1), (rows * tpr, 1, 1), smem)]
                accumulates: tuple[tuple[str, float], ...] = ()
                if s.columns:
                    store = max(1, ceil_div(n * len(s.columns), STORE_THREADS))
                    shapes.append(LaunchShape((min(store, MAX_GRID), 1, 1),
                                              (STORE_THREADS, 1, 1), 0))  # fmt: skip
                    accumulates = tuple((c.out, float(grid)) for c in s.columns)
                params = (("rows", rows), ("tpr", tpr), ("stages", len(s.stages)))
                out.append(Candidate(
                    group, {}, group, {}, params, tuple(shapes), 1, 1, registers,
                    rereads=again, l2_rereads=again, accumulates=accumulates,
                ))  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("rows")[-1], TILES["rows"])]

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = RowStagesFamily()


def _column_smem(d: Diagram, s: Stages) -> int:
    """Bytes of the block's column partials in shared memory (0: added into device memory
    directly, for a row too long to keep them)."""
    nbytes = len(s.columns) * d.axes[s.row] * 4
    return nbytes if nbytes <= COLUMN_SMEM_LIMIT else 0


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    d, kernel, c = plan.graph.diagram, kp.kernel, kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    s = read_stages(d, kernel)
    assert s is not None, "classified as row stages"
    rows, tpr = c.param("rows"), c.param("tpr")
    index = {a: f"ncdc_i_{a}" for a in (*s.rows, s.row)}
    ops = kernel.ops
    reductions = {op.out for stage in s.stages for op in stage}

    def value(name: str) -> str:
        if name in s.per_row:
            return f"ncdc_row_{name}"
        return f"ncdc_a_{name}" if name in kernel.inputs else f"ncdc_e_{name}"

    def element_pass(targets: list[str], known: set[str]) -> dict[str, Any]:
        """The loads and statements of one loop over the row that computes `targets`."""
        chain = [op for op in needed_ops(ops, targets, known) if op.out not in s.per_row]
        read = dict.fromkeys(n for op in chain for n in op.inputs if n in kernel.inputs
                             and n not in s.per_row)  # fmt: skip
        read.update(dict.fromkeys(t for t in targets if t in kernel.inputs))
        statements: list[Statement] = []
        for op in chain:
            statements += op_statements(op, value, index.__getitem__, value(op.out), None, d)
        loads = [{"name": n, "offset": offset_expr(d.tensor(n).axes, index.__getitem__)}
                 for n in read]  # fmt: skip
        return {"loads": loads, "statements": statements}

    def row_statements(made: set[str]) -> list[Statement]:
        """Per-row elementwise ops computable once `made` is known, not computed before."""
        out: list[Statement] = []
        for op in ops:
            fresh = op.out in s.per_row and op.out not in reductions and op.out not in made
            if fresh and all(n in made for n in op.inputs):
                out += op_statements(op, value, index.__getitem__, value(op.out), None, d)
                made.add(op.out)
        return out

    row_inputs = [n for n in kernel.inputs if n in s.per_row]
    made = set(row_inputs)
    prologue = row_statements(made)
    known = set(kernel.inputs) | made
    stages = []
    for stage in s.stages:
        sources = [str(op.operands[0]) for op in stage]
        loop = element_pass(sources, known)
        reduce = [{"out": op.out, "source": value(str(op.operands[0])), "combine": ROW_FNS[op.fn],
                   "identity": "(-ncdc::infinity())" if op.fn == "max" else "0.0f",
                   "mean": op.fn == "mean", "var": value(op.out),
                   "stored": cpp_type(d.tensor(op.out).dtype) if read_as_stored(op, d) else ""}
                  for op in stage]  # fmt: skip
        made |= {op.out for op in stage}
        stages.append({**loop, "reduce": reduce, "after": row_statements(made)})
        known |= made
    per_element = [n for n in kernel.outputs if n not in s.per_row
                   and n not in {c.out for c in s.columns}]  # fmt: skip
    column_sources = [str(op.operands[0]) for op in s.columns]
    final = element_pass(per_element + column_sources, known)
    result = d.tensor(per_element[0] if per_element else kernel.outputs[0])
    dtype = result.dtype.replace("_", "")
    name = f"{kernel.name}_rowstages_{dtype}_s{len(s.stages)}_r{rows}_t{tpr}"
    sized = dict.fromkeys((*s.rows, s.row))
    sizes = [Param(size_name(a), "int64", value=d.axes[a]) for a in sized]
    spaces = [
        Workspace(f"ncdc_{op.out}_acc", "fp32", d.axes[s.row], zeroed=True) for op in s.columns
    ]
    first = (
        *(Param(n, "tensor", d.tensor(n).dtype) for n in kernel.inputs),
        *(Param(n, "tensor", d.tensor(n).dtype, writes=True)
          for n in kernel.outputs if n not in {c.out for c in s.columns}),
        *(Param(w.name, "workspace", "fp32", writes=True) for w in spaces),
        *sizes,
    )  # fmt: skip
    second = (
        *(Param(w.name, "workspace", "fp32") for w in spaces),
        *(Param(op.out, "tensor", d.tensor(op.out).dtype, writes=True) for op in s.columns),
        *sizes,
    )
    rows_count = " * ".join(size_name(a) for a in s.rows)
    context = {
        "kernel": name,
        "doc": "; ".join(op.text for op in ops),
        "rows": rows,
        "tpr": tpr,
        "threads": rows * tpr,
        "rows_axes": [{"index": index[a], "size": size_name(a)} for a in reversed(s.rows)],
        "row_index": index[s.row],
        "row_size": size_name(s.row),
        "rows_count": rows_count,
        "row_loads": [
            {"name": n, "offset": offset_expr(d.tensor(n).axes, index.__getitem__)}
            for n in row_inputs
        ],  # fmt: skip
        "prologue": prologue,
        "stages": stages,
        "final": final,
        "stores": [
            {
                "name": n,
                "value": value(n),
                "offset": offset_expr(d.tensor(n).axes, index.__getitem__),
            }
            for n in per_element
        ],  # fmt: skip
        "row_stores": [
            {
                "name": n,
                "value": value(n),
                "offset": offset_expr(d.tensor(n).axes, index.__getitem__),
            }
            for n in kernel.outputs
            if n in s.per_row
        ],  # fmt: skip
        "columns": [
            {
                "name": op.out,
                "source": value(str(op.operands[0])),
                "workspace": w.name,
                "ctype": cpp_type(d.tensor(op.out).dtype),
                "mean": op.fn == "mean",
            }
            for op, w in zip(s.columns, spaces, strict=True)
        ],  # fmt: skip
        "column_cols": d.axes[s.row] if _column_smem(d, s) else 0,
        "store_threads": STORE_THREADS,
        "params": param_context(first),
        "store_params": param_context(second),
    }
    launches = [Launch.of(name, c.launches[0], first)]
    if s.columns:
        launches.append(Launch.of(f"{name}_store", c.launches[1], second))
    return KernelSource("rowstages.cu.j2", context, tuple(launches), tuple(spaces))
