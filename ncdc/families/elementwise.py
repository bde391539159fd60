"""The elementwise family: maps, broadcast binaries, casts and causal masks in one pass.

One thread handles a run of V consecutive output elements along the innermost axis (16-byte
loads where every tensor allows), in a grid-stride loop over the output. Each operand's
offset is computed from the output index, so an operand over a subset of the output's axes
(in any order) is broadcast by name. The chain is an unrolled list of `ncdc::op_*` calls in
`templates/elementwise.cu.j2`, built by ncdc.families.codegen (shared with the row-wise
family).

    >>> from ncdc.language.load import load_diagram_text
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: act
    ... axes: {m: 64, n: 256}
    ... inputs: {X: {axes: [m, n], dtype: bf16}, B: {axes: [n], dtype: bf16}}
    ... ops: ["H = add(X, B)", "Y = gelu(H)"]
    ... outputs: [Y]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> FAMILY.render(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'act_elementwise_bf16_t..._v8'
"""

from __future__ import annotations

import itertools
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
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    INDIRECT_KINDS,
    Statement,
    computed_indirect,
    cpp_type,
    indirect_sources,
    offset_expr,
    op_statements,
    param_context,
    size_name,
    status_param,
    status_workspace,
    struct_pointers,
    vector_width,
)
from ncdc.language.diagram import Diagram
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "threads": (128, 256),
    "vectors_per_thread": (1, 2, 4),  # 16-byte vectors per thread
}
MAX_GRID = 65535 * 16  # enough blocks to fill any GPU; the loop strides over the rest
MAX_VECTORS_PER_THREAD = 8


class ElementwiseFamily:
    """Only elementwise ops: every output over the kernel's woven axes."""

    name = "elementwise"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        if any(op.kind not in ELEMENTWISE_KINDS for op in kernel.ops):
            return None
        if computed_indirect(kernel):
            return None
        return Family(self.name, {"all": kernel.woven}, TILES)

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
        axes = family.axes("all") or kernel.woven
        for name in kernel.outputs:
            if set(d.tensor(name).axes) != set(axes):
                raise PlanError(
                    f"output {name} of kernel {kernel.name} is not over every axis {list(axes)}",
                    hint=f"compute {name} in a diagram of its own",
                )
        if not axes:
            names = ", ".join(kernel.outputs)
            raise PlanError(
                f"kernel {kernel.name} computes the scalar {names}: the elementwise kernel "
                "runs over at least one axis",
                hint=f"give {names} an axis of size 1: add one: 1 to axes and put its "
                "inputs over [one]",
            )
        inner = axes[-1]
        runs = [
            n for n in (*kernel.inputs, *kernel.outputs)
            if inner in d.tensor(n).axes and d.tensor(n).axes[-1] == inner
        ]  # fmt: skip
        vec = vector_width(d, runs)
        total = math.prod(d.axes[a] for a in axes)
        # a value per input per lane; a gather's lane also holds its 64-bit address
        gathers = sum(op.kind in INDIRECT_KINDS for op in kernel.ops)
        registers_per_vector = vec * (max(len(kernel.inputs), 1) + 2 * gathers)
        out: dict[tuple, Candidate] = {}
        for threads, asked in itertools.product(TILES["threads"], TILES["vectors_per_thread"]):
            tile = fixed.get(inner, min(threads * vec * asked, model.sizes[inner]))
            vpt = max(1, min(MAX_VECTORS_PER_THREAD, tile // (threads * vec)))
            params = (("vec", vec), ("vpt", vpt), ("threads", threads))
            if params in out:
                continue
            group = {**ones(axes[:-1], fixed), inner: tile}
            grid = max(1, min(MAX_GRID, ceil_div(total, (threads * vec * vpt))))
            shape = LaunchShape((grid, 1, 1), (threads, 1, 1), 0)
            registers = estimate_registers(registers_per_vector * vpt, 1, 0)
            out[params] = Candidate(group, {}, group, {}, params, (shape,), 1, 1, registers)
        return list(out.values())

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = ElementwiseFamily()


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The elementwise kernel of `kp.candidate`: its template context and launch."""
    d = plan.graph.diagram
    kernel = kp.kernel
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    axes = kp.family.axes("all") or kernel.woven
    inner = axes[-1]
    index: dict[str, str] = {a: f"ncdc_i_{a}" for a in axes}

    def mode(name: str) -> str:
        t_axes = d.tensor(name).axes
        if inner not in t_axes:
            return "scalar"
        return "run" if t_axes[-1] == inner else "strided"

    vec = c.param("vec")
    elem_index = dict(index)
    elem_index[inner] = f"(ncdc_i_{inner} + ncdc_j)"

    def value(name: str) -> str:
        if name in kernel.inputs:
            return f"ncdc_r_{name}" if mode(name) == "scalar" else f"ncdc_a_{name}[ncdc_j]"
        return f"ncdc_e_{name}"

    statements: list[Statement] = []
    pointers = struct_pointers(kernel)
    for op in kernel.ops:
        statements += op_statements(op, value, lambda a: elem_index[a], value(op.out), pointers, d)
    loaded = [n for n in kernel.inputs if n not in kernel.indirect_only]

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

    threads = c.threads
    dtype = d.tensor(kernel.outputs[0]).dtype
    name = f"{kernel.name}_elementwise_{dtype.replace('_', '')}_t{threads}_v{vec}"
    gathers = any(op.kind == "gather" for op in kernel.ops)
    sources = indirect_sources(kernel.ops)
    # the gathered or sliced axes and the sources' other axes size their pitches
    other = dict.fromkeys(a for n in sources for a in d.tensor(n).axes if a not in axes)
    params = (
        [
            Param(n, "tensor", d.tensor(n).dtype, writes=n in kernel.outputs)
            for n in (*kernel.inputs, *kernel.outputs)
        ]
        + ([status_param()] if gathers else [])
        + [Param(size_name(a), "int64", value=d.axes[a]) for a in (*axes, *other)]
    )
    context = {
        "kernel": name,
        "threads": threads,
        "vec": vec,
        "vpt": c.param("vpt"),
        "axes": [{"name": a, "size": size_name(a), "index": index[a]} for a in reversed(axes)],
        "inner": inner,
        "inputs": [access(n) for n in loaded],
        "outputs": [access(n) for n in kernel.outputs],
        "statements": statements,
        "result": {n: value(n) for n in kernel.outputs},
        "params": param_context(params),
        "doc": "; ".join(op.text for op in kernel.ops),
        # A run of gathers holds a 64-bit address per value; without a bound on blocks per
        # SM ptxas keeps such a kernel at 32 registers and spills (sm_80, sm_90a)
        "min_blocks": 1 if gathers else 0,
    }
    workspace = (status_workspace(),) if gathers else ()
    return KernelSource("elementwise.cu.j2", context, (Launch.of(name, c.main, params),), workspace)
