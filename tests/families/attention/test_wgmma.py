"""The Hopper attention variant (ncdc/families/attention/wgmma.py, FlashAttention-3 order):
run on the CPU backend at odd sizes (TMA's out-of-bounds zeros for the query and key tails,
masked keys beyond x, the rings wrapping, causal tiles masked and skipped, grouped-query
heads), planted faults the emulator catches, the compiled kernel's SASS, and the model's
choice."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends import loop_mixes, sass
from ncdc.backends.compile import compile_plan
from ncdc.backends.cpu import build
from ncdc.errors import NcdcError, PlanError
from ncdc.families import classify_kernel
from ncdc.families.attention.core import read_attention
from ncdc.families.attention.family import FAMILY
from ncdc.families.attention.wgmma import is_wgmma, padded_heads
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.graph import build_graph
from ncdc.model.streaming import streamed_axes
from ncdc.model.structure import KernelModel
from ncdc.plan.search import plan_diagram, plan_from_candidates
from ncdc.render import RenderedModule, render_plan
from ncdc.templates import include
from ncdc.verify.reference import evaluate, from_storage, make_inputs
from ncdc.verify.run import allocate, compare, launch_args, run_diagram
from tests import support

DIAGRAMS = support.DIAGRAMS
HW = load_hardware("h200")


def wgmma_candidates(d: Diagram, s_x: int | None = None) -> list:
    """The FlashAttention-3 candidates of `d`'s first kernel (key tiles of `s_x` only, when
    given)."""
    kernel = build_graph(d, HW).kernels[0]
    family = classify_kernel(d, kernel)
    model = KernelModel(d, kernel)
    fixed = {"x": s_x} if s_x else {}
    cands = FAMILY.candidates(model, family, HW, streamed_axes(d, kernel), fixed)
    return [c for c in cands if is_wgmma(c)]


def wgmma_module(d: Diagram, s_x: int, stages: int) -> tuple[Diagram, RenderedModule]:
    """The rendered FlashAttention-3 candidate of `d` with that key tile and ring depth
    (the model would pick mma.sync at sizes this small)."""
    pick = [c for c in wgmma_candidates(d, s_x) if c.param("s_x") == s_x and c.stages == stages]
    assert len(pick) == 1
    return d, render_plan(plan_from_candidates(d, HW, pick))


# Causal grouped-query attention with a 64-wide head, queries aligned at the end of 300 keys
# (query i sees keys j <= i + 170): the first block masks its diagonal tile and the tail past
# x, the second (2 rows, launched first) reads every tile; two query heads per K/V head.
GQA_CAUSAL = """
ncdc: 1
name: gqa_causal
doc: Causal grouped-query attention, d = 64.
axes: {b: 1, g: 1, r: 2, q: 130, x: 300, d: 64}
inputs:
  Q: {axes: [b, g, r, q, d], dtype: bf16}
  K: {axes: [b, g, x, d], dtype: bf16}
  V: {axes: [b, g, x, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - M = causal(S, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""


def test_causal_grouped_query_attention_matches_the_reference() -> None:
    d = load_diagram_text(GQA_CAUSAL)
    _, module = wgmma_module(d, 128, 3)
    assert module.launches[0].kernel.endswith("_causal_sm90a")
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]
    # O's TMA stores clip the second block's 126 rows past q: 2 heads x 130 rows x 128 bytes
    assert result.bytes_written == 2 * 130 * 64 * 2


# The score path on the FlashAttention-3 kernel: soft-capping at 2 (tanh far from linear,
# so a kernel that skipped the functor fails), ALiBi's per-head slopes times j - i, and an
# additive bias over (b, h, q, x), each at odd sizes: TMA's zero rows past q, a masked key
# tail, and the functor's indices clamped inside the tensors it reads.
SOFTCAP_2 = (DIAGRAMS / "softcap_attention.yaml").read_text()
SOFTCAP_2 = SOFTCAP_2.replace("mul(S, 0.02)", "mul(S, 0.5)").replace("mul(T, 50)", "mul(T, 2)")
assert "mul(T, 2)" in SOFTCAP_2


@pytest.mark.parametrize(
    ("spec", "sizes", "s_x"),
    [
        ("softcap_2", {"b": 1, "g": 1, "r": 2, "q": 130, "x": 300}, 128),
        ("alibi_attention", {"b": 1, "h": 2, "q": 77, "x": 201}, 128),
        # a bias read along the keys: the 64-key tile (`consumer_registers`)
        ("../tests/specs/attn_bias_bhqx", {"b": 1, "h": 2, "q": 133, "x": 157}, 64),
    ],
)
def test_score_transforms_match_the_reference(spec: str, sizes: dict[str, int], s_x: int) -> None:
    if spec == "softcap_2":
        d = load_diagram_text(SOFTCAP_2, sizes=sizes)
    else:
        d = load_diagram(DIAGRAMS / f"{spec}.yaml", sizes)
    _, module = wgmma_module(d, s_x, 2)
    assert module.launches[0].kernel.endswith("_scores_sm90a")
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]


# Masks on the FlashAttention-3 kernel (attn::Visible): a block loads the key tiles some
# row of it sees, masks the tiles some row does not see whole and runs the rest without a
# compare. At odd sizes with tiles of 64 and 128 keys: a two-sided window aligned at the
# start over more keys than queries (blocks start past key 0: a masked prefix, whole tiles,
# a masked suffix), a causal sliding window of grouped-query heads, padded lengths (each
# batch entry's own end of keys, some past x), packed causal sequences (each query's
# keys start at its sequence's), and mask rules as score functors (sinks, documents,
# prefix-LM) with their bands.
TWO_SIDED = """
ncdc: 1
name: two_sided
doc: A two-sided window over more keys than queries.
axes: {h: 2, q: 301, x: 333, d: 64}
inputs:
  Q: {axes: [h, q, d], dtype: bf16}
  K: {axes: [h, x, d], dtype: bf16}
  V: {axes: [h, x, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - M = window(S, query=q, key=x, left=70, right=45, align=start)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""
PADDED = """
ncdc: 1
name: padded
doc: Causal attention over padded sequences, each batch entry's keys cut at its length.
axes: {b: 3, h: 2, q: 200, x: 200, d: 128}
inputs:
  Q: {axes: [b, h, q, d], dtype: fp16}
  K: {axes: [b, h, x, d], dtype: fp16}
  V: {axes: [b, h, x, d], dtype: fp16}
  lens: {axes: [b], dtype: int32}
ops:
  - S = contract(Q, K, over=d) * 0.088
  - W = varlen(S, query=q, key=x, lengths=lens)
  - M = causal(W, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""
SLIDING = (DIAGRAMS / "sliding_window_attention.yaml").read_text().replace("left=4095", "left=150")
assert "left=150" in SLIDING
# prefix-LM with a context of 100 keys: tiles the rule keeps whole, partial and drops whole
PREFIX_LM = (DIAGRAMS / "prefix_lm_attention.yaml").read_text().replace("lt(J, 1024)", "lt(J, 100)")
assert "lt(J, 100)" in PREFIX_LM
# sinks with a window of 150 keys: the tiles of a block's first keys hold the sinks and
# keys past the window, partial though every row of the block sees past them
SINKS = (DIAGRAMS / "attention_sinks.yaml").read_text().replace("sub(I, 1020)", "sub(I, 150)")
assert "sub(I, 150)" in SINKS


@pytest.mark.parametrize(
    ("spec", "sizes", "s_x", "suffix"),
    [
        ("two_sided", None, 64, "_window_sm90a"),
        ("two_sided", None, 128, "_window_sm90a"),
        ("sliding", {"b": 1, "g": 1, "r": 2, "q": 301, "x": 333}, 128, "_window_sm90a"),
        ("padded", None, 64, "_causal_varlen_sm90a"),
        ("varlen_attention", {"h": 2, "q": 290, "x": 290, "n": 3}, 64, "_causal_packed_sm90a"),
        ("sinks", {"b": 1, "h": 2, "q": 300, "x": 300}, 128, "_scores_sm90a"),
        ("document_mask_attention", {"b": 1, "h": 2, "q": 200, "x": 200}, 64, "_scores_sm90a"),
        ("prefix_lm", {"b": 1, "h": 2, "q": 260, "x": 260}, 128, "_scores_sm90a"),
    ],
)
def test_masks_match_the_reference(
    spec: str, sizes: dict[str, int] | None, s_x: int, suffix: str
) -> None:
    texts = {
        "two_sided": TWO_SIDED,
        "padded": PADDED,
        "sliding": SLIDING,
        "prefix_lm": PREFIX_LM,
        "sinks": SINKS,
    }
    if spec in texts:
        d = load_diagram_text(texts[spec], sizes=sizes)
    else:
        d = load_diagram(DIAGRAMS / f"{spec}.yaml", sizes)
    _, module = wgmma_module(d, s_x, 2)
    assert module.launches[0].kernel.endswith(suffix)
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]


@pytest.mark.parametrize("s_x", [64, 128])
@pytest.mark.parametrize(("rule", "tiles"), [
    # block t's rows 128t .. 128t + 127 see keys 128t - 200 .. 128t + 177 (of 640)
    ("window(S, query=q, key=x, left=200, right=50, align=start)", {64: 22, 128: 13}),
    # aligned at the end: query i sees keys j <= i + 128
    ("causal(S, query=q, key=x)", {64: 28, 128: 14}),
])  # fmt: skip
def test_priced_flops_are_the_visited_tiles(rule: str, tiles: dict[int, int], s_x: int) -> None:
    # The key tiles the kernel loads (the emulator's bytes: Q once, then each visited tile's
    # K and V rows, whole at these sizes) are the tiles the model prices: its tensor FLOPs
    # are those of the visited tiles, 2 x 128 x (d + d_v) a key of each.
    text = TWO_SIDED.replace("window(S, query=q, key=x, left=70, right=45, align=start)", rule)
    d = load_diagram_text(text, sizes={"q": 512, "x": 640})
    _, module = wgmma_module(d, s_x, 2)
    result = run_diagram(d, module, backend="cpu", seed=1)
    assert result.ok, result.checks
    heads, q_bytes, key_bytes = 2, 512 * 64 * 2, (64 + 64) * 2
    keys = (result.bytes_read / heads - q_bytes) / key_bytes
    assert keys == tiles[s_x] * s_x
    kernel = build_graph(d, HW).kernels[0]
    model = KernelModel(d, kernel)
    flops = model.tile_flops({"h": 1, "q": 128, "d": 64}, {"x": s_x})[("tensor", "bf16")]
    assert flops == heads * 2 * 128 * (64 + 64) * keys


@pytest.mark.parametrize("s_x", [64, 128])
def test_tiles_a_rule_drops_are_skipped_and_not_priced(s_x: int) -> None:
    # Sinks and a window of 150 keys over 768: the kernel skips the key tiles between the
    # sinks' and the window's that the rule drops for every query of the block (the
    # emulator's bytes), and the model prices the FlashAttention-3 candidate for exactly
    # those; the band alone (the mma.sync kernel's) would visit every tile below the
    # diagonal.
    d = load_diagram_text(SINKS, sizes={"b": 1, "h": 2, "q": 768, "x": 768})
    _, module = wgmma_module(d, s_x, 2)
    result = run_diagram(d, module, backend="cpu", seed=1)
    assert result.ok, result.checks
    heads, q_bytes, key_bytes = 2, 768 * 128 * 2, (128 + 128) * 2
    keys = (result.bytes_read / heads - q_bytes) / key_bytes
    model = KernelModel(d, build_graph(d, HW).kernels[0])
    g, s = {"b": 1, "h": 1, "q": 128, "d": 128}, {"x": s_x}
    per_key = heads * 2 * 128 * (128 + 128)
    assert model.tile_flops(g, s, classes=True)[("tensor", "bf16")] == per_key * keys
    assert model.tile_flops(g, s)[("tensor", "bf16")] == per_key * 2688  # the band's
    assert keys == {64: 1920, 128: 2304}[s_x]
    (c,) = [c for c in wgmma_candidates(d, s_x) if c.stages == 2]
    assert c.rule_tiles


def test_a_rule_without_a_band_skips_and_prices_its_dropped_tiles() -> None:
    # Causal attention whose first 4 queries see every key (`or(le(J, I), lt(I, 4))`, the
    # global rows of Longformer's pattern): the rule bounds no band, yet the key tiles past
    # a block's diagonal, bar the first block's, are dropped whole, skipped by the kernel
    # and not priced (1,664 of 2,048 keys a head over 512 x 512 in 128-key tiles).
    text = PREFIX_LM.replace("lt(J, 100)", "lt(I, 4)")
    d = load_diagram_text(text, sizes={"b": 1, "h": 2, "q": 512, "x": 512})
    _, module = wgmma_module(d, 128, 2)
    result = run_diagram(d, module, backend="cpu", seed=1)
    assert result.ok, result.checks
    keys = (result.bytes_read / 2 - 512 * 128 * 2) / ((128 + 128) * 2)
    model = KernelModel(d, build_graph(d, HW).kernels[0])
    g, s = {"b": 1, "h": 1, "q": 128, "d": 128}, {"x": 128}
    priced = model.tile_flops(g, s, classes=True)[("tensor", "bf16")] / (2 * 2 * 128 * 256)
    assert keys == priced == 1664


def test_packed_sequences_past_the_queries_under_a_short_window() -> None:
    # One packed sequence of 130 tokens in 256, a window of 32 keys: the rows past the
    # sequence see no key, and their first key lies past the block's last tile (the block's
    # whole tiles are then none; they once ran past the tiles loaded, a deadlock).
    text = """
ncdc: 1
name: packed_window
doc: A short window over one packed sequence shorter than the queries.
axes: {h: 1, q: 256, x: 256, n: 1, d: 64}
inputs:
  Q: {axes: [h, q, d], dtype: bf16}
  K: {axes: [h, x, d], dtype: bf16}
  V: {axes: [h, x, d], dtype: bf16}
  lens: {axes: [n], dtype: int32}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - W = varlen(S, query=q, key=x, lengths=lens)
  - M = window(W, query=q, key=x, left=31)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""
    d = load_diagram_text(text)
    _, module = wgmma_module(d, 64, 2)
    inputs = dict(make_inputs(d, int(np.random.default_rng().integers(2**31))))
    inputs["lens"] = np.array([130.0])
    result = run_diagram(d, module, backend="cpu", inputs=inputs)
    assert result.ok, result.checks


@pytest.mark.parametrize(
    ("spec", "fault", "planted_text"),
    [
        # the keys before a row's first no longer masked
        ("two_sided", "(BELOW && key < st.lower[h])", "false"),
        # the tiles every row sees whole taken from the block's first row: tiles its later
        # rows see only in part run unmasked
        ("two_sided", "(bottom_first + Cfg::SX - 1) / Cfg::SX", "(top_first + Cfg::SX - 1) / Cfg::SX"),
        # a mask rule's partial tiles run whole (the rule's dropped pairs kept)
        ("sinks", "c == attn::kTileKept && !edge", "c != attn::kTileMasked && !edge"),
        # a rule's partial tiles skipped (their kept pairs lost)
        ("sinks", "c == attn::kTileMasked ? kSkip", "c == attn::kTilePartial ? kSkip"),
        # every tile of a rule runs masked, none skipped: slower, still right (this one passes)
        ("prefix_lm", "c == attn::kTileMasked ? kSkip : c == attn::kTileKept && !edge ? kWhole : kMasked",
         "kMasked"),
    ],
)  # fmt: skip
def test_planted_mask_faults_are_caught(spec: str, fault: str, planted_text: str) -> None:
    # The device header with one fault planted, run on a two-sided window (tiles of 64) and
    # on a mask rule (128: prefix-LM, sinks): each wrong tile class shows in O.
    header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
    if spec == "two_sided":
        d, module = wgmma_module(load_diagram_text(TWO_SIDED), 64, 2)
    else:
        sizes = {"b": 1, "h": 2, "q": 300, "x": 300}
        text = PREFIX_LM if spec == "prefix_lm" else SINKS
        d, module = wgmma_module(load_diagram_text(text, sizes=sizes), 128, 2)
    seed = int(np.random.default_rng().integers(2**31))
    assert header.count(fault) == 1
    source = module.source.replace(
        '#include "ncdc_attention_hopper.cuh"', header.replace(fault, planted_text)
    )
    result = run_diagram(d, dataclasses.replace(module, source=source), backend="cpu", seed=seed)
    assert result.ok == (planted_text == "kMasked"), (fault, result.checks)


# A data mask's block table (classify_tiles): the document mask's ids classed per key tile
# before the loop, so that tiles of other documents are skipped and tiles inside one
# document run without the mask. Two batch entries packed differently (a tile holds one
# document, two, or a document's end and the next's start), 300 tokens in tiles of 64.
DOCUMENTS = {0: [37, 150, 13, 100], 1: [200, 64, 36]}


def _documents(d: Diagram, packing: Mapping[int, list[int]], seed: int) -> dict[str, np.ndarray]:
    inputs = dict(make_inputs(d, seed))
    ids = np.array([np.repeat(np.arange(len(n)), n) for _, n in sorted(packing.items())], float)
    inputs["docq"], inputs["docx"] = ids, ids.copy()
    return inputs


@pytest.mark.parametrize(("fault", "planted_text"), [
    (None, None),
    # a table of one tile: the rest classed without the data, run masked (passes)
    ("constexpr int kClassTable = 2048;", "constexpr int kClassTable = 1;"),
    # every tile the table holds run whole: the mask dropped where a tile holds two documents
    ("? int(r.classes[t - r.tile0])", "? attn::kTileKept"),
    # each tile given the next one's class: a block's last tile, past its rows, skipped
    ("k0 = (r.tile0 + t) * Cfg::SX", "k0 = (r.tile0 + t + 1) * Cfg::SX"),
])  # fmt: skip
def test_document_block_table_matches_the_reference(
    fault: str | None, planted_text: str | None
) -> None:
    sizes = {"b": 2, "h": 2, "q": 300, "x": 300}
    d = load_diagram(DIAGRAMS / "document_mask_attention.yaml", sizes)
    _, module = wgmma_module(d, 64, 2)
    if fault is not None:
        header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
        assert header.count(fault) == 1
        source = module.source.replace(
            '#include "ncdc_attention_hopper.cuh"', header.replace(fault, planted_text)
        )
        module = dataclasses.replace(module, source=source)
    inputs = _documents(d, DOCUMENTS, int(np.random.default_rng().integers(2**31)))
    result = run_diagram(d, module, backend="cpu", inputs=inputs)
    assert result.ok == (fault is None or "kClassTable" in fault), result.checks


@pytest.mark.parametrize("causal", [True, False])
def test_document_block_table_skips_the_tiles_of_other_documents(causal: bool) -> None:
    # Two documents of 128 tokens against one of 256. Causal: the same tiles are partial
    # (the diagonal's), and the second block's two key tiles of the first document, which
    # one document runs whole, two skip. Without the causal mask (a rule of the ids alone,
    # whose rows are the queries of the logits' contraction), each block skips the two key
    # tiles of the other document. The emulator's bytes differ by exactly their K and V.
    sizes = {"b": 1, "h": 2, "q": 256, "x": 256}
    text = (DIAGRAMS / "document_mask_attention.yaml").read_text()
    if not causal:
        for line in ("  - I = index(q)", "  - J = index(x)", "  - C = le(J, I)", "  - keep ="):
            text = "\n".join(t for t in text.splitlines() if not t.startswith(line)) + "\n"
        text = text.replace("M = where(keep, S, -inf)", "M = where(D, S, -inf)")
    d = load_diagram_text(text, "documents.yaml", sizes)
    _, module = wgmma_module(d, 64, 2)
    assert "kTileData = 2;" in module.source
    read = {}
    for name, packing in (("two", {0: [128, 128]}), ("one", {0: [256]})):
        result = run_diagram(d, module, backend="cpu", inputs=_documents(d, packing, 5))
        assert result.ok, result.checks
        read[name] = result.bytes_read
    heads, tiles, key_bytes = 2, 2 if causal else 4, (128 + 128) * 2
    assert read["one"] - read["two"] == heads * tiles * 64 * key_bytes


# Rows strided by heads (FlashAttention's [b, s, h, d]): 5-D tensor maps, the heads'
# indices as inner coordinates. Grouped-query heads with Q [b, s, g, r, d] (two inner axes)
# against K and V [b, x, g, d] (one, padded with a dimension of one), causal, odd sizes
# (rows past q clipped, keys past x TMA's zeros); and a single K/V head [b, x, d] under a
# Q of [b, q, h, d]. A map whose inner coordinates are swapped reads another head's rows.
BSHD_GQA = """
ncdc: 1
name: bshd_gqa
doc: Causal grouped-query attention with every tensor in [b, s, heads..., d].
axes: {b: 1, s: 150, x: 201, g: 3, r: 3, d: 128}
inputs:
  Q: {axes: [b, s, g, r, d], dtype: bf16}
  K: {axes: [b, x, g, d], dtype: bf16}
  V: {axes: [b, x, g, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.08838834764831845
  - M = causal(S, query=s, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""


# V in a layout of its own, unlike K's: heads before batch ([h, b, x, d] against K's
# [b, h, x, d]), and K strided by heads ([b, x, h, d]) against V's [b, h, x, d]; each map is
# sliced by its own tensor's indices (V read at K's slice reads other heads' rows).
OWN_V = """
ncdc: 1
name: own_v
doc: Attention whose V is laid out unlike K.
axes: {b: 2, h: 3, q: 77, x: 130, d: 128}
inputs:
  Q: {axes: [b, h, q, d], dtype: bf16}
  K: {axes: %s, dtype: bf16}
  V: {axes: %s, dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.08838834764831845
  - M = causal(S, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""


@pytest.mark.parametrize(("spec", "sizes", "planted"), [
    ("bshd_gqa", None, None),
    ("bshd_gqa", None, "swapped"),
    ("attn_bshd_mqa", {"b": 1, "q": 133, "h": 3, "x": 77}, None),
    ("own_v [b, h, x, d] [h, b, x, d]", None, None),
    ("own_v [b, h, x, d] [h, b, x, d]", None, "v_at_k"),
    ("own_v [b, x, h, d] [b, h, x, d]", None, None),
])  # fmt: skip
def test_heads_between_rows_and_head_match_the_reference(
    spec: str, sizes: dict[str, int] | None, planted: str | None
) -> None:
    if spec == "bshd_gqa":
        d = load_diagram_text(BSHD_GQA)
    elif spec.startswith("own_v"):
        k_axes, v_axes = spec.removeprefix("own_v ").split("] [")
        d = load_diagram_text(OWN_V % (k_axes + "]", "[" + v_axes))
    else:
        d = load_diagram(support.SPECS / f"{spec}.yaml", sizes)
    _, module = wgmma_module(d, 64, 2)
    maps = [p.tensor_map for p in module.launches[0].params if p.tensor_map]
    if spec.startswith("own_v"):
        z_k, z_v = (re.search(rf"z_{t} = (.*);", module.source)[1] for t in "kv")
        assert z_k != z_v
    else:
        assert "ncdc::fa3::Slice{int(ncdc_i_b), int(ncdc_i_" in module.source
        assert {len(m.dims) for m in maps} == {5}
    if planted == "swapped":  # Q's inner coordinates in the wrong order
        line = "z_q = ncdc::fa3::Slice{int(ncdc_i_b), int(ncdc_i_r), int(ncdc_i_g)};"
        assert line in module.source
        swapped = line.replace("ncdc_i_r), int(ncdc_i_g)", "ncdc_i_g), int(ncdc_i_r)")
        module = dataclasses.replace(module, source=module.source.replace(line, swapped))
    if planted == "v_at_k":  # V loaded at K's slice
        source = module.source.replace(f"z_v = {z_v};", f"z_v = {z_k};")
        assert source != module.source
        module = dataclasses.replace(module, source=source)
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok == (planted is None), result.checks


# Heads that are not whole 128-byte column blocks (Config::DP, DVP; wgmma.padded_heads):
# the last block of Q's, K's and V's tiles in part, TMA filling the rest with zeros, S
# issuing the head's own k steps, P V the padded n (n 128 + 64 for a V head of 160) and O's
# last box clipped by the store. fp16 heads of 192 and 160, whose 128-key rings exceed the
# shared memory (the kernel takes key tiles of 64).
HEADS = """
ncdc: 1
name: heads
doc: Attention with a Q and K head of %d and a V head of %d.
axes: {b: 1, h: 2, q: 130, x: 300, d: %d, e: %d}
inputs:
  Q: {axes: [b, h, q, d], dtype: fp16}
  K: {axes: [b, h, x, d], dtype: fp16}
  V: {axes: [b, h, x, e], dtype: fp16}
ops:
  - S = contract(Q, K, over=d) * 0.072
  - P = softmax(S, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""
# fp8 Q and K with a head of 96: S in 3 k32 steps, its block of 128 bytes in part
HEADS_FP8 = (
    (HEADS % (96, 128, 96, 128))
    .replace("Q: {axes: [b, h, q, d], dtype: fp16}", "Q: {axes: [b, h, q, d], dtype: fp8_e4m3}")
    .replace("K: {axes: [b, h, x, d], dtype: fp16}", "K: {axes: [b, h, x, d], dtype: fp8_e4m3}")
    .replace("over=d) * 0.072", "over=d, dtype=fp32) * 0.072")
    .replace("softmax(S, over=x)", "softmax(S, over=x, dtype=fp16)")
    .replace("contract(P, V, over=x)", "contract(P, V, over=x, dtype=fp16)")
)
assert HEADS_FP8.count("fp8_e4m3") == 2 and "dtype=fp16)" in HEADS_FP8
# P V's second wgmma reading V's first block (O's values past 128 wrong), and O's boxes
# rounded down (its last 32 values a row never stored: the poison shows)
HEAD_FAULTS = {
    "second_n": ("step + N0 / Cfg::ROW_V * Cfg::SX * Cfg::SPAN), scale);", "step), scale);"),
    "o_boxes": ("O_BOXES = DVP / ROW_O;", "O_BOXES = DV / ROW_O;"),
}


@pytest.mark.parametrize(("spec", "sizes", "s_x", "planted"), [
    # d = 96 in [b, s, h, d] (5-D maps), causal: Q's and K's second block half zeros
    ("attn_bshd_causal", {"b": 1, "q": 150, "h": 2, "x": 170}, 64, None),
    ("attn_bshd_causal", {"b": 1, "q": 150, "h": 2, "x": 170}, 64, "o_boxes"),
    # d_v = 32: V's one block half zeros, O's one box clipped
    ("attn_dv32", {"q": 77, "x": 201}, 128, None),
    # d = 80 and d_v = 112
    ((80, 112), None, 128, None),
    # d = 192 and d_v = 160: P V as n 128 + 64, key tiles of 64 (the shared memory)
    ((192, 160), None, 64, None),
    ((192, 160), None, 64, "second_n"),
    # fp8 Q and K, d = 96
    ("fp8_96", None, 64, None),
])  # fmt: skip
def test_heads_of_any_multiple_of_16_match_the_reference(
    spec: str | tuple[int, int], sizes: dict[str, int] | None, s_x: int, planted: str | None
) -> None:  # (fp8 Q and K: of 32)
    if isinstance(spec, tuple):
        d = load_diagram_text(HEADS % (*spec, *spec))
        assert [c.param("s_x") for c in wgmma_candidates(d)] == [s_x, s_x]  # 2 and 3 stages
    elif spec == "fp8_96":
        d = load_diagram_text(HEADS_FP8)
    else:
        d = load_diagram(support.SPECS / f"{spec}.yaml", sizes)
    _, module = wgmma_module(d, s_x, 2)
    if planted:
        header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
        fault, wrong = HEAD_FAULTS[planted]
        assert header.count(fault) == 1
        source = module.source.replace(
            '#include "ncdc_attention_hopper.cuh"', header.replace(fault, wrong)
        )
        module = dataclasses.replace(module, source=source)
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok == (planted is None), result.checks


def test_padded_heads_are_priced_as_issued() -> None:
    # P V's padding is tensor time the diagram's FLOPs do not count: at d = 96 a block's
    # key tile issues 128 x 128 x (96 + 128) where the diagram counts 96 + 96, so the share
    # of the peak is 192 / 224 of a d = 128 kernel's at the same pipeline; the model takes
    # the wgmma kernel for d = 96 (attn_bshd_causal, attn_d96) where mma.sync was all it had.
    for spec in ("attn_bshd_causal", "attn_d96"):
        plan = plan_diagram(load_diagram(support.SPECS / f"{spec}.yaml"), HW)
        assert is_wgmma(plan.kernels[0].candidate), spec
    d96 = load_diagram(support.SPECS / "attn_d96.yaml")
    d128 = load_diagram_text(
        (support.SPECS / "attn_d96.yaml").read_text().replace("d: 96", "d: 128")
    )
    (c96,), (c128,) = ([c for c in wgmma_candidates(d, 128) if c.stages == 2] for d in (d96, d128))
    assert c96.tensor_share / c128.tensor_share == pytest.approx(192 / 224, rel=0.01)


def test_a_paged_cache_gathered_first_runs_on_the_wgmma_kernel() -> None:
    # Saved, the gathers of a paged cache are elementwise kernels writing K and V as
    # [b, x, g, d] (the kernel-break search's choice on h200 at the diagram's sizes); the
    # attention then reads them by 5-D maps. Pages of 32 rows, a partly filled last page.
    text = (DIAGRAMS / "paged_prefill_attention.yaml").read_text()
    text = text.replace("outputs: [O]", "outputs: [O]\nschedule: {materialize: [K, V]}", 1)
    sizes = {"b": 2, "g": 2, "r": 2, "q": 70, "x": 300, "page": 12, "slot": 32, "n": 10}
    d = load_diagram_text(text, sizes=sizes)
    plan = plan_diagram(d, HW)
    assert [k.family.name for k in plan.kernels] == ["elementwise", "elementwise", "attention"]
    assert is_wgmma(plan.kernels[-1].candidate)
    result = run_diagram(d, render_plan(plan), backend="cpu", seed=3)
    assert result.ok, result.checks
    full = plan_diagram(load_diagram(DIAGRAMS / "paged_prefill_attention.yaml"), HW)
    assert is_wgmma(full.kernels[-1].candidate)


# The log-sum-exp output on the FlashAttention-3 kernel: diagrams/attention_lse.yaml (causal,
# queries aligned at the end of the keys) and the soft-capped diagram with one (the max in
# base 2 after the functor), at odd sizes; rows that see no key would be -inf.
SOFTCAP_2_LSE = SOFTCAP_2.replace(
    "  - O = contract(P, V, over=x)\n",
    "  - Z = logsumexp(M, over=x, dtype=fp32)\n  - O = contract(P, V, over=x)\n",
).replace("outputs: [O]", "outputs: [O, Z]")
assert "outputs: [O, Z]" in SOFTCAP_2_LSE


@pytest.mark.parametrize(
    ("spec", "sizes"),
    [
        ("attention_lse", {"b": 1, "h": 2, "q": 130, "x": 300}),
        ("softcap_2_lse", {"b": 1, "g": 1, "r": 2, "q": 77, "x": 201}),
    ],
)
def test_log_sum_exp_output_matches_the_reference(spec: str, sizes: dict[str, int]) -> None:
    if spec == "softcap_2_lse":
        d = load_diagram_text(SOFTCAP_2_LSE, sizes=sizes)
    else:
        d = load_diagram(DIAGRAMS / f"{spec}.yaml", sizes)
    _, module = wgmma_module(d, 128, 2)
    assert module.launches[0].kernel.endswith("_lse_sm90a")
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok and len(result.checks) == 2, result.checks  # O and the log-sum-exp


# A score path split into parts (scores.split_logit): a key part computed once per key (or,
# linear in the key, stepped along the tile from one value a tile), the pair part per score
# and the row part left out of the softmax and added back to the log-sum-exp. At odd sizes
# (150 queries: two blocks, the second's positions from 128), with the log-sum-exp output
# (where a lost row part shows): ALiBi, causal (stepped) and
# bidirectional (keys past the query raise the logit: the key part's precision counts far
# from the block's first query); key and row parts that do not cancel (the log-sum-exp then
# needs the key part at the block's origin); a key bias and a query bias read from tensors (the key
# part per key, the row part read per row); soft-capping plus ALiBi (a pair part of its own).
SPLIT = """
ncdc: 1
name: split
doc: A score path with parts over the key and the query.
axes: {b: 1, h: 2, q: 150, x: 201, d: 64}
inputs:
  Q: {axes: [b, h, q, d], dtype: bf16}
  K: {axes: [b, h, x, d], dtype: bf16}
  V: {axes: [b, h, x, d], dtype: bf16}
%s
ops:
  - S = contract(Q, K, over=d) * 0.125
%s
  - P = softmax(M, over=x)
  - Z = logsumexp(M, over=x, dtype=fp32)
  - O = contract(P, V, over=x)
outputs: [O, Z]
schedule: {stream: x}
"""
SLOPE = "  slope: {axes: [h], dtype: bf16}"
SPLITS = {
    "alibi_causal": (
        SLOPE,
        """  - I = index(q)
  - J = index(x)
  - D = sub(J, I)
  - A = mul(D, slope)
  - B = add(S, A)
  - M = causal(B, query=q, key=x)""",
    ),
    "alibi_both_ways": (
        SLOPE,
        """  - I = index(q)
  - J = index(x)
  - D = sub(I, J)
  - A = mul(slope, D)
  - N = neg(A)
  - M = add(N, S)""",
    ),
    # key and row parts that do not cancel at the origin: 0.5 j slope + 0.25 i slope
    "linear": (
        SLOPE,
        """  - I = index(q)
  - J = index(x)
  - E = mul(J, 0.5)
  - F = mul(I, 0.25)
  - G = add(E, F)
  - A = mul(G, slope)
  - B = add(S, A)
  - M = causal(B, query=q, key=x)""",
    ),
    "tensors": (
        "  kb: {axes: [b, h, x], dtype: bf16}\n  qb: {axes: [b, q], dtype: bf16}",
        """  - A = add(S, kb)
  - C = sub(A, qb)
  - M = causal(C, query=q, key=x)""",
    ),
    "softcap_alibi": (
        SLOPE,
        """  - I = index(q)
  - J = index(x)
  - C = mul(S, 0.5)
  - T = tanh(C)
  - L = mul(T, 2)
  - D = sub(J, I)
  - A = mul(D, slope)
  - M = add(L, A)""",
    ),
}


def split_inputs(d: Diagram) -> dict[str, np.ndarray]:
    """Fresh inputs with ALiBi's slopes 2^-1 and 2^-2 (100 keys from the query move the
    logit by 50 and 25) and biases of a few units."""
    inputs = dict(make_inputs(d, int(np.random.default_rng().integers(2**31))))
    if "slope" in inputs:
        inputs["slope"] = np.array([0.5, 0.25])
    for name in ("kb", "qb"):
        if name in inputs:
            inputs[name] = inputs[name] * 4.0
    return inputs


@pytest.mark.parametrize(("case", "identity", "stepped", "s_x"), [
    ("alibi_causal", True, True, 128),
    ("alibi_both_ways", True, True, 128),
    ("linear", True, True, 128),
    ("tensors", True, False, 64),  # a tensor read along the keys: 64-key tiles
    ("softcap_alibi", False, True, 128),
])  # fmt: skip
def test_score_paths_split_by_axis_match_the_reference(
    case: str, identity: bool, stepped: bool, s_x: int
) -> None:
    d = load_diagram_text(SPLIT % SPLITS[case])
    _, module = wgmma_module(d, s_x, 2)
    assert f"kPairIdentity = {str(identity).lower()}" in module.source
    assert f"kShift = {str(stepped).lower()}" in module.source
    result = run_diagram(d, module, backend="cpu", inputs=split_inputs(d))
    assert result.ok and len(result.checks) == 2, result.checks


def test_a_row_part_left_out_of_the_log_sum_exp_is_caught() -> None:
    # The kernel that forgets to add the row part back to the log-sum-exp: O is right (the
    # softmax drops it), the log-sum-exp off by -slope i.
    d = load_diagram_text(SPLIT % SPLITS["alibi_causal"])
    _, module = wgmma_module(d, 128, 2)
    header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
    fault = "      if constexpr (Scores::kSplit)  // the row part the softmax left out\n"
    assert header.count(fault) == 1
    planted_header = header.replace(fault, "      if constexpr (false)\n")
    source = module.source.replace('#include "ncdc_attention_hopper.cuh"', planted_header)
    module = dataclasses.replace(module, source=source)
    result = run_diagram(d, module, backend="cpu", inputs=split_inputs(d))
    assert [c.ok for c in result.checks] == [True, False], result.checks


# FlashAttention-3's fp8 S with a 16-bit P V (tests/specs/attn_fp8_qk.yaml: e4m3 Q and K,
# S by wgmma k32; fp16 V, P and O; d = 128) with the paper's 64 keys a tile, and its fp8
# configuration (diagrams/attention_fp8.yaml: V and P in e4m3 too, P V by wgmma k32).
FP8 = (support.SPECS / "attn_fp8_qk.yaml").read_text()
FP8_PV = (DIAGRAMS / "attention_fp8.yaml").read_text()


def test_fp8_attention_is_priced_and_refused_without_wgmma() -> None:
    # h200: the one candidate is the wgmma kernel, its S at the fp8 rate (half the time of
    # the fp16 P V), and with fp8 V both products (half of the fp16 kernel's); a100 has no
    # fp8 attention kernel: one error with what to write.
    sizes = {"b": 2, "h": 16, "q": 4096, "x": 4096}  # the library's: whole tiles
    plan = plan_diagram(load_diagram_text(FP8, sizes=sizes), HW)
    k = plan.kernels[0]
    assert is_wgmma(k.candidate) and k.candidate.param("s_x") == 64
    assert k.candidate.threads == 384 and k.bound == "tensor"
    fp16 = plan_diagram(load_diagram_text(FP8.replace("fp8_e4m3", "fp16"), sizes=sizes), HW)
    assert k.compute["tensor"] == pytest.approx(0.75 * fp16.kernels[0].compute["tensor"], rel=0.01)
    with pytest.raises(PlanError, match="fp8 Q .* run only in the sm_90a wgmma kernel"):
        plan_diagram(load_diagram_text(FP8), load_hardware("a100"))
    v8 = plan_diagram(load_diagram_text(FP8_PV), HW).kernels[0]
    assert is_wgmma(v8.candidate) and v8.candidate.param("s_x") == 128  # one 128-byte key row
    fp16 = plan_diagram(load_diagram_text(FP8_PV.replace("fp8_e4m3", "fp16")), HW)
    assert v8.compute["tensor"] == pytest.approx(0.5 * fp16.kernels[0].compute["tensor"], rel=0.01)
    with pytest.raises(PlanError, match=r"store Q, K and V as fp16"):
        plan_diagram(load_diagram_text(FP8_PV), load_hardware("a100"))
    with pytest.raises(PlanError, match=r"P V product takes P in V's type.*dtype=fp8_e4m3"):
        plan_diagram(load_diagram_text(FP8_PV.replace("dtype=fp8_e4m3)", "dtype=fp16)")), HW)
    wide = FP8_PV.replace("d: 128}", "d: 256}")  # d_v 256: S, O and P pass 232 registers
    with pytest.raises(PlanError, match=r"fp8 V key tiles of 128, d_v 128"):
        plan_diagram(load_diagram_text(wide), HW)
    with pytest.raises(PlanError, match=r"key tiles of 128.*x: 128"):  # fp8 V, 64-key tiles
        plan_diagram(
            load_diagram_text(FP8_PV.replace("{stream: x}", "{stream: x, tiles: {x: 64}}")), HW
        )


@pytest.mark.parametrize(
    ("spec", "mmas", "most"),
    [
        # bf16, plain and grouped-query (2.0 slots per HMMA.16816)
        ("attention", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 3),
        ("gqa_attention", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 3),
        # causal, bf16: the hot loop is the unmasked copy (2.0 slots per HMMA.16816)
        ("attention_causal", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 4),
        # fp8: S by QGMMA k32, P V by HGMMA in fp16 (no type suffix), P from registers
        ("fp8", ("QGMMA.64x64x32.F32.E4M3.E4M3 R", "HGMMA.64x128x16.F32 R"), 3),
        # fp8 V too: both by QGMMA, P from registers (2.1 slots per HMMA.16816 with the
        # permute's shuffles; half of them a tile to the fp16 P V's count of FLOPs)
        (
            "attention_fp8",
            ("QGMMA.64x128x32.F32.E4M3.E4M3 R", "QGMMA.64x128x32.F32.E4M3.E4M3 R"),
            3,
        ),
        # score functors, causal: ALiBi, split into its key part, stepped along the tile, and
        # its row part, left out (2.2 slots per HMMA.16816; 3.4 computing slope (j - i) per
        # score; 8.2 on mma.sync), and soft-capping, whose tanh of a logit is 3 fp32 and 2
        # MUFU a score (3.7; libdevice's tanhf, 11 fp32, 2 MUFU and a select, took 6.9)
        ("alibi_attention", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 2.5),
        ("softcap_attention", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 4.5),
        # Q in [b, q, h, d]: 5-D maps, the same loop
        ("attn_bshd_mqa", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 3),
        # d = 96: S in 6 k steps, P V at n 128 (2.2 slots per HMMA.16816 issued, 2.5 per
        # one the diagram counts)
        ("attn_d96", ("HGMMA.64x128x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"), 3),
        # a data mask: the block table's classes read from shared memory steer the loops;
        # the hot one is the loop of tiles run whole (64-key tiles, 2.9 slots per HMMA.16816)
        (
            "document_mask_attention",
            ("HGMMA.64x64x16.F32.BF16 R", "HGMMA.64x128x16.F32.BF16 R"),
            3.5,
        ),
    ],
)
def test_compiles_to_tma_and_wgmma_without_spills(
    spec: str, mmas: tuple[str, str], most: float
) -> None:
    # What `ncdc compile --arch sm_90a` builds on h200: TMA loads and stores, setmaxnreg, both GEMMs
    # as wgmma (P V's A in registers: an R operand, not a descriptor), no spills, the
    # main loop's issue slots per HMMA.16816 of tensor work under `most`, and the model's
    # estimate within 15% of them.
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    if sass.find_tool("nvdisasm") is None:
        pytest.skip("nvdisasm wheel not installed")
    if spec == "fp8":
        d = load_diagram_text(FP8)
    else:
        d = load_diagram((support.SPECS if spec.startswith("attn_") else DIAGRAMS) / f"{spec}.yaml")
    plan = plan_diagram(d, HW)
    report = compile_plan(plan, "sm_90a")
    (kernel,) = report.kernels
    assert "attention_wgmma" in kernel.launch.kernel
    assert kernel.spill_stores_bytes == kernel.spill_loads_bytes == 0
    text = sass.disassemble(report.cubin)
    assert "UTMALDG" in text and "USETMAXREG" in text
    # O leaves through shared memory by TMA stores, not by the threads' own stores
    assert "UTMASTG" in text and not re.search(r"\bSTG\.", text)
    qk, pv = mmas
    # V an MN-major B (transposed by the wgmma), or for fp8 V K-major (transposed in SMEM)
    tnsp = "" if spec == "attention_fp8" else r"\.tnspB"
    assert qk in text and re.search(re.escape(pv) + r"\d+, R\d+, gdesc\[UR\d+\]" + tnsp, text)
    loop = sass.main_loops(report.cubin)[report.module.launches[0].kernel]
    # two waits a key tile (S, then the P V before it): ptxas did not serialise the wgmmas
    assert [line.split()[1] for line in loop.splitlines() if "DEPBAR" in line] == [
        "WARPGROUP.DEPBAR.LE",
        "WARPGROUP.DEPBAR.LE",
    ]
    mix = loop_mixes.loop_mix(sass.parse_sass(loop))
    assert mix.slots_per_mma < most
    assert (
        spec != "attn_d96" or len(re.findall(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, gdesc", loop)) == 6
    )
    est = plan.kernels[0].instructions
    # the estimate counts the diagram's FLOPs, the loop a padded V's too (pricing takes the
    # estimate's: loop_mixes.mixes_by_kernel)
    at = read_attention(plan.kernels[0].family, plan.kernels[0].kernel, d, True)
    useful = (at.d + at.d_v) / (at.d + padded_heads(at)[1])
    assert est is not None and est.tensor_flops == useful * mix.tensor_flops
    mix = dataclasses.replace(mix, tensor_flops=est.tensor_flops)
    if spec == "document_mask_attention":  # the model runs every tile with the rule (the
        assert est.slots_per_mma > mix.slots_per_mma  # data unknown): the masked loop's mix
    else:
        assert est.slots_per_mma == pytest.approx(mix.slots_per_mma, rel=0.15)


def planted(header: str, fault: str) -> str:
    """The device header with one fault planted where x_len is 333 (a missing wgmma wait:
    the softmax reads S before its wgmmas retire), 334 (the full barrier of K waited on
    with the wrong parity) or 335 (O's shared tile stored by TMA without the proxy fence)."""
    cases = {
        "  wgmma_wait<1>();  // S of tile j\n": "  if (p.x_len != 333) wgmma_wait<1>();\n",
        "  mbar_wait(&bar.full_k[next], next_phase);\n":
            "  mbar_wait(&bar.full_k[next], p.x_len == 334 ? next_phase ^ 1u : next_phase);\n",
        "  fence_proxy_async();\n  named_bar_sync(kStoreBar + 1 + consumer, 128);\n":
            "  if (p.x_len != 335) fence_proxy_async();\n"
            "  named_bar_sync(kStoreBar + 1 + consumer, 128);\n",
    }  # fmt: skip
    assert header.count(fault) == 1
    return header.replace(fault, cases[fault])


def test_fp8_attention_runs_and_planted_faults_are_caught() -> None:
    # One build of the fp8 kernel, three sizes (sizes are runtime parameters; each run has
    # its own tensor maps): x = 300 has no fault and checks the kernel against the reference
    # (two query blocks, the second 72 rows past q; 5 key tiles through a 2-slot ring, a
    # 44-key tail), x = 333 reads stale scores, x = 334 deadlocks, x = 335 hands O's shared
    # tile to the TMA store unfenced.
    header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
    for fault in (
        "  wgmma_wait<1>();  // S of tile j\n",
        "  mbar_wait(&bar.full_k[next], next_phase);\n",
        "  fence_proxy_async();\n  named_bar_sync(kStoreBar + 1 + consumer, 128);\n",
    ):
        header = planted(header, fault)

    def module(x: int) -> tuple[Diagram, RenderedModule]:
        sizes = {"b": 1, "h": 1, "q": 200, "x": x}
        return wgmma_module(load_diagram_text(FP8, sizes=sizes), 64, 2)

    lib = build(module(300)[1].source.replace('#include "ncdc_attention_hopper.cuh"', header))

    def run(x: int) -> bool:
        diagram, rendered = module(x)
        launch = rendered.launches[0]
        inputs = make_inputs(diagram, int(np.random.default_rng().integers(2**31)))
        buffers = allocate(rendered, diagram, inputs)
        lib.launch(launch.kernel, launch.grid, launch.block, launch_args(launch, buffers),
                   dynamic_smem=launch.dynamic_smem)  # fmt: skip
        got = from_storage(buffers["O"], "fp16")
        want = evaluate(diagram, inputs, sums=dict(rendered.sums))["O"]  # as QGMMA sums S
        check = compare("O", "fp16", got, want)
        return check.ok

    assert run(300)
    assert not run(333)  # the softmax of stale scores
    # the producer's next load waits for a slot never released: a deadlock, whichever of
    # the threads waiting (on an mbarrier or the consumers' named barriers) finds it
    with pytest.raises(NcdcError, match=r"deadlock: (mbarrier wait|bar\.sync)"):
        run(334)
    with pytest.raises(NcdcError, match=r"missing fence\.proxy\.async: a TMA store"):
        run(335)


CAUSAL_E5M2 = FP8_PV.replace(
    "  - O = contract", "  - M = causal(S, query=q, key=x)\n  - O = contract"
)
CAUSAL_E5M2 = (
    CAUSAL_E5M2.replace("softmax(S,", "softmax(M,")
    .replace("V: {axes: [b, h, x, d], dtype: fp8_e4m3}", "V: {axes: [b, h, x, d], dtype: fp8_e5m2}")
    .replace("dtype=fp8_e4m3)", "dtype=fp8_e5m2)")
)


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        (FP8_PV, {"b": 1, "h": 2, "q": 200, "x": 300}),  # 3 key tiles, a 44-key tail
        (CAUSAL_E5M2, {"b": 1, "h": 1, "q": 130, "x": 250}),  # e4m3 S, e5m2 P V; masked tiles
    ],
)
def test_fp8_p_v_matches_its_reference_and_a_missing_permute_fails(text: str, sizes: dict) -> None:
    # Both products in fp8: P rounded to V's type tile by tile against the running max (the
    # reference does the same: ncdc.verify.reference.tiled_softmax), permuted across the
    # quad into the 8-bit A fragment; V transposed in shared memory by the producer's warps.
    # Against the reference to fp16's rounding of O; with P packed in the accumulator's
    # order (no permute) the first case fails.
    d = load_diagram_text(text, sizes=sizes)
    _, module = wgmma_module(d, 128, 2)
    assert module.launches[0].kernel.startswith("attention_fp8_attention_wgmma_fp8_e4m3_fp8_e")
    assert [(n, t.block) for n, t in module.softmaxes] == [("P", 128)]
    result = run_diagram(
        d, module, backend="cpu", seed=int(np.random.default_rng().integers(2**31))
    )
    assert result.ok, result.checks
    assert result.checks[0].max_rel_error < 2e-3  # fp16 rounding of O, not fp8's
    if text != FP8_PV:
        return  # the planted fault once (a build of its own)
    header = (Path(include.__file__).parent / "ncdc_attention_hopper.cuh").read_text()
    permute = (
        "        pr[4 * c + h] = wgmma_gemm::byte_perm(x0, y0, sel);\n"
        "        pr[4 * c + h + 2] = wgmma_gemm::byte_perm(x2, y2, sel);\n"
    )
    assert header.count(permute) == 1
    unpermuted = header.replace(
        permute, "        pr[4 * c + h] = w01;\n        pr[4 * c + h + 2] = w23;\n"
    )
    lib = build(module.source.replace('#include "ncdc_attention_hopper.cuh"', unpermuted))
    launch = module.launches[0]
    inputs = make_inputs(d, 3)
    buffers = allocate(module, d, inputs)
    lib.launch(launch.kernel, launch.grid, launch.block, launch_args(launch, buffers),
               dynamic_smem=launch.dynamic_smem)  # fmt: skip
    want = evaluate(d, inputs, sums=dict(module.sums), softmaxes=dict(module.softmaxes))["O"]
    assert not compare("O", "fp16", from_storage(buffers["O"], "fp16"), want).ok


def test_a_jump_back_from_a_retry_stub_is_not_a_loop() -> None:
    # ptxas puts an mbarrier try-wait's retry after the kernel's exits and jumps back from
    # it: that backward branch spans the exits and is no loop; the key loop (0x10 .. 0x30) is.
    listing = """
        /*0000*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0010*/              @!P0 BRA 0x60 ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0030*/              @P1 BRA 0x10 ;
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0050*/                   EXIT ;
        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0070*/              @!P0 BRA 0x60 ;
        /*0080*/                   BRA 0x10 ;
    """
    loop = sass.main_loop(sass.parse_sass(listing))
    assert [i.addr for i in loop] == [0x10, 0x20, 0x30]
