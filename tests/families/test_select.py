"""The select family on the CPU emulator against float64 NumPy: every candidate the search
may pick (a warp or several per row, along the innermost axis or an outer one), NaN, ties
and infinities in the order NumPy gives, the values gathered by the picks (from registers,
or from an input in memory), the language's refusals, and the traffic the model prices."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from ncdc.errors import SpecError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram, plan_from_candidates
from ncdc.render import render_plan
from ncdc.verify.reference import evaluate, make_inputs
from ncdc.verify.run import run_diagram

H200 = load_hardware("h200")

# Two kernels: the 5 smallest of each row along the innermost axis, with their values (from
# registers) and a weight gathered by them (from memory) scaled by the value; and the
# position of the largest down an outer axis (strided loads), with its value.
TWO = """
ncdc: 1
name: two
axes: {t: 7, e: 600, j: 5, d: 3}
inputs:
  X: {axes: [t, e], dtype: bf16}
  w: {axes: [e], dtype: fp32}
  Y: {axes: [e, d], dtype: fp32}
ops:
  - N = neg(X)
  - I = topk(N, over=e, k=j, largest=false)
  - V = gather(N, I, axis=e)
  - g = gather(w, I, axis=e)
  - P = mul(V, g)
  - A = argmax(Y, over=e)
  - M = gather(Y, A, axis=e)
outputs: [I, V, P, A, M]
"""


@functools.cache
def _candidates() -> tuple[list, list]:
    d = load_diagram_text(TWO)
    plan = plan_diagram(d, H200)
    return tuple(
        list(
            {kp.candidate.params: kp.candidate for kp in kernel_alternatives(plan, k, 100)}.values()
        )  # fmt: skip
        for k in range(2)
    )


COUNT = 7  # (threads, threads per row): 128 or 256 with 32 or 128, 512 with 32, 128 or 512


def test_the_search_weighs_every_candidate() -> None:
    first, second = _candidates()
    assert len(first) == len(second) == COUNT
    assert {dict(c.params)["row_threads"] for c in first} == {32, 128, 512}


@pytest.mark.parametrize("i", range(COUNT))
def test_every_candidate_picks_as_the_reference(i: int) -> None:
    first, second = _candidates()
    d = load_diagram_text(TWO)
    module = render_plan(plan_from_candidates(d, H200, [first[i], second[-1 - i]]))
    result = run_diagram(d, module, backend="cpu", seed=i)
    assert result.ok, (first[i].params, second[-1 - i].params, result.checks)


def test_nan_ties_and_infinities_pick_as_numpy() -> None:
    """A NaN is picked first (the extreme either way), equal values by position, -inf and
    inf in their places; a row of NaN alone gives its first positions."""
    d = load_diagram_text(TWO, sizes={"t": 5, "e": 40, "j": 5, "d": 3})
    inputs = make_inputs(d, seed=4)
    inputs["X"][0, 7] = np.nan
    inputs["X"][1, :] = 0.5  # all equal: 0, 1, 2, 3, 4
    inputs["X"][2, 3] = np.inf  # the smallest of -X
    inputs["X"][2, 9] = -np.inf
    inputs["X"][3, :] = np.nan
    inputs["X"][4, 30:] = 2.0  # ties among the best
    inputs["Y"][:, 1] = -np.inf
    inputs["Y"][5, 2] = np.nan
    want = evaluate(d, inputs)
    assert want["I"][0, 0] == 7 and want["I"][1].tolist() == [0, 1, 2, 3, 4]
    assert want["I"][2, 0] == 3 and want["I"][3].tolist() == [0, 1, 2, 3, 4]
    assert want["I"][4].tolist() == [30, 31, 32, 33, 34]
    assert want["A"][1] == 0 and want["A"][2] == 5
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", inputs=inputs)
    assert result.ok, result.checks


def test_the_model_reads_each_row_once() -> None:
    """From device memory: X once, w at the picks (sectors), the picks and values once; the
    gather of the operand reads nothing (the values come with the picks)."""
    d = load_diagram_text(TWO)
    plan = plan_diagram(d, H200)
    first = plan.kernels[0]
    top = next(x for x in first.transfers if x.upper == "hbm")
    t, e, j = (d.axes[a] for a in "tej")
    outputs = t * j * (4 + 2 + 2)  # I (int32), V and P (bf16)
    assert t * e * 2 + outputs <= top.bytes <= t * e * 2 + outputs + e * 4


@pytest.mark.parametrize(
    "op, message",
    [
        ("I = topk(X, over=n, k=4)", "k names the axis of the picks"),
        ("I = topk(X, over=n, k=m)", "X already has the axis 'm'"),
        ("I = topk(X, over=n, k=big)", "topk picks 40 (big) of the 8 values along n"),
        ("I = topk(X, over=[m, n], k=j)", "topk picks along one axis"),
        ("I = argmax(X, over=n, dtype=fp32)", "argmax gives positions, int32"),
        ("I = topk(X, over=n, k=j, largest=yes)", "expected true or false for 'largest'"),
        ("I = argmax(X)", "argmax needs 'over='"),
    ],
)
def test_selections_refuse_what_they_cannot_mean(op: str, message: str) -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8, j: 3, big: 40}\n"
        f"inputs: {{X: {{axes: [m, n], dtype: bf16}}}}\nops: ['{op}']\noutputs: [I]\n"
    )
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):  # fmt: skip
        load_diagram_text(text)


def test_reference_by_hand() -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {n: 5, j: 3}\ninputs: {X: {axes: [n], dtype: fp32}}\n"
        "ops: ['T = topk(X, over=n, k=j)', 'B = topk(X, over=n, k=j, largest=false)', "
        "'A = argmax(X, over=n)', 'Z = argmin(X, over=n)']\noutputs: [T, B, A, Z]\n"
    )
    got = evaluate(load_diagram_text(text), {"X": np.array([1.0, 3.0, -2.0, 3.0, 0.0])})
    assert got["T"].tolist() == [1, 3, 0] and got["B"].tolist() == [2, 4, 0]
    assert got["A"] == 1 and got["Z"] == 2


def test_rows_read_in_vectors_also_where_a_row_starts_mid_vector() -> None:
    """A thread reads 8 bf16 positions a step in one 16-byte load: rows of 37 values start
    mid-vector (the scalar fallback) and end in a partial step."""
    d = load_diagram_text(TWO, sizes={"t": 5, "e": 37, "j": 5, "d": 3})
    module = render_plan(plan_diagram(d, H200))
    assert "ncdc::load_run<8>(ncdc_p_X" in module.source
    result = run_diagram(d, module, backend="cpu", seed=9)
    assert result.ok, result.checks
