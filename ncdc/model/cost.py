"""The time of a kernel with one tile choice on one machine (docs/cost-model.md 3 and 7).

`time_kernel` prices a candidate launch: the transfers across every level boundary at the
rates the resident warps reach, the compute units at the rates of the instructions the
kernel issues, the issue slots of its main loop, and the overlap its structure allows;
`evaluate_kernel` adds the residency per level and names the bound; `summarize` totals a
diagram's kernels. Pure functions, no I/O and no GPU. See docs/cost-model.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ncdc.hardware.machine import Hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.language.dtypes import DTYPES
from ncdc.model.geometry import band_imbalance, ragged_imbalance
from ncdc.model.graph import MemoryGraph, Partition
from ncdc.model.issue import ISSUE, LoopMix, issue_time_s
from ncdc.model.launch import Candidate, Family
from ncdc.model.overlap import (
    PIPELINE_LATENCY_S,
    POWER,
    in_flight_efficiency,
    latency_efficiency,
    overlap_compute,
    pingpong_compute,
    pipeline_fill,
    pipeline_stall,
)
from ncdc.model.structure import KernelModel, ops_flops
from ncdc.model.values import KernelPlan, LevelCost, Plan, TileChoice, Transfer, Unfused
from ncdc.units import ceil_div

REGISTER_OVERHEAD = 40  # addresses, loop counters, softmax state: a kernel's fixed registers
MAX_REGISTERS = 255


def estimate_registers(accumulator_values: int, threads: int, fragments: int) -> int:
    """Registers per thread: fp32 accumulators spread over the threads, the operand
    fragments a thread holds, and REGISTER_OVERHEAD. Uncapped: above 255 a kernel spills."""
    return int(ceil_div(accumulator_values, threads) + fragments + REGISTER_OVERHEAD)


Occupancy = Callable[[int, int, int, Any], tuple[int, str]]


class KernelTiming(NamedTuple):
    """The times of one kernel with one tile choice: all a search ranks by, without the
    residency per level that a KernelPlan also reports. (A named tuple, made for every
    candidate of a search.)"""

    transfers: tuple[Transfer, ...]
    compute: Mapping[str, float]  # unit -> seconds
    grid: int
    blocks_per_sm: int
    waves: int
    flops: int = 0  # FLOPs the kernel does (under a causal mask, only the key tiles it visits)
    padding: float = 1.0  # work done over useful work: padded tails and chunks
    launch_s: float = 0.0  # from each launch to its first block running, over the launches
    serial_s: float = 0.0  # the compute units' time as the kernel's structure overlaps them
    fill_s: float = 0.0  # the pipeline fills no other block's work hides (`pipeline_fill`)

    @property
    def times(self) -> dict[str, float]:
        """Unit or upper level -> seconds: the candidates for the bound."""
        return {**self.compute, **{t.upper: t.time_s for t in self.transfers}}

    @property
    def steady_s(self) -> float:
        """The largest of `times` and of the compute units' time as they overlap
        (`overlap_compute`); level and unit names never clash (ncdc.hardware.machine)."""
        slowest = max(self.serial_s, max(self.compute.values(), default=0.0))
        return max([slowest, *(t.time_s for t in self.transfers)])

    @property
    def memory_bound(self) -> bool:
        """Whether a level's transfers set `steady_s`."""
        return max((t.time_s for t in self.transfers), default=0.0) >= self.steady_s

    @property
    def predicted_time_s(self) -> float:
        """The launch, the exposed pipeline fills, then `steady_s`."""
        return self.launch_s + self.fill_s + self.steady_s

    @property
    def top_bytes(self) -> int:
        return self.transfers[0].bytes if self.transfers else 0


