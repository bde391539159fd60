"""Blocks per SM, checked against counts worked out by hand with the occupancy-calculator
rules (cuda_occupancy.h): registers per warp rounded up to 256 and split over 4
sub-partitions of 16384; smem per block plus 1 KiB reserved, rounded up to 128 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ncdc.hardware.occupancy import blocks_per_sm, occupancy


@dataclass(frozen=True)
class Limits:
    warp_size: int = 32
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    regs_per_thread: int = 255
    smem_per_sm_bytes: int = 233472  # 228 KiB
    smem_per_block_bytes: int = 232448  # 227 KiB opt-in


H100 = Limits()
KIB = 1024


@pytest.mark.parametrize(
    ("threads", "regs", "smem", "expected"),
    [
        # 128 regs x 32 = 4096 per warp; 16384 // 4096 = 4 warps per side, 16 per SM; 8 per block.
        (256, 128, 0, (2, "registers")),
        # 100 KiB + 1 KiB reserved = 103424 B; 233472 // 103424 = 2.
        (128, 32, 100 * KIB, (2, "smem")),
        # 16 regs: 512 per warp, 128 warps fit; threads: 2048 // 1024 = 2.
        (1024, 16, 0, (2, "threads")),
        # one warp per block: 64 would fit by threads, the SM takes 32 blocks.
        (32, 16, 0, (32, "blocks")),
        # 40 regs: 1280 per warp, 16384 // 1280 = 12 per side, 48 warps; 3 warps per block
        # -> 16 (a register file counted as one pool of 65536 would give 17).
        (96, 40, 0, (16, "registers")),
        # 33 regs x 32 = 1056, rounded up to 1280: 12 per side, 48 warps, 8 per block -> 6.
        (256, 33, 0, (6, "registers")),
        # 255 regs: 8160 rounded to 8192 per warp, 2 per side, 8 warps, 4 per block -> 2.
        (128, 255, 0, (2, "registers")),
        (128, 256, 0, (0, "registers")),  # over 255 per thread: cannot launch
        # 56 KiB + 1 KiB = 58368 B = 233472 / 4 exactly.
        (128, 32, 56 * KIB, (4, "smem")),
        # one byte more rounds up to 58496 B: only 3 fit.
        (128, 32, 56 * KIB + 1, (3, "smem")),
        # the largest opt-in block: 227 KiB + 1 KiB reserved fills the 228 KiB SM.
        (128, 32, 227 * KIB, (1, "smem")),
        (128, 32, 227 * KIB + 1, (0, "smem")),  # over the per-block limit
        # 64 regs: 2048 per warp, 8 per side, 32 warps: one block of 1024 threads (32 warps).
        (1024, 64, 0, (1, "registers")),
    ],
)
def test_blocks_per_sm(threads, regs, smem, expected):
    assert blocks_per_sm(threads, regs, smem, H100) == expected


def test_occupancy_fraction():
    # 2 blocks of 256 threads: 512 of 2048 threads.
    assert occupancy(256, 2, H100) == 0.25


def test_bad_block_size():
    with pytest.raises(ValueError, match="threads_per_block"):
        blocks_per_sm(0, 32, 0, H100)
