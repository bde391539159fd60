"""The search for one kernel (ncdc.plan.kernels): its family's candidates checked against the
profile's limits and ranked by the model.
"""

from __future__ import annotations

import pytest

from ncdc.errors import PlanError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram


def test_fixed_tile_wins():
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"),
                        {"m": 64, "n": 64, "k": 32})  # fmt: skip
    assert plan.tiles == {"m": 64, "n": 64, "k": 32}


def test_infeasible_fixed_tile_names_the_limit_and_the_numbers():
    with pytest.raises(PlanError) as info:
        plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200"),
                     {"q": 1024, "x": 1024})  # fmt: skip
    line = info.value.line()
    assert "kernel attention: tile q=1024 d=128 x=1024 with 2 stages needs" in line
    assert "232,448 B" in line or "registers per thread" in line


def test_infeasible_smem_message():
    with pytest.raises(PlanError, match=r"needs [\d,]+ B of shared memory per block; the a100 "
                       r"allows 166,912 B \(over by [\d,]+ B\)"):  # fmt: skip
        plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("a100"),
                     {"m": 256, "n": 256, "k": 512})  # fmt: skip


def test_tiny_gemm_plans_the_smallest_legal_tile():
    # m = n = k = 1: the GEMM kernel runs powers of two with whole 16 x 16 mma tiles per
    # warp, so the smallest block of 4 warps is 16 x 64 (one row of warps), k in one mma
    # step of 16. The padded work is counted: 16 x 64 x 16 multiply-adds for 1, on the
    # one busy SM of 132 with 4 of the 8 warps latency hiding needs, at the share of the
    # tensor peak that mma.sync reaches on Hopper.
    # Left to itself the search runs such a shape as a GEMV (one row: test_kernel_gemv.py);
    # a 64-column tile, which no GEMV kernel has here, leaves the GEMM's candidates.
    hw = load_hardware("h200")
    tiny = load_diagram("diagrams/matmul.yaml", {"m": 1, "n": 1, "k": 1})
    assert plan_diagram(tiny, hw).kernels[0].candidate.param("gemv") == 1
    plan = plan_diagram(tiny, hw, tiles={"n": 64})
    k = plan.kernels[0]
    assert k.block_tile == {"m": 16, "n": 64, "k": 16} and k.warps == 4
    rate = hw.rate("tensor", "bf16") * hw.mma_sync_share
    expected = 2 * (16 * 64 * 16) / rate * 132 / 0.5
    assert k.compute["tensor"] == pytest.approx(expected)


def test_small_odd_head_gemm_plans():
    # attention_unfused's PV GEMM with d = 24 (n) and q = 33 (m): tiles round up to powers
    # of two and whole warp tiles (n 32 or more, a multiple of 16 per warp), padding counted.
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/attention_unfused.yaml", {"d": 24, "q": 33}), hw)
    pv = plan.kernels[-1]
    assert pv.family.name == "gemm"
    m, n = pv.block_tile["q"], pv.block_tile["d"]
    assert n >= 32 and m >= 32 and m & (m - 1) == 0 and n & (n - 1) == 0
    assert pv.compute["tensor"] > pv.flops / hw.rate("tensor", "bf16") * (n / 24) * (64 / 33)


@pytest.mark.parametrize("profile", ["h200", "a100"])
@pytest.mark.parametrize("name", ["matmul", "attention_causal", "gqa_attention", "mlp"])
def test_memoised_search_checks_and_times_every_candidate_as_a_fresh_model_does(name, profile):
    """The search shares residency across pipeline stages, occupancy and wave tiles between
    candidates (tiling.Checker, KernelModel.tile_resident and tile_transfer). Each
    candidate's shared memory is checked against `per_group` (streamed inputs once per
    stage, plus the kernel's padding), its L2 tile against a wave tile worked out afresh, and its timing against a
    fresh model with no memo."""
    from ncdc.families import classify_kernel
    from ncdc.hardware.occupancy import blocks_per_sm
    from ncdc.model.cost import time_kernel
    from ncdc.model.graph import Partition, build_graph
    from ncdc.model.streaming import streamed_axes
    from ncdc.model.structure import KernelModel
    from ncdc.plan.kernels import Checker, gpu_choices

    hw = load_hardware(profile)
    diagram = load_diagram(f"diagrams/{name}.yaml")
    graph = build_graph(diagram, hw)
    checked = 0
    for kernel in graph.kernels:
        checker = Checker(KernelModel(diagram, kernel), hw)
        family = classify_kernel(diagram, kernel)
        for choice in gpu_choices(checker, family, streamed_axes(diagram, kernel), {}):
            fresh = KernelModel(diagram, kernel)
            block = choice.partitions["smem"]
            smem = 0
            for tensor, axes, size in fresh.inputs:
                values = fresh.per_group(tensor, axes, block.group, block.stream)
                streamed = any(a in block.stream for a in axes)
                smem += values * size * (choice.stages if streamed else 1)
            c = choice.candidate
            # the kernel's buffers hold at least the model's tile (and their row padding);
            # row-wise and elementwise kernels keep their tiles in registers
            assert c.smem_bytes == 0 or smem <= c.smem_bytes <= 2 * smem
            per_sm = blocks_per_sm(c.threads, c.registers, c.smem_bytes, hw.limits)
            wave = Checker(fresh, hw).wave_group(
                block.group, hw.limits.sms * per_sm[0], choice.splits,
                c.raster_group,
            )  # fmt: skip
            fits = (
                fresh.resident(wave, block.stream, choice.stages)[1]
                <= hw.level("l2").capacity_bytes
            )
            assert choice.partitions["l2"] == (Partition(wave, block.stream) if fits else block)
            memo = time_kernel(checker.model, hw, choice, checker.occupancy)
            assert memo == time_kernel(fresh, hw, choice, blocks_per_sm)
            checked += 1
    assert checked >= len(graph.kernels)  # not vacuous: every kernel had candidates
