"""What each architecture has, as data: the SM's tensor-core instruction shapes and the
sub-partitions that issue them (as tinygrad lists its `TensorCore`s per device), the shared
memory a block may opt into, and the features of an `a` target.

Every architecture ncdc targets (sm_80 to sm_100) has four sub-partitions per SM, each with
its own scheduler (one warp instruction issued per clock), its own tensor pipe and a
quarter of the register file (CUDA occupancy calculator, `cudaOccSubPartitionsPerMultiprocessor`).
`mma.sync` works on one warp's fragments: m16n8k16 for 16-bit inputs and m16n8k32 for
8-bit ones (PTX ISA, "Matrix shape"; 8-bit floats from sm_89, integers from sm_80). sm_90a
adds `wgmma` on a warpgroup's fragments (four warps, 64 rows): m64nNk16 for 16-bit inputs,
m64nNk32 for 8-bit ones, N a multiple of 8 up to 256, A from shared memory or registers
and B from shared memory (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").

    >>> mma_shape(2), mma_shape(1)
    (MmaShape(m=16, n=8, k=16), MmaShape(m=16, n=8, k=32))
    >>> HMMA_16816.flops, wgmma_k(1), WGMMA_ROWS_PER_WARP
    (4096, 32, 16)
"""

from __future__ import annotations

from dataclasses import dataclass

SUB_PARTITIONS = 4  # per SM, sm_80 .. sm_100
WARPGROUP_WARPS = 4  # the warps one wgmma runs on
WGMMA_M = 64  # rows of one wgmma: 16 per warp of its warpgroup
WGMMA_ROWS_PER_WARP = WGMMA_M // WARPGROUP_WARPS
WGMMA_K_BYTES = 32  # k of one wgmma in bytes of its inputs: k16 at 16 bits, k32 at 8
MMA_TILE = 16  # rows and columns of the smallest warp tile of mma.sync (m16, n8 x 2)


@dataclass(frozen=True)
class MmaShape:
    """One tensor-core instruction's m x n x k."""

    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


HMMA_16816 = MmaShape(16, 8, 16)  # the unit of tensor work issue slots are counted in


def mma_shape(input_bytes: int) -> MmaShape:
    """mma.sync's shape for inputs of `input_bytes` bytes a value (2 or 1)."""
    return MmaShape(16, 8, 32 if input_bytes == 1 else 16)


def wgmma_k(input_bytes: int) -> int:
    """wgmma's k for inputs of `input_bytes` bytes a value: 16 (16-bit) or 32 (8-bit)."""
    return WGMMA_K_BYTES // input_bytes


@dataclass(frozen=True)
class TensorCoreSum:
    """How a tensor-core instruction adds up its products, where that is not as an fp32
    sum would: `block` products and the accumulator C in one step, each term cut toward zero
    below 2^(Emax - fraction_bits) (Emax: the largest exponent among the nonzero terms, a
    product's being its operands' exponent sum), the exact sum of the cut terms cut toward
    zero to `kept_bits` significant bits. A contraction longer than `block` chains the steps
    in the order of its index, each step's result the next one's C."""

    block: int
    fraction_bits: int
    kept_bits: int


@dataclass(frozen=True)
class TiledSoftmax:
    """How a fused kernel's softmax feeds the product after it, where that is not as the
    exact softmax: the probabilities of each tile of `block` keys (tiles from key 0 along
    the softmax's axis) taken against the running max of the tiles so far, rounded to
    `dtype` (the product's operand type), then scaled to the row's final max and divided
    by the row's exact sum (FlashAttention's online softmax with an fp8 P)."""

    block: int
    dtype: str


# Hopper's fp8 wgmma (QGMMA) on H100 and H200: 32 products and C a step, 13 fraction bits
# kept, the result an fp32 whose low 10 bits are zero ("e8m13"). The bit-accurate model fitted
# to measurements by Khattak and Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
# (arXiv:2512.07004; models/H100TC.m of their code: fma 32, 13 fraction bits, truncation),
# agreeing with MMA-Sim (Xie et al., arXiv:2511.10909) and DeepSeek-V3's account of H800
# (arXiv:2412.19437, sec. 3.3.2: "around 14 bits"). 16-bit wgmma keeps 25 fraction bits and
# rounds to a whole fp32 (the same sources): as an fp32 sum, to within its last bit.
WGMMA_FP8_SUM = TensorCoreSum(block=32, fraction_bits=13, kept_bits=14)


# The first compute capability whose mma.sync takes each 8-bit input type (16-bit inputs:
# every architecture ncdc targets). Hopper's fp8 mma.sync has no native HMMA: ptxas emits
# two fp16 HMMAs for each m16n8k32 (ncdc.families.gemm.mix).
MMA_SYNC_MIN_SM = {"fp8_e4m3": 89, "fp8_e5m2": 89, "int8": 80}


def arch_number(arch: str) -> int:
    """The compute capability of an arch name: 'sm_90a' -> 90.

    >>> arch_number("sm_90a"), arch_number("sm_80")
    (90, 80)
    """
    return int("".join(ch for ch in arch.split("_")[-1] if ch.isdigit()) or 0)


# Opt-in shared memory per block by compute capability (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability"): what a kernel may ask for on that architecture.
SMEM_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448}
# The architecture-specific features of an `a` target (PTX ISA, "Target ISA notes": wgmma and
# setmaxnreg need sm_90a) and what they build.
A_FEATURES = {"sm_90a": ("wgmma and setmaxnreg", "the Hopper kernel")}
