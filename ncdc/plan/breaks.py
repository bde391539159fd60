"""Kernel breaks: where the spec writes no `materialize`, every legal set of results to save
to the top level is weighed by the model, and the cheapest that builds is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.graph import Kernel, MemoryGraph, build_graph
from ncdc.model.structure import top_bytes
from ncdc.model.values import BreakOption
from ncdc.plan.kernels import rank_kernel

MAX_BREAK_SETS = 64  # sets of saved results weighed, fewest saves first


def breakable_results(diagram: Diagram) -> list[str]:
    """Results a kernel may end at: those another op reads (an intermediate, or an output
    that later ops read too)."""
    read = {n for op in diagram.ops for n in op.inputs}
    return [op.out for op in diagram.ops if op.out in read]


def with_breaks(diagram: Diagram, saved: Sequence[str]) -> Diagram:
    """`diagram` with its kernels ending exactly at `saved` (the schedule's materialize)."""
    schedule = replace(diagram.schedule, materialize=tuple(saved), breaks_given=True)
    return replace(diagram, schedule=schedule)


def choose_breaks(
    diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int]
) -> tuple[Diagram, tuple[BreakOption, ...]]:
    """Where the spec writes no `materialize` on a GPU: every legal set of results to save
    (`breakable_results`, fewest first, up to MAX_BREAK_SETS), each priced by the model as
    the sum of its kernels' best plans, the cheapest that builds chosen (ties: fewer
    saves). A set whose least possible time (its top-level bytes at the achieved bandwidth
    plus a launch per kernel) is above the best so far is not planned. Returns the diagram
    with the chosen breaks and every option weighed; the diagram unchanged (and no
    options) where the spec wrote its breaks, on a machine that is not a GPU, or where
    nothing builds (planning it then says why).

        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.hardware.load import load_hardware
        >>> d, options = choose_breaks(load_diagram("diagrams/add_rmsnorm.yaml"),
        ...                            load_hardware("h200"), {})
        >>> [(o.saved, o.chosen) for o in options]
        [((), True), (('H',), False)]
    """
    if diagram.schedule.breaks_given or not hardware.is_gpu:
        return diagram, ()
    return _weigh_breaks(diagram, hardware, fixed, ())


def _break_sets(diagram: Diagram, base: tuple[str, ...]) -> list[tuple[str, ...]]:
    from itertools import combinations

    free = [r for r in breakable_results(diagram) if r not in base]
    sets: list[tuple[str, ...]] = []
    for size in range(len(free) + 1):
        for extra in combinations(free, size):
            sets.append((*base, *extra))
            if len(sets) == MAX_BREAK_SETS:
                return sets
    return sets


def _weigh_breaks(
    diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int], base: tuple[str, ...]
) -> tuple[Diagram, tuple[BreakOption, ...]]:
    top = hardware.levels[0].name
    bandwidth = hardware.achieved_bandwidth(top)
    least: list[tuple[float, int, tuple[str, ...], MemoryGraph]] = []
    for saved in _break_sets(diagram, base):
        graph = build_graph(with_breaks(diagram, saved), hardware)
        nbytes = sum(top_bytes(graph.diagram, k) for k in graph.kernels)
        time = nbytes / bandwidth + hardware.launch_s * len(graph.kernels)
        least.append((time, nbytes, saved, graph))
    least.sort(key=lambda x: (x[0], len(x[2])))
    memo: dict[tuple, float] = {}
    options: list[BreakOption] = []
    best: BreakOption | None = None
    for bound, nbytes, saved, graph in least:
        if (
            best is not None
            and best.predicted_time_s is not None
            and bound >= best.predicted_time_s
        ):
            options.append(
                BreakOption(
                    saved, nbytes, None, bound, "not planned: its traffic alone takes longer"
                )
            )
            continue
        try:
            time = sum(_kernel_time(graph, k, fixed, memo) for k in graph.kernels)
        except PlanError as error:
            options.append(BreakOption(saved, nbytes, None, bound, error.message.split("; ")[0]))
            continue
        option = BreakOption(saved, nbytes, time, bound)
        options.append(option)
        if best is None or best.predicted_time_s is None or time < best.predicted_time_s:
            best = option
    if best is None:
        return diagram, ()
    ordered = sorted(options, key=lambda o: (len(o.saved), o.saved))
    marked = tuple(replace(o, chosen=o is best) for o in ordered)
    return with_breaks(diagram, best.saved), marked


def _kernel_time(
    graph: MemoryGraph, kernel: Kernel, fixed: Mapping[str, int], memo: dict[tuple, float]
) -> float:
    """The best predicted time of `kernel`, remembered by what it computes and saves (the
    same kernel recurs in many sets of breaks)."""
    key = (tuple(op.out for op in kernel.ops), kernel.inputs, kernel.outputs)
    if key not in memo:
        memo[key] = rank_kernel(graph, kernel, fixed, 1)[0].predicted_time_s
    return memo[key]


def with_break_hint(
    error: PlanError, diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int]
) -> PlanError:
    """A refusal of the spec's own breaks, with a hint naming the results whose saving
    makes it build (the cheapest such set that keeps what the spec saves), where one does."""
    if not diagram.schedule.breaks_given or not hardware.is_gpu:
        return error
    base = tuple(diagram.schedule.materialize)
    chosen, options = _weigh_breaks(diagram, hardware, fixed, base)
    if not options or chosen.schedule.materialize == base:
        return error
    saved = ", ".join(chosen.schedule.materialize)
    return PlanError(
        error.message,
        where=error.where,
        hint=f"save these results: schedule: {{materialize: [{saved}]}}",
    )
