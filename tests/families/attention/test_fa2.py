"""The FlashAttention-2-order kernel (ncdc.families.attention.fa2) on the CPU emulator against
float64 NumPy, and through NVRTC.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from ncdc.backends.traffic import Traffic
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from ncdc.verify.reference import make_inputs, round_to
from tests import support
from tests.families.attention.helpers import assert_ok, run_attention

DIAGRAMS = support.DIAGRAMS


def _numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                     causal: bool = False) -> np.ndarray:  # fmt: skip
    """softmax(Q K^T * scale) V in float64 over the last two axes; masked rows give 0."""
    s = np.einsum("...qd,...xd->...qx", q, k) * scale
    nq, nx = s.shape[-2:]
    if causal:
        s = np.where(np.arange(nx)[None, :] > np.arange(nq)[:, None] + nx - nq, -np.inf, s)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = p.sum(axis=-1, keepdims=True)
    return np.einsum("...qx,...xd->...qd", p / np.where(total > 0, total, 1.0), v)


@pytest.mark.parametrize(
    "sizes",
    [
        {"q": 64, "x": 64, "d": 64},
        {"q": 65, "x": 65, "d": 64},  # tails in both
        {"q": 17, "x": 129, "d": 64},  # a partial query tile, 5 key chunks
        {"q": 64, "x": 64, "d": 128},
    ],
)
def test_forward(sizes: dict[str, int]) -> None:
    check, _, module, traffic = run_attention("attention", {"b": 1, "h": 1, **sizes})
    assert module.launches[0].kernel.startswith("attention_attention_bf16_q64_x32")
    assert_ok(check)
    # Q read once, K and V once per query tile, O written once: nothing more
    q, x, d = sizes["q"], sizes["x"], sizes["d"]
    assert traffic == Traffic(2 * d * (q + 2 * x * math.ceil(q / 64)), 2 * d * q)


def test_forward_batch_and_heads() -> None:
    check, _, module, _ = run_attention("attention", {"b": 2, "h": 2, "q": 20, "x": 33, "d": 64})
    assert module.launches[0].grid == (1, 4, 1)
    assert_ok(check)


@pytest.mark.parametrize(
    "q, x",
    [
        (65, 65),  # q = x: the diagonal tiles masked, the rest skipped
        (40, 100),  # q < x: every query sees the first 60 keys
        (100, 40),  # q > x: the first 60 queries see no key and give zeros
    ],
)
def test_causal(q: int, x: int) -> None:
    check, got, _, _ = run_attention("attention_causal", {"b": 1, "h": 1, "q": q, "x": x, "d": 64})
    assert_ok(check)
    if q > x:
        assert np.all(got[..., : q - x, :] == 0.0)


@pytest.mark.parametrize("name", ["attention", "attention_causal"])
@pytest.mark.parametrize("warp_q, stages", [(16, 3), (32, 2), (32, 3)])
def test_forward_arrangements(name: str, warp_q: int, stages: int) -> None:
    # 32 queries per warp (two mma row blocks on each K/V fragment) and a 3-stage ring,
    # at a tail in both axes: a partial query tile, unmasked tiles then masked ones
    sizes = {"b": 1, "h": 1, "q": 81, "x": 113, "d": 64}
    check, _, module, _ = run_attention(
        name, sizes, {"q": 128, "x": 32}, arrangement=(warp_q, stages)
    )
    launch = module.launches[0]
    assert launch.block[0] == 32 * 128 // warp_q and f"_s{stages}" in launch.kernel
    assert_ok(check)


@pytest.mark.parametrize("scale", ["-0.125", "0"])
def test_negative_and_zero_scale(scale: str) -> None:
    # the scale folded into the exponent: a negative one runs on -Q, zero stays finite
    text = (DIAGRAMS / "attention_causal.yaml").read_text().replace("0.08838834764831845", scale)
    assert scale in text
    sizes = {"b": 1, "h": 1, "q": 40, "x": 70, "d": 64}
    check, got, _, _ = run_attention("attention_causal", sizes, text=text)
    assert np.all(np.isfinite(got))
    assert_ok(check)


def test_gqa_shares_key_heads() -> None:
    # query head r of group g reads K/V head g: K and V have no r axis (stride 0)
    sizes = {"b": 1, "g": 2, "r": 2, "q": 33, "x": 70, "d": 64}
    check, _, module, _ = run_attention("gqa_attention", sizes)
    assert module.launches[0].grid == (1, 4, 1)
    assert_ok(check)


def test_large_logits_stay_finite() -> None:
    # logits of about 1e4: the online softmax must subtract the running max exactly
    diagram = load_diagram(DIAGRAMS / "attention.yaml", {"b": 1, "h": 1, "q": 33, "x": 70, "d": 64})
    inputs = make_inputs(diagram, seed=3)
    for name in ("Q", "K"):
        inputs[name] = round_to(inputs[name] * 100.0, "bf16")
    check, got, _, _ = run_attention("attention", dict(diagram.axes), inputs=inputs)
    assert np.all(np.isfinite(got))
    assert_ok(check)
    scale = diagram.ops[0].scale[0]
    assert isinstance(scale, float)
    want = _numpy_attention(inputs["Q"], inputs["K"], inputs["V"], scale)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


@pytest.mark.parametrize(
    "name, heads",
    [
        ("attention", {"d": 32}),  # 4 chunks a row: the padded pitch
        ("attention", {"d": 80}),
        ("attention", {"d": 96}),
        ("attention", {"d": 160}),  # Q's fragments from SMEM above 128
        ("attention", {"d": 256}),
        ("mla_attention", {"d": 192, "e": 128}),  # d_qk > d_v, d_qk swizzled (24 chunks)
        ("attn_dqk128_dv64", {"d": 48, "e": 112}),  # fp16, both padded, d_qk < d_v
    ],
)
def test_forward_head_sizes(name: str, heads: dict[str, int]) -> None:
    check, _, module, traffic = run_attention(name, {"b": 1, "h": 2, "q": 37, "x": 70, **heads})
    d, d_v = heads["d"], heads.get("e", heads["d"])
    kernel = module.launches[0].kernel
    assert f"_d{d}_" in kernel and (f"_dv{d_v}_" in kernel) == (d != d_v)
    assert ("_qsmem" in kernel) == (d > 128)
    assert_ok(check)
    # the padded SMEM rows change nothing in HBM: Q, K, V read once, O written once
    p = 2
    assert traffic == Traffic(p * 2 * (37 * d + 70 * (d + d_v)), p * 2 * 37 * d_v)


@pytest.mark.parametrize("d", [48, 112, 208])
def test_causal_head_sizes(d: int) -> None:
    check, _, _, _ = run_attention("attention_causal", {"b": 1, "h": 1, "q": 50, "x": 81, "d": d})
    assert_ok(check)


def test_causal_wide_head_streams_16_keys() -> None:
    # the default for a causal head above 192: 16-key chunks (no spill), run as planned
    sizes = {"b": 1, "h": 1, "q": 50, "x": 81, "d": 240}
    check, _, module, _ = run_attention("attention_causal", sizes, {"q": 64})
    assert "_x16_d240_" in module.launches[0].kernel
    assert_ok(check)


def test_gqa_head_size_80() -> None:
    check, _, _, _ = run_attention(
        "gqa_attention", {"b": 1, "g": 1, "r": 2, "q": 33, "x": 47, "d": 80}
    )
    assert_ok(check)


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize(
    "name", ["attention", "attention_causal", "gqa_attention", "decode_attention", "mla_attention"]
)
def test_full_size_compiles_without_spills(name: str) -> None:
    from ncdc.backends.compile import compile_plan

    pytest.importorskip("cuda.bindings.nvrtc")
    for profile, arch in (("a100", "sm_80"), ("h200", "sm_90a")):  # each arch's own plan
        plan = plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml"), load_hardware(profile))
        report = compile_plan(plan, arch)
        for k in report.kernels:
            assert k.spill_stores_bytes == 0 and k.spill_loads_bytes == 0, (arch, k)
            assert k.blocks_per_sm >= 1, (arch, k)


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("d", [32, 48, 80, 96, 112, 160, 192, 208, 240, 256])
@pytest.mark.parametrize("name", ["attention", "attention_causal", "decode_attention"])
def test_head_sizes_compile_without_spills(name: str, d: int) -> None:
    # the default plan of each arch's own profile: no spill without the compiler's feedback
    from ncdc.backends.compile import compile_plan

    pytest.importorskip("cuda.bindings.nvrtc")
    for profile, arch in (("a100", "sm_80"), ("h200", "sm_90a")):
        diagram = load_diagram(DIAGRAMS / f"{name}.yaml", {"d": d})
        report = compile_plan(plan_diagram(diagram, load_hardware(profile)), arch)
        assert not report.notes, (arch, report.notes)
        for k in report.kernels:
            assert k.spill_stores_bytes == 0 and k.spill_loads_bytes == 0, (arch, k)
