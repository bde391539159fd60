"""Attention's fused backward (ncdc.families.attention.backward): the backward `ncdc grad`
derives for attention, plain, causal and windowed, bf16 and fp16, plans one FlashAttention-2
order kernel beside the small row-wise D kernel, grouped-query heads too, and score paths
(soft-capping, ALiBi, an additive bias, mask rules of positions) with their gradient in the
kernel; emulated at odd sizes (query and key tails, a band that drops whole tiles) every
tiling matches the float64 reference, and a planted fault in the device code fails; what it
does not run is left to the GEMM and row-wise kernels; the model prices the pairs a band
visits, dQ's atomics, and the query-major second pass that replaces them in the
deterministic mode."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import pytest

from ncdc.backends import nvrtc
from ncdc.families.attention.backward import read_backward
from ncdc.grad.choose import choose_pair
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.launch import candidate_from_dict
from ncdc.plan.breaks import with_breaks
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.templates import include
from ncdc.verify.run import run_diagram
from tests.support import DIAGRAMS

H200 = load_hardware("h200")
A100 = load_hardware("a100")  # mma.sync: the kernel every target but sm_90a runs
ODD = {"b": 1, "h": 2, "q": 53, "x": 77, "d": 64}
WINDOW = """ncdc: 1
name: win_attention
axes: {b: 1, h: 2, q: 96, x: 96, d: 64}
inputs:
  Q: {axes: [b, h, q, d], dtype: fp16}
  K: {axes: [b, h, x, d], dtype: fp16}
  V: {axes: [b, h, x, d], dtype: fp16}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - M = window(S, query=q, key=x, left=17, right=3)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""


GQA_ODD = {"b": 1, "g": 2, "r": 3, "q": 53, "x": 77, "d": 64}
# the library's grouped-query attention under a causal mask
GQA_CAUSAL = (
    (DIAGRAMS / "gqa_attention.yaml")
    .read_text()
    .replace("name: gqa_attention", "name: gqa_causal")
    .replace(
        "  - P = softmax(S, over=x)",
        "  - M = causal(S, query=q, key=x)\n  - P = softmax(M, over=x)",
    )
)
assert "causal(S" in GQA_CAUSAL
# soft-capping at 2 (Gemma 2 caps at 50): a small cap bends tanh at the scores of random
# inputs, so its derivative in dS shows; grouped-query heads, causal
SOFTCAP = """ncdc: 1
name: softcap_gqa
axes: {b: 1, g: 2, r: 3, q: 53, x: 77, d: 64}
inputs:
  Q: {axes: [b, g, r, q, d], dtype: bf16}
  K: {axes: [b, g, x, d], dtype: bf16}
  V: {axes: [b, g, x, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - C = mul(S, 0.5)
  - T = tanh(C)
  - L = mul(T, 2)
  - M = causal(L, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""
SPECS = Path(__file__).parents[2] / "specs"
# padded sequences: each batch entry's keys past its length are dropped (fp16, head 64)
PADDED = """ncdc: 1
name: padded
axes: {b: 3, h: 2, q: 53, x: 77, d: 64}
inputs:
  Q: {axes: [b, h, q, d], dtype: fp16}
  K: {axes: [b, h, x, d], dtype: fp16}
  V: {axes: [b, h, x, d], dtype: fp16}
  L: {axes: [b], dtype: int32}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - M = varlen(S, query=q, key=x, lengths=L)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""


@functools.cache
def backward_of(text_or_name: str, wrt: tuple[str, ...] | None = None):
    """The backward diagram `ncdc grad` chooses for a library diagram, a spec under
    tests/specs (`specs/<name>`) or a spec's text, P not saved (at the smallest sizes the
    saved P can price lower)."""
    if "\n" in text_or_name:
        d = load_diagram_text(text_or_name, "spec.yaml")
    elif text_or_name.startswith("specs/"):
        d = load_diagram(SPECS / f"{text_or_name[6:]}.yaml")
    else:
        d = load_diagram(DIAGRAMS / f"{text_or_name}.yaml")
    return choose_pair(d, H200, wrt=wrt, recompute=("P",)).pair.backward


