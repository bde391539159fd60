"""Hardware profiles: every built-in loads and checks, peaks agree with their per-clock
figures, bad profiles and bad overrides fail with one clear line naming the file and path."""

from __future__ import annotations

import pytest

from ncdc.errors import HardwareError
from ncdc.hardware.load import (
    list_profiles,
    load_hardware,
)

# ---------------------------------------------------------------------------- built-ins


def test_h100_numbers_from_the_whitepaper():
    hw = load_hardware("h100")
    # 132 SMs x 4096 FLOP/clock/SM x 1830 MHz = 989.43 TFLOP/s (dense bf16, whitepaper table 3)
    peak = 132 * 4096 * 1830e6
    assert peak == pytest.approx(989.43e12, rel=1e-5)
    assert hw.rate("tensor", "bf16") == pytest.approx(peak, rel=1e-3)
    # 128 B/clock/SM x 132 SMs x 1980 MHz = 33.45 TB/s of shared memory bandwidth
    assert hw.bandwidth("smem") == pytest.approx(128 * 132 * 1980e6, rel=1e-3)
    # 227 KiB opt-in shared memory per block; 50 MiB L2
    assert hw.level("smem").capacity_bytes == 227 * 1024
    assert hw.limits.l2_bytes == 50 * 2**20
    assert hw.clock_hz == 1980e6


def test_a100_peak_is_at_boost_clock():
    # 108 SMs x 2048 FLOP/clock/SM x 1410 MHz = 311.9 TFLOP/s
    assert load_hardware("a100").rate("tensor", "bf16") == pytest.approx(108 * 2048 * 1410e6, 3e-3)


def test_h200_sfu_rate():
    # 16 exponentials/clock/SM x 132 SMs x 1980 MHz = 4.18e12 exp/s
    assert load_hardware("h200").rate("sfu", "exp") == pytest.approx(4.18e12, rel=1e-3)


def test_ridge_point_by_hand():
    hw = load_hardware("h100")
    # 989.4e12 FLOP/s / 3.35e12 B/s = 295.3 FLOP/B: a bf16 kernel must do ~295 FLOPs per byte
    # it reads from HBM to be compute-bound.
    assert hw.ridge_point("tensor", "bf16", "hbm") == pytest.approx(295.34, rel=1e-3)
    # napkin: 100e12 FLOP/s / 1e12 B/s = 100 FLOP/B at l0, 10 at l1.
    napkin = load_hardware("napkin")
    assert napkin.ridge_point("tensor", "bf16", "l0") == pytest.approx(100)
    assert napkin.ridge_point("tensor", "bf16", "l1") == pytest.approx(10)


def test_napkin_is_the_abstract_two_level_machine():
    hw = load_hardware("napkin")
    assert hw.arch == "none"
    assert hw.level_names() == ["l0", "l1"]
    assert hw.level("l1").capacity_bytes == 100 * 1024
    assert hw.level("l1").per == "sm" and hw.level("l0").per == "device"
    assert {source.kind for source in hw.sources.values()} == {"abstract"}


def test_hardware_is_hashable():
    assert hash(load_hardware("h100")) != hash(load_hardware("a100"))


# ---------------------------------------------------------------------------- lookups


def test_unknown_level_and_rate_list_the_choices():
    hw = load_hardware("h100")
    with pytest.raises(HardwareError, match="levels are hbm, l2, smem, rf"):
        hw.level("l3")
    with pytest.raises(HardwareError, match="units are cuda, sfu, tensor"):
        hw.rate("vector", "fp32")
    with pytest.raises(HardwareError, match="tensor kinds are bf16, fp16, fp8_e4m3"):
        hw.rate("tensor", "fp4")
    with pytest.raises(HardwareError, match="no tensor rate for 'fp8_e4m3'"):
        load_hardware("a100").rate("tensor", "fp8_e4m3")  # Ampere has no fp8 tensor path


# ---------------------------------------------------------------------------- user files


# ---------------------------------------------------------------------------- overrides


def test_every_gpu_profile_has_achievable_figures_with_sources():
    # Sustained clock, measured copy bandwidth of HBM, launch latency: each below its
    # datasheet figure and with a source; the cost model prices with them.
    for name in list_profiles():
        hw = load_hardware(name)
        if not hw.is_gpu:
            assert hw.launch_s == 0 and hw.achieved_bandwidth(hw.levels[0].name) == (
                hw.levels[0].bandwidth_bytes_per_s
            )
            continue
        top = hw.levels[0].name
        for path in ("achievable.clock", f"achievable.bandwidth.{top}", "achievable.launch"):
            assert hw.sources[path].source, (name, path)
        assert 0 < hw.achieved_bandwidth(top) <= hw.levels[0].bandwidth_bytes_per_s
        assert 0 < hw.launch_s < 1e-5
    # A100: 1200 of 1410 MHz under load (0.851), so 312 -> 265.5 TFLOP/s; HBM 1.8 TB/s.
    a100 = load_hardware("a100")
    assert a100.achieved_rate("tensor", "bf16") == pytest.approx(312e12 * 1200 / 1410)
    assert a100.achieved_bandwidth("hbm") == 1.8e12
    # H100: tensor peaks are quoted at 1830 MHz, the sustained clock: they stand; SMEM's
    # 128 B/clock/SM scales from the 1980 MHz boost to 1830.
    h100 = load_hardware("h100")
    assert h100.achieved_rate("tensor", "bf16") == h100.rate("tensor", "bf16")
    assert h100.achieved_bandwidth("smem") == pytest.approx(h100.bandwidth("smem") * 1830 / 1980)


def test_the_power_limit_is_a_share_of_each_tensor_peak():
    # H200: 783 TFLOP/s of bf16 on random data (894 on zeros, the same kernel): 0.791 of the
    # 989 priced; fp8 at the same share of its own peak (twice the FLOPs per joule). The
    # H100 takes the H200's figure (same die, same 700 W); GPUs without one have no limit.
    for name in ("h100", "h200"):
        hw = load_hardware(name)
        assert hw.power_rate("bf16") == pytest.approx(783e12, rel=0.002), name
        assert hw.power_rate("fp8_e4m3") == pytest.approx(2 * hw.power_rate("bf16"), rel=1e-3)
        assert hw.sources["achievable.power_duty"].source, name
    for name in ("a100", "l40s", "rtx4090", "b200", "napkin"):
        assert load_hardware(name).power_rate("bf16") == 0.0, name
