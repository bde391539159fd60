"""The attention kernels on the CPU emulator against float64 NumPy, and through NVRTC.

Emulated runs use one (batch, head) slice mostly and small tiles; sizes are runtime
parameters, so one library built per tile configuration serves every size (the module
header names the sizes, hence the cache by kernel names rather than by source).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from ncdc.emulate import EmulatedModule, Traffic, build
from ncdc.hardware import load_hardware
from ncdc.reference import evaluate, from_storage, make_inputs, round_to
from ncdc.render import RenderedModule, render_plan
from ncdc.run import OutputCheck, allocate, compare, launch_args
from ncdc.spec import Diagram, load_diagram
from ncdc.tiling import kernel_alternatives, plan_diagram, with_kernel

DIAGRAMS = Path(__file__).resolve().parent.parent / "diagrams"
HW = load_hardware("h200")
SMALL = {"q": 64, "x": 32}  # forward tiles for the emulator: 4 warps, 32-key chunks
_LIBS: dict[tuple[str, ...], EmulatedModule] = {}


def _module(name: str, sizes: dict[str, int], tiles: dict[str, int],
            splits: int | None = None) -> tuple[Diagram, RenderedModule]:  # fmt: skip
    diagram = load_diagram(DIAGRAMS / f"{name}.yaml", sizes)
    plan = plan_diagram(diagram, HW, tiles=tiles)
    if splits is not None:  # the decode candidate with that split of the keys
        kp = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == splits)
        plan = with_kernel(plan, 0, kp)
    return diagram, render_plan(plan)


def _run(name: str, sizes: dict[str, int], tiles: dict[str, int] = SMALL, *,
         splits: int | None = None, inputs: dict[str, np.ndarray] | None = None,
         seed: int = 0) -> tuple[OutputCheck, np.ndarray, RenderedModule, Traffic]:  # fmt: skip
    """Run the rendered kernels on NaN-poisoned outputs and workspace; compare with the
    float64 reference of the diagram."""
    diagram, module = _module(name, sizes, tiles, splits)
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
    got = from_storage(buffers["O"], "bf16")
    return compare("O", "bf16", got, want), got, module, traffic


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


# ------------------------------------------------------------------------------ NVRTC


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize(
    "name", ["attention", "attention_causal", "gqa_attention", "decode_attention"]
)
def test_full_size_compiles_without_spills(name: str) -> None:
    from ncdc.compile import compile_plan

    pytest.importorskip("cuda.bindings.nvrtc")
    plan = plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml"), HW)
    for arch in ("sm_80", "sm_90a"):
        report = compile_plan(plan, arch)
        for k in report.kernels:
            assert k.spill_stores_bytes == 0 and k.spill_loads_bytes == 0, (arch, k)
            assert k.blocks_per_sm >= 1, (arch, k)
