"""How a kernel's units and memory levels overlap in time: latency hiding by resident warps,
pipeline stalls, the serial softmax chain of FlashAttention-2 order, producer/consumer
pipelines and ping-pong warpgroups (FlashAttention-3 order), and warpgroup budgets
(the paper's sec. 5.6). Pure functions of times and counts; docs/cost-model.md derives each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ncdc.hardware.machine import Hardware
from ncdc.model.issue import ISSUE

# Warps resident per SM at which a unit or a memory level reaches its peak (Little's law:
# work in flight = latency x rate). Two warps per SM sub-partition: on sm_80/sm_90 an
# mma.sync warp alternates ldmatrix (~30 cycles of SMEM latency at 128 B/clock/SM, so about
# 3.8 KiB in flight, eight 512-byte ldmatrix.x4) and math, and one warp per sub-partition
# leaves the tensor pipe idle while it waits; an L2 or HBM stream needs latency x bandwidth
# in flight (H100: ~260 cycles x ~38 B/clock/SM ~ 10 KB per SM for L2, ~600 ns x 4.8 TB/s
# / 132 SMs ~ 22 KB for HBM), that is 8 warps with 2-4 KiB of 16-byte loads each. See
# docs/cost-model.md, "Latency hiding".
SATURATION_WARPS = 8
# The latency a GEMM's cp.async ring must cover: a k tile's copies are waited for at one
# barrier, so the slowest of them counts, from HBM under the load of every SM. ~600 ns idle
# (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023), about twice
# that with the memory busy; CUTLASS's sm_80 tensor-op GEMMs run 3-5 stages of 32-64 deep
# k tiles, which covers about this. See docs/cost-model.md, "Pipeline stages".
PIPELINE_LATENCY_S = 1.2e-6
# The latency a load waits for in a kernel that streams device memory with narrow loads
# (a reduction's columns, 2 bytes a thread): ~600 ns idle on an H100 (Chips and Cheese, as
# above). Its share of the rate is the bytes an SM has in flight over latency x its share
# of the bandwidth (Little's law): ncdc's column softmax at commit b9f9eb6, 8 warps of 512
# bytes an SM, was measured at 12% of the copy rate on an H200, against 26% by this count
# (600 ns, 3.5 TB/s) and 11% by its SASS's round trips (benchmarks/static_speed.py).
MEMORY_LATENCY_S = 0.6e-6
# The name of the power limit's time among a kernel's compute units (cost._power_s): a
# ceiling, like the issue slots, that no overlap of the other units passes.
POWER = "power"


def in_flight_efficiency(bytes_per_sm: float, bandwidth_per_sm: float) -> float:
    """Fraction of a device memory's rate an SM reaches with `bytes_per_sm` of loads in
    flight, its share of the rate being `bandwidth_per_sm` bytes a second (Little's law).

        >>> round(in_flight_efficiency(4096, 3.5e12 / 132), 2)
        0.26
    """
    need = MEMORY_LATENCY_S * bandwidth_per_sm
    return min(1.0, bytes_per_sm / need) if need > 0 else 1.0


def latency_efficiency(warps_per_sm: float) -> float:
    """Fraction of a unit's or a memory level's peak reached with `warps_per_sm` warps
    resident per SM: the work in flight grows with the warps until it covers latency x
    rate (Little's law), at SATURATION_WARPS, and the peak holds beyond.

        >>> latency_efficiency(4), latency_efficiency(8), latency_efficiency(16)
        (0.5, 1.0, 1.0)
    """
    return min(1.0, warps_per_sm / SATURATION_WARPS)


def pipeline_stall(stages: int, blocks: int, tile_s: float, tiles: int) -> float:
    """How much slower than its rates an SM multiplies when a k loop of `tiles` k tiles with
    `stages` pipeline slots waits for its copies: `stages - 1` k tiles are in flight while
    one is multiplied, and `blocks` resident blocks take turns, so a copy has
    (stages - 1) x blocks x `tile_s` (one block's k tile at the SM's rate) to arrive, and
    needs PIPELINE_LATENCY_S (Little's law). The first `stages - 1` tiles are the fill, whose
    latency no depth hides (`pipeline_fill` prices it); each later tile waits the shortfall.

        >>> pipeline_stall(2, 1, 0.6e-6, 8), pipeline_stall(3, 1, 0.6e-6, 8)
        (1.875, 1.0)
        >>> pipeline_stall(2, 1, 0.6e-6, 1), pipeline_stall(1, 1, 1.0, 8)
        (1.0, 1.0)
    """
    if stages < 2 or tile_s <= 0 or tiles < stages:
        return 1.0
    per_tile = max(1.0, PIPELINE_LATENCY_S / ((stages - 1) * blocks * tile_s))
    return 1.0 + (per_tile - 1.0) * (tiles - (stages - 1)) / tiles


def pipeline_fill(first_bytes: float, bandwidth_per_sm: float) -> float:
    """Seconds a block waits before its first MMA: its first chunk's copies, waited for at
    one barrier (PIPELINE_LATENCY_S, the slowest copy under load), their bytes at the SM's
    share of the level they come from. No depth of the ring hides this; only other work on
    the SM does.

        >>> round(pipeline_fill(64 * 1024, 7e12 / 132) * 1e6, 2)   # 64 KiB from an H100's L2
        2.44
    """
    return PIPELINE_LATENCY_S + first_bytes / bandwidth_per_sm


def overlap_compute(
    compute: Mapping[str, float], softmax_chain: bool, streams: int, fragments_s: float = 0.0
) -> float:
    """The compute units' time as the kernel's structure overlaps them.

    Without an online softmax (GEMM, row-wise, elementwise), the units work for different
    warps at once and the slowest sets the time. In FlashAttention-2 order a warp runs its
    MMAs (tensor) and then its softmax (max, exp, sum, rescale: CUDA cores and SFU, one
    dependent chain) on the same scores: within a warp they serialise, and the warps of one
    block march in step between the barriers of each key chunk. Only the `streams` blocks
    resident per SM run independently; of the shorter phase, (streams - 1) / streams is
    hidden by the others. One stream is fully serial (the paper's sec. 6), many overlap.
    The MMA phase also reads the K and V fragments from shared memory (`fragments_s`, the
    SMEM -> register transfer's time: ldmatrix feeding the MMAs of the same warp), which
    the softmax does not touch: the phase lasts max(MMAs, fragment loads), and what the
    softmax serialises with is that.

        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, True, 1)
        1.5
        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, True, 2)
        1.25
        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, False, 1)
        1.0
    """
    issue = compute.get(ISSUE, 0.0)
    if not softmax_chain or "tensor" not in compute:
        return max(compute.values(), default=0.0)
    mma = max(compute["tensor"], fragments_s)
    softmax = sum(t for unit, t in compute.items() if unit not in ("tensor", ISSUE, POWER))
    hidden = (streams - 1) / streams * min(mma, softmax) if streams > 1 else 0.0
    # however many streams overlap, every instruction still takes an issue slot
    return max(mma + softmax - hidden, issue)


def pipeline_time(
    tiles: int, stages: int, load_s: float, compute_s: float, issue_s: float = 0.0
) -> float:
    """Seconds for `tiles` tiles through a producer/consumer pipeline of `stages` shared
    buffers: a producer (a TMA or cp.async warp) fills a free buffer with the next tile in
    `load_s`, the consumers compute on a full one in `compute_s`, and each waits for the
    other through the buffers' barriers. One buffer serialises them: tiles x (load +
    compute). With two or more the producer runs ahead and the slower side sets the pace:
    the first load and the last compute are exposed, load + compute + (tiles - 1) x
    max(load, compute). (Deterministic times: more stages only absorb jitter, which this
    does not model.) `issue_s` is one tile's instructions at the SM's issue rate, producer
    and consumers together: however they overlap, the pipeline is no faster than
    tiles x issue_s.

        >>> pipeline_time(4, 1, 1.0, 2.0)    # serial: 4 x 3
        12.0
        >>> pipeline_time(4, 2, 1.0, 2.0)    # 1 + 2 + 3 x 2: the consumers bound
        9.0
        >>> pipeline_time(4, 3, 3.0, 2.0)    # 3 + 2 + 3 x 3: the producer bounds
        14.0
        >>> pipeline_time(4, 2, 1.0, 2.0, issue_s=2.5)   # the issue slots bound
        10.0
    """
    if tiles <= 0:
        return 0.0
    if stages <= 1:
        overlapped = tiles * (load_s + compute_s)
    else:
        overlapped = load_s + compute_s + (tiles - 1) * max(load_s, compute_s)
    return max(overlapped, tiles * issue_s)


def pingpong_time(tiles: int, mma_s: float, other_s: float, issue_s: float = 0.0) -> float:
    """Seconds for `tiles` tiles shared by a ping-pong pair of consumer warpgroups (as
    FlashAttention-3 schedules them): each tile is `mma_s` on the tensor pipe, which the
    pair shares, then `other_s` off it (the softmax, or an epilogue) on the warpgroup's own
    chain; a named barrier hands the tensor pipe from one warpgroup to the other, so one's
    softmax runs under the other's MMAs. In steady state a pair of tiles takes the longer
    of the pipe's 2 x mma and one warpgroup's mma + other: per tile max(mma, (mma +
    other) / 2). The last tile's `other_s` has no partner MMA to hide under. `issue_s` as
    in `pipeline_time`.

        >>> pingpong_time(8, 1.0, 0.5)   # tensor-bound: 8 x 1, then the last softmax
        8.5
        >>> pingpong_time(8, 1.0, 3.0)   # softmax-bound: 8 x (1 + 3) / 2 + 3
        19.0
        >>> pingpong_time(8, 1.0, 0.5, issue_s=1.25)
        10.0
    """
    if tiles <= 0:
        return 0.0
    steady = tiles * max(mma_s, (mma_s + other_s) / 2) + other_s
    return max(steady, tiles * issue_s)


def pingpong_compute(compute: Mapping[str, float], tiles: int) -> float:
    """The compute units' time of a kernel whose two consumer warpgroups ping-pong
    (`pingpong_time`): `tiles` key tiles one after the other on an SM, each the tensor
    time's share on the pipe and the rest of the units' (the softmax's FP32 work) off it,
    the issue slots a ceiling.

    The exponentials (`sfu`, MUFU.EX2) are counted with the MMAs, not hidden under the other
    warpgroup's: FlashAttention-3's measured shares of the H100's peak, 50%, 65% and 76% at
    d = 64, 128 and 256 (its Fig. 5; benchmarks/external/fa3_h100.yaml), are the serial sum
    of the MMAs and the exponentials (1 exp per score against 4d FLOPs: 1/2, 2/3 and 4/5 of
    the peak), as the paper's sec. 6 reads them (a softmax costing 33% of the fp16 MMA time
    gives 75%), not the hidden softmax the schedule aims for.

        >>> pingpong_compute({"tensor": 8.0, "cuda": 2.0}, 8)   # 8 x 1, then the last 0.25
        8.25
        >>> pingpong_compute({"tensor": 8.0, "cuda": 2.0, "sfu": 2.0}, 8)   # 8 x 1.25 + 0.25
        10.25
    """
    tiles = max(1, tiles)
    mma = compute.get("tensor", 0.0) + compute.get("sfu", 0.0)
    other = sum(t for unit, t in compute.items() if unit not in ("tensor", "sfu", ISSUE, POWER))
    return pingpong_time(tiles, mma / tiles, other / tiles, compute.get(ISSUE, 0.0) / tiles)


def warpgroups_per_sm(capacity: float, per_block: float, per_warpgroup: float) -> float:
    """Warpgroups one SM holds by one resource (the paper's sec. 5.6): what is left of the
    SM's `capacity` after a thread block's shared part, over each warpgroup's own part,
    (M_max - M_TB) / M_WG. A kernel runs the smallest of these over its resources, rounded
    down.

        >>> warpgroups_per_sm(228, 48, 48)      # H100 shared memory, KB: 3.75
        3.75
        >>> round(warpgroups_per_sm(256, 0, 74.75), 2)   # registers, KB: 3.42
        3.42
    """
    return (capacity - per_block) / per_warpgroup


@dataclass(frozen=True)
class WarpgroupBudget:
    """What one thread block keeps for itself and what each of its warpgroups (4 warps,
    128 threads) adds, in shared memory and in registers (bytes): the paper's M_TB and
    M_WG per resource (sec. 5.6)."""

    smem_block: float
    smem_warpgroup: float
    regs_block: float = 0.0
    regs_warpgroup: float = 0.0


WARPGROUP_THREADS = 128


def warpgroups_fit(hw: Hardware, budget: WarpgroupBudget) -> tuple[int, dict[str, float]]:
    """Warpgroups one SM of `hw` runs under `budget`: per resource (shared memory per SM,
    the register file, threads) `warpgroups_per_sm`, and the whole number the tightest
    allows; with the per-resource counts.

        >>> from ncdc.hardware.load import load_hardware
        >>> h100 = load_hardware("h100")   # 228 KiB of shared memory per SM
        >>> n, per = warpgroups_fit(h100, WarpgroupBudget(48 * 1024, 48 * 1024))
        >>> n, round(per["smem"], 2)
        (3, 3.75)
    """
    lim = hw.limits
    per = {
        "smem": warpgroups_per_sm(lim.smem_per_sm_bytes, budget.smem_block, budget.smem_warpgroup),
        "threads": lim.threads_per_sm / WARPGROUP_THREADS,
    }
    if budget.regs_warpgroup:
        per["registers"] = warpgroups_per_sm(
            lim.regs_per_sm * 4, budget.regs_block, budget.regs_warpgroup
        )
    return max(0, math.floor(min(per.values()))), per