def time_kernel(
    model: KernelModel,
    hw: Hardware,
    choice: TileChoice,
    occupancy: Occupancy = blocks_per_sm,
    mix: LoopMix | None = None,
) -> KernelTiming:
    """Transfers, compute time per unit and launch of `model`'s kernel run with `choice` on
    `hw` (docs/cost-model.md 3 and 7). `occupancy` is `blocks_per_sm` or a memo of it.

    On a GPU the launch is the candidate's: its grid, threads, shared memory and register
    budget. A resource of one SM (compute units, SMEM) runs at the pace of the busiest SM
    (`Pace`); a resource the device shares (L2, HBM) at the rate the warps resident on the
    whole device reach."""
    c = choice.candidate
    inner = choice.partitions[hw.block_level if c else hw.levels[-1].name]
    classes = c is not None and c.rule_tiles
    groups, tile_padding, flops = model.tile_work(inner.group, inner.stream, classes)
    if c is not None and c.recomputes:
        flops = _with_recomputed(model, flops, c.recomputes)
    pace = _pace(model, hw, inner, c, groups, tile_padding, occupancy)
    transfers = _transfers(model, hw, choice, pace)
    compute = _compute(model, hw, c, inner, flops, groups, pace, mix)
    # the MMA phase of an FA2-order warp loads its K/V fragments from shared memory
    fragments = transfers[-1].time_s if c is not None and hw.levels[-2].per == "sm" else 0.0
    serial = overlap_compute(compute, bool(model.online) and c is not None, pace.streams, fragments)
    if c is not None and c.pingpong:
        # two consumer warpgroups take turns at the tensor pipe: one's softmax runs under
        # the other's MMAs, for every key tile of the blocks the busiest SM runs
        chunks = math.prod(ceil_div(model.sizes.get(a, n), n) for a, n in inner.stream.items())
        serial = pingpong_compute(compute, chunks * ceil_div(pace.grid, hw.limits.sms))
    power = _power_s(hw, flops, pace) if c is not None and not c.cuda_cores else 0.0
    if power:
        # a ceiling of its own, after the overlap: the clock falls for every unit alike
        compute = {**compute, POWER: power}
    timing = KernelTiming(
        tuple(transfers), compute, int(pace.grid), pace.per_sm, int(pace.waves),
        int(sum(flops.values())), pace.padding,
        hw.launch_s * len(c.launches) if c is not None else 0.0, serial,
    )  # fmt: skip
    if c is None:
        return timing
    return timing._replace(fill_s=_fill_s(model, hw, inner, c, pace, timing, groups))


def _power_s(hw: Hardware, flops: Mapping[tuple[str, str], float], pace: Pace) -> float:
    """The time the power limit sets: the tensor work done (padded tails included) at the
    rate the GPU sustains under full tensor load on random data (`Hardware.power_rate`).
    A kernel whose tensor pipe would be busier than the profile's `power_duty` runs at the
    lower clock that keeps duty x clock there, which comes to this; the limit is the
    device's, so the busiest SM's share does not enter. 0 where the profile knows none."""
    total = 0.0
    for (unit, kind), n in flops.items():
        rate = hw.power_rate(kind) if unit == "tensor" else 0.0
        if rate:
            total += float(n) / rate
    return total * pace.padding


def _fill_s(
    model: KernelModel, hw: Hardware, inner: Partition, c: Candidate, pace: Pace,
    timing: KernelTiming, groups: int,
) -> float:  # fmt: skip
    """The pipeline fills the busiest SM waits for with nothing else to run: before its first
    MMA a block waits for its first chunk (`pipeline_fill`): its chunk of the streamed
    operands and its share of what it loads once (the L2 -> SMEM bytes over the blocks'
    tiles and chunks), at its share of the level they come from. Blocks that hold an SM
    alone (one resident at a time) each wait for their own; where several share an SM, the
    others' work hides every fill but the first wave's, whose blocks load together. In a
    kernel bound by a memory level those bytes are already in its transfer time: only the
    round trip is more. A kernel with no pipeline over a streamed axis (row-wise,
    elementwise) has no fill of this kind."""
    if c.stages < 2 or not inner.stream:
        return 0.0
    into = next((t for t in timing.transfers if t.lower == hw.block_level), None)
    if into is None or not into.bytes:
        return 0.0
    chunks = model.visited_chunks(inner.group, inner.stream)  # a band's, under a mask
    sms = hw.limits.sms
    # a grouped GEMM's blocks past its tiles exit at once (as in `_pace`)
    grid = min(pace.grid, groups * c.splits) if model.grouped else pace.grid
    starts = ceil_div(grid, sms) if pace.streams == 1 else 1
    if timing.memory_bound:
        return starts * PIPELINE_LATENCY_S
    first = into.bytes / (groups * chunks)
    # the level's bandwidth shared by the blocks that load at once
    share = hw.achieved_bandwidth(into.upper) / max(1, min(grid, sms * pace.streams))
    return starts * pipeline_fill(first, share)


