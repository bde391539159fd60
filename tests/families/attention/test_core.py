"""The attention kernels on the CPU emulator against float64 NumPy, and through NVRTC.

Emulated runs use one (batch, head) slice mostly and small tiles; sizes are runtime
parameters, so one library built per tile configuration serves every size (the module
header names the sizes, hence the cache by kernel names rather than by source).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from tests import support
from tests.families.attention.helpers import assert_ok, run_attention

DIAGRAMS = support.DIAGRAMS
SPECS = support.SPECS
HW = load_hardware("h200")


# ---------------------------------------------------------------------------- forward


# -------------------------------------------------------------------------- head sizes


def test_head_size_refusal_hint_plans() -> None:
    # the hint names a head size the kernel runs; written as the hint says, it plans
    from ncdc.errors import PlanError

    with pytest.raises(PlanError) as err:
        plan_diagram(load_diagram(DIAGRAMS / "attention.yaml", {"d": 72}), HW)
    assert "d=72" in str(err.value) and "--set d=80" in (err.value.hint or "")
    plan = plan_diagram(load_diagram(DIAGRAMS / "attention.yaml", {"d": 80}), HW)
    assert plan.kernels[0].candidate is not None


# ----------------------------------------------------------------------------- decode


# ------------------------------------------------------------------ split-key forward


# ------------------------------------------------------------------------------ NVRTC


# ------------------------------------------------------------------- arch and profile


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
    check, _, module, _ = run_attention(name, sizes)
    launch = module.launches[0]
    assert launch.kernel.startswith(f"{name}_attention_")  # fused, not a decode per query
    assert launch.grid == (1, sizes["b"] * sizes["h"], 1)  # h is a batch axis, q the rows
    assert_ok(check)


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
    (  # O's head not last: its axes are its contraction's operands', V's then P's
        _edit(("O = contract(P, V, over=x)", "O = contract(V, P, over=x)")),
        "write O = contract(P, V, ...), the probabilities first",
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
