"""The structure of a kernel that H, M and FLOPs come from (ncdc.model.structure)."""

from __future__ import annotations

import math

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
    # docs/cost-model.md section 1: a contraction of size k costs 2k FLOPs per output value.
    plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    assert plan.flops == 2 * 4096**3


def test_attention_flops_and_exponentials():
    # Section 6: 4 q x d per head on tensor cores, plus q x exponentials on the SFU; the
    # softmax's other arithmetic is 4 FLOPs per score on CUDA cores (its op record, ncdc.language.ops).
    q, x, d = 256, 512, 64
    plan = plan_diagram(load_diagram_text(ATTENTION), load_hardware("h100"))
    assert plan.flops == 4 * q * x * d + q * x + 4 * q * x


def test_a_gather_reads_the_distinct_rows_its_indices_select_in_whole_sectors():
    # An embedding of 8 tokens into a table of 1000 rows of 4 bf16 (8 bytes): random ids
    # select 1000 (1 - (1 - 1/1000)^8) = 7.97 distinct rows, each 4 values, into the device's
    # cache; each index's run of 8 bytes moves a whole 32-byte sector below it (share 4).
    from ncdc.model.graph import build_graph
    from ncdc.model.structure import KernelModel

    text = """
ncdc: 1
name: emb
axes: {t: 8, v: 1000, d: 4}
inputs: {E: {axes: [v, d], dtype: bf16}, ids: {axes: [t], dtype: int32}}
ops: ["Y = gather(E, ids, axis=v)"]
outputs: [Y]
"""
    d = load_diagram_text(text)
    graph = build_graph(d, load_hardware("h200"))
    (kernel,) = graph.kernels
    assert kernel.gathered_only == {"E"}
    model = KernelModel(d, kernel)
    (g,) = model.gathered
    assert abs(g.distinct - 4000 * (1 - (1 - 1 / 1000) ** 8)) < 1e-9 and not g.direct
    # the top level: ids (8 values) and the output (32) and the distinct rows, never all of E
    assert model.top_values == 8 + 32 + math.ceil(g.distinct)
    assert g.sector_share({}, model.sizes) == 4.0
