"""The scatter family: a scatter-add, with the elementwise ops that compute what it adds.

`Y = scatter_add(G, I, axis=v)` adds each value of G into Y at the place its index names
along v (the gradient of a gather: an embedding's rows, each picked by many tokens). Two
launches: the first runs a grid-stride loop over G's values, computes each from the
kernel's inputs (the elementwise chain before the scatter, as ncdc.families.codegen writes
it), checks its index (out of range sets the status word and adds nothing) and adds it into
a zeroed fp32 workspace over Y with an atomic; the second writes Y from the workspace in
Y's dtype. Consecutive threads take consecutive values of G, so a warp's adds go to
consecutive addresses of one row of Y where G's innermost axis is one Y keeps.

The model sees blocks split G's values (the kernel's woven axes are G's, ncdc.model.graph)
and every add as 4 bytes read and written at the L2 (`Candidate.accumulates`).

    >>> from ncdc.language.load import load_diagram_text
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: rows
    ... axes: {t: 512, v: 1000, d: 64}
    ... inputs: {G: {axes: [t, d], dtype: bf16}, ids: {axes: [t], dtype: int32}}
    ... ops: ["dE = scatter_add(G, ids, axis=v)"]
    ... outputs: [dE]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> [launch.kernel for launch in FAMILY.render(plan.kernels[0], plan).launches]
    ... # doctest: +ELLIPSIS
    ['rows_scatter_bf16_t..._u...', 'rows_scatter_bf16_t..._u..._store']
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
    Workspace,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
    ones,
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    GATHER_LIMIT,
    Statement,
    computed_indirect,
    cpp_type,
    element_value,
    indirect_sources,
    offset_expr,
    op_statements,
    param_context,
    size_name,
    status_param,
    status_workspace,
    struct_pointers,
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
    "threads": (128, 256),
    "unroll": (1, 4),  # values of G a thread adds per pass, their loads in flight together
}
MAX_GRID = 65535 * 16  # enough blocks to fill any GPU; the loop strides over the rest
STORE_THREADS = 256  # the second launch: the result from its fp32 workspace


def scatter_op(kernel: Kernel) -> Op | None:
    """The kernel's scatter-add when it is the last op and the only output, after elementwise
    ops only, and its index is read from memory; else None."""
    *chain, last = kernel.ops
    if last.kind != "scatter" or kernel.outputs != (last.out,):
        return None
    if any(op.kind not in ELEMENTWISE_KINDS for op in chain) or computed_indirect(kernel):
        return None
    return last if str(last.operands[1]) in kernel.inputs else None


class ScatterFamily:
    """A scatter-add of values the kernel reads or computes elementwise."""

    name = "scatter"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        op = scatter_op(kernel)
        if op is None:
            return None
        return Family(self.name, {"all": diagram.tensor(str(op.operands[0])).axes}, TILES)

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
        op = scatter_op(kernel)
        assert op is not None, "classified as a scatter"
        axis = op.params["axis"]
        if d.axes[axis] > GATHER_LIMIT:
            raise PlanError(
                f"scatter_add ({op.out}) along {axis} of {d.axes[axis]} values; the kernels "
                f"take indices up to {GATHER_LIMIT}",
                hint=f"split {axis} into parts of at most {GATHER_LIMIT}",
            )
        axes = family.axes("all")
        total = math.prod(d.axes[a] for a in axes)
        result = d.size(d.tensor(op.out))
        adds = total / max(result, 1)  # adds per value of the result, on average
        inner = axes[-1]
        out = []
        for threads in TILES["threads"]:
            for unroll in TILES["unroll"]:
                tile = fixed.get(inner, min(threads * unroll, d.axes[inner]))
                group = {**ones(axes[:-1], fixed), inner: tile}
                grid = max(1, min(MAX_GRID, ceil_div(total, threads * unroll)))
                store = max(1, min(MAX_GRID, ceil_div(result, STORE_THREADS)))
                shapes = (
                    LaunchShape((grid, 1, 1), (threads, 1, 1), 0),
                    LaunchShape((store, 1, 1), (STORE_THREADS, 1, 1), 0),
                )
                registers = estimate_registers(unroll * (len(kernel.inputs) + 3), 1, 0)
                out.append(Candidate(
                    group, {}, group, {}, (("threads", threads), ("unroll", unroll)), shapes,
                    1, 1, registers, accumulates=((op.out, adds),),
                ))  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = ScatterFamily()


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The two launches of `kp.candidate`: the adds, then the result from the workspace."""
    d, kernel, c = plan.graph.diagram, kp.kernel, kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    op = scatter_op(kernel)
    assert op is not None, "classified as a scatter"
    source, indices = (str(o) for o in op.operands)
    axis = op.params["axis"]
    axes = d.tensor(source).axes  # the values the first launch walks
    index = {a: f"ncdc_i_{a}" for a in axes}

    value = element_value(kernel)
    statements: list[Statement] = []
    pointers = struct_pointers(kernel)
    for chained in kernel.ops[:-1]:
        statements += op_statements(chained, value, index.__getitem__, value(chained.out),
                                    pointers, d)  # fmt: skip
    loaded = [n for n in kernel.inputs if n not in kernel.indirect_only]
    workspace = f"ncdc_{op.out}_acc"
    result = d.tensor(op.out)
    threads, unroll = c.param("threads"), c.param("unroll")
    dtype = result.dtype.replace("_", "")
    name = f"{kernel.name}_scatter_{dtype}_t{threads}_u{unroll}"
    # sizes of every axis the code indexes: G's, the result's and the gathered sources'
    sources = indirect_sources(kernel.ops)
    sized = dict.fromkeys([*axes, *result.axes, *(a for n in sources for a in d.tensor(n).axes)])
    sizes = [Param(size_name(a), "int64", value=d.axes[a]) for a in sized]
    reads = [Param(n, "tensor", d.tensor(n).dtype) for n in kernel.inputs]
    acc = Param(workspace, "workspace", "fp32", writes=True)
    first = (*reads, acc, status_param(), *sizes)
    second = (
        Param(workspace, "workspace", "fp32"),
        Param(op.out, "tensor", result.dtype, writes=True),
        *sizes,
    )
    total = " * ".join(size_name(a) for a in axes) or "1"
    context = {
        "kernel": name,
        "doc": "; ".join(o.text for o in kernel.ops),
        "threads": threads,
        "unroll": unroll,
        "axes": [{"size": size_name(a), "index": index[a]} for a in reversed(axes)],
        "total": total,
        "result_total": " * ".join(size_name(a) for a in result.axes) or "1",
        "inputs": [
            {"name": n, "offset": offset_expr(d.tensor(n).axes, index.__getitem__)} for n in loaded
        ],
        "statements": statements,
        "added": value(source),
        "index": value(indices),
        "target": offset_expr(result.axes, lambda a: "ncdc_k" if a == axis else index[a]),
        "bound": size_name(axis),
        "result": op.out,
        "result_type": cpp_type(result.dtype),
        "workspace": workspace,
        "store_threads": STORE_THREADS,
        "params": param_context(first),
        "store_params": param_context(second),
    }
    launches = (
        Launch.of(name, c.launches[0], first),
        Launch.of(f"{name}_store", c.launches[1], second),
    )
    spaces = (Workspace(workspace, "fp32", d.size(result), zeroed=True), status_workspace())
    return KernelSource("scatter.cu.j2", context, launches, spaces)
