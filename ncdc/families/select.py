"""The select family: the positions of the k best values along one axis (`argmax`,
`argmin`, `topk`), with the elementwise ops that compute the values fused in, and their
values where the diagram gathers them (`V = gather(X, I, axis=v)` of the same X).

`row_threads` threads walk a row (consecutive threads take consecutive runs of positions:
where the axis is the innermost, a run is one 16-byte vector of the narrowest such input,
so the loads coalesce and a step moves 16 bytes a thread), each keeping its k best in registers,
sorted (ncdc_select.cuh: most values cost one compare against the k-th); a warp merges its
lanes' lists in k rounds of a shuffle reduction, and a row's warps merge theirs through
shared memory. The values come from the same registers: a gather of the picks from the
operand reads nothing more.

    >>> from ncdc.language.load import load_diagram_text
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: router
    ... axes: {t: 4096, e: 256, j: 8}
    ... inputs: {S: {axes: [t, e], dtype: fp32}}
    ... ops: ["I = topk(S, over=e, k=j)", "W = gather(S, I, axis=e)"]
    ... outputs: [I, W]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> [launch.kernel for launch in FAMILY.render(plan.kernels[0], plan).launches]
    ... # doctest: +ELLIPSIS
    ['router_select_top8_t..._r...']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    block_share,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    GATHER_LIMIT,
    Statement,
    address_along,
    computed_indirect,
    cpp_type,
    element_value,
    indirect_sources,
    needed_ops,
    offset_expr,
    op_statements,
    param_context,
    row_start,
    size_name,
    status_param,
    status_workspace,
    struct_pointers,
    value_reads,
    vector_width,
)
from ncdc.language.diagram import Diagram, Op
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "threads": (128, 256, 512),
    "row_threads": (32, 128, 512),  # threads walking one row: a warp, or several
}
MAX_GRID = 65535 * 16  # enough blocks to fill any GPU; the loop strides over the rest


def select_op(kernel: Kernel, diagram: Diagram) -> Op | None:
    """The kernel's one selection, when the ops that compute its operand are elementwise
    and so are the ops after it (per pick: gathers by the picks, of the operand or of an
    input, and maps of those), and the kernel saves only what is computed per pick; else
    None."""
    picks = [op for op in kernel.ops if op.kind == "select"]
    if len(picks) != 1:
        return None
    op = picks[0]
    source = str(op.operands[0])
    before, after = _parts(kernel, op)
    if any(o.kind not in ELEMENTWISE_KINDS for o in [*before, *after]):
        return None
    made_before = {o.out for o in before}
    per_pick = set(op.axes)
    for o in after:
        if not set(o.axes) <= per_pick:
            return None
        gathered = o.operands[0] if o.kind == "gather" else None
        if gathered == source and (o.operands[1] != op.out or o.params["axis"] != op.over[0]):
            return None  # the operand is at hand only at the picks
        if any(n in made_before and n != gathered for n in o.inputs):
            return None  # a value of the row, gone by the time the picks are known
    if not set(kernel.outputs) <= {op.out, *(o.out for o in after)}:
        return None
    # a gather of another value the row computes: it is read from memory, so saved first
    return None if computed_indirect(kernel, held=[source]) else op


def _parts(kernel: Kernel, op: Op) -> tuple[list[Op], list[Op]]:
    """The ops computing the operand, per element of the row, and those run per pick."""
    source = str(op.operands[0])
    before = needed_ops([o for o in kernel.ops if o is not op], [source], kernel.inputs)
    return before, [o for o in kernel.ops if o is not op and o not in before]


class SelectFamily:
    """The k best values of each row and their positions."""

    name = "select"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        op = select_op(kernel, diagram)
        if op is None:
            return None
        source = diagram.tensor(str(op.operands[0]))
        return Family(self.name, {"all": source.axes, "picked": op.over}, TILES)

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
        op = select_op(kernel, d)
        assert op is not None, "classified as a selection"
        axis = op.over[0]
        if d.axes[axis] > GATHER_LIMIT:
            raise PlanError(
                f"{op.fn} ({op.out}) along {axis} of {d.axes[axis]} values; the kernels take "
                f"positions up to {GATHER_LIMIT}",
                hint=f"split {axis} into parts of at most {GATHER_LIMIT}",
            )
        others = tuple(a for a in d.tensor(str(op.operands[0])).axes if a != axis)
        units = math.prod(d.axes[a] for a in others)
        k = op.params["k"]
        out = []
        for threads in TILES["threads"]:
            for row_threads in TILES["row_threads"]:
                if row_threads > threads or (row_threads > 32 and row_threads > d.axes[axis]):
                    continue
                rows = threads // row_threads
                # a block's rows, and the k picks of each; the row streams past, a value
                # per thread of it at a time
                group = block_share(others, d.axes, rows)
                if op.params.get("picks"):
                    group[op.params["picks"]] = k
                stream = {axis: min(d.axes[axis], row_threads)}
                grid = max(1, min(MAX_GRID, ceil_div(units, rows)))
                shape = LaunchShape((grid, 1, 1), (threads, 1, 1), 0)
                registers = estimate_registers(2 * k + 4 * len(kernel.inputs) + 8, 1, 0)
                out.append(Candidate(
                    group, stream, group, stream,
                    (("threads", threads), ("row_threads", row_threads)),
                    (shape,), 1, 1, registers,
                ))  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = SelectFamily()


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The one launch of `kp.candidate`: the walk over each row, the merges, the stores of
    the picks and what is computed per pick."""
    d, kernel, c = plan.graph.diagram, kp.kernel, kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    op = select_op(kernel, d)
    assert op is not None, "classified as a selection"
    axis, source = op.over[0], str(op.operands[0])
    others = [a for a in d.tensor(source).axes if a != axis]
    picks = op.params.get("picks")
    index = {a: f"ncdc_i_{a}" for a in [*others, axis]}
    if picks:
        index[picks] = "ncdc_r"

    value, pointers = element_value(kernel), struct_pointers(kernel)
    before, after = _parts(kernel, op)

    def statements(ops: list[Op]) -> list[Statement]:
        out: list[Statement] = []
        for o in ops:
            if o.kind == "gather" and o.operands[0] == source:  # held with the pick
                out.append(Statement(value(o.out), "op_id", ("ncdc_picks.v[ncdc_r]",)))
            else:
                out += op_statements(o, value, index.__getitem__, value(o.out), pointers, d)
        return out

    loaded = list(dict.fromkeys(
        [*value_reads(before, kernel.inputs), *([source] if source in kernel.inputs else [])]
    ))  # fmt: skip

    threads, row_threads = c.param("threads"), c.param("row_threads")
    # the tensors that run along the row (the axis their innermost): read in 16-byte
    # vectors of the narrowest, `values` positions a thread and step
    runs = [n for n in loaded if d.tensor(n).axes[-1] == axis]
    values = min(8, vector_width(d, runs)) if runs else 1
    k = op.params["k"]
    kind = "top" if op.params["largest"] else "bottom"
    name = f"{kernel.name}_select_{kind}{k}_t{threads}_r{row_threads}"
    sources = indirect_sources(kernel.ops)
    read_axes = [a for n in [*kernel.inputs, *sources] for a in d.tensor(n).axes]
    sized = dict.fromkeys([*others, axis, *([picks] if picks else []), *read_axes])
    sizes = [Param(size_name(a), "int64", value=d.axes[a]) for a in sized]
    reads = [Param(n, "tensor", d.tensor(n).dtype) for n in kernel.inputs]
    writes = [Param(n, "tensor", d.tensor(n).dtype, writes=True) for n in kernel.outputs]
    params = (*reads, *writes, status_param(), *sizes)
    context = {
        "kernel": name,
        "doc": "; ".join(o.text for o in kernel.ops),
        "threads": threads,
        "row_threads": row_threads,
        "k": k,
        "largest": op.params["largest"],
        "length": size_name(axis),
        "position": index[axis],
        "units": " * ".join(size_name(a) for a in others) or "1",
        "unit_axes": [{"size": size_name(a), "index": index[a]} for a in reversed(others)],
        "starts": [
            {
                "name": n,
                "ctype": cpp_type(d.tensor(n).dtype),
                "offset": row_start(d.tensor(n), axis, index.__getitem__),
            }
            for n in loaded
        ],  # fmt: skip
        "values": values,
        "runs": [{"name": n} for n in runs],
        "loads": [
            {"name": n, "at": address_along(d.tensor(n), axis, index[axis])}
            for n in loaded
            if n not in runs
        ],
        "statements": statements(before),
        "operand": value(source),
        "picked": value(op.out),
        "pick_loads": [
            {"name": n, "offset": offset_expr(d.tensor(n).axes, index.__getitem__)}
            for n in value_reads(after, kernel.inputs)
        ],  # fmt: skip
        "pick_statements": statements(after),
        "stores": [
            {
                "name": n,
                "offset": offset_expr(d.tensor(n).axes, index.__getitem__),
                "value": value(n),
            }
            for n in kernel.outputs
        ],  # fmt: skip
        "params": param_context(params),
    }
    launch = Launch.of(name, c.launches[0], params)
    return KernelSource("select.cu.j2", context, (launch,), (status_workspace(),))