def deterministic(diagram):
    """`diagram` with `schedule: {deterministic: true}`."""
    return dataclasses.replace(
        diagram, schedule=dataclasses.replace(diagram.schedule, deterministic=True)
    )


def fused(backward, sizes: dict[str, int], tiles: dict[str, int] | None = None, hardware=A100):
    """The backward at `sizes` planned (its kernels' families) and rendered: for the A100 by
    default (the mma.sync kernel), or `hardware`."""
    small = dataclasses.replace(backward, axes={**backward.axes, **sizes})
    plan = plan_diagram(small, hardware, tiles or {})
    if not small.schedule.breaks_given and "attention_backward" not in families_of(plan):
        # at a test's small sizes saving P and dS for GEMMs can price lower: keep the breaks
        # the library's sizes choose, which leave the backward to its fused kernel
        library = plan_diagram(backward, hardware).graph.diagram.schedule.materialize
        small = with_breaks(small, library)
        plan = plan_diagram(small, hardware, tiles or {})
    assert "attention_backward" in families_of(plan), families_of(plan)
    return small, plan, render_plan(plan)


def families_of(plan) -> list[str]:
    """The family of each of the plan's kernels."""
    return [k.family.name for k in plan.kernels]


@pytest.mark.parametrize(
    "name, sizes, tiles, one_order",
    [
        ("attention_causal", ODD, {"x": 64, "q": 32}, False),
        ("attention_causal", ODD, {"x": 128, "q": 64}, True),
        ("attention", {**ODD, "d": 128}, {}, False),
        ("window", {"q": 101, "x": 131}, {"x": 64, "q": 32}, False),
        ("window", {"q": 101, "x": 131}, {"x": 64, "q": 32}, True),
        # grouped-query heads: dK and dV summed over a group's 3 heads in the block
        ("gqa_causal", GQA_ODD, {"x": 64, "q": 32}, False),
        ("gqa_causal", GQA_ODD, {"x": 128, "q": 64}, True),
        # score paths: tanh and its derivative, per-head slopes times positions, a bias
        # tensor read per (query, key), rules of positions (prefix-LM, sinks and a window)
        ("softcap", {}, {"x": 64, "q": 32}, False),
        ("softcap", {}, {"x": 64, "q": 32}, True),
        ("alibi_attention", {"b": 1, "h": 3, "q": 53, "x": 77, "d": 64}, {}, False),
        ("specs/attn_bias_bhqx", {"q": 53, "x": 77}, {"x": 64, "q": 32}, True),
        ("specs/attn_prefix_lm_odd", {}, {"x": 64, "q": 32}, False),
        ("specs/attn_sinks_window_odd", {}, {"x": 64, "q": 32}, True),
        # varlen: sequences packed along q and x (causal within each), and padded ones
        ("varlen_attention", {"h": 2, "q": 101, "x": 101, "n": 3, "d": 64}, {"x": 64, "q": 32},
         False),
        ("varlen_attention", {"h": 2, "q": 101, "x": 101, "n": 3, "d": 64}, {"x": 64, "q": 32},
         True),
        ("padded", {}, {"x": 64, "q": 32}, False),
    ],
)  # fmt: skip
def test_the_fused_backward_matches_the_reference_at_odd_sizes(
    name, sizes, tiles, one_order
) -> None:
    """Also in the deterministic mode: dQ by the query-major second kernel, no atomics. A
    slope or a bias is an input the gradient is not asked of (`--wrt Q --wrt K --wrt V`)."""
    text = {"window": WINDOW, "gqa_causal": GQA_CAUSAL, "softcap": SOFTCAP,
            "padded": PADDED}.get(name, name)  # fmt: skip
    wrt = ("Q", "K", "V") if name in ("alibi_attention", "specs/attn_bias_bhqx") else None
    backward = backward_of(text, wrt)
    diagram, plan, module = fused(deterministic(backward) if one_order else backward, sizes, tiles)
    assert [k.family.name for k in plan.kernels] == ["rowwise", "attention_backward"]
    kp = plan.kernels[1]
    assert (kp.candidate.param("bx"), kp.candidate.param("bq")) == (
        tiles.get("x", kp.candidate.param("bx")), tiles.get("q", kp.candidate.param("bq")))  # fmt: skip
    assert kp.candidate.param("dq_pass") == 1 if one_order else True
    assert ("ncdc::attn::dq_by_queries<" in module.source) == one_order
    result = run_diagram(diagram, module, seed=5)
    assert result.ok, result.checks
    assert {c.name for c in result.checks} == set(diagram.outputs)


