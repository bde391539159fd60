"""The structure of a kernel that H, M and FLOPs come from (ncdc.model.structure)."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram

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
    # softmax's other arithmetic is 4 FLOPs per score on CUDA cores (its op record, ncdc.language.ops).
    q, x, d = 256, 512, 64
    plan = plan_diagram(load_diagram_text(ATTENTION), load_hardware("h100"))
    assert plan.flops == 4 * q * x * d + q * x + 4 * q * x
