"""The GEMM kernels' main loops as the model counts them: issue slots per k tile of one
warp, by instruction class, from each template's structure (ncdc.model.issue.LoopMix),
before anything is compiled. Each count is fitted to, and tested against, the SASS ptxas
emits for the template (tests/model/test_issue.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ncdc.hardware.arch import WGMMA_ROWS_PER_WARP, wgmma_k
from ncdc.language.dtypes import DTYPES
from ncdc.model.issue import ESTIMATE, LoopMix, add_slots

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.launch import Candidate, Family
    from ncdc.model.structure import KernelModel

# Per k-tile of ncdc's mma.sync GEMM template (templates/include/ncdc_gemm.cuh), counted
# in the SASS ptxas emits for it (sm_80 and sm_90a, bf16; tiles 64 x 64 x 32 to 256 x 128
# x 64, warp tiles 32 x 32 to 64 x 64): the cp.async group's commit (LDGDEPBAR, with the
# copies) and wait plus the block barrier, the loop's counter and branch, three LDS of the
# k tile's ring indices; fragment addresses are loop-invariant (kept in registers), so the
# integer work is a fixed part (ring slot, k offset, predicates: 30) and 3.5 per 16-byte
# cp.async (its global pointer's increment and swizzled shared address), the least-squares
# fit of nine kernels (each one's slots within 5% of its SASS: tests/model/test_issue.py). An
# operand whose rows are not 16-byte aligned (the `_ua` / `_ub` / `_uab` kernels) is staged
# element by element: per element a thread holds, one LDG, one STS and 1.75 integer (its
# address and bounds predicate), fit to the 64 x 64 x 32 kernels. 8-bit inputs (IMMA.16832, k tiles
# 64 and 128) have a smaller fixed part, GEMM_INTEGER_FIXED_8BIT.
GEMM_FIXED = {"barrier": 2, "control": 2, "smem": 3}
GEMM_INTEGER_FIXED = 30
GEMM_INTEGER_FIXED_8BIT = 15  # the same fit over six int8 kernels (sm_80, sm_90a), each within 6%
GEMM_INTEGER_PER_COPY = 3.5
GEMM_INTEGER_PER_ELEMENT = 1.75
# Per k tile (128 bytes of k: four wgmma m64nNk16, or k32 for fp8) of one consumer warp
# of the Hopper GEMM (templates/gemm_wgmma.cu.j2, wgmma_gemm in ncdc_hopper.cuh), counted
# in its SASS on sm_90a: the full barrier's try-wait (SYNCS.PHASECHK), WARPGROUP.ARRIVE
# (wgmma.fence) and WARPGROUP.DEPBAR (commit and wait for one in flight), and one arrive on
# the empty barrier of each CTA of the cluster; the loop's branches; per wgmma, its two
# descriptors advanced from the ones built before the loop (a UIADD3 and a UMOV of the
# constant high word each, 4); and the ring's slot, phase and barrier addresses and the
# stage's descriptor offset (27: 25 to 30 over bn 64-256, 16-bit and fp8, clusters of 1
# and 2). The producer warp (one thread issuing the TMA copies and mbarrier operations,
# about 70 slots per k tile for a block of 8 consumer warps issuing 8 x 58) is left out:
# its slots overlap the consumers'.
WGMMA_PER_TILE = {"barrier": 3, "control": 4}
WGMMA_INTEGER_PER_MMA = 4
WGMMA_INTEGER_FIXED = 27
# A block-scaled contraction's promotion, once a block (ncdc_hopper.cuh, read_scales and
# promote): per consumer warp, the block's scales read while its wgmmas run (LDGs at 32-bit
# offsets with bounds predicates, about 24 integer instructions beside the plain loop's),
# and an FFMA per accumulator into the total. Scales over the columns add a column's LDG,
# its STS, a named barrier, one LDS.64 per 8 columns and an FMUL per accumulator (row times
# column scale), and about 24 integer instructions more. Counted in the SASS on sm_90a of
# fp8_block_scaled_matmul (scales per row and per 128 x 128 block of B: +24) and
# tests/specs/gemm_block_scaled_cols (per row and per column: +47 to +50 over tiles 128 x
# 128, 128 x 64, 64 x 128, 64 x 64).
WGMMA_BLOCK_FIXED = {"global": 2, "integer": 24}
WGMMA_BLOCK_COLUMNS = {"global": 1, "smem": 1, "barrier": 1, "integer": 24}
# A weight-only GEMM (16-bit A, int8 B) keeps B in shared memory as int8 and widens each
# fragment register in the main loop (ncdc_gemm.cuh, MmaTile::frag_b with WIDEN_B): per
# 16-bit pair, one LDS.U16 (two LDS.U8 where B's contiguous axis is n), two I2F.S8 and
# one F2FP pack, and no ldmatrix for B. 8-bit fragments of an operand whose contiguous
# axis is not k (gather_bytes) take four LDS.U8 and three PRMT / shift-or per register.
# Counted in the SASS of w8a16_matmul (sm_80, sm_90a) and fp8_matmul (sm_90a).
WIDEN_PER_REGISTER = {"smem": 1, "integer": 2, "fp16": 1}
GATHER_PER_REGISTER = {"smem": 4, "integer": 3}
# fp8 on sm_90 (no fp8 mma.sync): per m16n8k32, two HMMA.16816 on fp16 fragments and four
# FADDs merging them, and each fp8 fragment register (4 values) unpacked to two fp16 pairs
# (F2FP.F16.E4M3.UNPACK_B): A's 4 registers per 16 rows, B's 2 per 8 columns, per k32 step.
FP8_SPLIT_UNPACK_PER_REGISTER = 2


def _gemm_operands(
    family: Family, dtype: str, model: KernelModel | None
) -> tuple[int, int, bool, bool]:
    """Bytes per value of A and B and whether each is contiguous along k, from the
    contraction's operands (A first, as the gemm family reads them)."""
    p = 1 if dtype.startswith("fp8") or dtype == "int8" else 2
    if model is None:
        return p, p, True, True
    mm = next(op for op in model.kernel.ops if op.kind == "contract")
    a, b = (model.diagram.tensor(o) for o in mm.operands if isinstance(o, str))
    k = family.axes("k")[0]
    size = {"int8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
    return size.get(a.dtype, 2), size.get(b.dtype, 2), a.axes[-1] == k, b.axes[-1] == k


def gemm_mix(
    family: Family, c: Candidate, dtype: str, hw: Hardware, model: KernelModel | None = None
) -> LoopMix:
    """The mma.sync GEMM's k tile of one warp (estimate_mix): per k step, the MMAs and the
    fragment loads of A (4 registers per 16 rows) and B (2 per 8 columns), by ldmatrix, by
    gathering bytes, or widened from int8; per k tile, the copies and the fixed work."""
    params = dict(c.params)
    threads = c.threads
    a_bytes, b_bytes, a_k, b_k = _gemm_operands(family, dtype, model)
    eight_bit = a_bytes == 1  # the MMA's inputs (8-bit: m16n8k32)
    widen = b_bytes < a_bytes  # int8 weights under 16-bit activations
    k_step = 32 if eight_bit else 16
    wm, wn = params["bm"] // params["warps_m"], params["bn"] // params["warps_n"]
    steps = params["bk"] // k_step
    mmas = steps * (wm // 16) * (wn // 8)
    a_regs, b_regs = steps * 4 * (wm // 16), steps * 2 * (wn // 8)
    # no fp8 mma.sync on sm_90: ptxas emits two fp16 HMMAs and four FADDs (int8 has IMMA)
    split = dtype.startswith("fp8") and hw.arch.startswith("sm_90")
    classes = dict.fromkeys(("ldmatrix", "async_copy", "smem", "global", "fp32", "fp16"), 0.0)
    classes["tensor"] = mmas * (2 if split else 1)
    if a_k or not eight_bit:
        classes["ldmatrix"] += steps * (wm // 16)
    else:
        add_slots(classes, GATHER_PER_REGISTER, a_regs)
    if widen:
        add_slots(classes, {**WIDEN_PER_REGISTER, "smem": 1 if b_k else 2}, b_regs)
    elif b_k or not eight_bit:
        classes["ldmatrix"] += steps * (wn // 16)
    else:
        add_slots(classes, GATHER_PER_REGISTER, b_regs)
    if split:
        add_slots(classes, {"fp32": 4}, mmas)
        add_slots(classes, {"fp16": FP8_SPLIT_UNPACK_PER_REGISTER}, a_regs + b_regs)
    bk = params["bk"]
    staged = {"a": (params["bm"], a_bytes), "b": (params["bn"], b_bytes)}
    copy_bytes = sum(n * b for x, (n, b) in staged.items() if params.get(f"vec_{x}", 1))
    elementwise = sum(n for x, (n, _) in staged.items() if not params.get(f"vec_{x}", 1))
    copies = math.ceil(copy_bytes * bk / 16 / threads)
    elements = math.ceil(elementwise * bk / threads)
    add_slots(classes, {"async_copy": copies + 1, "global": elements})  # and the group's commit
    add_slots(classes, {"smem": elements})
    integer: float = GEMM_INTEGER_FIXED_8BIT if eight_bit else GEMM_INTEGER_FIXED
    integer += GEMM_INTEGER_PER_COPY * copies + GEMM_INTEGER_PER_ELEMENT * elements
    add_slots(classes, {"integer": integer, **GEMM_FIXED})
    return LoopMix(classes, 2.0 * wm * wn * bk, ESTIMATE)


def wgmma_mix(c: Candidate, dtype: str) -> LoopMix:
    """The Hopper GEMM's k tile of one consumer warp (one k tile of 128 bytes per iteration;
    the warp accumulates WGMMA_ROWS_PER_WARP rows of the 128 x bn tile): bk / 16 wgmmas
    (k32 for fp8), the descriptors' and the ring's integer work (WGMMA_INTEGER_*),
    WGMMA_PER_TILE and an empty arrive per CTA of the cluster; a block-scaled
    contraction's promotion (WGMMA_BLOCK_*) over the k tiles of a block."""
    params = dict(c.params)
    wgmmas = params["bk"] // wgmma_k(DTYPES[dtype].bytes)
    classes: dict[str, float] = {
        "tensor": wgmmas,
        "integer": WGMMA_INTEGER_PER_MMA * wgmmas + WGMMA_INTEGER_FIXED,
        **WGMMA_PER_TILE,
    }
    classes["barrier"] += params.get("cluster", 1)  # the empty arrives, one per CTA
    if params.get("block_tiles"):
        # the promotion, per block: an FFMA an accumulator (bn / 2 of them), and with
        # column scales their shared reads and an FMUL an accumulator
        block: dict[str, float] = {**WGMMA_BLOCK_FIXED, "fp32": params["bn"] // 2}
        if params.get("block_cols"):
            add_slots(block, {**WGMMA_BLOCK_COLUMNS, "fp32": params["bn"] // 2})
            block["smem"] += params["bn"] // 8
        add_slots(classes, block, 1 / params["block_tiles"])
    return LoopMix(classes, 2.0 * WGMMA_ROWS_PER_WARP * params["bn"] * params["bk"], ESTIMATE)