HEADER = Path(include.__file__).parent / "ncdc_attention_backward.cuh"


def _device_code(module) -> str:
    """The module's source with the backward's device header in place of its include."""
    return module.source.replace('#include "ncdc_attention_backward.cuh"', HEADER.read_text())


@pytest.mark.parametrize(
    "fault, broken, one_order",
    [
        ("          atomicAdd(dst_row + 8 * n, dq[n][2 * h]);\n", "dQ", False),  # unsummed
        ("  return MASKED && (j > i + hi || j < i + lo);\n", "dK", False),  # no band
        ("        ds[n][i] = sc.grad(s[n][i], p[n][i] * (ds[n][i] - d_t[col]), q0 + col,\n", "dK",
         False),
        # the query-major dQ pass: D not subtracted
        ("        ds[n][i] = sc.grad(s[n][i], p[n][i] * (ds[n][i] - d2[i >> 1]),\n", "dQ", True),
    ],
)  # fmt: skip
def test_a_planted_fault_fails(fault: str, broken: str, one_order: bool) -> None:
    header = HEADER.read_text()
    assert header.count(fault) == 1
    planted = {
        fault.startswith("          atomicAdd"): "",
        "MASKED &&" in fault: "  return false;\n",
        "d_t[col]" in fault: "        ds[n][i] = sc.grad(s[n][i], p[n][i] * ds[n][i], q0 + col,\n",
        "d2[i >> 1]" in fault: "        ds[n][i] = sc.grad(s[n][i], p[n][i] * ds[n][i],\n",
    }[True]
    backward = backward_of("attention_causal")
    diagram, _, module = fused(deterministic(backward) if one_order else backward, ODD)
    source = _device_code(module).replace(fault, planted)
    assert source != _device_code(module)
    result = run_diagram(diagram, dataclasses.replace(module, source=source), seed=5)
    failed = {c.name for c in result.checks if not c.ok}
    assert broken in failed, result.checks


@pytest.mark.parametrize(
    "fault, broken, one_order",
    [
        # the key-major kernel's queries of each key, the dQ pass's keys of each query
        ("(VARLEN && spans.dropped(g + 8 * (i >> 1), q0 + col))", {"dK", "dV"}, False),
        ("(VARLEN && spans.dropped(g + 8 * (i >> 1), key))", {"dQ"}, True),
    ],
)
def test_a_varlen_fault_fails(fault: str, broken: set[str], one_order: bool) -> None:
    """Pairs of two packed sequences kept: the gradients the kernel computes fail."""
    backward = backward_of("varlen_attention")
    sizes = {"h": 2, "q": 101, "x": 101, "n": 3, "d": 64}
    diagram, _, module = fused(deterministic(backward) if one_order else backward, sizes,
                               {"x": 64, "q": 32})  # fmt: skip
    source = _device_code(module)
    assert source.count(fault) == 1
    result = run_diagram(diagram, dataclasses.replace(module, source=source.replace(fault, "false")),
                         seed=5)  # fmt: skip
    assert {c.name for c in result.checks if not c.ok} >= broken, result.checks


def test_a_wrong_score_gradient_fails() -> None:
    """The score path's gradient as generated (tanh's derivative in dS) is what the checks
    hold: dS returned as dM instead fails dQ and dK."""
    diagram, _, module = fused(backward_of(SOFTCAP), {}, {"x": 64, "q": 32})
    right = "    return ncdc_e_dS;\n"
    assert module.source.count(right) == 1
    wrong = module.source.replace(right, "    return ncdc_dm;\n")
    result = run_diagram(diagram, dataclasses.replace(module, source=wrong), seed=5)
    assert {c.name for c in result.checks if not c.ok} >= {"dQ", "dK"}, result.checks


