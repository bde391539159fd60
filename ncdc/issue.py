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
  (`ncdc.sass.loop_mix`), once `ncdc compile` has put the kernel in the compile cache.

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
    from ncdc.hardware import Hardware
    from ncdc.launch import Candidate, Family

ISSUE = "issue"  # the name of the issue slots' time among a kernel's compute units
ISSUE_PER_CLOCK = 4  # warp instructions per clock per SM: one per sub-partition (sm_80..sm_90)
MMA_16816_FLOPS = 2 * 16 * 8 * 16  # one HMMA.16816: the unit `slots_per_mma` counts in
ESTIMATE = "per-family estimate"
SASS = "from the SASS"

# Per-warp instructions of the FA2-order softmax step of ncdc's attention template
# (templates/include/ncdc_attention.cuh), per score a thread holds: scale, running max,
# the tail mask's compare and select, exp2's argument, the exponential's sum, and the
# packing of P to 16 bits every two scores; per output value, the rescale by exp(m_old -
# m_new). Checked against the SASS of compiled kernels (tests/test_issue.py).
SOFTMAX_FP32_PER_SCORE = 7
SOFTMAX_FIXED = {"shuffle": 4, "barrier": 4, "control": 8, "smem": 6}
# Per k-tile of ncdc's GEMM template (templates/include/ncdc_gemm.cuh): wait for the
# cp.async group, the block barrier, the loop branch. Per fragment load or 16-byte copy,
# the integer work of its swizzled address and its bounds predicate (IMAD, IADD3, LEA,
# ISETP, SEL), and one LDS of the staged operand beside each ldmatrix: what ptxas emits for
# the template, 7 and 1 within 15% over tiles 64 x 64 to 256 x 128 (tests/test_issue.py).
GEMM_FIXED = {"barrier": 2, "control": 6}
GEMM_INTEGER_PER_ACCESS = 7


@dataclass(frozen=True)
class LoopMix:
    """Issue slots of one warp per main-loop iteration, by class (ncdc.sass.CLASS_ORDER),
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

        >>> from ncdc.hardware import load_hardware
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
    family: Family, c: Candidate, sizes: Mapping[str, int], dtype: str, hw: Hardware
) -> LoopMix | None:
    """What the family's template issues per warp and main-loop iteration, from its
    structure; None for a family without tensor work (row-wise, elementwise) or one whose
    loop is not modelled (decode, fp32 GEMM on CUDA cores).

    GEMM (one k-tile of `bk` per iteration, warp tile wm x wn, k step 16 for 16-bit
    inputs and 32 for 8-bit ones): (wm / 16)(wn / 8) HMMAs per k step (two HMMAs and four
    FADDs for an fp8 step on sm_90, which has no fp8 mma.sync), wm / 16 + wn / 16
    ldmatrix.x4 (and as many LDS), the tile's 16-byte cp.async chunks over the threads,
    GEMM_INTEGER_PER_ACCESS per fragment load and copy, and GEMM_FIXED. Attention (one key chunk of
    `s_x` per iteration, 16 query rows per warp): (d / 16)(s_x / 8) + (s_x / 16)(d_v / 8)
    HMMAs, as many ldmatrix.x4 for K and V over 16 x 16 blocks, the chunk's cp.async,
    SOFTMAX_FP32_PER_SCORE per score a thread holds plus the rescale of its output,
    one exponential per score, and SOFTMAX_FIXED.
    """
    params = dict(c.params)
    threads = c.threads
    if family.name in ("gemm", "gemv") and not params.get("simt", 1):  # gemv: its GEMMs
        p = 1 if dtype.startswith("fp8") or dtype == "int8" else 2
        k_step = 32 if p == 1 else 16
        wm, wn = params["bm"] // params["warps_m"], params["bn"] // params["warps_n"]
        steps = params["bk"] // k_step
        mmas = steps * (wm // 16) * (wn // 8)
        split = p == 1 and hw.arch.startswith("sm_90")  # ptxas: two fp16 HMMAs + four FADDs
        ldsm = steps * (wm // 16 + wn // 16)
        copies = math.ceil((params["bm"] + params["bn"]) * params["bk"] * p / 16 / threads)
        classes = {
            "tensor": mmas * (2 if split else 1),
            "ldmatrix": ldsm,
            "async_copy": copies,
            "fp32": 4 * mmas if split else 0,
            "smem": ldsm,
            "integer": GEMM_INTEGER_PER_ACCESS * (ldsm + copies),
            **GEMM_FIXED,
        }
        return LoopMix(classes, 2.0 * wm * wn * params["bk"], ESTIMATE)
    if family.name == "attention":
        d = math.prod(sizes[a] for a in family.axes("d"))
        d_v = math.prod(sizes[a] for a in family.axes("d_v"))
        s_x = params["s_x"]
        rows = 16
        ldsm = (d // 16) * (s_x // 16) + (s_x // 16) * (d_v // 16)
        copies = math.ceil(s_x * (d + d_v) * 2 / 16 / threads)
        scores = rows * s_x // 32  # per thread
        classes = {
            "tensor": (d // 16) * (s_x // 8) + (s_x // 16) * (d_v // 8),
            "ldmatrix": ldsm,
            "async_copy": copies,
            "fp32": SOFTMAX_FP32_PER_SCORE * scores + rows * d_v // 32,
            "fp16": scores // 2,
            "mufu": scores + 2,
            # two address updates per ldmatrix (swizzled row, chunk), one per copy, and the
            # loop's fixed indices (chunk pointers, the ring stage, the tail's key bound)
            "integer": 2 * ldsm + copies + 64,
            **SOFTMAX_FIXED,
        }
        return LoopMix(classes, 2.0 * rows * s_x * (d + d_v), ESTIMATE)
    return None
