"""Planning a diagram: its kernel breaks chosen, each kernel's candidates searched and ranked
by the cost model (ncdc.plan.kernels), the best plan and its runners-up summed.

On a GPU profile (levels hbm, l2, smem, rf) the candidates are the kernel family's
template parameters (ncdc.families): block tiles at SMEM, warp tiles at the registers, and
at L2 the union tile of the blocks of one wave when that wave's working set fits in L2. On
an abstract profile (the paper's two-level machine) every power of two of every woven and
streamed axis is tried, vectorised with NumPy. Explicit tiles (`schedule.tiles`, then
`--tile`) win over the search; an explicit tile that does not fit is an error that says
which limit it breaks and by how much.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    >>> plan.bound  # at full tensor load a Hopper GPU runs at its power limit (see the docs)
    'power'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ncdc.errors import PlanError
from ncdc.families import classify_kernel
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.cost import evaluate_kernel, summarize
from ncdc.model.graph import ON_CHIP, build_graph, oversized
from ncdc.model.launch import Candidate
from ncdc.model.structure import KernelModel
from ncdc.model.values import Plan, Unfused
from ncdc.plan.breaks import choose_breaks, with_break_hint
from ncdc.plan.kernels import Checker, estimate_mix, rank_kernel


def plan_diagram(
    diagram: Diagram,
    hardware: Hardware,
    tiles: Mapping[str, int] | None = None,
    *,
    compare_unfused: bool = False,
    continuous: bool = False,
) -> Plan:
    """The best plan for `diagram` on `hardware` by predicted time (`continuous`: on an
    abstract profile, group and stream sizes off the powers of two too, `_steps`).

    `tiles` (axis -> size, from `--tile`) override the spec's `schedule.tiles`; both win
    over the search.

        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.hardware.load import load_hardware
        >>> plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("h200")).bound
        'hbm'
    """
    return rank_tiles(
        diagram, hardware, 1, tiles, compare_unfused=compare_unfused, continuous=continuous
    )[0]


def rank_tiles(
    diagram: Diagram,
    hardware: Hardware,
    top_k: int = 5,
    tiles: Mapping[str, int] | None = None,
    *,
    compare_unfused: bool = False,
    model_only: bool = False,
    continuous: bool = False,
) -> list[Plan]:
    """The `top_k` best plans, best first: plan i runs every kernel with its i-th best tiles
    (or its last, when a kernel has fewer). With `compare_unfused` (for a report that shows
    it), the first plan carries the unfused comparison. With `model_only`, a kernel no
    family builds is priced by the model alone instead of refused."""
    fixed = _fixed_tiles(diagram, tiles)
    if hardware.is_gpu and not model_only:
        check_fits(diagram, hardware)
    diagram, breaks = (diagram, ()) if model_only else choose_breaks(diagram, hardware, fixed)
    graph = build_graph(diagram, hardware)
    try:
        per_kernel = [
            rank_kernel(graph, k, fixed, top_k, model_only, continuous) for k in graph.kernels
        ]
    except PlanError as error:
        raise with_break_hint(error, diagram, hardware, fixed) from None
    count = min(top_k, max(len(r) for r in per_kernel))
    plans = []
    for i in range(count):
        chosen = tuple(r[min(i, len(r) - 1)] for r in per_kernel)
        plans.append(replace(summarize(graph, chosen), fixed=fixed, breaks=breaks))
    if compare_unfused:
        plans[0] = with_unfused(plans[0])
    return plans


def check_fits(diagram: Diagram, hardware: Hardware) -> None:
    """A `PlanError` naming the first tensor the top level (a GPU's HBM) cannot hold, with
    its size and the capacity (ncdc.model.graph.oversized); the model alone (`--abstract`)
    still prices it."""
    problems = oversized(build_graph(diagram, hardware))
    if problems:
        raise PlanError(
            problems[0],
            hint="lower the sizes with --set AXIS=SIZE, or price the model alone with "
            "`ncdc cost --abstract`",
        )


def with_unfused(plan: Plan) -> Plan:
    """`plan` with the unfused comparison (every intermediate saved) filled in."""
    unfused = _unfused(plan.graph.diagram, plan.graph.hardware, plan)
    return replace(plan, unfused=unfused) if unfused is not None else plan


def plan_from_candidates(
    diagram: Diagram, hardware: Hardware, candidates: Sequence[Candidate]
) -> Plan:
    """The plan that runs kernel i with `candidates[i]` (a tuned entry rebuilt), checked
    against `hardware` as a search checks it; PlanError when one no longer fits."""
    diagram, _ = choose_breaks(diagram, hardware, {})
    graph = build_graph(diagram, hardware)
    if len(candidates) != len(graph.kernels) or not hardware.is_gpu:
        raise PlanError(
            f"{len(candidates)} stored candidates for {len(graph.kernels)} kernels",
            hint="run ncdc tune again",
        )
    kernels = []
    for kernel, c in zip(graph.kernels, candidates, strict=True):
        family = classify_kernel(diagram, kernel)
        model = KernelModel(diagram, kernel)
        choice, problem = Checker(model, hardware).check(c)
        if choice is None:
            raise PlanError(f"stored candidate for kernel {kernel.name}: {problem[1]}")
        mix = estimate_mix(model, family, hardware, choice)
        kernels.append(evaluate_kernel(model, family, hardware, choice, mix))
    return summarize(graph, tuple(kernels))


def _fixed_tiles(diagram: Diagram, tiles: Mapping[str, int] | None) -> dict[str, int]:
    """The spec's `schedule.tiles` overridden by `tiles` (from --tile), checked."""
    fixed = {**diagram.schedule.tiles, **(tiles or {})}
    for axis in fixed:
        if axis not in diagram.axes:
            raise PlanError(
                f"tile for unknown axis '{axis}'; the diagram has {', '.join(diagram.axes)}",
                hint="pass --tile AXIS=SIZE with one of the diagram's axes",
            )
    return fixed


def _unfused(diagram: Diagram, hardware: Hardware, fused: Plan) -> Unfused | None:
    """The same diagram with every intermediate saved to the top level, when it has any."""
    graph = fused.graph
    inner = [n for n, t in graph.tensors.items() if t.home == ON_CHIP]
    if not inner:
        return None
    schedule = replace(
        diagram.schedule,
        materialize=tuple(diagram.schedule.materialize) + tuple(inner),
        stream=(),
        tiles={},
        group=(),
        breaks_given=True,
    )
    try:
        plan = plan_diagram(replace(diagram, schedule=schedule), hardware)
    except PlanError:
        return None
    return Unfused(plan.top_bytes, plan.predicted_time_s, plan.top_bytes / fused.top_bytes)