def test_what_it_does_not_run_goes_to_the_other_kernels() -> None:
    # a gradient of the bias too: dBias is a (query, key) matrix the kernel never writes
    bias = backward_of("specs/attn_bias_bhqx")
    assert "dBias" in bias.outputs
    families = {k.family.name for k in plan_diagram(bias, H200).kernels}
    assert "attention_backward" not in families and "gemm" in families
    # a read of another tensor in the chain: not the backward's structure
    causal = backward_of("attention_causal")
    graph_kernel = next(k for k in plan_diagram(causal, H200).kernels
                        if k.family.name == "attention_backward").kernel  # fmt: skip
    assert read_backward(causal, graph_kernel) is not None
    extra = dataclasses.replace(graph_kernel, ops=graph_kernel.ops[:-1])
    assert read_backward(causal, extra) is None


def test_the_model_prices_the_pairs_a_band_visits_and_dqs_atomics() -> None:
    """Causal: about half the dense tile pairs (the key tiles' queries from the diagonal
    on), the FLOPs of five products over them; dQ added once per key tile, 4 bytes an add
    into the L2."""
    dense = plan_diagram(backward_of("attention"), H200).kernels[1]
    causal = plan_diagram(backward_of("attention_causal"), H200).kernels[1]
    sizes = backward_of("attention").axes
    products = 5 * 2 * math.prod(sizes[a] for a in ("b", "h", "q", "x", "d"))
    assert products <= dense.flops <= 1.05 * products  # five products, and the exp and muls
    assert 0.5 <= causal.flops / dense.flops <= 0.55
    c = causal.candidate
    ((name, adds),) = c.accumulates
    assert name == "dQ" and adds == math.ceil(sizes["x"] / c.param("bx"))
    l2 = next(t for t in causal.transfers if t.upper == "l2")
    dq = sizes["b"] * sizes["h"] * sizes["q"] * sizes["d"]
    assert l2.bytes >= dq * 4 * adds


def test_a_packed_varlen_backward_is_priced_over_its_causal_band() -> None:
    """The packed lengths' count of sequences is no work the kernel reduces: the causal band
    of varlen attention prices the pairs it visits, as the dense causal backward's."""
    kernel = plan_diagram(backward_of("varlen_attention"), H200).kernels[1]
    sizes = backward_of("varlen_attention").axes
    products = 5 * 2 * math.prod(sizes[a] for a in ("h", "q", "x", "d"))
    assert 0.5 <= kernel.flops / products <= 0.55


