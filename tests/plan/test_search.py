"""Tile selection: feasibility, fixed tiles and their errors, determinism, and a plan with a
sensible bound for every diagram on every built-in profile."""

from __future__ import annotations

import pytest

from ncdc.errors import PlanError
from ncdc.hardware.load import list_profiles, load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram, rank_tiles
from tests import support

DIAGRAMS = sorted(support.DIAGRAMS.glob("*.yaml"))
GPUS = [p for p in list_profiles() if p != "napkin"]
# fp8 Q and K attention runs only in the sm_90a wgmma kernel: other GPU profiles refuse it
SM90A_ONLY = {"attention_fp8"}


@pytest.mark.parametrize("profile", list_profiles())
@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
def test_every_diagram_plans_on_every_profile(path, profile):
    hw = load_hardware(profile)
    if path.stem in SM90A_ONLY and hw.is_gpu and hw.arch != "sm_90a":
        with pytest.raises(PlanError) as info:
            plan_diagram(load_diagram(path), hw)
        assert "\n" not in info.value.line() and "sm_90a" in info.value.line()
        assert info.value.exit_code == 2
        return
    plan = plan_diagram(load_diagram(path), hw)
    assert plan.predicted_time_s > 0
    for k in plan.kernels:
        assert k.smem_bytes <= hw.limits.smem_per_block_bytes
        assert k.registers_per_thread <= 255
        for level in k.levels[1:]:
            if level.level != "rf":
                assert level.resident_bytes <= level.capacity_bytes, level


@pytest.mark.parametrize("profile", GPUS)
@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "decode_attention"])
def test_memory_bound_diagrams(name, profile):
    # Bound by a device-wide memory: HBM, or L2 where the row-wise kernel's re-reads of a
    # norm's weight and bias per block outweigh HBM's traffic (B200: L2 only 1.4x HBM).
    plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml"), load_hardware(profile))
    assert plan.bound == "hbm" or (plan.bound == "l2" and name == "layernorm")


@pytest.mark.parametrize("profile", ["h100", "h200"])
@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_dense_diagrams_are_not_hbm_bound(name, profile):
    # With L2 reuse across a wave, a 4096^3 matmul and 4k attention are not HBM-bound; on
    # Hopper the model finds an mma.sync kernel held by on-chip traffic (L2 -> SMEM for the
    # matmul, SMEM -> registers for attention) within 2x of the tensor-core time.
    plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml"), load_hardware(profile))
    assert plan.bound != "hbm"
    assert plan.predicted_time_s < 2 * plan.kernels[0].compute["tensor"]


@pytest.mark.parametrize("profile", ["a100", "l40s"])
def test_matmul_is_compute_bound(profile):
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware(profile))
    assert plan.bound == "tensor" and plan.bound_kind == "compute"


def test_ranking_is_deterministic():
    d, hw = load_diagram("diagrams/matmul.yaml"), load_hardware("h200")
    first = [p.tiles for p in rank_tiles(d, hw, 5)]
    assert first == [p.tiles for p in rank_tiles(d, hw, 5)]
    assert len(first) == 5 and len({tuple(t.items()) for t in first}) > 1


def test_ranked_best_first():
    plans = rank_tiles(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"), 5)
    times = [p.predicted_time_s for p in plans]
    assert times == sorted(times)


def test_unknown_tile_axis():
    with pytest.raises(PlanError, match="unknown axis 'z'"):
        plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"), {"z": 8})


def test_a_tensor_hbm_cannot_hold_is_refused_on_a_gpu_and_priced_by_the_model_alone():
    # D[m, n, k] = 8192 x 8192 x 4096 bf16 is 512 GiB; the h200 holds 131.32 GiB
    diagram = load_diagram(support.UNBUILDABLE / "outer_product_over_hbm.yaml")
    with pytest.raises(PlanError) as info:
        rank_tiles(diagram, load_hardware("h200"), 1)
    line = info.value.line()
    assert line.startswith("D (bf16 [m, n, k] = 8192 x 8192 x 4096) is 512.00 GiB, more than")
    assert "`ncdc cost --abstract`" in line and "\n" not in line
    assert rank_tiles(diagram, load_hardware("h200"), 1, model_only=True)[0].top_bytes > 2**39
    assert plan_diagram(diagram, load_hardware("napkin")).top_bytes > 2**39
