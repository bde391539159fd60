"""The GEMM family's model terms: what pipeline stages buy, split-K, skinny GEMMs.

Each case says what it models and where its number comes from."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.overlap import PIPELINE_LATENCY_S, pipeline_stall
from ncdc.plan.search import plan_diagram

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
    # 256 x 128 x 64 bf16 k tile: 2 * 256 * 128 * 64 FLOPs at 4096 FLOP/clock/SM x 0.65
    # (mma.sync's share) x 1.98 GHz = 0.8 us; 2 stages cover 0.8 of 1.2 us, 3 cover 1.6.
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), H200)
    (kp,) = plan.kernels
    assert kp.candidate is not None
    assert kp.candidate.param("bk") == 64 and kp.candidate.stages == 3


def test_fp8_is_priced_at_the_rate_its_mma_sync_runs() -> None:
    # Hopper has no fp8 mma.sync: ptxas emits fp16 HMMAs for each m16n8k32 (see
    # BENCHMARKS.md, "GEMM main loop, from the SASS"), so the fp8 GEMM's tensor time equals
    # the bf16 one's; Ada (L40S, sm_89) runs native QMMA at twice the 16-bit rate.
    def tensor_s(name: str, profile: str) -> float:
        # k = 4095: rows TMA cannot read (not 16-byte aligned), so both run mma.sync
        sizes = {"k": 4095}
        plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml", sizes), load_hardware(profile))
        flops = sum(k.flops for k in plan.kernels)
        return sum(k.compute["tensor"] for k in plan.kernels) / flops

    assert abs(tensor_s("fp8_matmul", "h200") / tensor_s("matmul", "h200") - 1) < 0.05
    assert tensor_s("fp8_matmul", "l40s") / tensor_s("matmul", "l40s") < 0.6