def test_the_model_chooses_atomics_or_a_second_pass_by_price() -> None:
    """The query-major dQ pass computes S, P and dP again over the pairs the band visits and
    reads Q, dO, L and D once more and K and V once per query block: priced, it loses to
    dQ's atomics at the library's sizes, and the deterministic schedule takes it anyway
    (with the same kernel breaks: without atomics, the non-causal backward's cheapest plan
    saves P and dS for GEMMs, which the break search finds too)."""
    for name in ("attention", "attention_causal"):
        backward = backward_of(name)
        plan = plan_diagram(backward, H200)
        free = plan.kernels[1]
        same_breaks = with_breaks(deterministic(backward), plan.graph.diagram.schedule.materialize)
        fixed = plan_diagram(same_breaks, H200).kernels[1]
        assert free.candidate.param("dq_pass") == 0 and free.candidate.accumulates
        assert fixed.candidate.param("dq_pass") == 1 and not fixed.candidate.accumulates
        assert fixed.predicted_time_s > free.predicted_time_s
        # S and dP again: two of the five products, over the same pairs
        assert 1.3 <= fixed.flops / free.flops <= 1.5, (name, fixed.flops / free.flops)
        assert {op for op, _ in fixed.candidate.recomputes} >= {"S", "dP"}
        # K and V once per query block, all but the first from the L2 (a slice's blocks run
        # together): the device memory sees them once more
        rereads, served = dict(fixed.candidate.rereads), dict(fixed.candidate.l2_rereads)
        assert served == {"K": rereads["K"] - 1, "V": rereads["V"] - 1} and served["K"] > 1
        hbm, l2 = (next(t for t in fixed.transfers if t.upper == u) for u in ("hbm", "l2"))
        kv = 2 * math.prod(backward.axes[a] for a in ("b", "h", "x", "d")) * 2  # K and V
        assert l2.bytes - hbm.bytes >= served["K"] * kv
        assert candidate_from_dict(fixed.candidate.to_dict()) == fixed.candidate  # tune's cache
        module = render_plan(plan_diagram(same_breaks, H200))
        assert not [w for w in module.workspace if w.name.startswith("ncdc_dQ")]
        chosen = plan_diagram(deterministic(backward), H200)  # no atomics either way
        assert not any(k.candidate.accumulates for k in chosen.kernels)
        assert chosen.predicted_time_s <= plan_diagram(same_breaks, H200).predicted_time_s


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_default_tiles_compile_without_spills(arch: str) -> None:
    """On the A100 the mma.sync kernel, on the H200 the wgmma one for every variant (plain,
    causal, grouped, soft-capped, a mask rule, packed sequences; both dQ ways), as planned:
    none spills, so none is replaced by a next-best."""
    from ncdc.backends.compile import compile_plan

    hardware = H200 if arch == "sm_90a" else load_hardware("a100")
    for name, one_order in (("attention", False), ("attention_causal", False),
                            ("attention_causal", True), ("gqa_attention", False),
                            ("softcap_attention", False), ("softcap_attention", True),
                            ("prefix_lm_attention", True), ("varlen_attention", False)):  # fmt: skip
        backward = backward_of(name)
        plan = plan_diagram(deterministic(backward) if one_order else backward, hardware)
        assert bool(dict(plan.kernels[-1].candidate.params).get("wgmma")) == (arch == "sm_90a")
        report = compile_plan(plan, arch)
        assert not report.notes, report.notes
        kernels = [k for k in report.kernels if "attention_backward" in k.launch.kernel]
        assert len(kernels) == 2
        for kernel in kernels:
            assert kernel.spill_stores_bytes + kernel.spill_loads_bytes == 0, (name, kernel)


WGMMA_CASES = [
    ("attention", {"b": 1, "h": 2, "q": 53, "x": 77, "d": 128}, False),
    ("attention_causal", {"b": 1, "h": 2, "q": 53, "x": 77, "d": 64}, True),
    ("window", {"q": 101, "x": 131}, False),
    ("gqa_causal", {**GQA_ODD, "d": 128}, True),
    ("softcap", {"d": 128}, False),
    ("specs/attn_prefix_lm_odd", {}, False),
    ("varlen_attention", {"h": 2, "q": 101, "x": 101, "n": 3, "d": 64}, False),
    ("padded", {}, True),
]


@pytest.mark.parametrize("name, sizes, one_order", WGMMA_CASES)
def test_the_wgmma_backward_matches_the_reference_at_odd_sizes(name, sizes, one_order) -> None:
    """sm_90a's kernel (the five products on wgmma, 32 queries a step) under every kind of
    mask and score path, both dQ ways, heads 64 and 128, bf16 and fp16, at sizes that cut
    tiles on both axes."""
    text = {"window": WINDOW, "gqa_causal": GQA_CAUSAL, "softcap": SOFTCAP,
            "padded": PADDED}.get(name, name)  # fmt: skip
    backward = backward_of(text)
    d = {**backward.axes, **sizes}.get("d", 64)
    diagram, plan, module = fused(deterministic(backward) if one_order else backward, sizes,
                                  {"x": d, "q": 32}, H200)  # fmt: skip
    kp = plan.kernels[-1]
    assert dict(kp.candidate.params).get("wgmma") == 1, kp.candidate.params
    assert "attention_backward_wgmma<" in module.source
    result = run_diagram(diagram, module, seed=5)
    assert result.ok, result.checks


WGMMA_HEADER = Path(include.__file__).parent / "ncdc_attention_backward_hopper.cuh"


