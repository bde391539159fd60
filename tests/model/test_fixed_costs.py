"""What a kernel pays beside its steady state: the pipeline fill each block start leaves
exposed, the power limit under full tensor load, and the Q fragments FlashAttention-2 order
reads again from shared memory (docs/cost-model.md, "Fixed costs and the power limit")."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.cost import time_kernel
from ncdc.model.overlap import PIPELINE_LATENCY_S, POWER, pipeline_fill
from ncdc.model.structure import KernelModel
from ncdc.model.values import TileChoice
from ncdc.plan.search import plan_diagram
from ncdc.units import ceil_div


def _retime(plan, hw, **changes):
    """The plan's first kernel timed again with its candidate changed."""
    k = plan.kernels[0]
    c = dataclasses.replace(k.candidate, **changes)
    return time_kernel(
        KernelModel(plan.graph.diagram, k.kernel), hw, TileChoice(k.tiles, k.block_tile, c)
    )


def _first_chunk(plan, hw) -> float:
    """One block's chunk of what it loads into shared memory: the L2 -> SMEM bytes over the
    blocks' tiles and the chunks of the streamed axis."""
    k = plan.kernels[0]
    into = next(t for t in k.transfers if t.lower == hw.block_level)
    stream = k.tiles[hw.block_level].stream
    chunks = math.prod(ceil_div(plan.graph.diagram.axes[a], n) for a, n in stream.items())
    return into.bytes / (k.grid * chunks)


def test_a_block_that_holds_its_sm_alone_waits_for_each_fill():
    # FlashAttention-3 order on h200 (b 4, h 16, q = x = 4096, d 128): one block an SM, 2048
    # blocks, 16 on the busiest SM. Each waits for its first chunk before its first wgmma:
    # K and V (2 x 128 x 128 x 2 bytes) and a 32nd of Q's tile, 66 KiB, at a 132nd of the
    # L2's 10 TB/s (0.89 us), after a round trip under load (1.2 us): 2.09 us, 16 times
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/attention.yaml"), hw)
    k = plan.kernels[0]
    assert k.blocks_per_sm == 1 and k.grid == 2048 and k.bound == "tensor"
    assert _first_chunk(plan, hw) == 66 * 1024
    assert k.fill_s == pytest.approx(16 * (1.2e-6 + 66 * 1024 / (10e12 / 132)))
    assert k.predicted_time_s == pytest.approx(
        k.launch_s + k.fill_s + max(k.compute_time_s, *(t.time_s for t in k.transfers))
    )
    assert plan.fill_s == k.fill_s and plan.kernel_time_s == pytest.approx(k.kernel_time_s)


def test_a_memory_bound_kernel_waits_only_for_the_round_trip():
    # decode on h200 is bound by HBM, whose time already moves every byte: of its fill only
    # the first wave's round trip is more (three blocks an SM hide the rest)
    plan = plan_diagram(load_diagram("diagrams/decode_attention.yaml"), load_hardware("h200"))
    k = plan.kernels[0]
    assert k.bound == "hbm" and k.blocks_per_sm > 1
    assert k.fill_s == pytest.approx(PIPELINE_LATENCY_S)


def test_a_persistent_gemm_fills_its_ring_once():
    # 132 blocks stride over 2048 tiles: the producer runs ahead across tiles, one fill
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml", {"m": 8192, "n": 8192, "k": 8192}), hw)
    k = plan.kernels[0]
    assert k.grid == hw.limits.sms
    assert PIPELINE_LATENCY_S < k.fill_s < 2 * PIPELINE_LATENCY_S + 1e-6


def test_blocks_sharing_an_sm_hide_all_fills_but_the_first():
    # FlashAttention-2 order at head dim 64 on an RTX 4090: two blocks an SM, 8 waves
    hw = load_hardware("rtx4090")
    axes = {"b": 8, "h": 16, "q": 2048, "x": 2048, "d": 64}
    plan = plan_diagram(load_diagram("diagrams/attention.yaml", axes), hw, {"q": 128, "x": 64})
    k = plan.kernels[0]
    assert k.blocks_per_sm == 2 and k.waves > 1
    # one fill, the first wave's, whose two blocks an SM load their first chunks together
    share = hw.achieved_bandwidth("l2") / (2 * hw.limits.sms)
    assert k.fill_s == pytest.approx(pipeline_fill(_first_chunk(plan, hw), share))


