"""The attention kernels on the CPU emulator against float64 NumPy, and through NVRTC.

Emulated runs use one (batch, head) slice mostly and small tiles; sizes are runtime
parameters, so one library built per tile configuration serves every size (the module
header names the sizes, hence the cache by kernel names rather than by source).
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends.cpu import EmulatedModule, build
from ncdc.backends.traffic import Traffic
from ncdc.check.reference import evaluate, from_storage, make_inputs, round_to
from ncdc.check.run import OutputCheck, allocate, compare, launch_args, run_diagram
from ncdc.families.attention.splitk import is_split
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives, with_kernel
from ncdc.plan.search import plan_diagram
from ncdc.render import RenderedModule, render_plan
from tests import support

DIAGRAMS = support.DIAGRAMS
SPECS = support.SPECS
HW = load_hardware("h200")
SMALL = {"q": 64, "x": 32}  # forward tiles for the emulator: 4 warps, 32-key chunks
_LIBS: dict[tuple[str, ...], EmulatedModule] = {}


def _module(name: str, sizes: dict[str, int], tiles: dict[str, int],
            splits: int | None = None, arrangement: tuple[int, int] | None = None,
            text: str | None = None) -> tuple[Diagram, RenderedModule]:  # fmt: skip
    path = DIAGRAMS / f"{name}.yaml"
    if text is not None:
        diagram = load_diagram_text(text, sizes=sizes)
    else:
        diagram = load_diagram(path if path.exists() else SPECS / f"{name}.yaml", sizes)
    plan = plan_diagram(diagram, HW, tiles=tiles)
    if splits is not None:  # the decode candidate with that split of the keys
        kp = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == splits)
        plan = with_kernel(plan, 0, kp)
    if arrangement is not None:  # the forward candidate with (queries per warp, stages)
        kp = next(
            k for k in kernel_alternatives(plan, 0, 1000)
            if k.candidate is not None
            and (k.candidate.param("warp_q"), k.candidate.stages) == arrangement
        )  # fmt: skip
        plan = with_kernel(plan, 0, kp)
    return diagram, render_plan(plan)


def _run(name: str, sizes: dict[str, int], tiles: dict[str, int] = SMALL, *,
         splits: int | None = None, inputs: dict[str, np.ndarray] | None = None,
         seed: int = 0, arrangement: tuple[int, int] | None = None,
         text: str | None = None) -> tuple[OutputCheck, np.ndarray, RenderedModule, Traffic]:  # fmt: skip
    """Run the rendered kernels on NaN-poisoned outputs and workspace; compare with the
    float64 reference of the diagram."""
    diagram, module = _module(name, sizes, tiles, splits, arrangement, text)
    key = tuple(launch.kernel for launch in module.launches)
    if key not in _LIBS:
        _LIBS[key] = build(module.source)
    inputs = inputs if inputs is not None else make_inputs(diagram, seed)
    want = evaluate(diagram, inputs)["O"]
    buffers = allocate(module, diagram, inputs)
    traffic = Traffic(0, 0)
    for launch in module.launches:
        traffic += _LIBS[key].launch(launch.kernel, launch.grid, launch.block,
                          launch_args(launch, buffers), dynamic_smem=launch.dynamic_smem)  # fmt: skip
    dtype = diagram.tensor("O").dtype
    got = from_storage(buffers["O"], dtype)
    return compare("O", dtype, got, want), got, module, traffic


def _assert_ok(check: OutputCheck) -> None:
    assert check.unexpected_nan == 0, check
    assert check.max_abs_error <= 2e-2 * check.scale, check


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


# ---------------------------------------------------------------------------- forward


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
    check, _, module, traffic = _run("attention", {"b": 1, "h": 1, **sizes})
    assert module.launches[0].kernel.startswith("attention_attention_bf16_q64_x32")
    _assert_ok(check)
    # Q read once, K and V once per query tile, O written once: nothing more
    q, x, d = sizes["q"], sizes["x"], sizes["d"]
    assert traffic == Traffic(2 * d * (q + 2 * x * math.ceil(q / 64)), 2 * d * q)


def test_forward_batch_and_heads() -> None:
    check, _, module, _ = _run("attention", {"b": 2, "h": 2, "q": 20, "x": 33, "d": 64})
    assert module.launches[0].grid == (1, 4, 1)
    _assert_ok(check)


@pytest.mark.parametrize(
    "q, x",
    [
        (65, 65),  # q = x: the diagonal tiles masked, the rest skipped
        (40, 100),  # q < x: every query sees the first 60 keys
        (100, 40),  # q > x: the first 60 queries see no key and give zeros
    ],
)
def test_causal(q: int, x: int) -> None:
    check, got, _, _ = _run("attention_causal", {"b": 1, "h": 1, "q": q, "x": x, "d": 64})
    _assert_ok(check)
    if q > x:
        assert np.all(got[..., : q - x, :] == 0.0)


@pytest.mark.parametrize("name", ["attention", "attention_causal"])
@pytest.mark.parametrize("warp_q, stages", [(16, 3), (32, 2), (32, 3)])
def test_forward_arrangements(name: str, warp_q: int, stages: int) -> None:
    # 32 queries per warp (two mma row blocks on each K/V fragment) and a 3-stage ring,
    # at a tail in both axes: a partial query tile, unmasked tiles then masked ones
    sizes = {"b": 1, "h": 1, "q": 81, "x": 113, "d": 64}
    check, _, module, _ = _run(name, sizes, {"q": 128, "x": 32}, arrangement=(warp_q, stages))
    launch = module.launches[0]
    assert launch.block[0] == 32 * 128 // warp_q and f"_s{stages}" in launch.kernel
    _assert_ok(check)


@pytest.mark.parametrize("scale", ["-0.125", "0"])
def test_negative_and_zero_scale(scale: str) -> None:
    # the scale folded into the exponent: a negative one runs on -Q, zero stays finite
    text = (DIAGRAMS / "attention_causal.yaml").read_text().replace("0.08838834764831845", scale)
    assert scale in text
    sizes = {"b": 1, "h": 1, "q": 40, "x": 70, "d": 64}
    check, got, _, _ = _run("attention_causal", sizes, text=text)
    assert np.all(np.isfinite(got))
    _assert_ok(check)


def test_gqa_shares_key_heads() -> None:
    # query head r of group g reads K/V head g: K and V have no r axis (stride 0)
    sizes = {"b": 1, "g": 2, "r": 2, "q": 33, "x": 70, "d": 64}
    check, _, module, _ = _run("gqa_attention", sizes)
    assert module.launches[0].grid == (1, 4, 1)
    _assert_ok(check)


def test_large_logits_stay_finite() -> None:
    # logits of about 1e4: the online softmax must subtract the running max exactly
    diagram = load_diagram(DIAGRAMS / "attention.yaml", {"b": 1, "h": 1, "q": 33, "x": 70, "d": 64})
    inputs = make_inputs(diagram, seed=3)
    for name in ("Q", "K"):
        inputs[name] = round_to(inputs[name] * 100.0, "bf16")
    check, got, _, _ = _run("attention", dict(diagram.axes), inputs=inputs)
    assert np.all(np.isfinite(got))
    _assert_ok(check)
    scale = diagram.ops[0].scale[0]
    assert isinstance(scale, float)
    want = _numpy_attention(inputs["Q"], inputs["K"], inputs["V"], scale)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


# -------------------------------------------------------------------------- head sizes


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
    check, _, module, traffic = _run(name, {"b": 1, "h": 2, "q": 37, "x": 70, **heads})
    d, d_v = heads["d"], heads.get("e", heads["d"])
    kernel = module.launches[0].kernel
    assert f"_d{d}_" in kernel and (f"_dv{d_v}_" in kernel) == (d != d_v)
    assert ("_qsmem" in kernel) == (d > 128)
    _assert_ok(check)
    # the padded SMEM rows change nothing in HBM: Q, K, V read once, O written once
    p = 2
    assert traffic == Traffic(p * 2 * (37 * d + 70 * (d + d_v)), p * 2 * 37 * d_v)


@pytest.mark.parametrize("d", [48, 112, 208])
def test_causal_head_sizes(d: int) -> None:
    check, _, _, _ = _run("attention_causal", {"b": 1, "h": 1, "q": 50, "x": 81, "d": d})
    _assert_ok(check)


def test_causal_wide_head_streams_16_keys() -> None:
    # the default for a causal head above 192: 16-key chunks (no spill), run as planned
    sizes = {"b": 1, "h": 1, "q": 50, "x": 81, "d": 240}
    check, _, module, _ = _run("attention_causal", sizes, {"q": 64})
    assert "_x16_d240_" in module.launches[0].kernel
    _assert_ok(check)


def test_gqa_head_size_80() -> None:
    check, _, _, _ = _run("gqa_attention", {"b": 1, "g": 1, "r": 2, "q": 33, "x": 47, "d": 80})
    _assert_ok(check)


@pytest.mark.parametrize(
    "name, heads, splits",
    [
        ("decode_attention", {"d": 80}, 2),
        ("decode_attention", {"d": 256}, 1),
        ("mla_attention", {"d": 192, "e": 128}, 3),  # d_v < 128: the merge's ragged lanes
        ("attn_dqk128_dv64", {"d": 32, "e": 96}, 2),
    ],
)
def test_decode_head_sizes(name: str, heads: dict[str, int], splits: int) -> None:
    sizes = {"b": 1, "h": 2, "q": 3, "x": 150, **heads}
    check, _, module, _ = _run(name, sizes, {"x": 32}, splits=splits)
    assert module.launches[0].grid[0] == splits
    _assert_ok(check)


def test_head_size_refusal_hint_plans() -> None:
    # the hint names a head size the kernel runs; written as the hint says, it plans
    from ncdc.errors import PlanError

    with pytest.raises(PlanError) as err:
        plan_diagram(load_diagram(DIAGRAMS / "attention.yaml", {"d": 72}), HW)
    assert "d=72" in str(err.value) and "--set d=80" in (err.value.hint or "")
    plan = plan_diagram(load_diagram(DIAGRAMS / "attention.yaml", {"d": 80}), HW)
    assert plan.kernels[0].candidate is not None


# ----------------------------------------------------------------------------- decode


@pytest.mark.parametrize(
    "x, splits",
    [(1, 1), (7, 1), (300, 1), (300, 3), (300, 5)],  # splits a decode candidate can have
)
def test_decode(x: int, splits: int) -> None:
    check, _, module, _ = _run(
        "decode_attention", {"b": 1, "h": 2, "q": 1, "x": x, "d": 64}, {"x": 64}, splits=splits
    )
    first, merge = module.launches
    assert first.grid[0] == splits  # as the model priced it
    assert (first.grid[0] - 1) * 64 * math.ceil(math.ceil(x / 64) / splits) < x  # none empty
    assert [w.values for w in module.workspace] == [
        2 * first.grid[0] * 4 * 64,
        2 * first.grid[0] * 4 * 2,
    ]
    _assert_ok(check)


def test_decode_several_queries_and_d128() -> None:
    check, _, _, _ = _run("decode_attention", {"b": 1, "h": 1, "q": 7, "x": 129, "d": 128},
                       {"x": 64}, splits=2)  # fmt: skip
    _assert_ok(check)


@pytest.mark.parametrize(
    "q, x, suffix, blocks, splits",
    [
        # the query axis is the longer of r and q; the other is packed beside it
        (1, 70, "_s2", 2, 2),  # r = 4 rows of one query each: nothing left to pack
        (3, 33, "_h3", 2, 1),  # 4 heads (the rows' axis) x 3 queries packed: 12 rows
        (5, 40, "_h2", 4, 1),  # 5 queries x 4 heads do not fit: blocks of 2 heads, 10 rows
    ],
)
def test_decode_packs_query_heads_of_a_group(
    q: int, x: int, suffix: str, blocks: int, splits: int
) -> None:
    sizes = {"b": 1, "g": 2, "r": 4, "q": q, "x": x, "d": 64}
    check, _, module, _ = _run("decode_q4_gqa", sizes, {"x": 32}, splits=splits)
    first, merge = module.launches
    assert first.kernel.endswith(suffix) and first.grid[:2] == (splits, blocks)
    assert merge.grid[1] == first.grid[1]
    _assert_ok(check)


def test_decode_ring_stages_priced_as_built() -> None:
    # the model's stages are the ring the kernel allocates: Q plus stages x (K, V) chunks
    plan = plan_diagram(load_diagram(SPECS / "decode_gqa_long.yaml"), HW)
    c = plan.kernels[0].candidate
    assert c is not None and c.stages >= 3
    s_x = c.param("s_x")
    assert c.main.dynamic_smem == 2 * (16 * 128 + c.stages * s_x * 2 * 128)
    assert render_plan(plan).launches[0].kernel.endswith(f"_s{c.stages}")


def test_decode_causal_and_large_logits() -> None:
    sizes = {"b": 1, "h": 1, "q": 5, "x": 150, "d": 64}
    diagram = load_diagram(DIAGRAMS / "attention_causal.yaml", sizes)
    inputs = make_inputs(diagram, seed=5)
    for name in ("Q", "K"):
        inputs[name] = round_to(inputs[name] * 100.0, "bf16")
    check, got, module, _ = _run("attention_causal", sizes, {"x": 64}, splits=3, inputs=inputs)
    assert module.launches[0].kernel.endswith("_causal")
    assert np.all(np.isfinite(got))
    _assert_ok(check)


# ------------------------------------------------------------------ split-key forward

# soft-capped logits (a score functor), causal, and the log-sum-exp the merge writes
_SOFTCAP_LSE = (
    (DIAGRAMS / "softcap_attention.yaml")
    .read_text()
    .replace(
        "  - P = softmax(M, over=x)\n",
        "  - P = softmax(M, over=x)\n  - Z = logsumexp(M, over=x, dtype=fp32)\n",
    )
    .replace("outputs: [O]", "outputs: [O, Z]")
)


def test_split_keys_forward() -> None:
    # 70 keys in chunks of 32, 3 splits of one chunk (the last of 6 keys); query i sees
    # j <= i - 20, so queries 0..19 see no key at all (O = 0, Z = -inf) and query tile 0
    # nothing of split 2; 90 queries: a partial second tile
    sizes = {"b": 1, "g": 1, "r": 2, "q": 90, "x": 70, "d": 64}
    diagram = load_diagram_text(_SOFTCAP_LSE, sizes=sizes)
    plan = plan_diagram(diagram, HW, tiles=SMALL)
    kp = next(
        k for k in kernel_alternatives(plan, 0, 1000) if is_split(k.candidate) and k.splits == 3
    )
    module = render_plan(with_kernel(plan, 0, kp))
    first, merge = module.launches
    assert first.grid[2] == 3 and first.kernel.endswith("_causal_scores_lse_split")  # as priced
    assert kp.candidate is not None
    assert [s.grid for s in kp.candidate.launches] == [first.grid, merge.grid]
    for seed in (0, 1):
        checks = run_diagram(diagram, module, backend="cpu", seed=seed).checks
        assert {c.name for c in checks} == {"O", "Z"}
        for check in checks:
            assert check.ok and check.unexpected_nan == 0, check


def test_split_keys_chosen_for_a_grid_that_cannot_fill_the_gpu() -> None:
    # 77 queries (two tiles of 64) x 16 heads: 32 blocks on 132 SMs, 4096 keys to split
    small = plan_diagram(
        load_diagram(DIAGRAMS / "cross_attention.yaml", {"b": 1, "q": 77, "x": 4096}), HW
    )
    (kp,) = small.kernels
    assert is_split(kp.candidate) and kp.splits > 1 and len(kp.candidate.launches) == 2
    unsplit = [
        a.predicted_time_s for a in kernel_alternatives(small, 0, 2000) if a.splits == 1
    ]  # fmt: skip
    assert unsplit and kp.predicted_time_s < min(unsplit)
    # the library's cross-attention (4096 queries: 1024 blocks) and attention stay whole
    for name in ("cross_attention", "attention"):
        big = plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml"), HW).kernels[0]
        assert big.splits == 1 and not is_split(big.candidate)


# ------------------------------------------------------------------------------ NVRTC


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


# ------------------------------------------------------------------- arch and profile


def _ncdc(*args: str) -> subprocess.CompletedProcess:
    root = DIAGRAMS.parent
    return subprocess.run([sys.executable, "-m", "ncdc", *args], capture_output=True,
                          text=True, cwd=root)  # fmt: skip


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("arch, profile", [("sm_80", "a100"), ("sm_89", "l40s")])
def test_arch_alone_plans_for_its_profile(tmp_path: Path, arch: str, profile: str) -> None:
    # --arch alone plans for that arch's own profile, says so in one line, and compiles
    result = _ncdc("compile", "diagrams/attention.yaml", "--set", "d=256", "--arch", arch,
                   "-o", str(tmp_path), "--format", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"planning for the {profile} profile of {arch}" in result.stderr
    report = json.loads(result.stdout)
    assert report["hardware"] == profile
    # naming another profile is the user's choice, refused in one line where it cannot run
    # (h200's plan of d = 256 fits sm_80's SMEM, not sm_89's; a 64-key tile fits neither)
    refused = _ncdc("compile", "diagrams/attention.yaml", "--set", "d=256", "--arch", arch,
                    "--hardware", "h200", "--tile", "x=64", "-o", str(tmp_path / "h"))  # fmt: skip
    assert refused.returncode == 2 and f"--hardware {profile}" in refused.stderr


# ------------------------------------------------------------- roles from the structure


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("attn_bshd_mqa", {"b": 1, "q": 37, "h": 3, "x": 70, "d": 64}),
        ("attn_bshd_causal", {"b": 1, "q": 50, "h": 2, "x": 81, "d": 96}),
        ("attn_contract_kq", {"b": 1, "h": 2, "q": 37, "x": 70, "d": 64}),
    ],
)
def test_roles_from_structure(name: str, sizes: dict[str, int]) -> None:
    check, _, module, _ = _run(name, sizes)
    launch = module.launches[0]
    assert launch.kernel.startswith(f"{name}_attention_")  # fused, not a decode per query
    assert launch.grid == (1, sizes["b"] * sizes["h"], 1)  # h is a batch axis, q the rows
    _assert_ok(check)


def test_bshd_priced_as_bhsd() -> None:
    # the same problem in both layouts: one plan, the same predicted time
    sizes = {"b": 2, "h": 8, "q": 1024, "x": 1024, "d": 96}
    bshd = plan_diagram(load_diagram(SPECS / "attn_bshd_causal.yaml", sizes), HW).kernels[0]
    bhsd = plan_diagram(load_diagram(DIAGRAMS / "attention_causal.yaml", sizes), HW).kernels[0]
    assert bshd.candidate is not None and bhsd.candidate is not None
    assert bshd.candidate.params == bhsd.candidate.params
    assert bshd.candidate.launches == bhsd.candidate.launches
    assert bshd.predicted_time_s == pytest.approx(bhsd.predicted_time_s, rel=1e-9)


def test_mqa_bshd_is_not_a_decode_per_query() -> None:
    # Q [b, q, h, d] against one K/V head: q (2048) is the query axis, h (8) a batch axis
    plan = plan_diagram(load_diagram(SPECS / "attn_bshd_mqa.yaml"), HW)
    kp = plan.kernels[0]
    assert kp.family.name == "attention" and kp.family.axes("q") == ("q",)
    assert kp.candidate is not None and kp.candidate.main.grid[1] == 2 * 8


# ------------------------------------------------------------------- followable hints

_BASE = """ncdc: 1
name: hinted
axes: {b: 1, h: 2, q: 256, x: 256, d: 64}
inputs:
  Q: {axes: [b, h, q, d], dtype: bf16}
  K: {axes: [b, h, x, d], dtype: bf16}
  V: {axes: [b, h, x, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - P = softmax(S, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""


def _edit(*pairs: tuple[str, str]) -> str:
    text = _BASE
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    return text


# (refused spec, a piece of the hint, the spec written as the hint says)
_HINTED = [
    (  # a mask that is not the last op on the logits
        _edit(
            (
                "  - P = softmax(S",
                "  - M = causal(S, query=q, key=x)\n  - T = relu(M)\n  - P = softmax(T",
            )
        ),  # fmt: skip
        "schedule: {materialize: [S, P]}",
        _edit(
            (
                "  - P = softmax(S",
                "  - M = causal(S, query=q, key=x)\n  - T = relu(M)\n  - P = softmax(T",
            ),  # fmt: skip
            ("schedule: {stream: x}", "schedule: {materialize: [S, P]}"),
        ),
    ),
    (  # a scale on the second contraction
        _edit(("O = contract(P, V, over=x)", "O = contract(P, V, over=x) * 0.5")),
        "schedule: {materialize: [S, P]}",
        _edit(
            ("O = contract(P, V, over=x)", "O = contract(P, V, over=x) * 0.5"),
            ("schedule: {stream: x}", "schedule: {materialize: [S, P]}"),
        ),
    ),
    (  # V of another type
        _edit(("V: {axes: [b, h, x, d], dtype: bf16}", "V: {axes: [b, h, x, d], dtype: fp32}")),
        "inputs: {V: {axes: [b, h, x, d], dtype: bf16}}",
        _BASE,
    ),
    (  # the head axis not last
        _edit(("Q: {axes: [b, h, q, d]", "Q: {axes: [b, h, d, q]")),
        "put d last in Q",
        _BASE,
    ),
    (  # a head size the kernel has no tiles for
        _edit(("d: 64}", "d: 72}")),
        "axes: {d: 80}",
        _edit(("d: 64}", "d: 80}")),
    ),
]


@pytest.mark.parametrize("refused, hint, fixed", _HINTED)
def test_each_refusal_hint_can_be_followed(tmp_path: Path, refused: str, hint: str,
                                           fixed: str) -> None:  # fmt: skip
    from ncdc.errors import NcdcError

    bad, good = tmp_path / "refused.yaml", tmp_path / "fixed.yaml"
    bad.write_text(refused)
    good.write_text(fixed)
    with pytest.raises(NcdcError) as err:
        render_plan(plan_diagram(load_diagram(bad), HW))
    assert hint in (err.value.hint or ""), err.value
    plan = plan_diagram(load_diagram(good), HW)
    assert all(kp.candidate is not None for kp in plan.kernels)
    render_plan(plan)