@pytest.mark.parametrize(
    "fault, planted, broken, one_order",
    [
        # dS^T's stores not fenced to the async proxy before dQ's wgmma reads them
        ("    fence_proxy_async();\n    __syncthreads();  // every warpgroup's keys are in\n",
         "    __syncthreads();  // every warpgroup's keys are in\n", "fence.proxy.async", False),
        # the tiles written unswizzled
        ("(((chunk % 8) ^ (row % 8)) << 4)", "((chunk % 8) << 4)", {"dQ", "dK", "dV"}, False),
        # K read as a K-major A for dQ^T
        ("BackwardMma<T>::template ss<BQ, 1, 1>(dq, da, db", "BackwardMma<T>::template ss<BQ, 0, 1>(dq, da, db",
         {"dQ"}, False),
        # the query-major pass: D not subtracted
        ("      s[i] = p * (dp[i] - d2[h]);\n", "      s[i] = p * dp[i];\n", {"dQ"}, True),
    ],
)  # fmt: skip
def test_a_planted_wgmma_fault_fails(fault: str, planted: str, broken, one_order: bool) -> None:
    from ncdc.errors import NcdcError

    backward = backward_of("attention_causal")
    diagram, _, module = fused(deterministic(backward) if one_order else backward,
                               {"b": 1, "h": 2, "q": 53, "x": 77, "d": 128}, {"x": 128, "q": 32},
                               H200)  # fmt: skip
    include_line = '#include "ncdc_attention_backward_hopper.cuh"'
    source = module.source.replace(include_line, WGMMA_HEADER.read_text())
    assert source.count(fault) == 1
    wrong = dataclasses.replace(module, source=source.replace(fault, planted))
    if isinstance(broken, str):
        with pytest.raises(NcdcError, match=broken):
            run_diagram(diagram, wrong, seed=5)
        return
    result = run_diagram(diagram, wrong, seed=5)
    assert {c.name for c in result.checks if not c.ok} >= broken, result.checks


def test_a_score_gradient_not_linear_in_dm_is_not_fused() -> None:
    """The kernels take dS as dM times a factor of the pair; a backward diagram whose dS is
    not linear in dM (dM squared) is left to the other kernels."""
    from ncdc.language.write import diagram_yaml

    text = diagram_yaml(backward_of("attention_causal"))
    assert "  - dQ = contract(dM, K" in text
    squared = text.replace(
        "  - dQ = contract(dM, K", "  - dN = mul(dM, dM)\n  - dQ = contract(dN, K"
    )
    squared = squared.replace("contract(dM, Q", "contract(dN, Q")
    diagram = load_diagram_text(squared, "squared.yaml")
    families = [k.family.name for k in plan_diagram(diagram, H200).kernels]
    assert "attention_backward" not in families


@pytest.mark.parametrize("one_order", [False, True])
@pytest.mark.parametrize("hardware", [A100, H200], ids=["mma_sync", "wgmma"])
def test_the_rings_and_barriers_are_race_free(one_order: bool, hardware) -> None:
    """Both kernels under the emulator's race detector (ThreadSanitizer over the block's
    threads): the rings' stages, dS^T and the barriers between them; and a planted missing
    barrier (the dQ pass's ring refilled while other warps still read it) is reported."""
    from ncdc.backends import cpu
    from ncdc.errors import NcdcError

    try:
        cpu.sanitizer_runtime("race")
    except NcdcError:
        pytest.skip("no ThreadSanitizer runtime")
    backward = backward_of("attention_causal")
    wgmma = hardware is H200
    sizes = {"b": 1, "h": 1, "q": 70, "x": 70, "d": 64 if wgmma else 32}  # wgmma: heads of 64
    diagram, _, module = fused(deterministic(backward) if one_order else backward, sizes,
                               {"x": 64, "q": 32}, hardware)  # fmt: skip
    assert ("attention_backward_wgmma<" in module.source) == wgmma
    result = run_diagram(diagram, module, seed=5, sanitize="race")
    assert all(c.ok for c in result.checks), result.checks
    if not one_order or wgmma:
        return  # the planted fault once: in the query-major pass's ring
    barrier = (
        "    cp_async_wait_all();  // tile `it` has landed; every warp is done with the other"
        " stage\n    __syncthreads();\n"
    )
    source = _device_code(module)
    assert source.count(barrier) == 1
    planted = source.replace(barrier, barrier.replace("    __syncthreads();\n", ""))
    with pytest.raises(NcdcError, match="data race|wrote .* read"):
        run_diagram(diagram, dataclasses.replace(module, source=planted), seed=5,
                    sanitize="race")  # fmt: skip
