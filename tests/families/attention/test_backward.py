"""Attention's fused backward (ncdc.families.attention.backward): the backward `ncdc grad`
derives for attention, plain, causal and windowed, bf16 and fp16, plans one FlashAttention-2
order kernel beside the small row-wise D kernel, grouped-query heads too; emulated at odd
sizes (query and key tails, a band that drops whole tiles) every tiling matches the float64
reference, and a planted fault in the device code fails; score functors and others it does
not run are left to the GEMM and row-wise kernels; the model prices the pairs a band visits, dQ's
atomics, and the query-major second pass that replaces them in the deterministic mode."""

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
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.templates import include
from ncdc.verify.run import run_diagram
from tests.support import DIAGRAMS

H200 = load_hardware("h200")
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


@functools.cache
def backward_of(text_or_name: str):
    """The backward diagram `ncdc grad` chooses for a library diagram or a spec's text."""
    if "\n" in text_or_name:
        d = load_diagram_text(text_or_name, "spec.yaml")
    else:
        d = load_diagram(DIAGRAMS / f"{text_or_name}.yaml")
    return choose_pair(d, H200).pair.backward


def deterministic(diagram):
    """`diagram` with `schedule: {deterministic: true}`."""
    return dataclasses.replace(
        diagram, schedule=dataclasses.replace(diagram.schedule, deterministic=True)
    )


def fused(backward, sizes: dict[str, int], tiles: dict[str, int] | None = None):
    """The backward at `sizes` planned (its kernels' families) and rendered."""
    small = dataclasses.replace(backward, axes={**backward.axes, **sizes})
    plan = plan_diagram(small, H200, tiles or {})
    return small, plan, render_plan(plan)


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
    ],
)  # fmt: skip
def test_the_fused_backward_matches_the_reference_at_odd_sizes(
    name, sizes, tiles, one_order
) -> None:
    """Also in the deterministic mode: dQ by the query-major second kernel, no atomics."""
    backward = backward_of({"window": WINDOW, "gqa_causal": GQA_CAUSAL}.get(name, name))
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
        ("        ds[n][i] = p[n][i] * (ds[n][i] - d_t[col]);  // dS^T = P^T (dP^T - D)\n", "dK",
         False),
        # the query-major dQ pass: D not subtracted
        ("      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - d2[i >> 1]);\n",
         "dQ", True),
    ],
)  # fmt: skip
def test_a_planted_fault_fails(fault: str, broken: str, one_order: bool) -> None:
    header = HEADER.read_text()
    assert header.count(fault) == 1
    planted = {
        fault.startswith("          atomicAdd"): "",
        "MASKED &&" in fault: "  return false;\n",
        "d_t[col]" in fault: "        ds[n][i] = p[n][i] * ds[n][i];\n",
        "d2[i >> 1]" in fault: "      for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * ds[n][i];\n",
    }[True]
    backward = backward_of("attention_causal")
    diagram, _, module = fused(deterministic(backward) if one_order else backward, ODD)
    source = _device_code(module).replace(fault, planted)
    assert source != _device_code(module)
    result = run_diagram(diagram, dataclasses.replace(module, source=source), seed=5)
    failed = {c.name for c in result.checks if not c.ok}
    assert broken in failed, result.checks


def test_what_it_does_not_run_goes_to_the_other_kernels() -> None:
    # a score functor (soft-capping: tanh's derivative in dS), derived at a small size
    small = load_diagram(DIAGRAMS / "softcap_attention.yaml", {"b": 1, "q": 64, "x": 64})
    softcap = choose_pair(small, H200).pair.backward
    families = {k.family.name for k in plan_diagram(softcap, H200).kernels}
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


def test_the_model_chooses_atomics_or_a_second_pass_by_price() -> None:
    """The query-major dQ pass computes S, P and dP again over the pairs the band visits and
    reads Q, dO, L and D once more and K and V once per query block: priced, it loses to
    dQ's atomics at the library's sizes, and the deterministic schedule takes it anyway."""
    for name in ("attention", "attention_causal"):
        backward = backward_of(name)
        free = plan_diagram(backward, H200).kernels[1]
        fixed = plan_diagram(deterministic(backward), H200).kernels[1]
        assert free.candidate.param("dq_pass") == 0 and free.candidate.accumulates
        assert fixed.candidate.param("dq_pass") == 1 and not fixed.candidate.accumulates
        assert fixed.predicted_time_s > free.predicted_time_s
        # S and dP again: two of the five products, over the same pairs
        assert 1.3 <= fixed.flops / free.flops <= 1.5, (name, fixed.flops / free.flops)
        assert {op for op, _ in fixed.candidate.recomputes} >= {"S", "dP"}
        assert candidate_from_dict(fixed.candidate.to_dict()) == fixed.candidate  # tune's cache
        module = render_plan(plan_diagram(deterministic(backward), H200))
        assert not [w for w in module.workspace if w.name.startswith("ncdc_dQ")]


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_default_tiles_compile_without_spills(arch: str) -> None:
    from ncdc.backends.compile import compile_plan

    for name, one_order in (("attention", False), ("attention_causal", False),
                            ("attention_causal", True), ("gqa_attention", False)):  # fmt: skip
        backward = backward_of(name)
        plan = plan_diagram(deterministic(backward) if one_order else backward, H200)
        report = compile_plan(plan, arch)
        kernels = [k for k in report.kernels if "attention_backward" in k.launch.kernel]
        assert len(kernels) == 2
        for kernel in kernels:
            assert kernel.spill_stores_bytes + kernel.spill_loads_bytes == 0, (name, kernel)


@pytest.mark.parametrize("one_order", [False, True])
def test_the_rings_and_barriers_are_race_free(one_order: bool) -> None:
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
    sizes = {"b": 1, "h": 1, "q": 70, "x": 70, "d": 32}
    diagram, _, module = fused(deterministic(backward) if one_order else backward, sizes,
                               {"x": 64, "q": 32})  # fmt: skip
    result = run_diagram(diagram, module, seed=5, sanitize="race")
    assert all(c.ok for c in result.checks), result.checks
    if not one_order:
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