class Pace(NamedTuple):
    """How the busiest SM runs a launch. It holds ceil(grid / SMs) blocks (`streams` of them
    resident at once), each doing its share of the groups (more than one where the grid
    strides over them); `balance` is its work over the mean SM's (with a causal or window
    mask's uneven tiles), `sm_slow` what that and the rate its resident warps reach
    (`latency_efficiency`) make of the per-SM resources' times, `device_slow` the same for
    the device-wide levels, `padding` the work done over useful work. On an abstract
    machine, one group per core and no slowdown."""

    grid: int
    per_sm: int
    waves: int
    sm_slow: float
    device_slow: float
    padding: float
    streams: int
    balance: float


def _pace(
    model: KernelModel, hw: Hardware, inner: Partition, c: Candidate | None, groups: int,
    tile_padding: float, occupancy: Occupancy,
) -> Pace:  # fmt: skip
    if c is None:
        return Pace(groups, 1, 1, 1.0, 1.0, 1.0, 1, 1.0)
    per_sm, _ = occupancy(c.threads, min(c.registers, MAX_REGISTERS), c.smem_bytes, hw.limits)
    per_sm = max(per_sm, 1)
    sms = hw.limits.sms
    work = groups * c.splits  # one group's share of one split: what a block does
    # a grouped GEMM's grid bounds its tiles for any offsets; the blocks past them exit at
    # once: the blocks that work are fewer than the launch's
    grid = min(c.grid, work) if model.grouped else c.grid
    blocks = ceil_div(grid, sms)
    busiest = min(work, blocks * ceil_div(work, grid))
    resident = min(per_sm, blocks) * c.warps
    balance = busiest * sms / work
    streams = max(1, min(per_sm, blocks))
    if model.mask:
        balance *= _causal_balance(model, inner, grid, sms * streams, c)
    # Little's law for the device's levels: the loads in flight per SM. A streamed
    # attention ring keeps stages - 1 chunks in flight for each block (one is read)
    ahead = max(1, c.stages - 1) if model.online else 1
    device_slow = 1 / latency_efficiency(min(grid, sms * per_sm) * c.warps * ahead / sms)
    if c.in_flight:  # narrow loads: the bytes the resident warps keep in flight bound it too
        warps = min(grid, sms * per_sm) * c.warps / sms
        share = hw.achieved_bandwidth(hw.levels[0].name) / sms
        device_slow = max(device_slow, 1 / in_flight_efficiency(warps * c.in_flight, share))
    return Pace(
        c.grid, per_sm, ceil_div(grid, sms * per_sm), balance / latency_efficiency(resident),
        device_slow, tile_padding, streams, balance,
    )  # fmt: skip


