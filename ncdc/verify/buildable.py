"""Whether a diagram can be built: planned, and every kernel of the plan rendered from its
family's template (no NVRTC, no GPU).

`ncdc check` and `ncdc cost` on a GPU profile go through here, so a spec they accept is one
that `ncdc compile` can build, and a plan that `cost` prices is a kernel that exists. A spec
no template covers (a head size, a dtype, an op inside a fused kernel) is a `PlanError`
naming the spec, the kernel, the op and what is supported. A profile that is not a GPU (the
napkin machine) has no kernels to build: its plan is the model alone.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> check_buildable(load_diagram("diagrams/softmax.yaml"), load_hardware("h200")).bound
    'hbm'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram
from ncdc.model.values import Plan
from ncdc.plan.search import plan_diagram, rank_tiles

if TYPE_CHECKING:
    from ncdc.plan.choose import PlanSource

MODEL_ONLY = "model only (--abstract): no kernel was built"


def check_buildable(
    diagram: Diagram, hardware: Hardware, tiles: Mapping[str, int] | None = None
) -> Plan:
    """The plan of `diagram` with the model's (or the explicit) tiles, every kernel rendered
    on a GPU profile; a `PlanError` naming the spec when it cannot be
    planned or a kernel has no template that covers it."""
    try:
        plan = plan_diagram(diagram, hardware, tiles)  # the model's tiles: runners agree
    except PlanError as error:
        raise _in_spec(error, diagram) from None
    check_renders(plan)
    return plan


def check_renders(plan: Plan) -> None:
    """Render every kernel of `plan` (on a GPU profile; nothing to do elsewhere); a
    `PlanError` naming the spec, the kernel and what is supported when one cannot be."""
    if not plan.graph.hardware.is_gpu:
        return
    from ncdc.render import render_plan  # Jinja and the families: not for the model alone

    try:
        render_plan(plan)
    except PlanError as error:
        raise _in_spec(error, plan.graph.diagram) from None


def rank_buildable(
    diagram: Diagram,
    hardware: Hardware,
    top_k: int = 1,
    tiles: Mapping[str, int] | None = None,
    *,
    abstract: bool = False,
    use_tuned: bool = True,
    arch: str | None = None,
    compile: bool = False,
) -> tuple[list[Plan], PlanSource]:
    """The plans `ncdc cost` prints (`choose.rank_with_source`: tuned first when the cache
    has it) and where the first one's tiles came from, the first rendered
    (`check_renders`) unless `abstract`. The first is the launch `ncdc compile` settles on
    for `arch` (the profile's own by default) when the compile cache holds what it compiled
    (`settle_from_cache`), or, with `compile`, after compiling it now."""
    from ncdc.plan.choose import rank_with_source

    try:
        ranked, source = rank_with_source(
            diagram, hardware, top_k, tiles, use_tuned=use_tuned, model_only=abstract
        )
    except PlanError as error:
        raise _in_spec(error, diagram) from None
    if not abstract:
        check_renders(ranked[0])
        if hardware.is_gpu:
            ranked[0] = settled(ranked[0], arch or hardware.arch, compile)
        ranked[0] = with_compiled_sass(ranked[0])
    return ranked, source


def settled(plan: Plan, arch: str, compile: bool) -> Plan:
    """`plan` as `ncdc compile` settles it for `arch`: compiled now (`compile`), or from the
    compile cache where it holds the kernels (else `plan` as it is)."""
    from ncdc.backends.compile import compile_plan, replace_plan, settle_from_cache

    if compile:
        return replace_plan(compile_plan(plan, arch).plan, plan)
    return settle_from_cache(plan, arch)


def with_compiled_sass(plan: Plan) -> Plan:
    """`plan` priced on the SASS of its kernels where `ncdc compile` has put them in the
    compile cache (ncdc.backends.loop_mixes.cached_mixes), on its families' estimates elsewhere."""
    from ncdc.backends.loop_mixes import cached_mixes
    from ncdc.plan.feedback import with_instructions

    return with_instructions(plan, cached_mixes(plan))


def plan_buildable_specs(
    paths: Iterable[Path],
    hardware: Hardware,
    sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None,
    *,
    abstract: bool = False,
) -> list[Plan]:
    """The best plan of every spec file in `paths`, in order, each checked as `rank_buildable`."""
    from ncdc.language.load import check_unique_names

    paths = list(paths)
    check_unique_names(paths)  # their baseline entries would collide
    plans = []
    for path in paths:
        diagram = load_diagram(path, sizes)
        try:
            plan = rank_tiles(diagram, hardware, 1, tiles, model_only=abstract)[0]
        except PlanError as error:
            raise _in_spec(error, diagram) from None
        if not abstract:
            check_renders(plan)
        plans.append(plan)
    return plans


def spec_warnings(diagram: Diagram, hardware: Hardware, abstract: bool = False) -> tuple[str, ...]:
    """What `ncdc check` and `ncdc cost` warn of in a spec they accept: each broadcast that
    makes an axis nothing asked for (ncdc.language.broadcast), and, priced by the model
    alone (`--abstract`) on a GPU profile, each tensor its HBM cannot hold (an error
    otherwise: ncdc.plan.search.check_fits)."""
    from ncdc.language.broadcast import broadcast_warnings
    from ncdc.model.graph import build_graph, oversized

    lines = list(broadcast_warnings(diagram))
    if abstract and hardware.is_gpu:
        lines += [
            f"{diagram.source}: {line}: no kernel on this GPU can run it"
            for line in oversized(build_graph(diagram, hardware))
        ]
    return tuple(lines)


def is_model_only(hardware: Hardware, abstract: bool) -> bool:
    """True when `ncdc cost` built no kernel: `--abstract`, or a profile that is not a GPU."""
    return abstract or not hardware.is_gpu


def with_abstract(data: dict[str, Any], model_only: bool) -> dict[str, Any]:
    """`ncdc cost`'s JSON with its `abstract` field: true when no kernel was built."""
    return {**data, "abstract": model_only}


def _in_spec(error: PlanError, diagram: Diagram) -> PlanError:
    where = diagram.source if error.where is None else f"{diagram.source}: {error.where}"
    return PlanError(error.message, where=where, hint=error.hint)


def cost_note(plans: Sequence[Plan], abstract: bool) -> str | None:
    """The lines under `ncdc cost`'s table: the model-only caveat, each varlen mask priced
    dense for want of expected lengths (and grouped contraction priced as an even split),
    and each kernel whose tiles the model prefers to a published kernel's by more than its
    measured error (ncdc.plan.published); None when there is nothing to say."""
    from ncdc.model.geometry import dense_varlen_notes
    from ncdc.plan.published import doubted_notes

    lines = [MODEL_ONLY] if abstract else []
    for plan in plans:
        lines += dense_varlen_notes(plan)
        if not abstract:
            lines += doubted_notes(plan)
    return "\n".join(lines) or None
