"""The Hopper GEMM variant of the gemm family: TMA, an mbarrier ring, warp-specialised
warpgroups and wgmma (templates/gemm_wgmma.cu.j2, wgmma_gemm in ncdc_hopper.cuh).

One block of 384 threads runs 128 x BN output tiles persistently (tile b, b + grid, ...,
rasterised GROUP_M tile rows at a time): warpgroup 0 drops to 40 registers (setmaxnreg) and
one of its threads issues the TMA loads of each k tile (one 128-byte swizzle row: 64 values
of 16 bits or 128 of fp8) into a ring of `stages` slots; warpgroups 1 and 2 rise to 232
registers and each multiplies 64 rows with wgmma m64nBNk16 (fp8: k32, QGMMA) from
128-byte-swizzled descriptors, keeping one k tile in flight. Tails in m, n and k are TMA's
out-of-bounds zeros; the epilogue applies the gemm family's fused ops to the accumulators
and, for a 16-bit C in [batch,] m, n order, writes the tile into swizzled shared boxes that
one thread stores by TMA (kernel name `_tmastore`; clipped at the tails), else stores C
directly. With `cluster = 2` (kernel name `_c2`) two CTAs
along m form a thread-block cluster sharing each B tile: each loads half of it and
multicasts it to both, and the model counts the pair's joint L2 -> shared-memory traffic
(`Candidate.cluster`).

The candidates join the mma.sync ones on sm_90a profiles, and the model picks per shape.
Their price: the model's usual traffic and tile padding, with the tensor rate at the full
peak times `pipeline_share` (the candidate's `tensor_share`), in place of the
mma.sync share. wgmma's 8-bit operands exist only K-major: an n-contiguous fp8 B lands in
a staging slot and the producer warpgroup's other three warps transpose it into the K-major
slot (`transposes_b`; its shared-memory traffic is in `pipeline_share`). Several batch axes
run as one flat batch index where every tensor holds a run of them next to each other, or
none (`batch_run`). Layout limits (TMA needs 16-byte aligned strides) leave a kernel with
only the mma.sync candidates.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h200"))
    >>> plan.kernels[0].candidate.param("wgmma")
    1
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ncdc.families.base import KernelSource, Launch, Param, TensorMapSpec, permille
from ncdc.families.codegen import axis_pitch, cpp_type, size_name
from ncdc.families.gemm.core import contraction
from ncdc.hardware.arch import WGMMA_FP8_SUM
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan


class Operands(Protocol):
    """What this variant reads of the gemm family's operands (ncdc.families.gemm.core.Operands,
    handed over by the family, which imports this module)."""

    @property
    def a(self) -> Tensor: ...
    @property
    def b(self) -> Tensor: ...
    @property
    def c(self) -> Tensor: ...
    @property
    def m(self) -> str: ...
    @property
    def n(self) -> str: ...
    @property
    def k(self) -> str: ...
    @property
    def batch(self) -> tuple[str, ...]: ...
    @property
    def a_k(self) -> bool: ...
    @property
    def b_k(self) -> bool: ...
    @property
    def ends(self) -> str: ...
    @property
    def index(self) -> str: ...
    @property
    def blocks(self) -> str: ...


ARCH = "sm_90a"  # wgmma, TMA and setmaxnreg are sm_90a features
# wgmma k16 / k32 from descriptors; int8 sums exactly in int32 (.s32.s8.s8)
INPUT_DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8")
ROWS = 64  # rows of the block tile a consumer warpgroup takes (wgmma m64)
# consumer warpgroups: two (a 128-row tile, the producer's registers given to them), or
# one (a 64-row tile for skinny GEMMs, m <= 128: no register rebalancing)
CONSUMERS = (2, 1)
SPAN = 128  # swizzle span in bytes: one k tile row
THREADS = 384  # the two-consumer kernel: the producer warpgroup and two consumers
LAUNCH_REGISTERS = 168  # 65536 / 384 rounded down to 8: ptxas's budget under launch bounds
CONSUMER_REGISTERS = 232  # setmaxnreg.inc for the consumers (128 * (40 + 2 * 232) <= 65536)
REGISTER_OVERHEAD = 48  # a consumer's addressing, descriptors and epilogue besides its acc
GROUP_M = 8  # tile rows per raster group
TILES: dict[str, tuple[int, ...]] = {"n": (64, 128, 256), "stages": (3, 4, 5, 6)}
# CTAs of a thread-block cluster along m: the pair's B tile is loaded once, half by each CTA,
# and multicast to both (docs/compile.md); 1 is no cluster
CLUSTERS = (1, 2)
# Pipeline timing (cycles): a TMA load's latency from issue to landing (an L2 miss, of the
# order published microbenchmarks measure on H100: about 500-1000 cycles for HBM), and the
# producer thread's cost to issue one TMA or mbarrier operation.
TMA_LATENCY_CYCLES = 1000
ISSUE_CYCLES = 64


def offered(hw: Hardware) -> bool:
    """Whether `hw` runs this variant (an sm_90a profile: h100, h200)."""
    return hw.arch == ARCH


def is_wgmma(c: Candidate) -> bool:
    return dict(c.params).get("wgmma", 0) == 1


def mma_tile_s(hw: Hardware, dtype: str, bn: int, bm: int = 2 * ROWS) -> float:
    """Seconds one SM's tensor cores take for a bm x bn x (128 bytes of k) tile at peak."""
    per_sm = hw.achieved_rate("tensor", dtype) / hw.limits.sms
    return 2.0 * bm * bn * (SPAN // DTYPES[dtype].bytes) / per_sm


def stores_c_by_tma(ops: Operands, d: Diagram) -> bool:
    """Whether the epilogue stores C through shared memory and TMA: a 16-bit C laid out
    [batch,] m, n (n contiguous) with strides TMA can take; else it stores C directly."""
    c = ops.c
    return (
        DTYPES[c.dtype].bytes == 2
        and tuple(c.axes) == (*batch_order(ops), ops.m, ops.n)
        and _strides_aligned(c, d, 2)
    )


def pipeline_share(
    hw: Hardware, dtype: str, bn: int, stages: int, loads: int, *, transpose: bool = False,
    consumers: int = 2,
) -> float:  # fmt: skip
    """The share of the tensor peak the ring sustains: per k tile a block needs the MMA
    time of its (64 x consumers) x bn x bk tile (bk: 128 bytes of k), the producer's issue time (its
    `loads` TMA copies plus an mbarrier wait and arrive, and one more arrive when B is
    staged), the shared-memory time of the bytes wgmma reads (each consumer its 64 rows of
    A and all of B) plus, with `transpose`, the staged B tile read and written again by the
    transposing warps, and, with `stages` slots in flight, one TMA latency per `stages` k
    tiles; the slowest sets the pace (Little's law).

    >>> from ncdc.hardware.load import load_hardware
    >>> round(pipeline_share(load_hardware("h200"), "bf16", 128, 4, 3), 2)
    1.0
    >>> round(pipeline_share(load_hardware("h200"), "bf16", 64, 3, 2), 2)
    0.66
    >>> round(pipeline_share(load_hardware("h200"), "fp8_e4m3", 128, 4, 2, transpose=True), 2)
    0.87
    >>> round(pipeline_share(load_hardware("h200"), "bf16", 128, 4, 2, consumers=1), 2)
    0.88
    """
    clock = hw.achievable.clock_hz or hw.clock_hz
    esize = DTYPES[dtype].bytes
    bk = SPAN // esize
    mma_s = mma_tile_s(hw, dtype, bn, ROWS * consumers)
    issue_s = (loads + 2 + int(transpose)) * ISSUE_CYCLES / clock
    smem_bytes = (consumers * (ROWS + bn) + (2 * bn if transpose else 0)) * bk * esize
    smem_s = smem_bytes / (hw.achieved_bandwidth(hw.block_level) / hw.limits.sms)
    fill_s = (TMA_LATENCY_CYCLES / clock + issue_s) / stages
    return mma_s / max(mma_s, issue_s, smem_s, fill_s)


def transposes_b(ops: Operands) -> bool:
    """8-bit wgmma operands exist only K-major: an n-contiguous fp8 B is staged as TMA
    lands it and transposed into a K-major slot by the producer warpgroup's other warps."""
    return DTYPES[ops.b.dtype].bytes == 1 and not ops.b_k


def _strides_aligned(t: Tensor, d: Diagram, esize: int) -> bool:
    """TMA needs every stride but the innermost a multiple of 16 bytes."""
    for axis in t.axes[:-1]:
        pitch = math.prod(d.axes[a] for a in t.axes[t.axes.index(axis) + 1 :])
        if pitch * esize % 16:
            return False
    return True


def batch_run(batch: tuple[str, ...], t: Tensor) -> tuple[int, int] | None:
    """The batch axes `t` holds as indices [i, j) into `batch`: a run of them next to each
    other in `t` and in `batch`'s order ((0, 0): none, the same for every batch), so that
    digits i..j - 1 of the flat batch index times the run's innermost pitch address it (one
    dimension of a tensor map); None where `t` holds them otherwise.

        >>> from ncdc.language.diagram import Tensor
        >>> batch = ("b", "h")
        >>> batch_run(batch, Tensor("Q", ("b", "h", "q", "d"), "bf16"))
        (0, 2)
        >>> batch_run(batch, Tensor("bias", ("h", "e"), "bf16"))  # h alone: z's last digit
        (1, 2)
        >>> batch_run(batch, Tensor("W", ("d", "e"), "bf16"))  # none: every batch's
        (0, 0)
        >>> batch_run(batch, Tensor("Q", ("h", "b", "q", "d"), "bf16"))  # the other order
        >>> batch_run(batch, Tensor("Q", ("b", "q", "h", "d"), "bf16"))  # apart
    """
    held = tuple(a for a in t.axes if a in batch)
    if not held:
        return (0, 0)
    i, at = batch.index(held[0]), t.axes.index(held[0])
    if batch[i : i + len(held)] != held or t.axes[at : at + len(held)] != held:
        return None
    return (i, i + len(held))


def batch_digits(batch: tuple[str, ...], t: Tensor) -> dict[str, Any]:
    """How `t` (holding a `batch_run`) finds its batch from the flat index z: its pitch
    (the run's innermost, or none) and, for a run of some of the axes only, z's digits as
    `z / div % mod` (size parameters to multiply; `split` false: z itself)."""
    run = batch_run(batch, t)
    assert run is not None, "the candidates take only tensors holding a run of the batch axes"
    i, j = run
    return {
        "pitch_z": axis_pitch(t, batch[j - 1]) if j else None,
        "split": j > 0 and (i, j) != (0, len(batch)),
        "div": [size_name(a) for a in batch[j:]],
        "mod": [size_name(a) for a in batch[i:j]],
    }


def _runs(ops: Operands, d: Diagram, mm: Op, tensors: Iterable[Tensor] = ()) -> bool:
    """Whether the template runs these operands: two inputs of one 16-bit or 8-bit type (an
    8-bit B that is n-contiguous is transposed in shared memory; int8 only into a result
    the epilogue converts: an int32 C stays exact on mma.sync), A k-contiguous, each batch
    axis held by A or B, every tensor of the kernel (`tensors` too) holding a `batch_run`
    of them and C all, strides TMA can take; not a grouped GEMM, nor one gathering A's rows
    (its tensor maps copy boxes of one slice of B and of contiguous rows of A: the mma.sync
    kernel runs those)."""
    if ops.a.dtype not in INPUT_DTYPES or ops.b.dtype != ops.a.dtype:
        return False  # weight-only int8 B widens in the mma.sync main loop
    if not ops.a_k or ops.a.dtype == "int8" and ops.c.dtype == "int32":
        return False
    if ops.ends or ops.index:
        return False
    batch = batch_order(ops)
    if not set(ops.batch) <= set(ops.a.axes) | set(ops.b.axes):
        return False  # one of A and B may be the same for every batch (a 2-D map)
    if len(batch) != len(ops.batch) or batch_run(batch, ops.c) != (0, len(batch)):
        return False
    if any(batch_run(batch, t) is None for t in (ops.a, ops.b, *tensors)):
        return False
    if math.prod(d.axes[a] for a in ops.batch) >= 2**31:
        return False  # the kernel's batch index and the map's coordinate are 32-bit
    esize = DTYPES[ops.a.dtype].bytes
    blocks = {ops.blocks} - {""}
    for t, axes in ((ops.a, {ops.m, ops.k}), (ops.b, {ops.n, ops.k})):
        if set(t.axes) - axes - set(ops.batch) - blocks or not _strides_aligned(t, d, esize):
            return False
    if ops.blocks:
        # the blocks and k read as one k axis of A and B: blocks of whole k tiles
        inner = (ops.blocks, ops.k)
        if ops.a.axes[-2:] != inner or ops.b.axes[-2:] != inner:
            return False
        # the main loop reads the block scales at 32-bit offsets
        scales = [f for f in mm.scale if isinstance(f, str)]
        if any(math.prod(d.axes[a] for a in d.tensor(f).axes) >= 2**31 for f in scales):
            return False
        return d.axes[ops.k] % (SPAN // esize) == 0
    return True


def k_length(ops: Operands, d: Diagram) -> int:
    """The length the main loop runs along k: k, or a block-scaled contraction's blocks
    times k."""
    return d.axes[ops.k] * (d.axes[ops.blocks] if ops.blocks else 1)


def block_needs(ops: Operands) -> str:
    """What a block-scaled contraction needs to run as one kernel (said in its refusal)."""
    return (
        f"only the wgmma kernel (sm_90a) does, with {ops.blocks} just before {ops.k} as A's and "
        f"B's last axes, B k-contiguous, and {ops.k} whole 128-byte k tiles"
    )


def candidates(
    model: KernelModel, family: Family, hw: Hardware, streams: tuple[str, ...],
    fixed: Mapping[str, int], ops: Operands,
) -> list[Candidate]:  # fmt: skip
    """The wgmma launches for this kernel on `hw`; none where the variant cannot run it or
    the user fixed an m or k tile it does not have."""
    d, kernel = model.diagram, model.kernel
    mm = contraction(kernel)
    tensors = [d.tensor(t) for t in (*kernel.inputs, *kernel.outputs)]
    if not offered(hw) or not _runs(ops, d, mm, tensors):
        return []
    esize = DTYPES[ops.a.dtype].bytes
    bk = SPAN // esize
    if fixed.get(ops.k, bk) != bk:
        return []
    other = tuple(a for a in kernel.woven if a not in (ops.m, ops.n))
    batches = math.prod(d.axes[a] for a in ops.batch)
    c_size = DTYPES[ops.c.dtype].bytes if stores_c_by_tma(ops, d) else 0
    clock = hw.achievable.clock_hz or hw.clock_hz
    k_tiles = ceil_div(k_length(ops, d), bk)
    # a block-scaled contraction holds each block's partial sum beside the total; its block
    # scales over the columns (not the rows) are shared through shared memory
    held = 2 if ops.blocks else 1
    cols = any(
        {ops.blocks, ops.n} <= set(d.tensor(f).axes) and ops.m not in d.tensor(f).axes
        for f in mm.scale
        if isinstance(f, str) and ops.blocks
    )
    out = []
    for consumers, bn in itertools.product(CONSUMERS, TILES["n"]):
        bm = ROWS * consumers
        if fixed.get(ops.m, bm) != bm or ops.n in fixed and fixed[ops.n] != bn:
            continue
        if consumers == 1 and d.axes[ops.m] > 2 * ROWS:
            continue  # 64-row tiles for skinny GEMMs (m <= 128); beyond, two consumers
        if held * bn // 2 + REGISTER_OVERHEAD > CONSUMER_REGISTERS:
            continue
        if not ops.b_k and bn * esize % SPAN:
            continue  # an MN-major B tile is whole 128-byte column blocks (ncdc_hopper.cuh)
        loads = 2 if ops.b_k else 1 + bn * esize // SPAN
        transpose = transposes_b(ops)
        c_tile = bm * bn * c_size
        # the TMA stores of a tile's C boxes, their commit and wait, and the two named
        # barriers: a consumer's serial cost per tile, over its k tiles' MMA time
        store_s = (bn * c_size // SPAN + 4) * ISSUE_CYCLES / clock if c_size else 0.0
        tiles_m = ceil_div(d.axes[ops.m], bm)
        for cluster, stages in itertools.product(CLUSTERS, TILES["stages"]):
            if cluster > 1 and tiles_m < cluster:
                continue  # no two tiles along m share a B tile
            if cluster > 1 and short_k_share(k_length(ops, d), bk, cluster, ops.b_k):
                continue
            # the persistent units: `cluster` tiles stacked along m, one per CTA of a cluster
            units = ceil_div(tiles_m, cluster) * ceil_div(d.axes[ops.n], bn) * batches
            grid = (cluster * max(1, min(units, hw.limits.sms // cluster)), 1, 1)
            # per stage: A, B as wgmma reads it, and the staging slot of a transposed B
            smem = 1024 + stages * (bm + bn * (2 if transpose else 1)) * bk * esize + c_tile
            # a block-scaled contraction's column scales: two blocks of them per consumer
            smem += 2 * consumers * bn * 4 if cols else 0
            share = pipeline_share(hw, ops.a.dtype, bn, stages, loads, transpose=transpose,
                                   consumers=consumers)  # fmt: skip
            tile_s = k_tiles * mma_tile_s(hw, ops.a.dtype, bn, bm) / share
            share *= tile_s / (tile_s + store_s)
            params: tuple[tuple[str, int], ...] = (
                ("wgmma", 1), ("bm", bm), ("bn", bn), ("bk", bk), ("stages", stages),
                ("tma_store", int(c_size > 0)), ("cluster", cluster),
            )  # fmt: skip
            if ops.blocks:
                params += (("block_tiles", d.axes[ops.k] // bk), ("block_cols", int(cols)))
            group = {**{a: fixed.get(a, 1) for a in other}, ops.m: bm, ops.n: bn}
            stream = {a: (bk if a == ops.k else fixed.get(a, 1)) for a in streams}
            # the register level's tile is a warpgroup's: wgmma reads its A (64 rows) and
            # all of B from shared memory once per warpgroup, not once per warp
            warp_group = {**group, ops.m: ROWS}
            warp_stream = {**stream, ops.k: 32 // esize} if ops.k in stream else stream
            threads = THREADS if consumers == 2 else 256  # one producer, one consumer
            shape = LaunchShape(grid, (threads, 1, 1), smem)
            out.append(
                Candidate(
                    group,
                    stream,
                    warp_group,
                    warp_stream,
                    params,
                    (shape,),
                    stages,
                    1,
                    LAUNCH_REGISTERS if consumers == 2 else min(255, 65536 // threads),
                    cluster=((ops.m, cluster),) if cluster > 1 else (),
                    tensor_share=permille(share),
                    raster_group=GROUP_M,
                )  # fmt: skip
            )
    return out


def short_k_share(k: int, bk: int, cluster: int, b_k: bool) -> bool:
    """Whether an MN-major B's last k tile is so short that the share of its last CTA would
    lie wholly past k: the kernel issues no such TMA box (no source says what TMA does with
    one), and the stale rows it would leave reach every output (BBoxes, ncdc_hopper.cuh).

    >>> short_k_share(264, 64, 2, b_k=False), short_k_share(296, 64, 2, b_k=False)
    (True, False)
    """
    return not b_k and 0 < k % bk <= bk // cluster


def arch_problem(kernel_name: str, sm: int) -> str:
    if sm != 90:
        return f"{kernel_name} was planned with wgmma and TMA, which only sm_90a has"
    return ""


def _tensor_map(t: Tensor, d: Diagram, inner: tuple[str, str], box: tuple[int, int],
                batch: tuple[str, ...], blocks: str = "") -> TensorMapSpec:  # fmt: skip
    """The map of `t` over (inner axis, outer axis[, batch axes]) with a `box`: the batch
    axes it holds one dimension (`batch_run`); `blocks`, the axis just outside k, joins k's
    dimension (a block-scaled contraction's k)."""
    axes: tuple[tuple[str, ...], ...] = (*((a,) for a in inner), *((batch,) if batch else ()))
    if blocks:
        axes = tuple((blocks, *a) if a == (inner[0],) else a for a in axes)
    esize = DTYPES[t.dtype].bytes

    def stride(dim: tuple[str, ...]) -> int:
        return math.prod(d.axes[a] for a in t.axes[t.axes.index(dim[-1]) + 1 :]) * esize

    return TensorMapSpec(
        tensor=t.name,
        dtype=t.dtype,
        dims=tuple(math.prod(d.axes[a] for a in dim) for dim in axes),
        strides=tuple(stride(dim) for dim in axes[1:]),
        box=(*box, *((1,) if batch else ())),
        swizzle=SPAN,
        axes=axes,
    )


def batch_order(ops: Operands) -> tuple[str, ...]:
    """The batch axes in C's order: the digits of the kernel's flat batch index, outermost
    first (C holds them all)."""
    return tuple(a for a in ops.c.axes if a in ops.batch)


def _own(batch: tuple[str, ...], t: Tensor) -> tuple[str, ...]:
    """The batch axes `t` holds (a `batch_run`; none: the same for every batch)."""
    return tuple(a for a in batch if a in t.axes)


def render(kp: KernelPlan, plan: Plan, ops: Operands, epilogue: dict[str, Any]) -> KernelSource:
    """The wgmma GEMM of `kp.candidate`: template context, tensor maps and its launch;
    `epilogue` is the gemm family's description of the fused ops."""
    d = plan.graph.diagram
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    mm = kp.kernel.ops[0]
    bm, bn, bk, stages = c.param("bm"), c.param("bn"), c.param("bk"), c.param("stages")
    cluster = c.param("cluster")
    name = (
        f"{kp.kernel.name}_gemm_wgmma_{ops.a.dtype}_m{bm}_n{bn}_k{bk}_s{stages}"
        f"_b{'k' if ops.b_k else 'n'}{'_tmastore' if c.param('tma_store') else ''}"
        f"{f'_c{cluster}' if cluster > 1 else ''}{'_blocks' if ops.blocks else ''}_sm90a"
    )
    order = batch_order(ops)  # the flat batch index's digits
    batch = order[-1] if order else None
    # a scale named twice is in its group twice and in `tensors` once
    scales = [t for group in epilogue["block_scales"].values() for t in group]
    for t in epilogue["operands"] + scales:
        # the digits of the flat batch index this tensor's batch axes are (batch_run)
        t["z"] = batch_digits(order, d.tensor(t["name"]))
        t["pitch_z"] = t["z"]["pitch_z"]
    digits = [batch_digits(order, t) for t in (ops.a, ops.b)]
    axes = [a for a in kp.kernel.axes if a in d.axes]
    map_a, map_b = f"ncdc_tma_{ops.a.name}", f"ncdc_tma_{ops.b.name}"
    flat = [batch is not None and not _own(order, t) for t in (ops.a, ops.b)]
    spec_a = _tensor_map(ops.a, d, (ops.k, ops.m), (bk, bm), _own(order, ops.a), ops.blocks)
    # in a cluster each CTA loads its share of B: n rows (K-major) or k rows (MN-major)
    b_box = (bk, bn // cluster) if ops.b_k else (SPAN // DTYPES[ops.b.dtype].bytes, bk // cluster)
    b_axes = (ops.k, ops.n) if ops.b_k else (ops.n, ops.k)
    spec_b = _tensor_map(ops.b, d, b_axes, b_box, _own(order, ops.b), ops.blocks)
    params = [Param(t, "tensor", d.tensor(t).dtype) for t in kp.kernel.inputs]
    params.append(Param(ops.c.name, "tensor", ops.c.dtype, writes=True))
    params += [Param(size_name(a), "int64", value=d.axes[a]) for a in axes]
    params += [
        Param(map_a, "tensormap", ops.a.dtype, tensor_map=spec_a),
        Param(map_b, "tensormap", ops.b.dtype, tensor_map=spec_b),
    ]
    map_c = ""
    if c.param("tma_store"):
        map_c = f"ncdc_tma_{ops.c.name}"
        box_c = (SPAN // DTYPES[ops.c.dtype].bytes, ROWS)
        spec_c = _tensor_map(ops.c, d, (ops.n, ops.m), box_c, order)
        params.append(Param(map_c, "tensormap", ops.c.dtype, tensor_map=spec_c))
    context: dict[str, Any] = {
        "kernel": name,
        "summary": f"{mm.text} (+{len(kp.kernel.ops) - 1} epilogue ops), wgmma",
        "threads": c.threads,
        "bn": bn,
        "bk": bk,
        "stages": stages,
        "group_m": c.raster_group,
        "cluster": cluster,
        "consumers": bm // ROWS,
        "b_k": "true" if ops.b_k else "false",
        "batched": "true" if batch else "false",
        # A or B the same for every batch, or over some batch axes only: the Problem's
        # a_flat, b_flat and their digits of the flat batch index
        "flat": [str(f).lower() for f in flat]
        if any(flat) or any(g["split"] for g in digits)
        else [],
        "digits": digits if any(g["split"] for g in digits) else [],
        "by_name": {t["name"]: t for t in epilogue["operands"]},
        "smem_bytes": c.smem_bytes,
        "map_a": map_a,
        "map_b": map_b,
        "map_c": map_c,
        "c_size": DTYPES[ops.c.dtype].bytes if map_c else 0,
        "a": {"name": ops.a.name, "ctype": cpp_type(ops.a.dtype)},
        "b": {"name": ops.b.name, "ctype": cpp_type(ops.b.dtype)},
        "c": {
            "name": ops.c.name,
            "ctype": cpp_type(ops.c.dtype),
            "pitch_m": axis_pitch(ops.c, ops.m),
            "pitch_n": axis_pitch(ops.c, ops.n),
            "pitch_z": axis_pitch(ops.c, batch) if batch else None,
        },
        "params": [
            {
                "name": q.name,
                "kind": q.kind,
                "ctype": cpp_type(q.dtype) if q.kind == "tensor" else "",
                "writes": q.writes,
            }
            for q in params
        ],
        "size_m": size_name(ops.m),
        "size_n": size_name(ops.n),
        # a block-scaled contraction's k: its blocks times their length
        "size_k": " * ".join(size_name(a) for a in (ops.blocks, ops.k) if a),
        "block_tiles": dict(c.params).get("block_tiles", 0),
        "batches": " * ".join(size_name(a) for a in order) or "1",
        **epilogue,
    }
    # the two-consumer kernel's setmaxnreg budgets assume ptxas's entry registers
    entry = LAUNCH_REGISTERS if bm == 2 * ROWS else 0
    launch = Launch.of(name, c.main, params, (cluster, 1, 1), entry_registers=entry)
    sums = ((mm.out, WGMMA_FP8_SUM),) if DTYPES[ops.a.dtype].is_fp8 else ()
    return KernelSource("gemm_wgmma.cu.j2", context, (launch,), sums=sums)
