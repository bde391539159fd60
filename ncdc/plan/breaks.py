"""Kernel breaks: where the spec writes no `materialize`, every legal set of results to save
to the top level is weighed by the model, and the cheapest that builds is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.graph import Kernel, MemoryGraph, build_graph, positional_results
from ncdc.model.structure import top_bytes
from ncdc.model.values import BreakOption
from ncdc.plan.kernels import rank_kernel

MAX_BREAK_SETS = 64  # sets of saved results weighed, fewest saves first


def breakable_results(diagram: Diagram) -> list[str]:
    """Results a kernel may end at: those another op reads (an intermediate, or an output
    that later ops read too), but for those computed from positions and numbers alone (a
    mask rule's terms), which any kernel recomputes for less than reading them back."""
    read = {n for op in diagram.ops for n in op.inputs}
    positional = positional_results(diagram)
    return [op.out for op in diagram.ops if op.out in read and op.out not in positional]


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
    plus a launch per kernel) is above the best so far is not planned. Where none of
    those builds, a greedy descent from every result saved (`_descend`). Returns the diagram
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
    """Sets of results to save, fewest first, up to MAX_BREAK_SETS. Within a size the
    operands of contractions come first: a contraction's kernel reads them best as stored
    tiles (a rotated Q and K saved let attention take its TMA kernel), and with many
    results the cap would otherwise cut their pairs.

        >>> from ncdc.language.load import load_diagram
        >>> sets = _break_sets(load_diagram("diagrams/rope_attention.yaml"), ())
        >>> sets[1:3], ("Qr", "Kr") in sets
        ([('Qr',), ('Kr',)], True)
    """
    from itertools import combinations

    contracted = {n for op in diagram.ops if op.kind == "contract" for n in op.inputs}
    results = breakable_results(diagram)
    order = sorted(results, key=lambda r: (r not in contracted, results.index(r)))
    free = [r for r in order if r not in base]
    sets: list[tuple[str, ...]] = []
    at = {op.out: i for i, op in enumerate(diagram.ops)}
    for size in range(len(free) + 1):
        for extra in combinations(free, size):
            sets.append(tuple(sorted((*base, *extra), key=lambda r: at.get(r, len(at)))))
            if len(sets) == MAX_BREAK_SETS:
                return sets
    return sets


def _weigh_breaks(
    diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int], base: tuple[str, ...]
) -> tuple[Diagram, tuple[BreakOption, ...]]:
    memo: dict[tuple, float] = {}
    sets = _break_sets(diagram, base)
    options = _weigh_sets(diagram, hardware, fixed, sets, memo)
    if not any(o.predicted_time_s is not None for o in options) and len(sets) == MAX_BREAK_SETS:
        options = _descend(diagram, hardware, fixed, base, memo)
    built = [o for o in options if o.predicted_time_s is not None]
    if not built:
        return diagram, ()
    best = min(built, key=lambda o: (o.predicted_time_s, len(o.saved)))
    ordered = sorted(options, key=lambda o: (len(o.saved), o.saved))
    marked = tuple(replace(o, chosen=o is best) for o in ordered)
    return with_breaks(diagram, best.saved), marked


def _weigh_sets(
    diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int],
    sets: Sequence[tuple[str, ...]], memo: dict[tuple, float],
) -> list[BreakOption]:  # fmt: skip
    """Each set priced, the least-traffic first; a set whose traffic alone takes longer
    than the best found is not planned."""
    top = hardware.levels[0].name
    bandwidth = hardware.achieved_bandwidth(top)
    least: list[tuple[float, int, tuple[str, ...], MemoryGraph]] = []
    options: list[BreakOption] = []
    for saved in sets:
        try:
            graph = build_graph(with_breaks(diagram, saved), hardware)
        except PlanError as error:  # kernels that would each wait for the other
            options.append(BreakOption(saved, 0, None, 0.0, error.message.split("; ")[0]))
            continue
        nbytes = sum(top_bytes(graph.diagram, k) for k in graph.kernels)
        time = nbytes / bandwidth + hardware.launch_s * len(graph.kernels)
        least.append((time, nbytes, saved, graph))
    least.sort(key=lambda x: (x[0], len(x[2])))
    best: float | None = None
    for bound, nbytes, saved, graph in least:
        if best is not None and bound >= best:
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
        options.append(BreakOption(saved, nbytes, time, bound))
        best = time if best is None else min(best, time)
    return options


def _descend(
    diagram: Diagram, hardware: Hardware, fixed: Mapping[str, int], base: tuple[str, ...],
    memo: dict[tuple, float],
) -> list[BreakOption]:  # fmt: skip
    """Where none of the fewest-first sets builds (a long diagram, as a derived backward
    pass is): from every result saved, drop one save at a time, each time the drop that
    makes the plan fastest, until no drop makes it faster or builds. Greedy: up to n^2 / 2
    sets for n results, each kernel priced once (`memo`)."""
    # an index is a value the kernel has, never a kernel of its own
    current = tuple(r for r in breakable_results(diagram) if _made_by(diagram, r) != "index")
    options = _weigh_sets(diagram, hardware, fixed, [current], memo)
    best = options[0]
    while best.predicted_time_s is not None:
        drops = [tuple(r for r in current if r != drop) for drop in current if drop not in base]
        tried = [_weigh_sets(diagram, hardware, fixed, [saved], memo)[0] for saved in drops]
        options += tried
        built = [o for o in tried if o.predicted_time_s is not None]
        better = min(built, key=lambda o: o.predicted_time_s or 0.0, default=None)
        if better is None or (better.predicted_time_s or 0.0) >= best.predicted_time_s:
            break
        best, current = better, better.saved
    return options


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
    if not options or set(chosen.schedule.materialize) == set(base):
        return error
    saved = ", ".join(chosen.schedule.materialize)
    return PlanError(
        error.message,
        where=error.where,
        hint=f"save these results: schedule: {{materialize: [{saved}]}}",
    )


def _made_by(diagram: Diagram, name: str) -> str:
    """The kind of the op that computes `name`."""
    op = diagram.producer(name)
    return op.kind if op is not None else ""
