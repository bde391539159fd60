"""Kernel families: one module each, one registry, classification from structure.

`FAMILIES` maps a family's name to its object (ncdc.families.base.KernelFamily); the order
is the order a kernel is tried in: a GEMM with an epilogue before an elementwise chain,
attention before anything with a softmax. Adding a family is one module here, one
template and one device header (docs/architecture.md).

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.model.graph import build_graph
    >>> g = build_graph(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    >>> f = classify_kernel(g.diagram, g.kernels[0])
    >>> f.name, f.roles["m"], f.roles["n"], f.roles["k"]
    ('gemm', ('m',), ('n',), ('k',))
"""

from __future__ import annotations

from ncdc.errors import PlanError
from ncdc.families import elementwise, gemv, reduce, rowstages, rowwise, scan, scatter, select
from ncdc.families.attention import backward as attention_backward
from ncdc.families.attention import decode
from ncdc.families.attention import family as attention
from ncdc.families.base import KernelFamily
from ncdc.families.codegen import computed_indirect
from ncdc.families.gemm import family as gemm
from ncdc.language.diagram import Diagram
from ncdc.model.graph import Kernel
from ncdc.model.launch import Family

FAMILIES: dict[str, KernelFamily] = {
    f.name: f
    for f in (
        gemv.FAMILY,
        gemm.FAMILY,
        attention.FAMILY,
        decode.FAMILY,
        attention_backward.FAMILY,
        rowwise.FAMILY,
        rowstages.FAMILY,
        reduce.FAMILY,
        scatter.FAMILY,
        scan.FAMILY,
        select.FAMILY,
        elementwise.FAMILY,
    )
}
SUPPORTED = (
    "a contraction with elementwise ops after it (GEMM, or GEMV for a vector or at most "
    "8 rows); contract, softmax, contract "
    "(attention); attention's backward (dQ, dK and dV from P recomputed by its saved "
    "log-sum-exp); one softmax, norm or reduction over a tensor's last axis with elementwise "
    "ops around it (row-wise); several reductions over a row in stages, with sums down the "
    "columns (row stages); one over any other axes, to a scalar or a vector (reduce); "
    "a scatter-add of values computed elementwise (scatter); a running sum, max or min along "
    "one axis with elementwise ops around it (scan); the positions of the k best values "
    "along an axis, with their values gathered (select); elementwise ops alone"
)


def get_family(name: str) -> KernelFamily:
    """The family called `name`; the error lists the families there are."""
    family = FAMILIES.get(name)
    if family is None:
        raise PlanError(
            f"no kernel family '{name}'", hint=f"families: {', '.join(sorted(FAMILIES))}"
        )
    return family


def classify_kernel(diagram: Diagram, kernel: Kernel) -> Family:
    """The family of `kernel`, decided from its operations' structure (not from names).

    Raises PlanError when no family fits, naming the kernel's operations and what the
    families cover; the hint names a result the user can save to split the kernel.
    """
    for family in FAMILIES.values():
        found = family.classify(diagram, kernel)
        if found is not None:
            return found
    listing = ", ".join(f"{op.fn} ({op.out})" for op in kernel.ops)
    inner = [op.out for op in kernel.ops[:-1] if op.out not in kernel.outputs]
    hint = (
        _indirect_hint(kernel)
        or _row_axis_hint(diagram, kernel)
        or _contraction_hint(diagram, kernel)
        or (
            f"save an intermediate to split the kernel: schedule: {{materialize: [{inner[0]}]}}"
            if inner
            else "write the diagram as one of those"
        )
    )
    raise PlanError(
        f"no kernel family for ops {listing} in kernel {kernel.name}; the families cover "
        f"{SUPPORTED}",
        hint=hint,
    )


def _indirect_hint(kernel: Kernel) -> str:
    """The results to save where a gather or a slice reads what the kernel computes."""
    names = computed_indirect(kernel)
    if not names:
        return ""
    return (
        f"a gather or a slice reads its source from memory: save "
        f"{', '.join(names)}: schedule: {{materialize: [{', '.join(names)}]}}"
    )


def _contraction_hint(diagram: Diagram, kernel: Kernel) -> str:
    """The results to save when a kernel holds contractions no GEMM runs: a GEMM's epilogue
    runs after its one contraction, so an operand a contraction reads must be saved when this
    kernel computes it (H of a down projection), and of two contractions an epilogue
    combines, every one but the last (the gate G of SwiGLU: silu(G) * U then runs in the U
    GEMM's epilogue, reading G).

        schedule: {materialize: [G, H]}     # SwiGLU: gate GEMM, U GEMM + silu(G) * U, down
    """
    contracts = [op for op in kernel.ops if op.kind == "contract"]
    if not contracts:
        return ""
    computed = {op.out for op in kernel.ops}
    save: list[str] = []
    for op in contracts:
        save += [o for o in op.inputs if o in computed]
    # Which contractions each result depends on, inside this kernel.
    depends: dict[str, list[str]] = {}
    for op in kernel.ops:
        if op.kind == "contract":
            depends[op.out] = [op.out]
            continue
        got = [c for o in op.inputs for c in depends.get(o, [])]
        depends[op.out] = list(dict.fromkeys(got))
        if len(depends[op.out]) > 1:
            save += depends[op.out][:-1]
            depends[op.out] = depends[op.out][-1:]
    if not save:
        return ""
    order = {op.out: i for i, op in enumerate(diagram.ops)}
    names = sorted(
        {*diagram.schedule.materialize, *save} - set(diagram.outputs), key=order.__getitem__
    )
    return (
        "a GEMM kernel runs one contraction and the elementwise ops after it; save the "
        f"results that split them: schedule: {{materialize: [{', '.join(names)}]}}"
    )


def _row_axis_hint(diagram: Diagram, kernel: Kernel) -> str:
    """What to write for a row op that no family runs because of its axes: a reduction
    over several axes one axis at a time, or an input with the reduced axis last."""
    for op in kernel.ops:
        if op.kind not in ("softmax", "norm", "reduce"):
            continue
        src = diagram.tensor(next(o for o in op.operands if isinstance(o, str)))
        if op.kind == "reduce" and len(op.over) > 1 and src.axes[-1] in op.over:
            last = src.axes[-1]
            rest = [a for a in op.over if a != last]
            over = rest[0] if len(rest) == 1 else "[" + ", ".join(rest) + "]"
            partial = f"{op.out}_{last}"
            return (
                f"reduce one axis at a time and save the partial: {partial} = "
                f"{op.fn}({src.name}, over={last}), {op.out} = {op.fn}({partial}, over={over}), "
                f"schedule: {{materialize: [{partial}]}}"
            )
        inputs = {t.name for t in diagram.inputs}
        if len(op.over) == 1 and src.axes[-1] != op.over[0] and src.name in inputs:
            axes = [a for a in src.axes if a != op.over[0]] + [op.over[0]]
            return (
                f"store {src.name} with {op.over[0]} last: "
                f"{src.name}: {{axes: [{', '.join(axes)}]}}"
            )
    return ""
