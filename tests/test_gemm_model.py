"""The GEMM family's model terms: what pipeline stages buy, split-K, skinny GEMMs.

Each case says what it models and where its number comes from."""

from __future__ import annotations

from ncdc.cost import PIPELINE_LATENCY_S, pipeline_stall
from ncdc.hardware import load_hardware
from ncdc.spec import load_diagram
from ncdc.tiling import plan_diagram

H200 = load_hardware("h200")


def test_pipeline_stall_is_latency_over_the_tiles_in_flight() -> None:
    # 0.4 us k tiles, one block per SM: 2 stages hold 0.4 us in flight of the 1.2 us needed
    # (each tile after the first waits 3x as long: (1 + 2 x 9/10) over 10 tiles), 4 stages
    # 1.2 us (no stall); two resident blocks halve what is missing.
    t = PIPELINE_LATENCY_S / 3
    assert abs(pipeline_stall(2, 1, t, 10) - 2.8) < 1e-9
    assert pipeline_stall(4, 1, t, 10) == 1.0
    assert abs(pipeline_stall(2, 2, t, 10) - 1.45) < 1e-9
    assert pipeline_stall(1, 1, t, 10) == 1.0  # no ring, no stall priced
    assert pipeline_stall(3, 1, t, 2) == 1.0  # every copy issued up front: the fill only


def test_matmul_on_h200_takes_a_three_stage_ring() -> None:
    # 128 x 256 x 64 bf16 k tile: 2 * 128 * 256 * 64 FLOPs at 4096 FLOP/clock/SM x 0.65
    # (mma.sync's share) x 1.98 GHz = 0.8 us; 2 stages cover 0.8 of 1.2 us, 3 cover 1.6.
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), H200)
    (kp,) = plan.kernels
    assert kp.candidate is not None
    assert kp.candidate.param("bk") == 64 and kp.candidate.stages == 3
