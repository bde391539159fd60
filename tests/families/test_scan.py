"""The scan family on the CPU emulator against float64 NumPy: every candidate the search may
pick (by rows and by columns, in chunks or whole, forward and from the end), NaN and inf
carried on from where they appear, the language's refusals, and the traffic the model
prices."""

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

# Two kernels: a running sum along X's innermost axis (a warp per row) and a running
# max or min along W's outer axis (a thread per column), with ops before and after it.
# n is long enough for every chunk count (64 chunks of 256) and a multiple of no step.
TWO = """
ncdc: 1
name: two
axes: {b: 2, n: 16400, d: 5}
inputs:
  X: {axes: [b, n], dtype: bf16}
  W: {axes: [n, d], dtype: fp32}
  s: {axes: [d], dtype: fp32}
ops:
  - Y = cumsum(X, over=n, reverse=%s)
  - V = mul(W, s)
  - Z = %s(V, over=n, reverse=%s)
  - U = add(Z, V)
outputs: [Y, U]
"""
VARIANTS = [("false", "cummax", "true"), ("true", "cummin", "false"), ("false", "cumsum", "false")]


@functools.cache
def _candidates(text: str) -> tuple[list, list]:
    """The distinct candidates of both kernels the search weighs, in its order."""
    d = load_diagram_text(text)
    plan = plan_diagram(d, H200)
    found = []
    for k in range(2):
        found.append(list({kp.candidate.params: kp.candidate
                           for kp in kernel_alternatives(plan, k, 100)}.values()))  # fmt: skip
    return found[0], found[1]


COUNT = 24  # 2 thread counts x 3 values per step x 4 chunk counts


def test_the_search_weighs_every_candidate() -> None:
    rows, columns = _candidates(TWO % VARIANTS[0])
    assert {dict(c.params)["chunks"] for c in rows} == {1, 4, 16, 64}
    assert {dict(c.params)["values"] for c in columns} == {1, 4, 8}
    assert len(rows) == len(columns) == COUNT


@pytest.mark.parametrize("i", range(COUNT))
def test_every_candidate_scans_as_the_reference(i: int) -> None:
    """Each thread count, values per step and chunk count of both mappings, each run once,
    the variants (sum, max, min, forward and from the end) taken in turn."""
    text = TWO % VARIANTS[i % len(VARIANTS)]
    rows, columns = _candidates(text)
    d = load_diagram_text(text)
    module = render_plan(plan_from_candidates(d, H200, [rows[i], columns[i]]))
    mappings = {launch.kernel.split("_scan_")[1].split("_")[0] for launch in module.launches}
    assert mappings == {"rows", "columns"}
    result = run_diagram(d, module, backend="cpu", seed=i)
    assert result.ok, (rows[i].params, columns[i].params, result.checks)


def test_nan_and_inf_carry_on_from_where_they_appear() -> None:
    """A NaN in a running sum or max makes every later value NaN (and none before); an inf
    makes a running sum inf until a -inf meets it (NaN); a -inf never wins a running max."""
    text = TWO % ("false", "cummax", "false")
    d = load_diagram_text(text, sizes={"b": 2, "n": 700, "d": 5})
    inputs = make_inputs(d, seed=3)
    inputs["X"][0, 100] = np.nan
    inputs["X"][1, 50] = np.inf
    inputs["X"][1, 600] = -np.inf
    inputs["W"][10, 0] = np.nan
    inputs["W"][20, 1] = np.inf
    inputs["W"][:, 2] = -np.inf
    want = evaluate(d, inputs)
    assert np.isnan(want["Y"][0, 100:]).all() and not np.isnan(want["Y"][0, :100]).any()
    assert np.isnan(want["Y"][1, 600:]).all() and np.isposinf(want["Y"][1, 50:600]).all()
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", inputs=inputs)
    assert result.ok, result.checks
    assert all(c.reference_nonfinite for c in result.checks)


def test_scans_at_sizes_of_one() -> None:
    """One row, one column, one element along the axis: the warp's other lanes hold
    nothing, and a step of several values holds one."""
    for sizes in ({"b": 1, "n": 1, "d": 1}, {"b": 1, "n": 33, "d": 1}, {"b": 3, "n": 257, "d": 2}):
        d = load_diagram_text(TWO % ("true", "cumsum", "true"), sizes=sizes)
        result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=1)
        assert result.ok, (sizes, result.checks)


def test_the_model_prices_a_chunked_scan_as_two_reads() -> None:
    """Whole, the inputs are read once and the outputs written once from device memory;
    in chunks the inputs are read again (the totals pass) and the totals cross too."""
    d = load_diagram_text(TWO % VARIANTS[2])
    rows, _ = _candidates(TWO % VARIANTS[2])
    b, n = d.axes["b"], d.axes["n"]
    for c in (next(c for c in rows if dict(c.params)["chunks"] == k) for k in (1, 16)):
        plan = plan_from_candidates(d, H200, [c, _candidates(TWO % VARIANTS[2])[1][0]])
        top = next(x for x in plan.kernels[0].transfers if x.upper == "hbm")
        reads = 2 if dict(c.params)["chunks"] > 1 else 1
        assert top.bytes >= reads * b * n * 2 + b * n * 2, (c.params, top.bytes)
        assert top.bytes <= reads * b * n * 2 + b * n * 2 + 64 * 1024, (c.params, top.bytes)


@pytest.mark.parametrize(
    "op, message",
    [
        ("Y = cumsum(X, over=[m, n])", "cumsum runs along one axis"),
        ("Y = cumsum(X, over=n, reverse=maybe)", "expected true or false for 'reverse'"),
        ("Y = cumsum(X)", "cumsum needs 'over='"),
        ("Y = cummax(X, over=k)", "cummax over 'k', but X has axes"),
    ],
)
def test_scans_refuse_what_they_cannot_mean(op: str, message: str) -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8, k: 3}\n"
        f"inputs: {{X: {{axes: [m, n], dtype: bf16}}}}\nops: ['{op}']\noutputs: [Y]\n"
    )
    with pytest.raises(SpecError, match=message.replace("[", r"\[")):
        load_diagram_text(text)


def test_a_running_sum_of_integers_is_int32() -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8}\n"
        "inputs: {L: {axes: [m, n], dtype: int8}}\nops: ['O = cumsum(L, over=n)']\noutputs: [O]\n"
    )
    d = load_diagram_text(text)
    assert d.tensor("O").dtype == "int32"
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=2)
    assert result.ok, result.checks


def test_reference_by_hand() -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {n: 4}\ninputs: {X: {axes: [n], dtype: fp32}}\n"
        "ops: ['A = cumsum(X, over=n)', 'B = cummax(X, over=n, reverse=true)', "
        "'C = cummin(X, over=n)']\noutputs: [A, B, C]\n"
    )
    got = evaluate(load_diagram_text(text), {"X": np.array([1.0, -2.0, 5.0, 0.5])})
    assert got["A"].tolist() == [1.0, -1.0, 4.0, 4.5]
    assert got["B"].tolist() == [5.0, 5.0, 5.0, 0.5]
    assert got["C"].tolist() == [1.0, -2.0, -2.0, -2.0]
