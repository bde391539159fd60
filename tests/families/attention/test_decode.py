"""The decode family (ncdc.families.attention.decode): split-key partials and their merge, on
the CPU emulator against float64 NumPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs, round_to
from tests import support
from tests.families.attention.helpers import assert_ok, run_attention

DIAGRAMS = support.DIAGRAMS


SPECS = support.SPECS


HW = load_hardware("h200")


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
    check, _, module, _ = run_attention(name, sizes, {"x": 32}, splits=splits)
    assert module.launches[0].grid[0] == splits
    assert_ok(check)


@pytest.mark.parametrize(
    "x, splits",
    [(1, 1), (7, 1), (300, 1), (300, 3), (300, 5)],  # splits a decode candidate can have
)
def test_decode(x: int, splits: int) -> None:
    check, _, module, _ = run_attention(
        "decode_attention", {"b": 1, "h": 2, "q": 1, "x": x, "d": 64}, {"x": 64}, splits=splits
    )
    first, merge = module.launches
    assert first.grid[0] == splits  # as the model priced it
    assert (first.grid[0] - 1) * 64 * math.ceil(math.ceil(x / 64) / splits) < x  # none empty
    assert [w.values for w in module.workspace] == [
        2 * first.grid[0] * 4 * 64,
        2 * first.grid[0] * 4 * 2,
    ]
    assert_ok(check)


def test_decode_several_queries_and_d128() -> None:
    check, _, _, _ = run_attention("decode_attention", {"b": 1, "h": 1, "q": 7, "x": 129, "d": 128},
                       {"x": 64}, splits=2)  # fmt: skip
    assert_ok(check)


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
    check, _, module, _ = run_attention("decode_q4_gqa", sizes, {"x": 32}, splits=splits)
    first, merge = module.launches
    assert first.kernel.endswith(suffix) and first.grid[:2] == (splits, blocks)
    assert merge.grid[1] == first.grid[1]
    assert_ok(check)


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
    check, got, module, _ = run_attention(
        "attention_causal", sizes, {"x": 64}, splits=3, inputs=inputs
    )
    assert module.launches[0].kernel.endswith("_causal")
    assert np.all(np.isfinite(got))
    assert_ok(check)
