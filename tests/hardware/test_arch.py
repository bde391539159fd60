"""What each architecture has, as data (ncdc.hardware.arch), agreeing with the profiles."""

from __future__ import annotations

import pytest

from ncdc.hardware.arch import (
    HMMA_16816,
    MMA_SYNC_MIN_SM,
    SMEM_PER_BLOCK,
    SUB_PARTITIONS,
    WGMMA_ROWS_PER_WARP,
    arch_number,
    mma_shape,
    wgmma_k,
)
from ncdc.hardware.load import load_hardware


def test_instruction_shapes() -> None:
    assert (mma_shape(2).k, mma_shape(1).k) == (16, 32)  # m16n8k16, m16n8k32
    assert HMMA_16816.flops == 4096 and (wgmma_k(2), wgmma_k(1)) == (16, 32)
    assert WGMMA_ROWS_PER_WARP * 4 == 64 and SUB_PARTITIONS == 4


@pytest.mark.parametrize("profile", ["a100", "l40s", "rtx4090", "h100", "h200", "b200"])
def test_each_profile_gives_a_block_the_shared_memory_its_arch_allows(profile: str) -> None:
    hw = load_hardware(profile)
    assert hw.limits.smem_per_block_bytes == SMEM_PER_BLOCK[arch_number(hw.arch)]


def test_each_profiles_peak_agrees_with_its_sub_partitions() -> None:
    # A100: 2048 dense bf16 FLOPs per clock per SM, 512 for each of the 4 sub-partitions
    # (an HMMA.16816 every 8 cycles each)
    assert load_hardware("a100").rate("tensor", "bf16") / (108 * 1410e6) == pytest.approx(
        2048, rel=0.01
    )
    assert MMA_SYNC_MIN_SM == {"fp8_e4m3": 89, "fp8_e5m2": 89, "int8": 80}
