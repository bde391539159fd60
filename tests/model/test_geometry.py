"""The geometry of masked attention (ncdc.model.geometry): the key chunks each query tile
visits, and the share of the dense work that is.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.geometry import causal_fraction
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


CAUSAL = """
ncdc: 1
name: causal
axes: {q: 256, x: 256, d: 64}
inputs: {Q: {axes: [q, d], dtype: bf16}, K: {axes: [x, d], dtype: bf16},
         V: {axes: [x, d], dtype: bf16}}
ops: ["S = contract(Q, K, over=d)", "M = causal(S, query=q, key=x)",
      "P = softmax(M, over=x)", "O = contract(P, V, over=x)"]
outputs: [O]
"""


def test_causal_fraction_by_hand():
    # q = x = 256, tiles of 64 queries and chunks of 64 keys: query tile t sees keys up to
    # 64 (t + 1) - 1, so it loads 64, 128, 192, 256 keys: 640 of 4 x 256 = 5/8.
    assert causal_fraction(256, 256, 64, 64) == Fraction(5, 8)
    # 16-query tiles (one warp each): warps 0-3 load one chunk, 4-7 two, 8-11 three,
    # 12-15 four: 64 x (4 + 8 + 12 + 16) = 2560 of 16 x 256 keys, again 5/8.
    assert causal_fraction(256, 256, 16, 64) == Fraction(5, 8)
    # more keys than queries: the diagonal is aligned at the end, query i sees i + 256 keys
    assert causal_fraction(256, 512, 256, 64) == 1
    # more queries than keys: queries 0-191 see no key; one 256-query tile still loads all
    assert causal_fraction(256, 64, 64, 64) == Fraction(1, 4)
    # nothing is skipped without streaming (one chunk of all keys)
    assert causal_fraction(256, 256, 64, 256) == 1


def test_causal_attention_skips_masked_tiles():
    # The kernel visits key chunk j of query tile t only if some query of t sees a key of
    # j (ncdc/templates/include/ncdc_attention.cuh): with q = x = 256, g_q = s_x = 64 that is
    # 5/8 of the dense work (test above). FLOPs: dense 4 q x d + q x (exp) + 4 q x
    # (softmax) + q x (mask) = 16,777,216 + 393,216 = 17,170,432; x 5/8 = 10,731,520.
    # K and V into SMEM (block tile): dense 2 x 4 tiles x 256 x 64 = 131,072, causal
    # 81,920; with Q (16,384) and O (16,384) 114,688 values. Into registers (16-query
    # warps, also 5/8): K and V 16 x 2 x 256 x 64 x 5/8 = 327,680, plus Q and O.
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram_text(CAUSAL), hw, {"q": 64, "x": 64})
    square = ATTENTION.replace("q: 256, x: 512", "q: 256, x: 256")
    dense = plan_diagram(load_diagram_text(square), hw, {"q": 64, "x": 64})
    assert plan.flops == 10_731_520
    assert dense.flops == 4 * 256 * 256 * 64 + 5 * 256 * 256  # no mask: all of it
    smem = {t.lower: t.values for t in plan.transfers}
    assert smem["smem"] == 114_688
    assert smem["rf"] == 327_680 + 2 * 16_384
    dense_smem = {t.lower: t.values for t in dense.transfers}
    assert dense_smem["smem"] == 131_072 + 2 * 16_384
    # 5/8 of the work, but 4 query tiles on 132 SMs: the kernel lasts as long as its
    # longest block, the last tile, which does all 4 chunks (`causal_imbalance`: its 4
    # chunks over the mean 2.5, 8/5), so the tensor time is the dense one.
    assert plan.kernels[0].compute["tensor"] == pytest.approx(
        dense.kernels[0].compute["tensor"] * 5 / 8 * 8 / 5
    )


def test_causal_attention_at_q_equals_x_is_about_half():
    # attention_causal.yaml (q = x = 4096) against attention.yaml: about half the FLOPs and
    # the K/V traffic into SMEM (the diagonal tiles are computed in full, so a bit more);
    # the time a bit more again, the longest block setting it (FlashAttention-2 measures
    # 0.59 on an A100, docs/cost-model.md).
    hw = load_hardware("h200")
    causal = plan_diagram(load_diagram("diagrams/attention_causal.yaml"), hw)
    dense = plan_diagram(load_diagram("diagrams/attention.yaml"), hw)
    assert 0.5 < causal.flops / dense.flops < 0.53
    smem = [t.values for t in (causal, dense) for t in t.transfers if t.lower == "smem"]
    assert 0.5 < smem[0] / smem[1] < 0.56
    assert 0.5 < causal.predicted_time_s / dense.predicted_time_s < 0.6


def test_causal_decode_sees_every_key():
    # One query aligned at the end of 4096 keys sees them all: nothing is skipped.
    text = CAUSAL.replace("q: 256, x: 256", "q: 1, x: 4096")
    hw = load_hardware("h200")
    causal = plan_diagram(load_diagram_text(text), hw)
    dense = plan_diagram(load_diagram_text(ATTENTION.replace("q: 256, x: 512", "q: 1, x: 4096")),
                         hw)  # fmt: skip
    assert causal.kernels[0].family.name == "decode_attention"
    assert causal.flops == dense.flops + 4096  # plus the mask's one compare per score
    assert causal.top_bytes == dense.top_bytes


def test_a_mask_rule_bounds_the_band_with_the_built_in_masks() -> None:
    # prefix-LM's rule keeps nothing past i + 36; a causal mask beside it (end-aligned at
    # q=100, x=130: j <= i + 30) takes the tighter upper side
    from ncdc.model.geometry import Band, mask_band
    from ncdc.model.graph import build_graph
    from tests import support

    text = (support.SPECS / "attn_prefix_lm_odd.yaml").read_text()
    for edit, want in [((), Band("q", "x", None, 36)),
                       ((("M = where(K0, S, -inf)", "M = where(K0, S, -inf)\n  - M2 = causal(M, "
                          "query=q, key=x)"), ("softmax(M,", "softmax(M2,")),
                        Band("q", "x", None, 30))]:  # fmt: skip
        t = text
        for old, new in edit:
            t = t.replace(old, new)
        d = load_diagram_text(t)
        kernel = build_graph(d, load_hardware("h200")).kernels[0]
        assert mask_band(kernel, d.axes) == want
