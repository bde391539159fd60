"""What attention diagrams do to their logits, fused: biases, soft-capping, position terms,
causal (either alignment), window and varlen masks, and the log-sum-exp output.

Each construct runs on the CPU emulator at odd sizes (no tile divides q or x; lengths 0
and 1 included) on NaN-poisoned outputs against the float64 reference, whose masks are
checked here against plain loops; `ncdc cost`'s work for a window is the work the kernel
does; every refusal's hint, written as it says, plans.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends.cpu import EmulatedModule, build
from ncdc.backends.traffic import Traffic
from ncdc.errors import NcdcError, SpecError
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.geometry import band_fraction, band_tiles
from ncdc.model.masks import Call, Const, Data, MaskRule, Pos, Term, read_mask_rule
from ncdc.plan.feedback import kernel_alternatives, with_kernel
from ncdc.plan.search import plan_diagram
from ncdc.render import RenderedModule, render_plan
from ncdc.verify.reference import evaluate, from_storage, make_inputs
from ncdc.verify.run import OutputCheck, allocate, compare, launch_args
from tests import support

DIAGRAMS = support.DIAGRAMS
HW = load_hardware("h200")
SMALL = {"q": 64, "x": 32}  # 4 warps, 32-key chunks: the emulator's forward tiles
_LIBS: dict[tuple, EmulatedModule] = {}


def _library(name: str, sizes: dict[str, int], edits: tuple[tuple[str, str], ...] = ()) -> Diagram:
    text = (DIAGRAMS / f"{name}.yaml").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return load_diagram_text(text, f"{name}.yaml", sizes)


def _run(diagram: Diagram, tiles: dict[str, int] = SMALL, splits: int | None = None,
         seed: int = 0) -> tuple[dict[str, OutputCheck], dict, RenderedModule, Traffic]:  # fmt: skip
    """Every output of the rendered kernels against the reference, on poisoned outputs."""
    plan = plan_diagram(diagram, HW, tiles=tiles)
    if splits is not None:
        kp = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == splits)
        plan = with_kernel(plan, 0, kp)
    module = render_plan(plan)
    # sizes are runtime parameters: one library per kernel variant and diagram text serves
    # every size (the source's header names the sizes)
    key = (tuple(la.kernel for la in module.launches), tuple(op.text for op in diagram.ops),
           tuple(diagram.inputs))  # fmt: skip
    if key not in _LIBS:
        _LIBS[key] = build(module.source)
    inputs = make_inputs(diagram, seed)
    want = evaluate(diagram, inputs)
    buffers = allocate(module, diagram, inputs)
    traffic = Traffic(0, 0)
    for launch in module.launches:
        traffic += _LIBS[key].launch(launch.kernel, launch.grid, launch.block,
                          launch_args(launch, buffers), dynamic_smem=launch.dynamic_smem)  # fmt: skip
    checks, got = {}, {}
    for name in diagram.outputs:
        dtype = diagram.tensor(name).dtype
        got[name] = from_storage(buffers[name], dtype)
        checks[name] = compare(name, dtype, got[name], want[name])
    return checks, {"got": got, "want": want, "inputs": inputs}, module, traffic


def _assert_ok(checks: dict[str, OutputCheck]) -> None:
    for check in checks.values():
        assert check.unexpected_nan == 0, check
        assert check.max_abs_error <= 2e-2 * check.scale, check


# ------------------------------------------------------------------- the reference


def _visible_by_loops(nq: int, nk: int, fn: str, **kw: object) -> np.ndarray:
    """[nq, nk] True where query i sees key j, by the definitions in diagram-language.md."""
    seen = np.zeros((nq, nk), dtype=bool)
    shift = nk - nq if kw.get("align", "end") == "end" else 0
    for i in range(nq):
        for j in range(nk):
            if fn == "causal":
                seen[i, j] = j <= i + shift
            elif fn == "window":
                seen[i, j] = i + shift - int(kw["left"]) <= j <= i + shift + int(kw["right"])  # type: ignore[call-overload]
            else:  # packed lengths: the same sequence
                ends = np.cumsum(kw["lengths"])  # type: ignore[call-overload]
                si = int(np.searchsorted(ends, i, side="right"))
                sj = int(np.searchsorted(ends, j, side="right"))
                seen[i, j] = si == sj and si < len(ends)
    return seen


_MASK_SPEC = """
ncdc: 1
name: masked
axes: {q: 7, x: 11, n: 4}
inputs:
  S: {axes: [q, x], dtype: fp32}
  L: {axes: [n], dtype: int32}
ops:
  - M = MASK
  - Y = add(M, 0.0)
  - Z = sum(Y, over=x)
