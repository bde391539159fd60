"""permute: a tensor's values stored with its axes in another order, run by the elementwise
family (fused with the ops around it) on the CPU emulator against float64 NumPy, its
refusals, and its gradient."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.errors import SpecError
from ncdc.grad.derive import derive
from ncdc.grad.pair import every_way, make_pair
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import evaluate
from ncdc.verify.run import run_diagram
from tests.grad.helpers import compare

H200 = load_hardware("h200")

CHAIN = """
ncdc: 1
name: perm
axes: {b: 3, s: 37, h: 5, d: 24}
inputs:
  X: {axes: [b, s, h, d], dtype: bf16}
  w: {axes: [d], dtype: fp32}
  M: {axes: [s, d], dtype: fp32}
ops:
  - S = mul(X, w)
  - Y = permute(S, axes=[b, h, d, s], dtype=fp16)   # the innermost axis changes
  - Z = exp(Y)                                       # reads Y as stored, in fp16
  - T = permute(M, axes=[d, s])                      # a plain transpose
outputs: [Y, Z, T]
"""


def test_permuted_values_land_where_numpy_puts_them() -> None:
    d = load_diagram_text(CHAIN)
    assert d.tensor("Y").axes == ("b", "h", "d", "s") and d.tensor("Y").dtype == "fp16"
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=3)
    assert result.ok, result.checks
    x = np.arange(6.0).reshape(2, 3)
    two = load_diagram_text(CHAIN.replace("s: 37", "s: 2").replace("d: 24", "d: 3"))
    got = evaluate(two, {"X": np.zeros((3, 2, 5, 3)), "w": np.ones(3), "M": x})
    assert got["T"].tolist() == x.T.tolist()


@pytest.mark.parametrize(
    "axes, message",
    [
        ("[b, s, d]", "permute puts S's axes"),
        ("[b, s, h, d, d]", "permute puts S's axes"),
        ("[b, s, h, q]", "unknown axis 'q'"),
        ("3", "expected axis names for 'axes'"),
    ],
)
def test_permute_refuses_other_axes(axes: str, message: str) -> None:
    text = CHAIN.replace("axes=[b, h, d, s], dtype=fp16", f"axes={axes}")
    with pytest.raises(SpecError, match=message):
        load_diagram_text(text)


def test_the_gradient_goes_back_in_the_operands_order() -> None:
    text = CHAIN.replace("bf16", "fp32").replace(", dtype=fp16", "")
    d = load_diagram_text(text, sizes={"b": 2, "s": 3, "h": 2, "d": 4})
    backward = derive(d)
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert max(errors.values()) < 1e-6, (ways, errors)
