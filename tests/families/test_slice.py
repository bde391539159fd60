"""slice, shift and roll: values read along an axis at a fixed offset from each position,
fused into the kernels of the ops around them (RoPE's rotated halves, a causal convolution's
taps, the parts of a packed projection), on the CPU emulator against float64 NumPy; their
refusals and their gradients."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.errors import SpecError
from ncdc.grad.derive import derive
from ncdc.grad.pair import every_way, make_pair
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import evaluate
from ncdc.verify.run import run_diagram
from tests import support
from tests.grad.helpers import compare

H200 = load_hardware("h200")

SHIFTS = """
ncdc: 1
name: shifts
axes: {b: 2, s: 37, h: 3, d: 24, f: 72, w: 30}
inputs:
  X: {axes: [b, s, h, d], dtype: bf16}
  cos: {axes: [s, d], dtype: fp32}
  sin: {axes: [s, d], dtype: fp32}
  QKV: {axes: [b, s, f], dtype: bf16}
ops:
  - R = roll(X, axis=d, by=12)         # the halves swapped
  - i = index(d)
  - lo = lt(i, 12)
  - m = mul(lo, -2)
  - sgn = add(m, 1)                    # -1 on the first half, 1 on the second
  - RS = mul(R, sgn)
  - A = mul(X, cos)
  - B = mul(RS, sin)
  - Y = add(A, B, dtype=bf16)          # RoPE
  - K = slice(QKV, axis=f, start=24, into=d)   # the middle third
  - T = slice(QKV, axis=f, start=60, into=w)   # past the end: zeros
  - P = shift(X, axis=s, by=2)         # two positions later: zeros first
  - C = cumsum(P, over=s)              # a shift fused into a scan
outputs: [Y, K, T, C]
"""


def test_offset_reads_land_where_numpy_puts_them() -> None:
    d = load_diagram_text(SHIFTS)
    assert d.tensor("K").axes == ("b", "s", "d") and d.tensor("T").axes == ("b", "s", "w")
    plan = plan_diagram(d, H200)
    assert "scan" in {kp.family.name for kp in plan.kernels}
    result = run_diagram(d, render_plan(plan), backend="cpu", seed=7)
    assert result.ok, result.checks


def test_reference_by_hand() -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {n: 5, m: 3}\ninputs: {X: {axes: [n], dtype: fp32}}\n"
        "ops: ['A = roll(X, axis=n, by=2)', 'B = shift(X, axis=n, by=-1)', "
        "'C = slice(X, axis=n, start=3, into=m)', 'D = roll(X, axis=n, by=-7)']\n"
        "outputs: [A, B, C, D]\n"
    )
    got = evaluate(load_diagram_text(text), {"X": np.array([1.0, 2.0, 3.0, 4.0, 5.0])})
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert got["A"].tolist() == np.roll(x, 2).tolist()
    assert got["B"].tolist() == [2.0, 3.0, 4.0, 5.0, 0.0]
    assert got["C"].tolist() == [4.0, 5.0, 0.0]
    assert got["D"].tolist() == np.roll(x, -7).tolist()


@pytest.mark.parametrize(
    "op, message",
    [
        ("Y = slice(X, axis=n, start=1.5)", "expected a whole number for 'start'"),
        ("Y = slice(X, axis=q, start=1)", "slice along 'q', but X has axes"),
        ("Y = slice(X, axis=n, start=1, into=m)", "X already has the axis 'm'"),
        ("Y = slice(X, axis=n, start=1, into=4)", "'into' names the axis of the result"),
        ("Y = shift(X, axis=n, by=-9)", "shift by -9 along n of 8 reads nothing"),
        ("Y = shift(X, axis=n, by=8)", "shift by 8 along n of 8 reads nothing"),
        ("Y = slice(X, axis=n, start=-3, into=q)", "slice start=-3 along n of 8 reads nothing"),
        ("Y = roll(X, axis=n)", "roll needs 'by='"),
    ],
)
def test_offset_reads_refuse_what_they_cannot_mean(op: str, message: str) -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8, q: 3}\n"
        f"inputs: {{X: {{axes: [m, n], dtype: bf16}}}}\nops: ['{op}']\noutputs: [Y]\n"
    )
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        load_diagram_text(text)


def test_gradients_are_read_back_at_the_opposite_offset() -> None:
    text = SHIFTS.replace("bf16", "fp32").replace(", dtype=fp32", "")
    d = load_diagram_text(text.replace("by=12", "by=2").replace("lt(i, 12)", "lt(i, 2)")
                          .replace("start=24", "start=3").replace("start=60", "start=7"),
                          sizes={"b": 1, "s": 5, "h": 1, "d": 4, "f": 9, "w": 4})  # fmt: skip
    backward = derive(d)
    assert {"roll", "slice"} <= {line.fn for line in backward.lines}
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"X", "cos", "sin", "QKV"}
        assert max(errors.values()) < 1e-6, (ways, errors)


def test_a_slice_of_a_computed_value_is_saved_first() -> None:
    """A slice reads its operand from memory: where the operand is computed in the same
    kernel, no family takes the kernel, and the kernel-break search saves the operand."""
    text = (
        "ncdc: 1\nname: twice\naxes: {s: 7, f: 30, d: 12, g: 9}\n"
        "inputs: {X: {axes: [s, f], dtype: fp32}}\n"
        "ops: ['A = slice(X, axis=f, start=3, into=d)', 'B = exp(A)', "
        "'C = slice(B, axis=d, start=2, into=g)']\noutputs: [C]\n"
    )
    d = load_diagram_text(text)
    plan = plan_diagram(d, H200)
    assert len(plan.kernels) == 2 and "B" in plan.kernels[0].kernel.outputs
    result = run_diagram(d, render_plan(plan), backend="cpu", seed=2)
    assert result.ok, result.checks


@pytest.mark.parametrize("hw", ["h200", "a100"])
def test_a_packed_projection_split_by_slices(hw: str) -> None:
    """diagrams/swiglu_packed.yaml at odd sizes (tests/specs/swiglu_packed_odd.yaml): the
    gate and up projections as one GEMM, its product saved and read back by two slices
    into SiLU(gate) x up; the bytes the kernels issue are the model's."""
    d = load_diagram(support.SPECS / "swiglu_packed_odd.yaml")
    plan = plan_diagram(d, load_hardware(hw))
    assert [kp.family.name for kp in plan.kernels] == ["gemm", "elementwise"]
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, render_plan(plan), backend="cpu", seed=seed)
    assert result.ok, result.checks
    # the traffic out of the L2: every byte the kernels load from or store to memory
    modelled = sum(t.bytes for kp in plan.kernels for t in kp.transfers if t.upper == "l2")
    assert result.bytes_read + result.bytes_written == modelled
