"""Resident blocks per SM from a kernel's resources, as the CUDA occupancy calculator counts.

Pure arithmetic, no GPU. The rules follow `cuda_occupancy.h` (shipped with the CUDA
runtime headers) and the CUDA C++ Programming Guide, "Occupancy Calculator" and the
compute-capability tables, for sm_80 and later:

- registers are allocated per warp, `registers * warp_size` rounded up to 256, and each of
  the 4 SM sub-partitions holds a quarter of the register file: warps that fit per
  sub-partition, times 4, divided by the warps of a block;
- shared memory is allocated per block in 128-byte units and every block also takes the
  1 KiB the driver reserves (`reservedSharedMemPerBlock`); a block may use at most
  `smem_per_block_bytes` of its own;
- threads: the block's warps must fit in `threads_per_sm`; blocks: at most `blocks_per_sm`.

    >>> from ncdc.hardware.load import load_hardware
    >>> H100 = load_hardware("h100").limits
    >>> blocks_per_sm(256, 128, 0, H100)     # 4096 regs/warp: 4 warps per sub-partition
    (2, 'registers')
"""

from __future__ import annotations

from typing import Protocol

from ncdc.hardware.arch import SUB_PARTITIONS
from ncdc.units import ceil_div

REG_ALLOC_UNIT = 256  # registers, per warp (cudaOccRegAllocationGranularity, sm_30+)
SMEM_ALLOC_UNIT = 128  # bytes (cudaOccSMemAllocationGranularity, sm_80+)
SMEM_RESERVED_PER_BLOCK = 1024  # bytes (cudaDevProp::reservedSharedMemPerBlock, sm_80+)

# When two limits give the same count, the first one here is reported.
LIMITERS = ("registers", "smem", "threads", "blocks")


class Limits(Protocol):
    """The per-SM limits this module reads (ncdc.hardware.machine.Limits has them all)."""

    @property
    def warp_size(self) -> int: ...
    @property
    def threads_per_sm(self) -> int: ...
    @property
    def blocks_per_sm(self) -> int: ...
    @property
    def regs_per_sm(self) -> int: ...
    @property
    def regs_per_thread(self) -> int: ...
    @property
    def smem_per_sm_bytes(self) -> int: ...
    @property
    def smem_per_block_bytes(self) -> int: ...


def _round_up(x: int, unit: int) -> int:
    return ceil_div(x, unit) * unit


def _blocks_by_registers(warps: int, registers: int, limits: Limits) -> int:
    if registers > limits.regs_per_thread:
        return 0
    regs_per_warp = _round_up(registers * limits.warp_size, REG_ALLOC_UNIT)
    if regs_per_warp == 0:
        return limits.blocks_per_sm
    # The hardware launch check rounds the block's warps up to a multiple of the sub-partitions.
    if regs_per_warp * _round_up(warps, SUB_PARTITIONS) > limits.regs_per_sm:
        return 0
    warps_per_side = (limits.regs_per_sm // SUB_PARTITIONS) // regs_per_warp
    return warps_per_side * SUB_PARTITIONS // warps


def _blocks_by_smem(smem_bytes: int, limits: Limits) -> int:
    if smem_bytes > limits.smem_per_block_bytes:
        return 0
    allocated = _round_up(smem_bytes + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)
    return limits.smem_per_sm_bytes // allocated


def blocks_per_sm(
    threads_per_block: int,
    registers_per_thread: int,
    smem_per_block_bytes: int,
    limits: Limits,
) -> tuple[int, str]:
    """Blocks of one kernel resident on one SM at once, and the resource that limits them.

    `smem_per_block_bytes` is static plus dynamic shared memory. A block that cannot run
    at all gives 0 and names the resource it exceeds.

        >>> from ncdc.hardware.load import load_hardware
        >>> H100 = load_hardware("h100").limits
        >>> blocks_per_sm(128, 32, 100 * 1024, H100)   # 101 KiB allocated per block
        (2, 'smem')
    """
    if threads_per_block <= 0:
        raise ValueError(f"threads_per_block must be positive, got {threads_per_block}")
    warps = ceil_div(threads_per_block, limits.warp_size)
    counts = {
        "registers": _blocks_by_registers(warps, registers_per_thread, limits),
        "smem": _blocks_by_smem(smem_per_block_bytes, limits),
        "threads": limits.threads_per_sm // (warps * limits.warp_size),
        "blocks": limits.blocks_per_sm,
    }
    limiter = min(LIMITERS, key=lambda r: counts[r])
    return counts[limiter], limiter


def occupancy(threads_per_block: int, blocks: int, limits: Limits) -> float:
    """Resident warps over the most an SM can hold, between 0 and 1."""
    warps = ceil_div(threads_per_block, limits.warp_size)
    return blocks * warps * limits.warp_size / limits.threads_per_sm
