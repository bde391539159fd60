"""Tile selection: candidate group and stream sizes per level, kept if they fit, ranked by
the cost model.

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
    >>> plan.bound_kind  # L2 -> SMEM traffic bounds it on Hopper with mma.sync (see the docs)
    'memory'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families import FAMILIES, classify_kernel, get_family
from ncdc.hardware.machine import Hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.language.diagram import Diagram
from ncdc.model.cost import (
    MAX_REGISTERS,
    KernelTiming,
    evaluate_kernel,
    summarize,
    time_kernel,
)
from ncdc.model.graph import ON_CHIP, Kernel, MemoryGraph, Partition, build_graph
from ncdc.model.issue import LoopMix
from ncdc.model.launch import Candidate, Family
from ncdc.model.streaming import streamed_axes
from ncdc.model.structure import KernelModel
from ncdc.model.values import BreakOption, KernelPlan, Plan, TileChoice, Unfused
from ncdc.units import ceil_div

if TYPE_CHECKING:
    import numpy as np

STEP_EXACT = 32  # a continuous search tries every size up to this
STEPS_PER_OCTAVE = 16  # and then this many a doubling


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
    diagram, breaks = (diagram, ()) if model_only else choose_breaks(diagram, hardware, fixed)
    graph = build_graph(diagram, hardware)
    try:
        per_kernel = [
            _rank_kernel(graph, k, fixed, top_k, model_only, continuous) for k in graph.kernels
        ]
    except PlanError as error:
        raise _with_break_hint(error, diagram, hardware, fixed) from None
    count = min(top_k, max(len(r) for r in per_kernel))
    plans = []
    for i in range(count):
        chosen = tuple(r[min(i, len(r) - 1)] for r in per_kernel)
        plans.append(replace(summarize(graph, chosen), fixed=fixed, breaks=breaks))
    if compare_unfused:
        plans[0] = with_unfused(plans[0])
    return plans


def with_unfused(plan: Plan) -> Plan:
    """`plan` with the unfused comparison (every intermediate saved) filled in."""
    unfused = _unfused(plan.graph.diagram, plan.graph.hardware, plan)
    return replace(plan, unfused=unfused) if unfused is not None else plan


def kernel_alternatives(plan: Plan, index: int, top_k: int) -> list[KernelPlan]:
    """The `top_k` best candidates of the plan's kernel `index` under its fixed tiles, best
    first (the plan's own choice is the first, unless tuned tiles put it elsewhere)."""
    graph = plan.graph
    return _rank_kernel(graph, graph.kernels[index], plan.fixed, top_k)


def with_kernel(plan: Plan, index: int, kp: KernelPlan) -> Plan:
    """`plan` with its kernel `index` run as `kp`; the totals summed again."""
    kernels = list(plan.kernels)
    kernels[index] = kp
    return replace(summarize(plan.graph, tuple(kernels)), fixed=plan.fixed)


def retime_kernel(plan: Plan, kp: KernelPlan, registers: int) -> KernelPlan:
    """`kp` priced again with the registers per thread the compiler reported: occupancy,
    waves and time follow from them (ncdc.backends.compile feeds ptxas's count back here)."""
    c = kp.candidate
    if c is None or c.registers == registers:
        return kp
    hw = plan.graph.hardware
    model = KernelModel(plan.graph.diagram, kp.kernel)
    choice = TileChoice(kp.tiles, kp.block_tile, c.with_registers(registers))
    return evaluate_kernel(model, kp.family, hw, choice, kp.instructions)


def with_instructions(plan: Plan, mixes: Mapping[int, LoopMix]) -> Plan:
    """`plan` with kernel i priced on the main-loop mix `mixes[i]` (counted from its
    compiled SASS, ncdc.backends.sass.loop_mix) instead of its family's estimate."""
    if not mixes:
        return plan
    kernels = list(plan.kernels)
    for i, mix in mixes.items():
        kp = kernels[i]
        model = KernelModel(plan.graph.diagram, kp.kernel)
        choice = TileChoice(kp.tiles, kp.block_tile, kp.candidate)
        kernels[i] = evaluate_kernel(model, kp.family, plan.graph.hardware, choice, mix)
    return replace(summarize(plan.graph, tuple(kernels), plan.unfused), fixed=plan.fixed)


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
        choice, problem = _Checker(model, hardware).check(c)
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


# ---------------------------------------------------------------------------- kernel breaks

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
        nbytes = sum(KernelModel(graph.diagram, k).top_bytes for k in graph.kernels)
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
        memo[key] = _rank_kernel(graph, kernel, fixed, 1)[0].predicted_time_s
    return memo[key]


def _with_break_hint(
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


def _generic(kernel: Kernel) -> Family:
    """The family of a kernel priced by the model alone (no template builds it)."""
    return Family("generic", {"woven": kernel.woven, "reduced": kernel.reduced})


def _rank_kernel(
    graph: MemoryGraph,
    kernel: Kernel,
    fixed: Mapping[str, int],
    top_k: int,
    model_only: bool = False,
    continuous: bool = False,
) -> list[KernelPlan]:
    """The `top_k` best plans of `kernel`. On a GPU, the candidates of its family; where no
    family builds it, a PlanError, or with `model_only` the abstract machine's search over
    the same levels (the paper's analysis, which needs no kernel)."""
    hw = graph.hardware
    diagram = graph.diagram
    streams = streamed_axes(diagram, kernel)
    model = KernelModel(diagram, kernel)
    fixed = {a: v for a, v in fixed.items() if a in kernel.axes}
    checker = _Checker(model, hw)
    choices: list[TileChoice] = []
    try:
        family = classify_kernel(diagram, kernel)
        if hw.is_gpu:
            choices = _gpu_choices(checker, family, streams, fixed)
    except PlanError:
        if hw.is_gpu and not model_only:
            raise
        family = _generic(kernel)
    if not choices:
        choices = _abstract_choices(model, hw, streams, fixed, top_k, continuous)
    # Rank by the times alone; only the best few become full plans.
    mixes = [estimate_mix(model, family, hw, c) for c in choices]
    timings = [
        time_kernel(model, hw, c, checker.occupancy, mix)
        for c, mix in zip(choices, mixes, strict=True)
    ]
    order = sorted(range(len(choices)), key=lambda i: _rank_key(choices[i], timings[i]))
    return [evaluate_kernel(model, family, hw, choices[i], mixes[i]) for i in order[:top_k]]


def estimate_mix(
    model: KernelModel, family: Family, hw: Hardware, choice: TileChoice
) -> LoopMix | None:
    """The family's estimate of the main loop's issue slots for `choice`'s candidate; None
    on an abstract machine, for a kernel no family builds, or a loop the family does not
    model."""
    if choice.candidate is None or family.name not in FAMILIES:
        return None
    return get_family(family.name).loop_mix(model, family, choice.candidate, hw)


def _rank_key(c: TileChoice, t: KernelTiming) -> tuple:
    """Fastest first; then fewer bytes moved at the top; then less padded work (a tile
    larger than a small axis only adds padding); then larger tiles; then by name."""
    return (
        t.predicted_time_s,
        t.top_bytes,
        t.padding,
        -math.prod(c.block_tile.values()),
        sorted(c.block_tile.items()),
        c.warps,
        c.stages,
        c.splits,
    )


def _powers(size: int) -> list[int]:
    out = [1 << i for i in range(size.bit_length()) if 1 << i < size]
    return out + [size]


# ------------------------------------------------------------------------ abstract machine


def _steps(size: int) -> list[int]:
    """Sizes a continuous search tries along an axis of `size`: every whole number up to
    STEP_EXACT, then a geometric ladder of STEPS_PER_OCTAVE a doubling (each within 2^(1/16)
    = 4.4% of the next), and the size itself.

        >>> _steps(40)[:5], _steps(40)[-3:]
        ([1, 2, 3, 4, 5], [36, 38, 40])
    """
    out = set(range(1, min(size, STEP_EXACT) + 1)) | {size}
    i = 0
    while (v := round(STEP_EXACT * 2 ** (i / STEPS_PER_OCTAVE))) < size:
        out.add(v)
        i += 1
    return sorted(out)


def _abstract_choices(
    model: KernelModel,
    hw: Hardware,
    streams: tuple[str, ...],
    fixed: Mapping[str, int],
    top_k: int,
    continuous: bool = False,
) -> list[TileChoice]:
    """Every power of two per woven and streamed axis (`continuous`: every `_steps` size),
    at every level below the top, evaluated at once; the `top_k` that fit, by time then
    bytes then size."""
    import numpy as np  # only this search is vectorised

    kernel = model.kernel
    group_only = model.diagram.schedule.group
    axes = list(kernel.woven) + list(streams)
    options = []
    for a in axes:
        size = model.sizes[a]
        whole = a in kernel.rows or (group_only and a in kernel.woven and a not in group_only)
        ladder = _steps(size) if continuous else _powers(size)
        options.append([fixed[a]] if a in fixed else [size] if whole else ladder)
    # One axis of the grid per tiled axis, broadcast against each other: the model's
    # arithmetic then runs on whole grids of candidates at once.
    grids = np.meshgrid(*[np.array(o, dtype=np.int64) for o in options], indexing="ij", sparse=True)
    shape = tuple(len(o) for o in options)
    sizes = dict(zip(axes, grids, strict=True))
    g = {a: sizes[a] for a in kernel.woven}
    s = {a: sizes[a] for a in streams}
    volume = np.ones(shape)
    for grid in grids:
        volume = volume * grid
    volume = volume.ravel()
    per_level = []
    slowest = max((n / hw.rate(u, k) for (u, k), n in model.flops_by_unit.items()), default=0)
    compute_s = np.full(volume.shape, slowest)
    if model.mask:  # a causal mask skips key chunks: work over the keys depends on the tile
        compute_s = np.broadcast_to(_abstract_compute(model, hw, g, s), shape).ravel()
    for upper, lower in zip(hw.levels, hw.levels[1:], strict=False):
        _, nbytes = model.transfer(g, s)
        _, resident = model.resident(g, s)
        nbytes = np.broadcast_to(nbytes, shape).ravel().astype(np.float64)
        resident = np.broadcast_to(resident, shape).ravel()
        fits = np.flatnonzero(resident <= lower.capacity_bytes)
        if not len(fits):
            raise PlanError(
                _abstract_overflow(axes, options, fixed, resident, lower, hw),
                hint=f"raise {lower.name}.capacity or use smaller tiles",
            )
        # only candidates that fit are sorted; lexsort is stable, so ties keep grid order
        time_s = np.maximum(nbytes[fits] / upper.bandwidth_bytes_per_s, compute_s[fits])
        order = np.lexsort((-volume[fits], nbytes[fits], time_s))  # last key sorts first
        best = [int(i) for i in fits[order[:top_k]]]
        per_level.append((lower.name, best))
    choices = []
    for i in range(max(len(b) for _, b in per_level)):
        parts = {}
        block: dict[str, int] = {}
        for name, best in per_level:
            index = np.unravel_index(best[min(i, len(best) - 1)], shape)
            flat = {a: o[x] for a, o, x in zip(axes, options, index, strict=True)}
            parts[name] = Partition(
                {a: flat[a] for a in kernel.woven}, {a: flat[a] for a in streams}
            )
            block = block or flat
        choices.append(TileChoice(parts, block))
    return choices


def _abstract_compute(
    model: KernelModel, hw: Hardware, g: Mapping[str, np.ndarray], s: Mapping[str, np.ndarray]
) -> np.ndarray:
    """The slowest unit's time per candidate when the work depends on the tile."""
    import numpy as np

    kept = model.mask_fraction(g, s)
    times = [
        (n - model.keyed_flops.get(unit, 0) * (1 - kept)) / hw.rate(*unit)
        for unit, n in model.flops_by_unit.items()
    ]
    return np.maximum.reduce(np.broadcast_arrays(*times)) if times else np.zeros(1)


def _abstract_overflow(
    axes: list[str],
    options: list[list[int]],
    fixed: Mapping[str, int],
    resident: np.ndarray,
    level: object,
    hw: Hardware,
) -> str:
    need = int(resident.min())
    cap = level.capacity_bytes  # type: ignore[attr-defined]
    name = level.name  # type: ignore[attr-defined]
    what = " ".join(f"{a}={fixed[a]}" for a in axes if a in fixed)
    head = f"tile {what} needs" if what else "the smallest tile needs"
    return (
        f"{head} {need:,} B at {name}; the {hw.name} {name} holds {cap:,} B "
        f"(over by {need - cap:,} B)"
    )


# ------------------------------------------------------------------------------- GPUs


def _gpu_choices(
    checker: _Checker, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[TileChoice]:
    model = checker.model
    candidates = get_family(family.name).candidates(model, family, checker.hw, streams, fixed)
    choices = []
    problems: list[tuple[float, str]] = []
    for c in candidates:
        choice, problem = checker.check(c)
        if choice is not None:
            choices.append(choice)
        else:
            problems.append(problem)
    if not choices:
        what = " ".join(f"{a}={v}" for a, v in fixed.items())
        head = f"tile {what}" if what else f"every {family.name} tile"
        detail = min(problems)[1] if problems else "no candidates"
        raise PlanError(
            f"{head} for kernel {model.kernel.name}: {detail}",
            hint="use smaller tiles (--tile AXIS=SIZE) or drop the fixed tile to search"
            if fixed
            else "shrink the axes with --set AXIS=SIZE, or pick a larger GPU (--hardware)",
        )
    return choices


class _Checker:
    """Checks the candidates of one kernel on one GPU, remembering what candidates share:
    blocks per SM for each (threads, registers, shared memory), and wave tiles."""

    def __init__(self, model: KernelModel, hw: Hardware):
        self.model = model
        self.hw = hw
        self.cache_level = hw.cache_level
        self.l2_capacity = hw.level(hw.cache_level).capacity_bytes if hw.cache_level else None
        # levels below the top other than the block, register and cache levels: a block's
        self.others = [
            lv.name
            for lv in hw.levels[1:]
            if lv.name not in (hw.block_level, hw.register_level, hw.cache_level)
        ]
        self._per_sm: dict[tuple[int, int, int], tuple[int, str]] = {}
        self._waves: dict[tuple, dict[str, int]] = {}

    def occupancy(
        self, threads: int, registers: int, smem: int, _limits: object = None
    ) -> tuple[int, str]:
        """`blocks_per_sm` on this checker's GPU (an `Occupancy` for `time_kernel`)."""
        key = (threads, registers, smem)
        found = self._per_sm.get(key)
        if found is None:
            found = self._per_sm[key] = blocks_per_sm(threads, registers, smem, self.hw.limits)
        return found

    def check(self, c: Candidate) -> tuple[TileChoice | None, tuple]:
        """The choice for candidate `c`, or None and (how far over, a message naming the
        limit it breaks)."""
        model, hw = self.model, self.hw
        lim = hw.limits
        tile = _tile_text(c)
        for shape in c.launches:
            if shape.dynamic_smem > lim.smem_per_block_bytes:
                return None, (
                    shape.dynamic_smem / lim.smem_per_block_bytes,
                    f"tile {tile} with {c.stages} stages needs {shape.dynamic_smem:,} B of "
                    f"shared memory per block; the {hw.name} allows "
                    f"{lim.smem_per_block_bytes:,} B "
                    f"(over by {shape.dynamic_smem - lim.smem_per_block_bytes:,} B)",
                )
            if shape.threads > lim.threads_per_block:
                return None, (
                    shape.threads / lim.threads_per_block,
                    f"tile {tile} needs {shape.threads} threads per block; the {hw.name} "
                    f"allows {lim.threads_per_block}",
                )
            problem = shape.problem()
            if problem:
                return None, (2.0, f"tile {tile}: {problem}")
        cap = min(lim.regs_per_thread, MAX_REGISTERS)
        if c.registers > cap:
            return None, (
                c.registers / cap,
                f"tile {tile} needs about {c.registers} registers per thread; the "
                f"{hw.name} allows {cap} (over by {c.registers - cap}; it would spill)",
            )
        per_sm, limiter = self.occupancy(c.threads, c.registers, c.smem_bytes)
        if per_sm < 1:
            return None, (2.0, f"tile {tile} cannot run: one block exceeds the SM's {limiter}")
        block = Partition(c.group, c.stream)
        parts = {hw.block_level: block, hw.register_level: Partition(c.warp_group, c.warp_stream)}
        if self.l2_capacity is not None:
            wave = self.wave_group(c.group, lim.sms * per_sm, c.splits, c.raster_group)
            _, wave_bytes = model.tile_resident(wave, c.stream, c.stages)
            fits = wave_bytes <= self.l2_capacity
            parts[self.cache_level] = Partition(wave, c.stream) if fits else block
        for name in self.others:
            parts[name] = block
        return TileChoice(parts, {**c.group, **c.stream}, c), ()

    def wave_group(
        self, group: Mapping[str, int], wave: int, splits: int, group_m: int = 0
    ) -> dict[str, int]:
        """Union tile of the first `wave` blocks in raster order (the last woven axis
        fastest): what one wave of blocks, running at once, loads through L2. With
        `group_m` (a GEMM's grouped order), runs of consecutive blocks walk `group_m` tiles
        of the second-last woven axis before the next tile of the last: a wave smaller
        than one group spans `group_m` tiles along it and the columns it reaches; one of
        whole groups is whole rows of tiles, as in row order."""
        woven = self.model.kernel.woven
        key = (tuple(map(group.__getitem__, woven)), wave, splits, group_m)
        found = self._waves.get(key)
        if found is None:
            model = self.model
            left = max(wave // splits, 1)
            found = {}
            axes = list(reversed(woven))
            if group_m and len(axes) >= 2:
                n, m = axes[0], axes[1]
                count_n = ceil_div(model.sizes[n], group[n])
                count_m = ceil_div(model.sizes[m], group[m])
                if left >= group_m * count_n:  # whole groups: rows of tiles, as in row order
                    rows, cols = min(count_m, ceil_div(left, count_n)), count_n
                else:  # part of one group: its rows, and the columns the wave reaches
                    rows = min(count_m, group_m)
                    cols = min(count_n, ceil_div(left, rows))
                found[n] = min(cols * group[n], model.sizes[n])
                found[m] = min(rows * group[m], model.sizes[m])
                left = max(ceil_div(left, (count_m * count_n)), 1)
                axes = axes[2:]
            for a in axes:
                count = ceil_div(model.sizes[a], group[a])
                take = min(count, left)
                found[a] = min(take * group[a], model.sizes[a])
                left = max(ceil_div(left, count), 1)
            self._waves[key] = found
        return found


def _tile_text(c: Candidate) -> str:
    return " ".join(f"{a}={v}" for a, v in {**c.group, **c.stream}.items() if v > 1)
