"""The cost model beyond the paper: FLOPs counted by hand, time as the largest of the
compute and transfer times, bound names, waves, streaming legality, the JSON form."""

from __future__ import annotations

import math

import pytest

from ncdc.cost import FORMAT, plan_to_dict
from ncdc.errors import PlanError
from ncdc.hardware import load_hardware
from ncdc.spec import load_diagram, load_diagram_text
from ncdc.tiling import plan_diagram

ATTENTION = """
ncdc: 1
name: att
axes: {q: 256, x: 512, d: 64}
inputs: {Q: {axes: [q, d], dtype: bf16}, K: {axes: [x, d], dtype: bf16},
         V: {axes: [x, d], dtype: bf16}}
ops: ["S = contract(Q, K, over=d)", "P = softmax(S, over=x)", "O = contract(P, V, over=x)"]
outputs: [O]
"""


def test_matmul_flops_are_2mnk():
    # napkin-model.md section 1: a contraction of size k costs 2k FLOPs per output value.
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    assert plan.flops == 2 * 4096**3


def test_attention_flops_and_exponentials():
    # Section 6: 4 q x d per head on tensor cores, plus q x exponentials on the SFU; the
    # softmax's other arithmetic is 4 FLOPs per score on CUDA cores (CUDA_FLOPS_PER_VALUE).
    q, x, d = 256, 512, 64
    plan = plan_diagram(load_diagram_text(ATTENTION), load_hardware("h100"))
    assert plan.flops == 4 * q * x * d + q * x + 4 * q * x


def test_time_is_the_largest_and_the_sum():
    # Section 7: predicted = max over compute units and boundaries; no overlap = their sum.
    plan = plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("h200"))
    k = plan.kernels[0]
    times = [*k.compute.values(), *(t.time_s for t in k.transfers)]
    assert k.predicted_time_s == max(times)
    assert k.predicted_time_no_overlap_s == pytest.approx(sum(times))
    assert plan.bound == "hbm" and plan.bound_kind == "memory"


def test_transfer_time_is_bytes_over_the_upper_bandwidth():
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/layernorm.yaml"), hw)
    for t in plan.transfers:
        assert t.time_s == pytest.approx(t.bytes / hw.level(t.upper).bandwidth_bytes_per_s)
    # layernorm reads X once and writes Y once (plus W, B per block of rows)
    assert plan.transfers[0].bytes >= 2 * 16384 * 4096 * 2


def test_waves_round_up():
    # Section 7: waves = groups / (SMs x blocks per SM), rounded up.
    hw = load_hardware("h100")
    k = plan_diagram(load_diagram("diagrams/matmul.yaml"), hw).kernels[0]
    assert k.waves == math.ceil(k.grid / (hw.limits.sms * k.blocks_per_sm))
    assert k.compute["tensor"] >= 2 * 4096**3 / hw.rate("tensor", "bf16")


def test_stream_of_a_saved_softmax_is_refused():
    # Section 5: plain softmax, whose output still has the axis, does not stream.
    text = """
ncdc: 1
name: s
axes: {q: 64, x: 64}
inputs: {S: {axes: [q, x], dtype: bf16}}
ops: ["P = softmax(S, over=x)"]
outputs: [P]
schedule: {stream: [x]}
"""
    with pytest.raises(PlanError, match="cannot stream x: softmax P over x is saved"):
        plan_diagram(load_diagram_text(text), load_hardware("napkin"))


def test_stream_through_layernorm_is_refused():
    text = """
ncdc: 1
name: ln
axes: {m: 64, n: 64, k: 32}
inputs: {X: {axes: [m, n], dtype: bf16}, W: {axes: [n, k], dtype: bf16}}
ops: ["Y = layernorm(X, over=n)", "Z = contract(Y, W, over=n)"]
outputs: [Z]
schedule: {stream: [n]}
"""
    with pytest.raises(PlanError, match="cannot stream n: layernorm Y over n"):
        plan_diagram(load_diagram_text(text), load_hardware("napkin"))


def test_online_softmax_streams():
    plan = plan_diagram(load_diagram_text(ATTENTION), load_hardware("napkin"))
    assert "x" in plan.kernels[0].tiles["l1"].stream


def test_plan_to_dict_fields():
    plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200"))
    data = plan_to_dict(plan)
    assert data["format"] == FORMAT
    for key in ("spec", "hardware", "flops", "tiles", "levels", "transfers", "compute_time_s",
                "predicted_time_s", "predicted_time_no_overlap_s", "bound", "kernels",
                "intensity_flop_per_byte", "ridge_flop_per_byte", "unfused"):  # fmt: skip
        assert key in data, key
    assert [t["upper"] for t in data["transfers"]] == ["hbm", "l2", "smem"]
    assert data["unfused"]["ratio"] > 10  # fusion keeps the q x scores on chip
