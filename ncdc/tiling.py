"""Tile selection: candidate group and stream sizes per level, kept if they fit, ranked by
the cost model.

On a GPU profile (levels hbm, l2, smem, rf) the candidates are the kernel family's
template parameters (ncdc.families): block tiles at SMEM, warp tiles at the registers, and
at L2 the union tile of the blocks of one wave when that wave's working set fits in L2. On
an abstract profile (the paper's two-level machine) every power of two of every woven and
streamed axis is tried, vectorised with NumPy. Explicit tiles (`schedule.tiles`, then
`--tile`) win over the search; an explicit tile that does not fit is an error that says
which limit it breaks and by how much.

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    >>> plan.bound_kind  # L2 -> SMEM traffic bounds it on Hopper with mma.sync (see the docs)
    'memory'
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from ncdc.cost import (
    MAX_REGISTERS,
    KernelModel,
    KernelPlan,
    KernelTiming,
    Plan,
    TileChoice,
    Unfused,
    estimate_registers,
    evaluate_kernel,
    streamed_axes,
    summarize,
    time_kernel,
)
from ncdc.errors import PlanError
from ncdc.families import MMA_K, VECTOR_BYTES, Family, classify_kernel
from ncdc.graph import ON_CHIP, Kernel, MemoryGraph, Partition, build_graph
from ncdc.hardware import Hardware
from ncdc.occupancy import blocks_per_sm
from ncdc.spec import DTYPE_BYTES, Diagram

if TYPE_CHECKING:
    import numpy as np

GPU_LEVELS = ("smem", "rf")  # a profile with these levels gets the family templates' tiles
MMA_TILE = 16  # rows and columns of the smallest warp tile (mma m16, n8 x 2)


def plan_diagram(
    diagram: Diagram, hardware: Hardware, tiles: Mapping[str, int] | None = None
) -> Plan:
    """The best plan for `diagram` on `hardware` by predicted time.

    `tiles` (axis -> size, from `--tile`) override the spec's `schedule.tiles`; both win
    over the search.

        >>> from ncdc.spec import load_diagram
        >>> from ncdc.hardware import load_hardware
        >>> plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("h200")).bound
        'hbm'
    """
    return rank_tiles(diagram, hardware, top_k=1, tiles=tiles)[0]


def rank_tiles(
    diagram: Diagram, hardware: Hardware, top_k: int = 5, tiles: Mapping[str, int] | None = None
) -> list[Plan]:
    """The `top_k` best plans, best first: plan i runs every kernel with its i-th best tiles
    (or its last, when a kernel has fewer). The first plan carries the unfused comparison."""
    fixed = {**diagram.schedule.tiles, **(tiles or {})}
    for axis in fixed:
        if axis not in diagram.axes:
            raise PlanError(
                f"tile for unknown axis '{axis}'; the diagram has {', '.join(diagram.axes)}",
                hint="pass --tile AXIS=SIZE with one of the diagram's axes",
            )
    graph = build_graph(diagram, hardware)
    per_kernel = [_rank_kernel(graph, k, fixed, top_k) for k in graph.kernels]
    count = min(top_k, max(len(r) for r in per_kernel))
    plans = []
    for i in range(count):
        chosen = tuple(r[min(i, len(r) - 1)] for r in per_kernel)
        plans.append(summarize(graph, chosen))
    unfused = _unfused(diagram, hardware, plans[0])
    if unfused is not None:
        plans[0] = replace(plans[0], unfused=unfused)
    return plans


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
    )
    try:
        plan = plan_diagram(replace(diagram, schedule=schedule), hardware)
    except PlanError:
        return None
    return Unfused(plan.top_bytes, plan.predicted_time_s, plan.top_bytes / fused.top_bytes)


def _family(diagram: Diagram, kernel: Kernel, gpu: bool) -> Family:
    try:
        return classify_kernel(diagram, kernel)
    except PlanError:
        if gpu:
            raise
        return Family("generic", {"woven": kernel.woven, "reduced": kernel.reduced})


def _rank_kernel(
    graph: MemoryGraph, kernel: Kernel, fixed: Mapping[str, int], top_k: int
) -> list[KernelPlan]:
    hw = graph.hardware
    gpu = all(name in graph.levels for name in GPU_LEVELS)
    diagram = graph.diagram
    streams = streamed_axes(diagram, kernel)
    family = _family(diagram, kernel, gpu)
    model = KernelModel(diagram, kernel)
    fixed = {a: v for a, v in fixed.items() if a in kernel.axes}
    checker = _Checker(model, hw)
    if gpu:
        choices = _gpu_choices(checker, family, streams, fixed)
    else:
        choices = _abstract_choices(model, hw, streams, fixed, top_k)
    # Rank by the times alone; only the best few become full plans.
    timings = [time_kernel(model, hw, c, checker.occupancy) for c in choices]
    order = sorted(range(len(choices)), key=lambda i: _rank_key(choices[i], timings[i]))
    return [evaluate_kernel(model, family, hw, choices[i]) for i in order[:top_k]]


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


def _options(
    axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int]
) -> list[int]:
    if axis in fixed:
        return [fixed[axis]]
    return sorted({min(c, size) for c in defaults})


def _powers(size: int) -> list[int]:
    out = [1 << i for i in range(size.bit_length()) if 1 << i < size]
    return out + [size]


# ------------------------------------------------------------------------ abstract machine


def _abstract_choices(
    model: KernelModel, hw: Hardware, streams: tuple[str, ...], fixed: Mapping[str, int], top_k: int
) -> list[TileChoice]:
    """Every power of two per woven and streamed axis, at every level below the top,
    evaluated at once; the `top_k` that fit, by time then bytes then size."""
    import numpy as np  # only this search is vectorised

    kernel = model.kernel
    group_only = model.diagram.schedule.group
    axes = list(kernel.woven) + list(streams)
    options = []
    for a in axes:
        size = model.sizes[a]
        whole = a in kernel.rows or (group_only and a in kernel.woven and a not in group_only)
        options.append([fixed[a]] if a in fixed else [size] if whole else _powers(size))
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


class _Block(NamedTuple):
    """A candidate block before it is checked: sizes at SMEM and at a warp, and launch."""

    group: dict[str, int]
    stream: dict[str, int]
    warp_group: dict[str, int]
    warp_stream: dict[str, int]
    warps: int
    stages: int
    threads: int
    registers: int
    smem_inputs: bool  # inputs staged through shared memory (else straight to registers)
    splits: int = 1


def _gpu_choices(
    checker: _Checker, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[TileChoice]:
    make = {
        "gemm": _gemm_blocks,
        "attention": _attention_blocks,
        "decode_attention": _attention_blocks,
        "rowwise": _rowwise_blocks,
        "elementwise": _elementwise_blocks,
    }[family.name]
    model = checker.model
    blocks = make(model, family, streams, fixed)
    choices = []
    problems: list[tuple[float, str]] = []
    for b in blocks:
        choice, problem = checker.check(b)
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
            hint="use smaller tiles (--tile) or drop the fixed tile to search",
        )
    return choices


class _Checker:
    """Checks the candidate blocks of one kernel on one GPU, remembering what candidates
    share: blocks per SM for each (threads, registers, shared memory), and wave tiles."""

    def __init__(self, model: KernelModel, hw: Hardware):
        self.model = model
        self.hw = hw
        names = [lv.name for lv in hw.levels]
        self.l2_capacity = hw.level("l2").capacity_bytes if "l2" in names else None
        # levels below the top other than SMEM, registers and L2: a block's tile
        self.others = [n for n in names[1:] if n not in ("smem", "rf", "l2")]
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

    def check(self, b: _Block) -> tuple[TileChoice | None, tuple]:
        """The choice for block `b`, or None and (how far over, a message naming the limit)."""
        model, hw = self.model, self.hw
        lim = hw.limits
        smem = 0
        if b.smem_inputs:
            smem = int(model.tile_resident(b.group, b.stream, b.stages, inputs_only=True)[1])
        if smem > lim.smem_per_block_bytes:
            return None, (
                smem / lim.smem_per_block_bytes,
                f"tile {_tile_text(b)} with {b.stages} stages needs {smem:,} B of shared memory "
                f"per block; the {hw.name} allows {lim.smem_per_block_bytes:,} B "
                f"(over by {smem - lim.smem_per_block_bytes:,} B)",
            )
        if b.registers > min(lim.regs_per_thread, MAX_REGISTERS):
            cap = min(lim.regs_per_thread, MAX_REGISTERS)
            return None, (
                b.registers / cap,
                f"tile {_tile_text(b)} needs about {b.registers} registers per thread; the "
                f"{hw.name} allows {cap} (over by {b.registers - cap}; it would spill)",
            )
        if b.threads > lim.threads_per_block:
            return None, (
                b.threads / lim.threads_per_block,
                f"tile {_tile_text(b)} needs {b.threads} threads per block; the {hw.name} "
                f"allows {lim.threads_per_block}",
            )
        per_sm, limiter = self.occupancy(b.threads, b.registers, smem)
        if per_sm < 1:
            return None, (
                2.0,
                f"tile {_tile_text(b)} cannot run: one block exceeds the SM's {limiter}",
            )
        block = Partition(b.group, b.stream)
        parts = {"smem": block, "rf": Partition(b.warp_group, b.warp_stream)}
        if self.l2_capacity is not None:
            wave = self.wave_group(b.group, lim.sms * per_sm, b.splits)
            _, wave_bytes = model.tile_resident(wave, b.stream, b.stages)
            parts["l2"] = Partition(wave, b.stream) if wave_bytes <= self.l2_capacity else block
        for name in self.others:
            parts[name] = block
        block_tile = {**b.group, **b.stream}
        return TileChoice(
            parts, block_tile, b.warps, b.stages, b.splits, b.threads, b.registers, smem
        ), ()

    def wave_group(self, group: Mapping[str, int], wave: int, splits: int) -> dict[str, int]:
        """Union tile of the first `wave` blocks in raster order (the last woven axis
        fastest): what one wave of blocks, running at once, loads through L2."""
        key = (tuple(map(group.__getitem__, self.model.kernel.woven)), wave, splits)
        found = self._waves.get(key)
        if found is None:
            model = self.model
            left = max(wave // splits, 1)
            found = {}
            for a in reversed(model.kernel.woven):
                count = -(-model.sizes[a] // group[a])
                take = min(count, left)
                found[a] = min(take * group[a], model.sizes[a])
                left = max(-(-left // count), 1)
            self._waves[key] = found
        return found


def _tile_text(b: _Block) -> str:
    return " ".join(f"{a}={v}" for a, v in {**b.group, **b.stream}.items() if v > 1)


def _ones(axes: tuple[str, ...], fixed: Mapping[str, int]) -> dict[str, int]:
    return {a: fixed.get(a, 1) for a in axes}


def _gemm_blocks(
    model: KernelModel, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[_Block]:
    d = model.diagram
    t = family.tiles
    m, n, k = family.axes("m")[-1], family.axes("n")[-1], family.axes("k")[-1]
    mm = next(op for op in model.kernel.ops if op.kind == "contract")
    p = min(DTYPE_BYTES[d.tensor(x).dtype] for x in mm.operands if isinstance(x, str))
    mma_k = MMA_K.get(p, 16)
    other = tuple(a for a in model.kernel.woven if a not in (m, n))
    k_opts = _rounded_options(k, t["s_k_fp8"] if p == 1 else t["s_k"], model.sizes[k], fixed, mma_k)
    ones = _ones(other, fixed)
    streams_of = {s_k: {a: (s_k if a == k else fixed.get(a, 1)) for a in streams} for s_k in k_opts}
    out = []
    seen = set()
    for g_m, g_n, s_k, warps in itertools.product(
        _rounded_options(m, t["g_m"], model.sizes[m], fixed, MMA_TILE),
        _rounded_options(n, t["g_n"], model.sizes[n], fixed, MMA_TILE),
        k_opts,
        t["warps"],
    ):
        g_m, g_n, w_m, w_n = _arrange(g_m, g_n, warps)
        if (g_m, g_n, s_k, warps) in seen:
            continue
        seen.add((g_m, g_n, s_k, warps))
        threads = 32 * warps
        fragments = -(-(w_m + w_n) * mma_k * p // (4 * 32))
        group = {**ones, m: g_m, n: g_n}
        stream = streams_of[s_k]
        warp_group = {**group, m: w_m, n: w_n}
        warp_stream = {**stream, k: min(mma_k, s_k)} if k in stream else stream
        registers = estimate_registers(g_m * g_n, threads, fragments)
        for stages in t["stages"]:  # the pipeline depth changes shared memory alone
            out.append(
                _Block(
                    group,
                    stream,
                    warp_group,
                    warp_stream,
                    warps,
                    stages,
                    threads,
                    registers,
                    True,
                )
            )
    return out


@functools.cache
def _arrange(g_m: int, g_n: int, warps: int) -> tuple[int, int, int, int]:
    """(block rows, block columns, warp rows, warp columns) for `warps` warps over a
    g_m x g_n block, as the GEMM kernel runs it: each side a power of two, rounded up to
    whole 16 x 16 mma tiles per warp; the arrangement that pads least, then the squarest
    warp tile."""
    g_m, g_n = _pow2(max(g_m, MMA_TILE)), _pow2(max(g_n, MMA_TILE))
    best: tuple[tuple[int, float], tuple[int, int, int, int]] | None = None
    for wm in (1, 2, 4, 8):
        if warps % wm:
            continue
        wn = warps // wm
        bm, bn = _round_up(g_m, MMA_TILE * wm), _round_up(g_n, MMA_TILE * wn)
        score = (bm * bn, abs(math.log2((bm / wm) / (bn / wn))))
        if best is None or score < best[0]:
            best = (score, (bm, bn, bm // wm, bn // wn))
    assert best is not None
    return best[1]


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _pow2(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()


def _rounded_options(
    axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int], least: int
) -> list[int]:
    """Candidate tiles for an axis the kernel tiles in powers of two of at least `least`
    (an mma tile): each default clamped to the axis rounded up so, so that a small or odd
    axis still gets the smallest legal tile; its padding is counted by the cost model."""
    if axis in fixed:
        return [fixed[axis]]
    return sorted({min(c, max(least, _pow2(size))) for c in defaults})


def _attention_blocks(
    model: KernelModel, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[_Block]:
    d = model.diagram
    t = family.tiles
    (q,), (x,) = family.axes("q"), family.axes("x")
    if x not in streams:
        raise PlanError(
            f"attention kernel {model.kernel.name} needs {x} streamed",
            hint=f"remove {x} from schedule.group and let it stream",
        )
    head = sum(model.sizes[a] for a in family.axes("d"))
    head_v = math.prod(model.sizes[a] for a in family.axes("d_v"))
    p = DTYPE_BYTES[d.tensor(model.kernel.inputs[0]).dtype]
    decode = family.name == "decode_attention"
    out = []
    for g_q, s_x, stages, splits in itertools.product(
        _mma_rows(q, t["g_q"], model.sizes[q], fixed),
        _mma_rows(x, t["s_x"], model.sizes[x], fixed),
        t["stages"],
        t.get("splits", (1,)),
    ):
        if splits > 1 and s_x * splits > model.sizes[x]:
            continue
        warps = t["warps"][0] if decode else max(g_q // 16, 1)
        threads = 32 * warps
        group = {
            a: (g_q if a == q else model.sizes[a] if a in family.axes("d_v") else 1)
            for a in model.kernel.woven
        }
        group.update({a: v for a, v in fixed.items() if a in group and a != q})
        stream = {a: (s_x if a == x else fixed.get(a, 1)) for a in streams}
        accumulators = g_q * head_v + g_q * s_x
        fragments = -(-g_q * head * p // (4 * threads))
        registers = estimate_registers(accumulators, threads, fragments)
        warp_group = group if decode else {**group, q: max(g_q // warps, 1)}
        out.append(
            _Block(
                group, stream, warp_group, stream, warps, stages, threads, registers, True, splits
            )
        )
    return out


def _mma_rows(
    axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int]
) -> list[int]:
    """Candidate query or key tiles of the attention kernels: whole 16-row mma blocks, each
    default clamped to the axis rounded up to 16 (a decode step's one query runs as 16)."""
    if axis in fixed:
        return [_round_up(fixed[axis], MMA_TILE)]
    return sorted({min(c, _round_up(size, MMA_TILE)) for c in defaults})


def _rowwise_blocks(
    model: KernelModel, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[_Block]:
    d = model.diagram
    rows = family.axes("rows")
    (row,) = family.axes("row")
    n = model.sizes[row]
    p = max(DTYPE_BYTES[d.tensor(i).dtype] for i in model.kernel.inputs)
    vec = VECTOR_BYTES // p
    out = []
    last = rows[-1] if rows else None
    row_opts = _options(last, family.tiles["rows"], model.sizes[last], fixed) if last else [1]
    for r, vpt in itertools.product(row_opts, family.tiles["vectors_per_thread"]):
        vpt = max(vpt, -(-n // (vec * 1024)))
        per_row = -(-n // (vec * vpt))
        threads = -(-r * per_row // 32) * 32
        group = {**_ones(rows, fixed), **({last: r} if last else {})}
        if row in model.kernel.woven:
            group[row] = n
        stream: dict[str, int] = {}
        registers = estimate_registers(vec * vpt * max(len(model.kernel.inputs), 1), 1, 0)
        out.append(
            _Block(group, stream, group, stream, threads // 32, 1, threads, registers, False)
        )
    return out


def _elementwise_blocks(
    model: KernelModel, family: Family, streams: tuple[str, ...], fixed: Mapping[str, int]
) -> list[_Block]:
    d = model.diagram
    axes = model.kernel.woven
    if not axes:  # a scalar result: one warp computes it
        return [_Block({}, {}, {}, {}, 1, 1, 32, estimate_registers(1, 1, 0), False)]
    last = axes[-1]
    p = max(DTYPE_BYTES[d.tensor(i).dtype] for i in model.kernel.inputs)
    vec = VECTOR_BYTES // p
    out = []
    for threads, vpt in itertools.product(
        family.tiles["threads"], family.tiles["vectors_per_thread"]
    ):
        tile = fixed.get(last, min(threads * vec * vpt, model.sizes[last]))
        group = {**_ones(axes[:-1], fixed), last: tile}
        registers = estimate_registers(vec * vpt * max(len(model.kernel.inputs), 1), 1, 0)
        out.append(_Block(group, {}, group, {}, threads // 32, 1, threads, registers, False))
    return out