def _transfers(model: KernelModel, hw: Hardware, choice: TileChoice, pace: Pace) -> list[Transfer]:
    """The traffic across each level boundary and its time at the rate the pace allows."""
    c = choice.candidate
    levels = hw.levels
    transfers = []
    for upper, lower in zip(levels, levels[1:], strict=False):
        part = choice.partitions[lower.name]
        # loads from device memory stop at a tensor's edge; those from shared memory read
        # the zero-filled tail tile whole
        clipped = c is not None and upper.per == "device"
        group = part.group
        if c is not None and c.cluster and lower.name == hw.block_level:
            # a cluster's blocks multicast what they share: the traffic of their joint tile
            group = {**group, **{a: group[a] * n for a, n in c.cluster}}
        top = upper.name == levels[0].name  # into the device's cache: a row read once
        classes = c is not None and c.rule_tiles
        values, nbytes = model.tile_transfer(group, part.stream, clipped, top, classes)
        if c is not None and c.rereads:
            # inputs the kernel reads again from global memory (a long row's second pass);
            # the device memory does not see those the L2 serves
            again = _reread(model, c.rereads)
            served = _reread(model, c.l2_rereads) if top else (0, 0)
            values += again[0] - served[0]
            nbytes += again[1] - served[1]
        if c is not None and c.fragment_rereads and lower.name == levels[-1].name:
            again = _reread(model, c.fragment_rereads)
            values += again[0]
            nbytes += again[1]
        if c is not None and c.accumulates and upper.per == "device":
            more = _accumulated(model, c.accumulates, top)
            values += more[0]
            nbytes += more[1]
        if choice.splits > 1 and lower.name != levels[-1].name:
            # partial outputs, fp32, and the running max and sum of each row, saved then read
            merge_values = 2 * choice.splits * model.output_values
            values += merge_values
            nbytes += merge_values * 4
        bandwidth = hw.achieved_bandwidth(upper.name)
        slow = pace.device_slow if upper.per == "device" else pace.sm_slow
        transfers.append(
            Transfer(
                upper.name, lower.name, int(values), int(nbytes), bandwidth,
                float(nbytes) / bandwidth * slow,
            )
        )  # fmt: skip
    return transfers


def _compute(
    model: KernelModel, hw: Hardware, c: Candidate | None, inner: Partition,
    flops: Mapping[tuple[str, str], float], groups: int, pace: Pace, mix: LoopMix | None,
) -> dict[str, float]:  # fmt: skip
    """Seconds per compute unit at its rate, slowed as the pace says (and a GEMM's ring by
    its stalls), with the main loop's issue slots as a unit of their own."""
    compute: dict[str, float] = {}
    for (unit, kind), n in flops.items():
        compute[unit] = compute.get(unit, 0.0) + float(n) / unit_rate(hw, unit, kind, c)
    stall = 1.0
    if c is not None and c.stages > 1 and not model.online:
        # a GEMM's cp.async ring (attention's double buffer is priced by its warps)
        chunks = model.visited_chunks(inner.group, inner.stream)  # a band's, under a mask
        # every group's k tiles are done once, split or not; a split's loop runs its share
        tile_s = max(compute.values(), default=0.0) * hw.limits.sms / (groups * chunks)
        stall = pipeline_stall(c.stages, pace.streams, tile_s, int(ceil_div(chunks, c.splits)))
    compute = {unit: t * pace.sm_slow * pace.padding * stall for unit, t in compute.items()}
    if mix is not None and c is not None:
        # the main loops' instructions at the SMs' issue rate: a ceiling no overlap of warps
        # passes (the busiest SM's share, with the padded tails it computes)
        tensor = sum(float(n) for (unit, _), n in flops.items() if unit == "tensor")
        compute[ISSUE] = issue_time_s(mix, tensor, hw) * pace.padding * pace.balance
    return compute


