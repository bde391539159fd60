"""The kernel's own instructions in the plan's time: issue slots per main-loop iteration.

An SM issues one warp instruction per clock per sub-partition (4 per SM on sm_80 .. sm_90),
whatever the instruction: an HMMA, an ldmatrix, a cp.async, an FFMA of the softmax, an
address increment. A kernel whose main loop needs more issue slots than its tensor pipe
needs cycles is bound by issue, not by the tensor cores. The mix comes from one of two
places, and the plan says which:

- **per-family estimate**: what the family's template issues per iteration of one warp,
  from its structure (the warp tile, the key chunk, the k step), before anything is
  compiled (`estimate_mix`);
- **from the SASS**: the instructions of the compiled cubin's main loop, counted by class
  (`ncdc.backends.sass.loop_mix`), once `ncdc compile` has put the kernel in the compile cache.

    >>> mix = LoopMix({"tensor": 32, "ldmatrix": 12, "integer": 30}, 2 * 64 * 32 * 32)
    >>> mix.slots, round(mix.slots_per_mma, 2)
    (74.0, 2.31)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.cost import KernelModel
    from ncdc.model.launch import Candidate, Family

ISSUE = "issue"  # the name of the issue slots' time among a kernel's compute units
ISSUE_PER_CLOCK = 4  # warp instructions per clock per SM: one per sub-partition (sm_80..sm_90)
MMA_16816_FLOPS = 2 * 16 * 8 * 16  # one HMMA.16816: the unit `slots_per_mma` counts in
ESTIMATE = "per-family estimate"
SASS = "from the SASS"

# Per-warp instructions of the FA2-order softmax step of ncdc's attention template
# (templates/include/ncdc_attention.cuh), per score a thread holds: the running max, exp2's
# argument (the scale folded into one FFMA) and the exponential's sum, and the packing of
# P to 16 bits every two scores; per output value, the rescale by exp(m_old - m_new), and
# per row the max and sum updates. Per key chunk: the ring's wait and barrier, the loop
# branches, three LDS of the ring's indices, the row reductions' shuffles. The integer work
# (cp.async pointers stepped by rows, the ring stage, the tail's key bound) is about
# constant: 126 and 164 in the d = 128 kernels of 32 and 64 keys (sm_90a, sm_80), the
# constant is their mean. Counted in the SASS of compiled kernels (tests/test_issue.py):
# the totals within 5%.
SOFTMAX_FP32_PER_SCORE = 3
SOFTMAX_FP32_FIXED = 16
SOFTMAX_FIXED = {"shuffle": 4, "barrier": 2, "control": 4, "smem": 3}
ATTENTION_INTEGER = 145
# Per k-tile of ncdc's mma.sync GEMM template (templates/include/ncdc_gemm.cuh), counted
# in the SASS ptxas emits for it (sm_80 and sm_90a, bf16; tiles 64 x 64 x 32 to 256 x 128
# x 64, warp tiles 32 x 32 to 64 x 64): the cp.async group's commit (LDGDEPBAR, with the
# copies) and wait plus the block barrier, the loop's counter and branch, three LDS of the
# k tile's ring indices; fragment addresses are loop-invariant (kept in registers), so the
# integer work is a fixed part (ring slot, k offset, predicates: 30) and 3.5 per 16-byte
# cp.async (its global pointer's increment and swizzled shared address), the least-squares
# fit of nine kernels (each one's slots within 5% of its SASS: tests/test_issue.py). An
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
# in its SASS on sm_90a: the full barrier's try-wait (SYNCS.PHASECHK), the empty barrier's
# arrive, WARPGROUP.ARRIVE (wgmma.fence) and WARPGROUP.DEPBAR (commit and wait for one in
# flight); the loop's branches; and the integer and uniform work of building each wgmma's
# two shared-memory descriptors (12 each) and the ring's slot, phase and barrier
# addresses (38). The producer warp (one thread issuing the TMA copies and mbarrier
# operations, about 70 slots per k tile for a block of 8 consumer warps issuing 8 x 98)
# is left out: its slots are a tenth of the consumers' and overlap them.
WGMMA_PER_TILE = {"barrier": 4, "control": 4}
WGMMA_INTEGER_PER_MMA = 12
WGMMA_INTEGER_FIXED = 38
WGMMA_CONSUMER_ROWS = 16  # rows of the 128 x bn tile one consumer warp accumulates
# Per key tile of one consumer warp of the FlashAttention-3 kernel (attention_wgmma.cu.j2,
# ncdc_attention_hopper.cuh), counted in its SASS on sm_90a (bf16; d, d_v, s_x = 128, 128,
# 128 and 64; 192, 128, 128 and 64): one HGMMA per 16 of the head (S) and per 16 keys (P V);
# per score a thread holds (s_x / 2) the max, exp2's FFMA and the sum, one MUFU.EX2 and
# half an F2FP pack; per output value (d_v / 2) the rescale; per S wgmma the integer and
# uniform work of its two descriptors, and a part that grows as the tile shrinks (the
# least-squares fit of the four kernels, each within 2%); the turn's named barriers, the
# rings' waits and arrives, the warpgroup fence and waits. The producer warp (one thread:
# d / 64 + d_v / 64 TMA copies and four mbarrier operations a tile) is left out, as for
# the GEMM.
FA3_FP32_PER_SCORE = 3
FA3_FP32_FIXED = 14
FA3_FIXED = {"shuffle": 4, "barrier": 10, "control": 5}
FA3_INTEGER_PER_QK_WGMMA = 11.6
FA3_INTEGER_FIXED = 34
FA3_INTEGER_PER_TILE_HALVING = 23  # times 128 / s_x
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
# The score path of a fused attention kernel (a score functor: statements between S and
# the masks; ncdc_attention.cuh score_step), per score a thread holds, counted in the SASS
# of softcap_attention and alibi_attention (sm_80, sm_90a): the functor sees the
# natural-log logit and returns a base-2 one (two FMULs), each arithmetic statement is one
# fp32 instruction, an index is an integer and its conversion, and tanhf (libdevice:
# 1 - 2 / (2^(2|x| log2 e) + 1) for |x| >= 0.6, an odd polynomial below, both evaluated
# and one selected) is 11 fp32, 2 MUFU (EX2, RCP) and 2.5 integer (sign and select).
FUNCTOR_FP32_PER_SCORE = 2
SCORE_OP_SLOTS: dict[str, dict[str, float]] = {
    "tanh": {"fp32": 11, "mufu": 2, "integer": 2.5},
    "exp": {"fp32": 2, "mufu": 1},
    "sigmoid": {"fp32": 3, "mufu": 2},
    "index": {"integer": 1},
}
# A kernel whose masks bound the keys from below (a window, packed sequences) runs every
# tile through the masked loop (ncdc_attention.cuh: no clear tiles): per score the key's
# index, its compares against the row's bounds and their combination (ISETP, PLOP3, SEL,
# IADD3), and the select of -inf (FSEL); per chunk the mask.any test's branches and warp
# votes. A window's bounds are two bands per row (the window's and the causal one: 10
# integer a score in sliding_window_attention's SASS), packed sequences one sequence's
# start and the causal bound (5.5 in varlen_attention's).
LOWER_MASK_PER_SCORE: dict[str, dict[str, float]] = {
    "window": {"integer": 10, "fp32": 1},
    "packed": {"integer": 5.5, "fp32": 1},
}
LOWER_MASK_FIXED = {"barrier": 2, "control": 3}
# The masked copy of the loop (the diagonal's and the x tail's chunks of a kernel without a
# lower bound) selects -inf for the dropped keys and takes the max over the selected
# scores: 2 fp32 more per score than the unmasked copy (FSEL, FMNMX), its integer work
# about the same, in the SASS of attention and cross_attention (sm_80, sm_90a).
TAIL_MASK_FP32_PER_SCORE = 2
# Q's fragments read from the Q tile at each step (d x rows / 16 > Q_REGISTER_HEAD, as
# ncdc/families/attention/core.py's q_in_registers): one ldmatrix.x4 per 16 x 16 block of Q and
# its address, per warp and chunk.
Q_REGISTER_HEAD = 128
Q_SMEM_INTEGER_PER_BLOCK = 12


@dataclass(frozen=True)
class LoopMix:
    """Issue slots of one warp per main-loop iteration, by class (ncdc.backends.sass.CLASS_ORDER),
    and the tensor FLOPs that iteration does; `source` is ESTIMATE or SASS."""

    classes: Mapping[str, float] = field(hash=False)
    tensor_flops: float  # tensor FLOPs one warp does in one iteration
    source: str = ESTIMATE

    @property
    def slots(self) -> float:
        return float(sum(self.classes.values()))

    @property
    def slots_per_mma(self) -> float:
        """Issue slots per m16n8k16-equivalent of tensor work (4096 FLOPs)."""
        return self.slots * MMA_16816_FLOPS / self.tensor_flops if self.tensor_flops else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "slots_per_iteration": self.slots,
            "tensor_flops_per_iteration": self.tensor_flops,
            "slots_per_mma": self.slots_per_mma,
            "classes": {k: v for k, v in self.classes.items() if v},
        }


def issue_time_s(mix: LoopMix, tensor_flops: float, hw: Hardware) -> float:
    """Seconds the SMs need to issue a kernel's main loops that do `tensor_flops` in all:
    iterations (tensor_flops / the mix's FLOPs per iteration) x slots each, at
    ISSUE_PER_CLOCK per SM per clock of the sustained clock, over every SM.

        >>> from ncdc.hardware.machine import load_hardware
        >>> hw = load_hardware("a100")   # 108 SMs at the sustained 1200 MHz
        >>> mix = LoopMix({"tensor": 1, "integer": 3}, MMA_16816_FLOPS)
        >>> round(issue_time_s(mix, MMA_16816_FLOPS * 4 * 108 * 1.2e9, hw), 6)   # 4 slots each
        4.0
    """
    if not mix.tensor_flops:
        return 0.0
    iterations = tensor_flops / mix.tensor_flops
    return iterations * mix.slots / (ISSUE_PER_CLOCK * hw.limits.sms * hw.achieved_clock_hz)


def estimate_mix(
    family: Family,
    c: Candidate,
    sizes: Mapping[str, int],
    dtype: str,
    hw: Hardware,
    model: KernelModel | None = None,
) -> LoopMix | None:
    """What the family's template issues per warp and main-loop iteration, from its
    structure; None for a family without tensor work (row-wise, elementwise) or one whose
    loop is not modelled (decode, fp32 GEMM on CUDA cores). `model` (the kernel's ops and
    tensors) tells a GEMM its operands' types and layouts and an attention kernel its
    score path; without it a GEMM is read as two k-contiguous operands of `dtype` and an
    attention kernel as the plain one.

    GEMM (one k-tile of `bk` per iteration, warp tile wm x wn, k step 16 for 16-bit
    inputs and 32 for 8-bit ones): (wm / 16)(wn / 8) HMMAs per k step (two HMMAs and four
    FADDs for an fp8 step on sm_90, which has no fp8 mma.sync, and the fragments unpacked
    to fp16), wm / 16 + wn / 16 ldmatrix.x4 (an 8-bit operand not contiguous along k
    gathers its fragments byte by byte; int8 weights under 16-bit activations are widened
    register by register, WIDEN_PER_REGISTER), the tile's 16-byte cp.async chunks over the
    threads at each operand's bytes (an unaligned operand's elements instead, one LDG and
    STS each), the integer work of GEMM_INTEGER_*, and GEMM_FIXED. The Hopper GEMM (param
    `wgmma`; one k tile of 128 bytes per iteration of a consumer warp, which accumulates
    16 rows of the 128 x bn tile): bk / 16 wgmmas (k32 for fp8), WGMMA_INTEGER_* and
    WGMMA_PER_TILE. Attention (one key chunk of `s_x` per iteration, 16 query rows a
    warp): `attention_mix`.
    The FlashAttention-3 kernel (attention with param `wgmma`; one key tile per iteration
    of a consumer warp, 16 of its warpgroup's 64 rows): d / 16 (fp8: d / 32) + s_x / 16
    wgmmas, the softmax's FA3_FP32_*, MUFU and packing per score, the rescale per output
    value, FA3_INTEGER_* and FA3_FIXED.
    """
    params = dict(c.params)
    if family.name == "gemm" and params.get("wgmma", 0):
        wgmmas = params["bk"] // (32 if dtype.startswith("fp8") else 16)
        classes: dict[str, float] = {
            "tensor": wgmmas,
            "integer": WGMMA_INTEGER_PER_MMA * wgmmas + WGMMA_INTEGER_FIXED,
            **WGMMA_PER_TILE,
        }
        flops = 2.0 * WGMMA_CONSUMER_ROWS * params["bn"] * params["bk"]
        return LoopMix(classes, flops, ESTIMATE)
    if family.name in ("gemm", "gemv") and not params.get("simt", 1):  # gemv: its GEMMs
        return gemm_mix(family, c, dtype, hw, model)
    if family.name == "attention" and params.get("wgmma", 0):
        d = math.prod(sizes[a] for a in family.axes("d"))
        d_v = math.prod(sizes[a] for a in family.axes("d_v"))
        s_x = params["s_x"]
        scores = s_x // 2  # per thread: 64 rows x s_x over 128 threads
        qk = d // (32 if dtype.startswith("fp8") else 16)  # S's wgmmas: k16, or k32 for fp8
        classes = {
            "tensor": qk + s_x // 16,
            "fp32": FA3_FP32_PER_SCORE * scores + d_v // 2 + FA3_FP32_FIXED,
            "fp16": scores // 2,
            "mufu": scores + 2,
            "integer": FA3_INTEGER_PER_QK_WGMMA * qk
            + FA3_INTEGER_FIXED
            + FA3_INTEGER_PER_TILE_HALVING * 128 / s_x,
            **FA3_FIXED,
        }
        return LoopMix(classes, 2.0 * WGMMA_CONSUMER_ROWS * s_x * (d + d_v), ESTIMATE)
    if family.name == "attention":
        return attention_mix(family, c, sizes, model)
    return None


def masked_share(q: int, x: int, g_q: int, s_x: int, shift: int | None) -> float:
    """The share of a fused attention kernel's chunk iterations that run its masked loop
    (ncdc_attention.cuh, attention_forward): block t of g_q queries visits the chunks up to
    its last query's last key and runs those every one of its rows sees whole (below its
    first query's last key) unmasked, the rest (the diagonal's and the x tail's) masked.
    `shift`: a causal mask's offset (key j is seen by query i when j <= i + shift), None
    without one.

        >>> masked_share(4096, 4096, 128, 64, 0)   # 2 of a block's diagonal chunks
        0.06060606060606061
        >>> masked_share(4096, 77, 64, 80, None)   # every chunk is the x tail
        1.0
    """
    visits = masked = 0
    for q0 in range(0, q, g_q):
        first_last = x - 1 if shift is None else min(x - 1, q0 + shift)
        last = x - 1 if shift is None else min(x - 1, min(q0 + g_q, q) - 1 + shift)
        tiles = last // s_x + 1 if last >= 0 else 0
        clear = min(tiles, (first_last + 1) // s_x) if first_last >= 0 else 0
        visits += tiles
        masked += tiles - clear
    return masked / visits if visits else 0.0


def _add(classes: dict[str, float], slots: Mapping[str, float], times: float = 1.0) -> None:
    for k, v in slots.items():
        classes[k] = classes.get(k, 0.0) + v * times


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
        _add(classes, GATHER_PER_REGISTER, a_regs)
    if widen:
        _add(classes, {**WIDEN_PER_REGISTER, "smem": 1 if b_k else 2}, b_regs)
    elif b_k or not eight_bit:
        classes["ldmatrix"] += steps * (wn // 16)
    else:
        _add(classes, GATHER_PER_REGISTER, b_regs)
    if split:
        _add(classes, {"fp32": 4}, mmas)
        _add(classes, {"fp16": FP8_SPLIT_UNPACK_PER_REGISTER}, a_regs + b_regs)
    bk = params["bk"]
    staged = {"a": (params["bm"], a_bytes), "b": (params["bn"], b_bytes)}
    copy_bytes = sum(n * b for x, (n, b) in staged.items() if params.get(f"vec_{x}", 1))
    elementwise = sum(n for x, (n, _) in staged.items() if not params.get(f"vec_{x}", 1))
    copies = math.ceil(copy_bytes * bk / 16 / threads)
    elements = math.ceil(elementwise * bk / threads)
    _add(classes, {"async_copy": copies + 1, "global": elements})  # and the group's commit
    _add(classes, {"smem": elements})
    integer: float = GEMM_INTEGER_FIXED_8BIT if eight_bit else GEMM_INTEGER_FIXED
    integer += GEMM_INTEGER_PER_COPY * copies + GEMM_INTEGER_PER_ELEMENT * elements
    _add(classes, {"integer": integer, **GEMM_FIXED})
    return LoopMix(classes, 2.0 * wm * wn * bk, ESTIMATE)


def _score_path(model: KernelModel | None) -> tuple[list[str], str]:
    """The score functor's statements (op functions, an index as "index") between the
    logits and the masks, and the mask that bounds the keys from below: "window", "packed"
    (a varlen mask whose lengths run along an axis the output lacks) or ""."""
    if model is None:
        return [], ""
    ops = model.kernel.ops
    out_axes = set(model.diagram.tensor(model.kernel.outputs[0]).axes)
    statements = [
        "index" if op.kind == "index" else op.fn
        for op in ops
        if op.kind in ("map", "binary", "index", "cast")
    ]
    masks = {op.fn: op for op in ops if op.kind == "mask"}
    if "window" in masks:
        return statements, "window"
    if "varlen" in masks:
        lengths = model.diagram.tensor(masks["varlen"].params["lengths"])
        return statements, "" if set(lengths.axes) <= out_axes else "packed"
    return statements, ""


def attention_mix(
    family: Family, c: Candidate, sizes: Mapping[str, int], model: KernelModel | None = None
) -> LoopMix:
    """The attention kernel's hot key chunk of one warp (estimate_mix): (d / 16)(s_x / 8) +
    (s_x / 16)(d_v / 8) HMMAs, as many ldmatrix.x4 for K and V over 16 x 16 blocks (Q's
    too where they do not stay in registers), the chunk's cp.async,
    SOFTMAX_FP32_PER_SCORE per score a thread holds plus the rescale of its output and
    SOFTMAX_FP32_FIXED, one exponential per score, ATTENTION_INTEGER and SOFTMAX_FIXED; a
    warp of 32 query rows (param `warp_q`) does twice the MMAs on the same K/V fragments.
    A score functor adds its statements per score (FUNCTOR_FP32_PER_SCORE,
    SCORE_OP_SLOTS: one fp32 for any other), and a mask bounding the keys from below its
    compares (LOWER_MASK_*): its kernel has no unmasked loop. Otherwise the diagonal's and
    the x tail's chunks run the masked copy of the loop, TAIL_MASK_FP32_PER_SCORE more
    per score, on their share of the chunks (`masked_share`)."""
    params = dict(c.params)
    threads = c.threads
    d = math.prod(sizes[a] for a in family.axes("d"))
    d_v = math.prod(sizes[a] for a in family.axes("d_v"))
    s_x = params["s_x"]
    rows = params.get("warp_q", 16)  # query rows of one warp (16 or 32)
    # K and V fragments: one ldmatrix.x4 per 16 x 16 block, shared by a warp's rows
    ldsm = (d // 16) * (s_x // 16) + (s_x // 16) * (d_v // 16)
    integer: float = ATTENTION_INTEGER
    if d * rows // 16 > Q_REGISTER_HEAD:  # Q's fragments read from SMEM at each step
        ldsm += (rows // 16) * (d // 16)
        integer += Q_SMEM_INTEGER_PER_BLOCK * (rows // 16) * (d // 16)
    copies = math.ceil(s_x * (d + d_v) * 2 / 16 / threads)
    scores = rows * s_x // 32  # per thread
    classes: dict[str, float] = {
        "tensor": rows // 16 * ((d // 16) * (s_x // 8) + (s_x // 16) * (d_v // 8)),
        "ldmatrix": ldsm,
        "async_copy": copies + 1,  # and the chunk's commit
        "fp32": SOFTMAX_FP32_PER_SCORE * scores + rows * d_v // 32 + SOFTMAX_FP32_FIXED,
        "fp16": scores // 2,
        "mufu": scores + 2,
        "integer": integer,
        **SOFTMAX_FIXED,
    }
    statements, below = _score_path(model)
    if statements:
        _add(classes, {"fp32": FUNCTOR_FP32_PER_SCORE}, scores)
        for fn in statements:
            _add(classes, SCORE_OP_SLOTS.get(fn, {"fp32": 1}), scores)
    if below:
        _add(classes, LOWER_MASK_PER_SCORE[below], scores)
        _add(classes, LOWER_MASK_FIXED)
    elif model is not None:  # the masked loop's share of the chunks (`masked_share`)
        (q_axis,), (x_axis,) = family.axes("q"), family.axes("x")
        q, x = sizes[q_axis], sizes[x_axis]
        causal = [op for op in model.kernel.ops if op.kind == "mask" and op.fn == "causal"]
        shift = None
        if causal:
            shift = x - q if causal[0].params.get("align", "end") == "end" else 0
        share = masked_share(q, x, params.get("g_q", q), s_x, shift)
        _add(classes, {"fp32": TAIL_MASK_FP32_PER_SCORE * share}, scores)
    return LoopMix(classes, 2.0 * rows * s_x * (d + d_v), ESTIMATE)
