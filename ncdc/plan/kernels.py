"""The search for one kernel: its family's candidates on a GPU, each checked against the
profile's limits (shared memory, threads, registers, occupancy, the grid) and given the
L2 tile of a wave of its blocks, then ranked by the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ncdc.errors import PlanError
from ncdc.families import FAMILIES, classify_kernel, get_family
from ncdc.hardware.machine import Hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.model.cost import MAX_REGISTERS, KernelTiming, evaluate_kernel, time_kernel
from ncdc.model.graph import Kernel, MemoryGraph, Partition
from ncdc.model.issue import LoopMix
from ncdc.model.launch import Candidate, Family
from ncdc.model.streaming import streamed_axes
from ncdc.model.structure import KernelModel
from ncdc.model.values import KernelPlan, TileChoice
from ncdc.model.waves import wave_tile
from ncdc.plan.abstract import abstract_choices


def generic_family(kernel: Kernel) -> Family:
    """The family of a kernel priced by the model alone (no template builds it)."""
    return Family("generic", {"woven": kernel.woven, "reduced": kernel.reduced})


def rank_kernel(
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
    checker = Checker(model, hw)
    choices: list[TileChoice] = []
    try:
        family = classify_kernel(diagram, kernel)
        if hw.is_gpu:
            choices = gpu_choices(checker, family, streams, fixed)
    except PlanError:
        if hw.is_gpu and not model_only:
            raise
        family = generic_family(kernel)
    if not choices:
        choices = abstract_choices(model, hw, streams, fixed, top_k, continuous)
    # Rank by the times alone; only the best few become full plans.
    mixes = [estimate_mix(model, family, hw, c) for c in choices]
    timings = [
        time_kernel(model, hw, c, checker.occupancy, mix)
        for c, mix in zip(choices, mixes, strict=True)
    ]
    order = ranked(choices, timings)
    return [evaluate_kernel(model, family, hw, choices[i], mixes[i]) for i in order[:top_k]]


# Times within this share of the best are a tie: the model's figures (latencies, sustained
# clocks, bandwidths) carry no finer sense, and a kernel's structure breaks the tie better
# than a difference of a few nanoseconds in a small chunk's fill.
TIE = 1e-3


def ranked(choices: list[TileChoice], timings: list[KernelTiming]) -> list[int]:
    """Indices of `choices`, best first by `rank_key`, with every choice whose time is
    within TIE of the best ranked among those by the rest of the key (fewer bytes, less
    padding, larger tiles) as if their times were equal."""
    order = sorted(range(len(choices)), key=lambda i: rank_key(choices[i], timings[i]))
    if not order:
        return order
    best = timings[order[0]].predicted_time_s
    tied = [i for i in order if timings[i].predicted_time_s <= best * (1 + TIE)]
    rest = [i for i in order if timings[i].predicted_time_s > best * (1 + TIE)]
    tied.sort(key=lambda i: rank_key(choices[i], timings[i])[1:])
    return tied + rest


def estimate_mix(
    model: KernelModel, family: Family, hw: Hardware, choice: TileChoice
) -> LoopMix | None:
    """The family's estimate of the main loop's issue slots for `choice`'s candidate; None
    on an abstract machine, for a kernel no family builds, or a loop the family does not
    model."""
    if choice.candidate is None or family.name not in FAMILIES:
        return None
    return get_family(family.name).loop_mix(model, family, choice.candidate, hw)


def rank_key(c: TileChoice, t: KernelTiming) -> tuple:
    """Fastest first; then fewer bytes moved at the top; then less padded work (a tile
    larger than a small axis only adds padding); then larger tiles; then by the sizes in
    the kernel's order of its axes (never by their names: a renamed spec plans the same)."""
    return (
        t.predicted_time_s,
        t.top_bytes,
        t.padding,
        -math.prod(c.block_tile.values()),
        tuple(c.block_tile.values()),
        c.warps,
        c.stages,
        c.splits,
    )


def gpu_choices(
    checker: Checker, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
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
        # with tiles fixed the detail names the tile ("tile m=256 ... needs ..."): once
        head = (
            f"kernel {model.kernel.name}"
            if fixed
            else f"every {family.name} tile for kernel {model.kernel.name}"
        )
        detail = min(problems)[1] if problems else "no candidates"
        raise PlanError(
            f"{head}: {detail}",
            hint="use smaller tiles (--tile AXIS=SIZE) or drop the fixed tile to search"
            if fixed
            else "shrink the axes with --set AXIS=SIZE, or pick a larger GPU (--hardware)",
        )
    return choices


class Checker:
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
        tile = tile_text(c)
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
        self, group: Mapping[str, int], wave: int, splits: int, raster_group: int = 0
    ) -> dict[str, int]:
        """`wave_tile` of this checker's kernel, memoised: the candidates of a search share
        their block tiles."""
        woven = self.model.kernel.woven
        key = (tuple(map(group.__getitem__, woven)), wave, splits, raster_group)
        found = self._waves.get(key)
        if found is None:
            found = wave_tile(self.model.sizes, woven, group, wave, splits, raster_group)
            self._waves[key] = found
        return found


def tile_text(c: Candidate) -> str:
    return " ".join(f"{a}={v}" for a, v in {**c.group, **c.stream}.items() if v > 1)