def _causal_balance(
    model: KernelModel, inner: Partition, grid: int, slots: int, c: Candidate
) -> float:
    """`causal_imbalance` for a causal kernel's block tile; the blocks over the other woven
    axes (batch, heads) are grid / (query tiles x splits). A candidate that splits the keys
    (`split_size`) gives each split its own range of chunks."""
    assert model.mask is not None
    query, key, lo, hi = model.mask
    queries, keys = model.sizes[query], model.sizes[key]
    if query in inner.stream and key not in inner.stream:
        # blocks of keys, queries streamed (attention's backward): the same geometry with
        # the axes' roles swapped, key j seen by the queries j - hi <= i <= j - lo
        grid_keys = ceil_div(keys, inner.group.get(key, keys))
        return band_imbalance(
            keys, queries, inner.group.get(key, keys), inner.stream[query],
            None if hi is None else -hi, None if lo is None else -lo,
            max(1, grid // grid_keys), slots, False,
        )  # fmt: skip
    g_q = inner.group.get(query, queries)
    s_x = inner.stream.get(key, keys)
    tiles = ceil_div(queries, g_q)
    split_chunks = c.split_size // s_x if c.splits > 1 else 0
    batches = max(1, grid // (tiles * c.splits))
    if model.ragged:  # never split (attention_splitk)
        r = model.ragged
        return ragged_imbalance(queries, keys, g_q, s_x, lo, hi, r.rows, r.packed, batches, slots)
    return band_imbalance(queries, keys, g_q, s_x, lo, hi, batches, slots, True, split_chunks)


def _with_recomputed(
    model: KernelModel, flops: Mapping[tuple[str, str], float],
    recomputes: tuple[tuple[str, float], ...],
) -> dict[tuple[str, str], float]:  # fmt: skip
    """`flops` and those of the operations a later launch computes again, at its share."""
    out = dict(flops)
    by_out = {op.out: op for op in model.kernel.ops}
    for name, share in recomputes:
        for key, n in ops_flops(model.diagram, [by_out[name]]).items():
            out[key] = out.get(key, 0) + n * share
    return out


def _reread(model: KernelModel, rereads: tuple[tuple[str, int], ...]) -> tuple[int, int]:
    """(values, bytes) of the extra whole reads of inputs that a candidate declares."""
    d = model.diagram
    values = sum(d.size(d.tensor(name)) * times for name, times in rereads)
    nbytes = sum(
        d.size(d.tensor(name)) * times * DTYPES[d.tensor(name).dtype].bytes
        for name, times in rereads
    )
    return values, nbytes


def _accumulated(model: KernelModel, accumulates: tuple[tuple[str, float], ...], top: bool
                 ) -> tuple[int, int]:  # fmt: skip
    """(values, bytes) of outputs accumulated by fp32 atomics: into the L2 every add (4 bytes
    a value each time); out of device memory the fp32 workspace once each way (the last
    launch reads it and writes the output, counted with the outputs)."""
    d = model.diagram
    values = nbytes = 0.0
    for name, adds in accumulates:
        n = d.size(d.tensor(name))
        values += n * (2 if top else adds)
        nbytes += n * 4 * (2 if top else adds)
    return round(values), round(nbytes)


def evaluate_kernel(
    model: KernelModel,
    family: Family,
    hw: Hardware,
    choice: TileChoice,
    mix: LoopMix | None,
) -> KernelPlan:
    """The cost of `model`'s kernel run with `choice` on `hw` (docs/cost-model.md 3-7); the
    main loop's issue slots are `mix` (the SASS's, or the family's estimate: the plan
    layer asks the family), None where the kernel has no modelled loop."""
    timing = time_kernel(model, hw, choice, mix=mix)
    c = choice.candidate
    level_costs = [_top_level(model, hw)]
    for level in hw.levels[1:]:
        part = choice.partitions[level.name]
        if c and level.name == hw.block_level:
            values, nbytes = model.resident(part.group, part.stream, c.stages, True, c.unstaged)
        elif c and level.name == hw.register_level:
            values = c.threads * min(c.registers, MAX_REGISTERS)
            nbytes = values * 4
        else:
            values, nbytes = model.resident(part.group, part.stream)
        level_costs.append(LevelCost(level.name, level.capacity_bytes, int(values), int(nbytes)))
    compute = timing.compute
    # the compute units' time as the kernel's structure overlaps them (overlap_compute)
    compute_time = max(timing.serial_s, max(compute.values(), default=0.0))
    unit = max(compute, key=lambda u: compute[u]) if compute else "tensor"
    if compute and timing.serial_s > compute[unit]:
        unit = "tensor"
    candidates = timing.times
    bound = max(candidates, key=lambda k: candidates[k]) if candidates else unit
    if candidates and timing.serial_s > candidates[bound]:
        bound = "tensor"  # the MMAs and the softmax they serialise with (overlap_compute)
    return KernelPlan(
        kernel=model.kernel,
        family=family,
        tiles=dict(choice.partitions),
        block_tile=dict(choice.block_tile),
        warps=choice.warps,
        stages=choice.stages,
        grid=timing.grid,
        blocks_per_sm=timing.blocks_per_sm,
        registers_per_thread=min(c.registers, MAX_REGISTERS) if c else 0,
        smem_bytes=c.smem_bytes if c else 0,
        flops=timing.flops,
        levels=tuple(level_costs),
        transfers=timing.transfers,
        compute_time_s=compute_time,
        predicted_time_s=timing.predicted_time_s,
        # the power limit is no resource of its own: it slows the others (not summed)
        predicted_time_no_overlap_s=timing.launch_s
        + timing.fill_s
        + sum(t for name, t in candidates.items() if name != POWER),
        bound=bound,
        compute=compute,
        splits=choice.splits,
        waves=timing.waves,
        unit=unit,
        candidate=c,
        instructions=mix if c is not None else None,
        launch_s=timing.launch_s,
        fill_s=timing.fill_s,
    )


def _top_level(model: KernelModel, hw: Hardware) -> LevelCost:
    top = hw.levels[0]
    return LevelCost(top.name, top.capacity_bytes, model.top_values, model.top_bytes)


def unit_rate(hw: Hardware, unit: str, kind: str, c: Candidate | None = None) -> float:
    """The rate of `unit` for `kind`; a tensor type the GPU lacks (fp8 on an A100) runs at
    its 16-bit rate, as the inputs are widened. A candidate whose family prices its own
    tensor instruction (`tensor_share`: wgmma on Hopper) runs at that share of the peak
    instead of the mma.sync share; one on `cuda_cores` at the fp32 CUDA-core
    rate."""
    rates = hw.rates.get(unit, {})
    if unit == "tensor" and c is not None and c.cuda_cores:
        # a family that runs its contraction as fp32 FMAs on CUDA cores (GEMV)
        return hw.achieved_rate("cuda", "fp32")
    own = c.tensor_share if c is not None else 0.0
    if unit == "tensor" and own and kind in rates:
        return hw.achieved_rate(unit, kind) * own
    if unit == "tensor":
        # ncdc's kernels issue mma.sync, which reaches only part of Hopper's peak.
        if kind.startswith("fp8") and hw.mma_sync_share < 1 and "fp16" in rates:
            # Hopper has no fp8 mma.sync: ptxas emits two fp16 HMMAs (and FADDs) for each
            # m16n8k32, so fp8 runs at the fp16 mma.sync rate, not a share of the fp8 peak.
            kind = "fp16"
        kind = next((k for k in (kind, "bf16", "fp16") if k in rates), "")
        if not kind:
            return hw.achieved_rate("cuda", "fp32")
        return hw.achieved_rate(unit, kind) * hw.mma_sync_share
    if kind in rates:
        return hw.achieved_rate(unit, kind)
    return hw.achieved_rate(unit, next(iter(rates)))


def summarize(
    graph: MemoryGraph, kernels: tuple[KernelPlan, ...], unfused: Unfused | None = None
) -> Plan:
    """Totals over kernels: transfers per boundary summed, times summed kernel by kernel."""
    transfers: list[Transfer] = list(kernels[0].transfers)
    for k in kernels[1:]:
        transfers = [a.plus(b) for a, b in zip(transfers, k.transfers, strict=True)]
    predicted = sum(k.predicted_time_s for k in kernels)
    # the bound of the whole: the resource with the most time summed over kernels
    totals: dict[str, float] = {}
    for k in kernels:
        for unit, t in k.compute.items():
            totals[unit] = totals.get(unit, 0.0) + t
        if k.unit in k.compute:  # what the softmax serialised with the MMAs adds
            totals[k.unit] += max(0.0, k.compute_time_s - k.compute[k.unit])
        for tr in k.transfers:
            totals[tr.upper] = totals.get(tr.upper, 0.0) + tr.time_s
    bound = max(totals, key=lambda r: totals[r])
    return Plan(
        graph=graph,
        kernels=kernels,
        flops=sum(k.flops for k in kernels),
        transfers=tuple(transfers),
        compute_time_s=sum(k.compute_time_s for k in kernels),
        predicted_time_s=predicted,
        predicted_time_no_overlap_s=sum(k.predicted_time_no_overlap_s for k in kernels),
        launch_s=sum(k.launch_s for k in kernels),
        fill_s=sum(k.fill_s for k in kernels),
        bound=bound,
        unfused=unfused,
    )