outputs: [M]
"""


@pytest.mark.parametrize(
    "mask, kw",
    [
        ("causal(S, query=q, key=x)", {}),
        ("causal(S, query=q, key=x, align=start)", {"align": "start"}),
        ("window(S, query=q, key=x, left=2, right=1)", {"left": 2, "right": 1}),
        (
            "window(S, query=q, key=x, left=0, align=start)",
            {"left": 0, "right": 0, "align": "start"},
        ),  # fmt: skip
    ],
)
def test_reference_masks_match_loops(mask: str, kw: dict) -> None:
    text = _MASK_SPEC.replace("MASK", mask).replace("  L: {axes: [n], dtype: int32}\n", "")
    d = load_diagram_text(text.replace("outputs: [M]", "outputs: [M, Z]"))
    got = evaluate(d, {"S": np.zeros((7, 11))})["M"]
    assert np.array_equal(got == 0, _visible_by_loops(7, 11, mask.split("(")[0], **kw))


def test_reference_packed_lengths_match_loops() -> None:
    text = _MASK_SPEC.replace("MASK", "varlen(S, query=q, key=x, lengths=L)")
    text = text.replace("axes: {q: 7, x: 11", "axes: {q: 11, x: 11")
    d = load_diagram_text(text.replace("outputs: [M]", "outputs: [M, Z]"))
    lengths = np.array([3.0, 0.0, 1.0, 5.0])  # 9 of 11 tokens: the last 2 in no sequence
    got = evaluate(d, {"S": np.zeros((11, 11)), "L": lengths})["M"]
    assert np.array_equal(got == 0, _visible_by_loops(11, 11, "varlen", lengths=lengths))


def test_made_lengths_include_0_and_1_and_fit() -> None:
    d = _library("varlen_attention", {"q": 50, "x": 50, "n": 7})
    lens = make_inputs(d, seed=1)["lens"]
    assert lens[0] == 0 and lens[1] == 1 and lens.sum() <= 50 and lens.min() >= 0


# ------------------------------------------------------------ emulated, forward


def test_cross_attention_77_keys() -> None:
    checks, _, module, _ = _run(_library("cross_attention", {"b": 1, "h": 2, "q": 37}))
    assert module.launches[0].kernel.startswith("cross_attention_attention_fp16_q64_x32_d64")
    _assert_ok(checks)


_WINDOW = ("left=4095)   # right=0", "left=40)   # right=0")


@pytest.mark.parametrize("q, x", [(150, 150), (70, 150), (150, 70)])
def test_sliding_window(q: int, x: int) -> None:
    d = _library("sliding_window_attention", {"b": 1, "g": 1, "r": 2, "q": q, "x": x},
                 (_WINDOW,))  # fmt: skip
    checks, _, module, traffic = _run(d)
    _assert_ok(checks)
    # the kernel loads the key chunks the model counts (`band_tiles`): K and V of each
    # visited chunk once per query tile, and Q of the tiles that see some key; none outside
    # the window
    tiles = band_tiles(q, x, 64, 32, x - q - 40, x - q)
    rows = sum(min(64, q - 64 * t) for t, (n, _) in enumerate(tiles) if n)
    heads, p, dh = 2, 2, 128
    assert traffic.bytes_read == heads * p * dh * (rows + 2 * sum(n for _, n in tiles))


def test_window_both_sides_align_start() -> None:
    edit = ("window(S, query=q, key=x, left=4095)", "window(S, query=q, key=x, left=20, "
            "right=33, align=start)")  # fmt: skip
    d = _library("sliding_window_attention", {"b": 1, "g": 1, "r": 1, "q": 101, "x": 77}, (edit,))
    _assert_ok(_run(d)[0])


@pytest.mark.parametrize("q, x", [(45, 100), (100, 45)])
def test_causal_aligned_at_the_start(q: int, x: int) -> None:
    edit = ("causal(S, query=q, key=x)", "causal(S, query=q, key=x, align=start)")
    d = _library("attention_lse", {"b": 1, "h": 1, "q": q, "x": x, "d": 64}, (edit,))
    checks, out, _, _ = _run(d)
    _assert_ok(checks)
    # top-left: query 0 sees key 0 only, whatever x is
    assert np.isfinite(out["got"]["L"]).all()


def test_alibi() -> None:
    d = _library("alibi_attention", {"b": 1, "h": 2, "q": 70, "x": 83, "d": 64})
    checks, out, module, _ = _run(d)
    assert module.launches[0].kernel.endswith("_causal_scores")
    _assert_ok(checks)


def test_softcap_holds_large_logits() -> None:
    # logits of several hundred: capped at 50, they stay finite and match the reference
    d = _library("softcap_attention", {"b": 1, "g": 1, "r": 2, "q": 70, "x": 83, "d": 64},
                 (("* 0.08333333333333333", "* 20.0"),))  # fmt: skip
    checks, out, _, _ = _run(d, seed=2)
    _assert_ok(checks)
    assert np.isfinite(out["got"]["O"]).all()


def test_additive_biases_broadcast() -> None:
    # three biases in one diagram: per head, a padding mask per batch entry, one for all
    biases = {"Bh": "[h, q, x]", "Bb": "[b, x]", "Bq": "[q, x]"}
    text = (DIAGRAMS / "attention.yaml").read_text()
    text = text.replace(
        "  V: {axes: [b, h, x, d], dtype: bf16}\n",
        "  V: {axes: [b, h, x, d], dtype: bf16}\n"
        + "".join(f"  {n}: {{axes: {a}, dtype: fp32}}\n" for n, a in biases.items()),
    )
    text = text.replace(
        "  - P = softmax(S, over=x)",
        "  - T1 = add(S, Bh)\n  - T2 = add(Bb, T1)\n  - T3 = add(T2, Bq)\n"
        "  - P = softmax(T3, over=x)",
    )
    text = text.replace("O = contract(P, V, over=x)", "O = contract(P, V, over=x, dtype=bf16)")
    d = load_diagram_text(text, "bias.yaml", {"b": 2, "h": 2, "q": 37, "x": 45, "d": 64})
    _assert_ok(_run(d)[0])


def test_packed_varlen_with_lengths_0_and_1() -> None:
    d = _library("varlen_attention", {"h": 1, "q": 150, "x": 150, "n": 6, "d": 64})
    checks, out, _, _ = _run(d, seed=4)
    _assert_ok(checks)
    lens = out["inputs"]["lens"].astype(int)
    assert lens[0] == 0 and lens[1] == 1
    # token 0 is the length-1 sequence: it sees itself only, so O = V there
    assert np.allclose(out["got"]["O"][0, 0], out["inputs"]["V"][0, 0], atol=1e-2)
    # tokens past the last sequence see no key: zeros, as FlashAttention gives
    assert np.all(out["got"]["O"][:, lens.sum() :] == 0.0)


def test_padded_varlen_with_lengths_0_and_1() -> None:
    edits = (
        ("axes: {h: 16, q: 8192, x: 8192, n: 16, d: 128}",
         "axes: {b: 3, h: 16, q: 8192, x: 8192, d: 128}"),
        ("[h, q, d]", "[b, h, q, d]"), ("[h, x, d]", "[b, h, x, d]"),
        ("lens: {axes: [n]", "lens: {axes: [b]"),
    )  # fmt: skip
    d = _library("varlen_attention", {"b": 3, "h": 1, "q": 77, "x": 77, "d": 64}, edits)
    checks, out, _, _ = _run(d, seed=5)
    _assert_ok(checks)
    assert np.all(out["got"]["O"][0] == 0.0)  # length 0: every query sees nothing


def test_lse_forward() -> None:
    d = _library("attention_lse", {"b": 1, "h": 2, "q": 100, "x": 45, "d": 64})
    checks, out, module, _ = _run(d)
    _assert_ok(checks)
    assert checks["L"].max_rel_error <= 1e-5  # fp32, from the fp32 running max and sum
    lse = out["got"]["L"]
    assert np.all(np.isneginf(lse[..., :55]))  # queries before the diagonal see no key
    assert np.all(np.isfinite(lse[..., 55:]))


# -------------------------------------------------------------- emulated, decode


@pytest.mark.parametrize(
    "name, sizes, edits, splits",
    [
        ("attention_lse", {"b": 1, "h": 2, "q": 7, "x": 150, "d": 64}, (), 2),
        ("varlen_attention", {"h": 1, "q": 9, "x": 9, "n": 4, "d": 64}, (), 1),
    ],
)
def test_decode_scores(name: str, sizes: dict[str, int], edits: tuple, splits: int) -> None:
    checks, _, module, _ = _run(_library(name, sizes, edits), {"x": 32}, splits=splits)
    assert module.launches[0].kernel.startswith(f"{name}_decode_attention")
    _assert_ok(checks)


# ------------------------------------------------------------------------ the model


def _flops(name: str, sizes: dict[str, int], edits: tuple = ()) -> int:
    plan = plan_diagram(_library(name, sizes, edits), HW)
    return plan.kernels[0].flops


def test_window_cost_grows_with_the_window_not_the_keys() -> None:
    window = {"b": 1, "g": 1, "r": 1}
    long, longer = _flops("sliding_window_attention", {**window, "q": 16384, "x": 16384}), \
        _flops("sliding_window_attention", {**window, "q": 32768, "x": 32768})  # fmt: skip
    # twice the queries, each seeing about the same 4096 keys: about twice the work (the
    # first 4096 queries see fewer); causal attention does four times
    assert 1.9 < longer / long < 2.2
    edit = (("window(S, query=q, key=x, left=4095)", "causal(S, query=q, key=x)"),)
    causal = [_flops("sliding_window_attention", {**window, "q": n, "x": n}, edit)
              for n in (16384, 32768)]  # fmt: skip
    assert 3.9 < causal[1] / causal[0] < 4.1
    half = _flops("sliding_window_attention", {**window, "q": 32768, "x": 32768},
                  (("left=4095)", "left=2047)"),))  # fmt: skip
    assert 0.45 < half / longer < 0.6
    assert float(band_fraction(32768, 32768, 128, 64, -4095, 0)) < 0.13


# ------------------------------------------------------------------ spec and hints


@pytest.mark.parametrize(
    "op, message",
    [
        ("window(S, query=q, key=x)", "needs 'left='"),
        ("window(S, query=q, key=x, left=-1)", "from 0 to"),
        ("causal(S, query=q, key=x, align=left)", "align=end or align=start"),
        ("varlen(S, query=q, key=x, lengths=S)", "expected int32"),
    ],
)
def test_mask_arguments_are_checked(op: str, message: str) -> None:
    text = _MASK_SPEC.replace("MASK", op).replace("outputs: [M]", "outputs: [M, Z]")
    text = text.replace("  L: {axes: [n], dtype: int32}\n", "")
    with pytest.raises(SpecError, match=message.replace("(", r"\(")) as err:
        load_diagram_text(text)
    assert err.value.hint


_BASE = (DIAGRAMS / "attention_lse.yaml").read_text()


def _edit(*pairs: tuple[str, str]) -> str:
    text = _BASE
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


_LSE_BF16 = ("dtype=fp32)", "dtype=bf16)")
_BIAS_IN = (
    "  V: {axes: [b, h, x, d], dtype: bf16}\n",
    "  V: {axes: [b, h, x, d], dtype: bf16}\n  B: {axes: [h, x, d], dtype: fp32}\n",
)
_BIAS_OP = ("  - M = causal(S", "  - T = add(S, B)\n  - M = causal(T")
_MASK_FIRST = (
    "  - M = causal(S, query=q, key=x)\n  - P = softmax(M",
    "  - C = causal(S, query=q, key=x)\n  - M = tanh(C)\n  - P = softmax(M",
)
_TWO_LENGTHS = (
    ("  V: {axes: [b, h, x, d], dtype: bf16}\n", "  V: {axes: [b, h, x, d], dtype: bf16}\n"
     "  L1: {axes: [b], dtype: int32}\n  L2: {axes: [b], dtype: int32}\n"),
    ("  - M = causal(S", "  - W1 = varlen(S, query=q, key=x, lengths=L1)\n"
     "  - W2 = varlen(W1, query=q, key=x, lengths=L2)\n  - M = causal(W2"),
)  # fmt: skip

# (refused spec, a piece of the hint, the spec written as the hint says)
_HINTED = [
    (_edit(_LSE_BF16), "L = logsumexp(M, over=x, dtype=fp32)", _BASE),
    (_edit(_BIAS_IN, _BIAS_OP), "drop the axis d from T's operands",
     _edit(("  V: {axes: [b, h, x, d], dtype: bf16}\n", "  V: {axes: [b, h, x, d], dtype: bf16}\n"
            "  B: {axes: [h, x], dtype: fp32}\n"), _BIAS_OP,
           ("O = contract(P, V, over=x)", "O = contract(P, V, over=x, dtype=bf16)"))),
    (_edit(_BIAS_IN, ("  B: {axes: [h, x, d], dtype: fp32}", "  B: {axes: [h, x], dtype: fp32}"),
           _BIAS_OP), "O = contract(P, V, over=x, dtype=bf16)",
     _edit(_BIAS_IN, ("  B: {axes: [h, x, d], dtype: fp32}", "  B: {axes: [h, x], dtype: fp32}"),
           _BIAS_OP, ("O = contract(P, V, over=x)", "O = contract(P, V, over=x, dtype=bf16)"))),
    (_edit(_MASK_FIRST), "schedule: {materialize: [S, P]}",
     _edit(_MASK_FIRST, ("schedule: {stream: x}", "schedule: {materialize: [S, P]}"),
           ("outputs: [O, L]", "outputs: [O]"), ("  - L = logsumexp", "  # "))),
    (_edit(*_TWO_LENGTHS), "remove W2 = varlen(...)",
     _edit(*_TWO_LENGTHS, ("  - W2 = varlen(W1, query=q, key=x, lengths=L2)\n", ""),
           ("causal(W2", "causal(W1"), ("  L2: {axes: [b], dtype: int32}\n", ""))),
]  # fmt: skip


@pytest.mark.parametrize("refused, hint, fixed", _HINTED)
def test_each_refusal_hint_can_be_followed(tmp_path: Path, refused: str, hint: str,
                                           fixed: str) -> None:  # fmt: skip
    bad, good = tmp_path / "refused.yaml", tmp_path / "fixed.yaml"
    bad.write_text(refused)
    good.write_text(fixed)
    with pytest.raises(NcdcError) as err:
        render_plan(plan_diagram(load_diagram(bad, {"q": 100, "x": 100}), HW))
    assert hint in (err.value.hint or ""), err.value
    plan = plan_diagram(load_diagram(good, {"q": 100, "x": 100}), HW)
    assert all(kp.candidate is not None for kp in plan.kernels)
    render_plan(plan)


def test_window_outside_attention_is_refused_with_a_hint() -> None:
    text = _MASK_SPEC.replace("MASK", "window(S, query=q, key=x, left=3)")
    text = text.replace("  L: {axes: [n], dtype: int32}\n", "").replace(
        "outputs: [M]", "outputs: [M, Z]"
    )
    with pytest.raises(NcdcError) as err:
        render_plan(plan_diagram(load_diagram_text(text), HW))
    assert "softmax" in (err.value.hint or "") and "causal" in (err.value.hint or "")


# ------------------------------------------------------------- mask rules as diagrams

_PREFIX = ("F = lt(J, 1024)", "F = lt(J, 21)")
_SINKS = (("W0 = sub(I, 1020)", "W0 = sub(I, 33)"), ("N = lt(J, 4)", "N = lt(J, 3)"))


def _spec(name: str, sizes: dict[str, int]) -> Diagram:
    return load_diagram(support.SPECS / f"{name}.yaml", sizes)


@pytest.mark.parametrize(
    "diagram",
    [
        pytest.param(lambda: _library("prefix_lm_attention", {"h": 2, "q": 150, "x": 150},
                                      (_PREFIX,)), id="prefix-lm"),
        pytest.param(lambda: _library("attention_sinks", {"h": 1, "q": 130, "x": 170},
                                      _SINKS), id="sinks"),
        pytest.param(lambda: _spec("attn_prefix_lm_odd", {}), id="prefix-lm-odd"),
        pytest.param(lambda: _spec("attn_sinks_window_odd", {}), id="sinks-window-inverted"),
    ],
)  # fmt: skip
def test_mask_rules_run_fused_against_the_reference(diagram) -> None:
    d = diagram()
    checks, out, module, traffic = _run(d)
    _assert_ok(checks)
    assert module.launches[0].kernel.endswith("_scores")
    # the kernel loads the key tiles of the band the rule implies, as the model prices them
    plan = plan_diagram(d, HW, tiles=SMALL)
    assert traffic.bytes_read + traffic.bytes_written == plan.kernels[0].transfers[1].bytes


def test_a_rule_band_skips_key_tiles_as_the_model_prices_them() -> None:
    # prefix-LM: keys past i + 20 are dropped, so the last key tiles of the first query
    # tiles are never loaded: less traffic than the dense kernel
    d = _library("prefix_lm_attention", {"h": 1, "q": 256, "x": 256}, (_PREFIX,))
    dense = _library("prefix_lm_attention", {"h": 1, "q": 256, "x": 256},
                     (("M = where(K0, S, -inf)", "M = where(K0, S, -1e30)"),))  # fmt: skip
    masked, full = plan_diagram(d, HW, tiles=SMALL), plan_diagram(dense, HW, tiles=SMALL)
    tiles = band_tiles(256, 256, 64, 32, None, 20)
    assert masked.kernels[0].flops < full.kernels[0].flops
    keys = sum(n for _, n in tiles)
    assert masked.kernels[0].flops == pytest.approx(full.kernels[0].flops * keys / (4 * 256))
    source = render_plan(masked).source
    assert "ncdc_slice.vis.hi = ncdc::attn::lmin(ncdc_slice.vis.hi, 20ll);" in source


def test_decode_runs_a_mask_rule() -> None:
    d = _spec("attn_prefix_lm_odd", {"q": 5, "x": 150})
    checks, _, module, _ = _run(d, {"x": 32}, splits=2)
    assert module.launches[0].kernel.startswith("attn_prefix_lm_odd_decode_attention")
    _assert_ok(checks)


def test_a_rule_on_a_heads_position_runs_with_the_head_constant_over_a_block() -> None:
    # the rule compares the key's position with the head's (a batch axis, one value in each
    # block): it bounds no band over the queries, runs per score and matches the reference
    text = (support.SPECS / "attn_prefix_lm_odd.yaml").read_text()
    d = load_diagram_text(text.replace("I = index(q)", "I = index(h)"))
    (kp,) = plan_diagram(d, HW, tiles=SMALL).kernels
    assert kp.family.name == "attention"
    rule = read_mask_rule(kp.kernel)
    assert rule is not None and (rule.query, rule.key) == ("q", "x")
    checks, _, module, _ = _run(d, seed=4)
    assert module.launches[0].kernel.endswith("_scores")
    _assert_ok(checks)


def test_a_document_mask_by_index_tensors_runs_fused() -> None:
    """Packed documents: an int32 id per token compared per score (eq(docq, docx)) with the
    causal rule, fused in the attention kernel; documents of 1, 37, 60 and 52 tokens."""
    from ncdc.verify.run import run_diagram

    d = _library("document_mask_attention", {"b": 1, "h": 2, "q": 150, "x": 150, "d": 64},
                 (("* 0.08838834764831845", "* 0.125"),))  # fmt: skip
    inputs = make_inputs(d, 3)
    ids = np.repeat([0.0, 1.0, 2.0, 3.0], [1, 37, 60, 52])
    inputs["docq"][:] = ids
    inputs["docx"][:] = ids
    module = render_plan(plan_diagram(d, HW, tiles=SMALL))
    assert [launch.kernel for launch in module.launches][0].endswith("_scores")
    result = run_diagram(d, module, backend="cpu", inputs=inputs)
    assert result.ok, result.checks


def test_t5_buckets_are_the_ones_t5_computes() -> None:
    """The diagram's buckets against T5's own rule (bidirectional, 32 buckets, distances to
    128), written out: offsets up to 8 exact, then logarithmic, then the last bucket."""
    import math

    d = _library("t5_relative_attention", {"b": 1, "h": 1, "q": 300, "x": 300, "d": 64})
    inputs = make_inputs(d, 1)
    bucket = evaluate(d, inputs, rounded=False)["bucket"]  # over (x, q)

    def t5(rel: int) -> int:
        ret = 16 if rel > 0 else 0
        n = abs(rel)
        if n < 8:
            return ret + n
        large = 8 + int(math.log(n / 8) / math.log(128 / 8) * 8)
        return ret + min(large, 15)

    for i, j in [(0, 0), (0, 7), (7, 0), (0, 8), (9, 0), (0, 100), (5, 299), (299, 0), (3, 131)]:
        assert bucket[j, i] == t5(j - i), (i, j)


# The device's tile classes (the functor's `tile`, ncdc::attn::iv_*) and the model's on
# arrays (tile_class_grid) against ncdc.model.masks.tile_class, over every tile of 133 queries by 149 keys in tiles of 16 x 8:
# rules of the library (prefix-LM, sinks, a document mask's data: always partial) and ones
# that reach every interval operation (abs, products through 0, min and max, eq and ne,
# not, a nested where, a constant past fp32's exact integers).
TILE_RULES = {
    "prefix_lm": "Or(le(J, I), lt(J, 40))",
    "sinks": "And(le(J, I), Or(gt(J, sub(I, 30)), lt(J, 4)))",
    "documents": "eq(D, D)",
    "dilated": "And(le(abs(sub(J, I)), 20), eq(mul(sub(J, I), 0), 0))",
    "strided": "Or(ge(min(J, 70), max(I, 50)), ne(neg(J), -100))",
    "nested": "where(lt(I, 64), Not(gt(J, add(I, 3))), ge(J, mul(I, 2)))",
    "inexact": "lt(J, add(I, 0.5))",
    "huge": "lt(J, 33554432)",
}


@pytest.mark.parametrize("rule", sorted(TILE_RULES))
def test_device_tile_classes_match_the_model(rule: str) -> None:
    from ncdc.families.attention.scores import rule_tile
    from ncdc.model.masks import tile_class_grid, tile_classes

    term = _parse_rule(TILE_RULES[rule])
    expr = rule_tile(term, "q", "x", lambda a: f"ncdc_b_{a}")
    source = (
        '#include "ncdc_runtime.cuh"\n#include "ncdc_attention.cuh"\n'
        'extern "C" __global__ void classes(int* out, int q, int x) {\n'
        "  int n = 0;\n"
        "  for (int ncdc_i0 = 0; ncdc_i0 < q; ncdc_i0 += 16)\n"
        "    for (int ncdc_j0 = 0; ncdc_j0 < x; ncdc_j0 += 8) {\n"
        "      const int ncdc_i1 = (ncdc_i0 + 16 < q ? ncdc_i0 + 16 : q) - 1;\n"
        "      const int ncdc_j1 = (ncdc_j0 + 8 < x ? ncdc_j0 + 8 : x) - 1;\n"
        "      using namespace ncdc::attn;\n"
        f"      out[n++] = iv_class({expr});\n"
        "    }\n}\nNCDC_EXPORT_KERNEL(classes);\n"
    )
    mask_rule = MaskRule("q", "x", term)
    want = np.array(tile_classes(mask_rule, 133, 149, 16, 8), np.int32)
    got = np.full(want.size, -1, np.int32)
    build(source).launch("classes", 1, 1, [got, 133, 149])
    assert (got.reshape(want.shape) == want).all()
    # the model's arrays of tiles (rule_fraction, tile_kinds) give the same classes
    rows = np.array([[i, min(i + 16, 133) - 1] for i in range(0, 133, 16)])
    cols = np.array([[j, min(j + 8, 149) - 1] for j in range(0, 149, 8)])
    assert (tile_class_grid(mask_rule, rows, cols) == want).all()
    counts = {c: int((want == c).sum()) for c in (0, 1, 2)}
    if rule == "documents":
        assert counts == {0: 0, 1: want.size, 2: 0} and isinstance(term.args[0], Data)
    elif rule not in ("inexact", "huge"):
        assert counts[0] + counts[2] > 0, counts  # the rule decides some tiles whole


# A data mask's block table (the Hopper kernel's classify_tiles): a warp's interval of each
# tensor over a tile (ncdc::attn::iv_over) and the rule's class given those, against the
# model's tile_class given the NumPy min and max, and against the rule itself pair by pair in
# fp32 (a tile classed kept has every pair kept, one classed masked none), over every tile
# of 133 queries by 149 keys in tiles of 16 x 64 (two values a lane, a partial warp at the
# ends): packed document ids, a document mask with a causal band, ids shared as a prefix
# every document sees, a fractional constant (0.7 is 0.69999999 in fp32, as the score path
# compares), -inf as padding, and a NaN among the ids (the tiles that read it stay partial).
DATA_RULES = {
    "documents": "eq(Dq, Dx)",
    "causal_documents": "And(le(J, I), eq(Dq, Dx))",
    "shared_prefix": "Or(lt(Dx, 1), eq(Dq, Dx))",
    "below_fraction": "Or(lt(Dx, 0.7), eq(Dq, Dx))",
    "not_padding": "And(ne(Dx, -inf), eq(Dq, Dx))",
}


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("rule", sorted(DATA_RULES))
def test_block_table_classes_match_the_model(rule: str, nan: bool) -> None:
    from ncdc.families.attention.scores import rule_tile
    from ncdc.model.masks import tile_class

    term = _parse_rule(DATA_RULES[rule])
    expr = rule_tile(term, "q", "x", str, {"Dq": "ncdc_dv[0]", "Dx": "ncdc_dv[1]"})
    source = (
        '#include "ncdc_runtime.cuh"\n#include "ncdc_attention.cuh"\n'
        'extern "C" __global__ void classes(const float* dq, const float* dx, int* out, int q, int x) {\n'
        "  int n = 0;\n"
        "  for (int ncdc_i0 = 0; ncdc_i0 < q; ncdc_i0 += 16)\n"
        "    for (int ncdc_j0 = 0; ncdc_j0 < x; ncdc_j0 += 64) {\n"
        "      const int ncdc_i1 = (ncdc_i0 + 16 < q ? ncdc_i0 + 16 : q) - 1;\n"
        "      const int ncdc_j1 = (ncdc_j0 + 64 < x ? ncdc_j0 + 64 : x) - 1;\n"
        "      using namespace ncdc::attn;\n"
        "      Iv ncdc_dv[2] = {iv_over<1>(dq, 1, ncdc_i0, ncdc_i1, threadIdx.x),\n"
        "                       iv_over<2>(dx, 1, ncdc_j0, ncdc_j1, threadIdx.x)};\n"
        f"      const int c = iv_class({expr});\n"
        "      if (threadIdx.x == 0) out[n] = c;\n"
        "      ++n;\n"
        "    }\n}\nNCDC_EXPORT_KERNEL(classes);\n"
    )
    # documents of 1-60 tokens (ids 0, 1, 2, ...) after one of 80, packed; the keys' the
    # queries' shifted by 7, with a run of 0.7 and, past the first tile, a run of -inf
    rng = np.random.default_rng(int(np.random.default_rng().integers(2**31)))
    lengths = np.concatenate([[80], rng.integers(1, 61, 40)])
    ids = np.repeat(np.arange(lengths.size), lengths).astype(np.float32)
    dq, dx = ids[:133].copy(), ids[7:156].copy()
    dx[64:80], dx[128:149] = np.float32(0.7), -np.inf
    if nan:
        dq[20], dx[100] = np.nan, np.nan
    got = np.full(9 * 3, -1, np.int32)
    build(source).launch("classes", 1, 32, [dq, dx, got, 133, 149])
    mask_rule = MaskRule("q", "x", term)

    def span(a: np.ndarray) -> tuple[float, float]:
        return (float(a.min()), float(a.max()))  # NaN if there is one: unknown

    tiles = [(i, min(i + 16, 133), j, min(j + 64, 149))
             for i in range(0, 133, 16) for j in range(0, 149, 64)]  # fmt: skip
    want = [
        int(tile_class(mask_rule, (i0, i1 - 1), (j0, j1 - 1),
                       {"Dq": span(dq[i0:i1]), "Dx": span(dx[j0:j1])}))
        for i0, i1, j0, j1 in tiles
    ]  # fmt: skip
    assert got.tolist() == want
    for (i0, i1, j0, j1), c in zip(tiles, want, strict=True):  # sound, pair by pair
        i, j = np.arange(i0, i1)[:, None], np.arange(j0, j1)[None, :]
        kept = _pairs(term, i, j, dq, dx)
        assert c != 2 or kept.all(), (rule, i0, j0)
        assert c != 0 or not kept.any(), (rule, i0, j0)
    assert {0, 2} & set(want) and 1 in want  # the data decides some tiles whole


def _pairs(term: Term, i: np.ndarray, j: np.ndarray, dq: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """The rule over queries i by keys j in fp32, as the score path computes it."""
    if isinstance(term, Pos):
        return (i if term.axis == "q" else j).astype(np.float32)
    if isinstance(term, Const):
        return np.float32(term.value)
    if isinstance(term, Data):
        return dq[i] if term.name == "Dq" else dx[j]
    assert isinstance(term, Call)
    a = [_pairs(t, i, j, dq, dx) for t in term.args]
    ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "and": np.logical_and, "or": np.logical_or}  # fmt: skip
    with np.errstate(invalid="ignore"):
        return np.broadcast_to(ops[term.fn](*a), (i.shape[0], j.shape[1]))


def _parse_rule(text: str) -> Term:
    """A rule written as nested calls over I (the query), J (the key), D (a tensor) and
    numbers, as a Term (And, Or and Not capitalised: Python keeps their names)."""
    import ast

    def term(node: ast.expr) -> Term:
        if isinstance(node, ast.Name):
            return {"I": Pos("q"), "J": Pos("x"), "D": Data("D"), "Dq": Data("Dq"),
                    "Dx": Data("Dx"), "inf": Const(math.inf)}[node.id]  # fmt: skip
        if isinstance(node, ast.Constant):
            return Const(float(node.value))
        if isinstance(node, ast.UnaryOp):  # a negative number, or -inf
            inner = term(node.operand)
            assert isinstance(inner, Const)
            return Const(-inner.value)
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        return Call(node.func.id.lower(), tuple(term(a) for a in node.args))

    return term(ast.parse(text, mode="eval").body)


def test_tanh_of_a_logit_is_accurate_in_absolute_terms() -> None:
    # op_tanh_logit (a soft cap's m tanh(k x), its scales folded in) against float64 tanh:
    # within a few fp32 ulps of m everywhere, +-inf to +-m, NaN to NaN; and the same form
    # on the GPU's approximate exp2 and reciprocal (2 and 1 ulp) stays inside that bound.
    source = (
        '#include "ncdc_runtime.cuh"\n#include "ncdc_elementwise.cuh"\n'
        'extern "C" __global__ void capped(const float* x, float* y, float k, float m, int n) {\n'
        "  for (int i = 0; i < n; ++i) y[i] = ncdc::op_tanh_logit(x[i], k, m);\n"
        "}\nNCDC_EXPORT_KERNEL(capped);\n"
    )
    rng = np.random.default_rng(7)
    x = np.concatenate([np.linspace(-40, 40, 4001), rng.standard_normal(2000) * 200,
                        [0.0, -0.0, 1e-30, np.inf, -np.inf, np.nan]]).astype(np.float32)  # fmt: skip
    module = build(source)
    for k, m in ((1.0, 1.0), (0.02, 50.0), (1 / 30, 30.0)):
        y = np.full_like(x, 7.0)
        module.launch("capped", 1, 1, [x, y, np.float32(k), np.float32(m), np.int32(x.size)])
        want = m * np.tanh(np.float64(k) * x.astype(np.float64))
        finite = np.isfinite(x)
        assert np.abs(y[finite] - want[finite]).max() <= 4 * m * 2.0**-24
        assert (y[x == np.inf] == m).all() and (y[x == -np.inf] == -m).all()
        assert np.isnan(y[np.isnan(x)]).all()


def test_constant_scales_fold_and_keep_every_value() -> None:
    from ncdc.families.attention.scores import LOG2E, fold_scales
    from ncdc.families.codegen import Statement

    made = [
        Statement("a", "op_mul", ("ncdc_s", "0.02f")),
        Statement("b", "op_mul", ("3.0f", "a")),  # a constant first
        Statement("t", "op_tanh_logit", ("b",)),
        Statement("l", "op_mul", ("t", "50.0f")),
        Statement("z", "op_mul", ("l", "1e-45f")),  # a subnormal factor: not folded
        Statement("w", "op_add", ("l", "b")),
        Statement("ncdc_log2", "op_mul", ("w", f"{LOG2E!r}f")),
    ]
    folded = {st.out: (st.fn, st.args) for st in fold_scales(made)}
    assert folded["b"] == ("op_mul", ("ncdc_s", f"{0.02 * 3.0!r}f"))
    assert folded["t"] == ("op_tanh_logit", ("ncdc_s", f"{0.02 * 3.0!r}f", "1.0f"))
    assert folded["l"] == ("op_tanh_logit", ("ncdc_s", f"{0.02 * 3.0!r}f", "50.0f"))
    assert folded["z"] == ("op_mul", ("l", "1e-45f"))
    assert folded["w"] == ("op_add", ("l", "b"))  # a sum is no scale: log2 e stays apart
    assert folded["ncdc_log2"] == ("op_mul", ("w", f"{LOG2E!r}f"))
    # evaluated, every variable keeps its value
    s = 1.7
    values = {"ncdc_s": s}
    for st in fold_scales(made):
        args = [values[a] if a in values else float(a[:-1]) for a in st.args]
        values[st.out] = {
            "op_mul": lambda a, b: a * b, "op_add": lambda a, b: a + b,
            "op_tanh_logit": lambda x, k=1.0, m=1.0: m * np.tanh(k * x),
        }[st.fn](*args)  # fmt: skip
    b = s * 0.02 * 3.0
    capped = 50 * np.tanh(b)
    want = {"b": b, "t": np.tanh(b), "l": capped, "w": capped + b,
            "ncdc_log2": (capped + b) * LOG2E}  # fmt: skip
    for name, v in want.items():
        assert values[name] == pytest.approx(v, rel=1e-12), name


def test_a_soft_cap_issues_no_tanhf() -> None:
    # the Hopper kernel's softcap functor: per score 2 MUFU of its own (EX2, RCP) beside the
    # softmax's EX2, the caps' multiplies folded (50 tanh(s / 50) log2 e: one FFMA), no
    # libdevice tanhf (its select between two forms: FSETP a score)
    from ncdc.backends import sass
    from ncdc.backends.compile import compile_plan

    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    if sass.find_tool("nvdisasm") is None:
        pytest.skip("nvdisasm wheel not installed")
    plan = plan_diagram(load_diagram(DIAGRAMS / "softcap_attention.yaml"), load_hardware("h200"))
    report = compile_plan(plan, "sm_90a")
    loop = sass.parse_sass(sass.main_loops(report.cubin)[report.module.launches[0].kernel])
    ops = [i.opcode for i in loop]
    scores = 64  # a consumer thread's scores of a 64 x 128 tile
    assert ops.count("MUFU") == pytest.approx(3 * scores, abs=4)
    assert ops.count("FSETP") < 4


def test_a_tanh_takes_the_logit_form_only_where_its_error_stays_absolute() -> None:
    # Gemma's cap (50 tanh(s / 50), added to nothing else) runs as op_tanh_logit; a tanh
    # that multiplies the logits (s tanh(s)) keeps libdevice's tanhf, whose error is
    # relative to tiny values too.
    from ncdc.families.attention.scores import logit_maps

    capped = _library("softcap_attention", {"b": 1, "g": 1, "r": 2, "q": 70, "x": 83, "d": 64})
    (kernel,) = plan_diagram(capped, load_hardware("h200")).kernels
    assert logit_maps(kernel.kernel.ops, "L") == {"T"}
    gated = _library(
        "softcap_attention", {"b": 1, "g": 1, "r": 2, "q": 70, "x": 83, "d": 64},
        (("  - L = mul(T, 50)          # 50 tanh(s / 50)", "  - L = mul(T, S)"),),
    )  # fmt: skip
    (kernel,) = plan_diagram(gated, load_hardware("h200")).kernels
    assert logit_maps(kernel.kernel.ops, "L") == frozenset()
    source = render_plan(plan_diagram(gated, load_hardware("h200"))).source
    assert "ncdc::op_tanh(" in source and "op_tanh_logit" not in source
    checks, _, _, _ = _run(gated, seed=5)
    _assert_ok(checks)