def test_a_kernel_without_a_streamed_pipeline_has_no_fill():
    # rows held whole, and a row streamed without a ring (cross_entropy: one stage over v)
    for spec in ("diagrams/rmsnorm.yaml", "diagrams/softmax.yaml", "diagrams/cross_entropy.yaml"):
        plan = plan_diagram(load_diagram(spec), load_hardware("h200"))
        assert plan.fill_s == 0.0, spec
    k = plan.kernels[0]
    assert k.stages == 1 and k.tiles["smem"].stream


def test_a_full_load_gemm_runs_at_the_power_limited_rate():
    # 8192^3 bf16 on h200: the tensor pipe would be busy 85% of the time at the sustained
    # clock (L2 bounds the rest); the power limit allows 79%, so the clock falls and the
    # rate is 783 TFLOP/s
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml", {"m": 8192, "n": 8192, "k": 8192}), hw)
    k = plan.kernels[0]
    assert k.bound == POWER and k.bound_kind == "compute"
    steady = k.kernel_time_s - k.fill_s
    assert plan.flops / steady == pytest.approx(hw.power_rate("bf16"), rel=0.01)
    # the same kernel on a GPU whose limit is unknown runs at its sustained clock
    free = dataclasses.replace(hw, achievable=dataclasses.replace(hw.achievable, power_duty=0.0))
    unlimited = _retime(plan, free)
    assert POWER not in unlimited.compute
    assert unlimited.predicted_time_s < 0.95 * k.predicted_time_s
    # the report shows no power time as a resource of its own in the no-overlap sum
    assert k.predicted_time_no_overlap_s == pytest.approx(
        k.launch_s
        + k.fill_s
        + sum(t for u, t in k.compute.items() if u != POWER)
        + sum(t.time_s for t in k.transfers)
    )


def test_attention_stays_under_the_power_limit():
    # FlashAttention-3 order at d = 128 keeps the tensor pipe about 2/3 busy (the
    # exponentials share it): below the limit, the power time bounds nothing
    hw = load_hardware("h100")
    axes = {"b": 1, "h": 16, "q": 16384, "x": 16384, "d": 128}
    k = plan_diagram(load_diagram("diagrams/attention.yaml", axes), hw).kernels[0]
    assert 0 < k.compute[POWER] < k.compute_time_s and k.bound != POWER


def test_fa2_order_reads_q_fragments_again_above_the_register_head():
    # d = 256 on sm_90 without wgmma: Q's fragments (256 x 16 / 16 values a warp) do not
    # stay in registers; the warps read the Q tile from SMEM at every key chunk
    hw = dataclasses.replace(load_hardware("h100"), arch="sm_90")
    axes = {"b": 1, "h": 8, "q": 4096, "x": 4096, "d": 256}
    plan = plan_diagram(load_diagram("diagrams/attention.yaml", axes), hw, {"q": 128, "x": 64})
    k = plan.kernels[0]
    chunks = 4096 // 64
    q_name = next(name for name, _ in k.candidate.fragment_rereads)
    assert k.candidate.fragment_rereads == ((q_name, chunks - 1),)
    without = _retime(plan, hw, fragment_rereads=())
    q_bytes = 8 * 4096 * 256 * 2
    assert k.transfers[-1].bytes - without.transfers[-1].bytes == q_bytes * (chunks - 1)
    assert [t.bytes for t in k.transfers[:-1]] == [t.bytes for t in without.transfers[:-1]]
    # split over the keys, every split reads Q once (`rereads`) and again at each of its
    # chunks: as many reads of Q's fragments in all as chunks
    split = plan_diagram(load_diagram("diagrams/attention.yaml", {**axes, "b": 1, "h": 1, "q": 64}),
                         hw, {"q": 64, "x": 64})  # fmt: skip
    ks = split.kernels[0]
    assert ks.splits > 1
    extra = dict(ks.candidate.fragment_rereads)[q_name] + dict(ks.candidate.rereads)[q_name]
    assert extra == chunks - 1
    # at d = 128 they stay in registers
    small = plan_diagram(load_diagram("diagrams/attention.yaml", {**axes, "d": 128}), hw,
                         {"q": 128, "x": 64})  # fmt: skip
    assert small.kernels[0].candidate.fragment_rereads == ()
