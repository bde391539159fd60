"""The row-stages family on the CPU emulator against float64 NumPy: the backward of layernorm
and rmsnorm as ncdc grad derives them (row statistics, then two row means of what they
give, then dX; dW and dB summed down the columns), softmax written out in two stages, NaN
and -inf, per-row outputs, a mean down the columns, and the traffic the model prices."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.grad.choose import choose_pair
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.language.write import diagram_yaml
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import compare, run_diagram
from tests import support
from tests.runtime_sizes import run_at_sizes

H200 = load_hardware("h200")

SOFTMAX = """
ncdc: 1
name: staged_softmax
axes: {b: 3, m: 5, n: 130}
inputs: {X: {axes: [b, m, n], dtype: fp32}, W: {axes: [n], dtype: bf16}}
ops:
  - M = max(X, over=n)
  - D = sub(X, M)
  - E = exp(D)
  - S = sum(E, over=n)
  - Y = div(E, S)
  - Z = mul(Y, W)
  - A = mean(Z, over=[b, m])
outputs: [Y, M, S, A]
"""


# layernorm written out: two means in one stage, then a max; outputs later ops read (r,
# m1: bf16, read as stored), a per-row input over the rows axes in another order, a mean
# down the columns over two axes
WRITTEN_OUT = """
ncdc: 1
name: ln_written_out
axes: {b: 3, s: 7, n: 45}
inputs:
  X: {axes: [b, s, n], dtype: bf16}
  W: {axes: [n], dtype: bf16}
  c: {axes: [s, b], dtype: fp32}
ops:
  - X2 = square(X)
  - m1 = mean(X, over=n)
  - m2 = mean(X2, over=n)
  - mm = square(m1)
  - var = sub(m2, mm)
  - v1 = add(var, 1e-5)
  - r = rsqrt(v1)
  - C = sub(X, m1)
  - N = mul(C, r)
  - Y = mul(N, W)
  - Z = add(Y, c)
  - top = max(Z, over=n)
  - col = mean(Z, over=[b, s], dtype=fp32)
outputs: [Z, r, top, col, m1]
"""


def _backward(name: str, sizes: dict[str, int]) -> str:
    d = load_diagram(support.DIAGRAMS / f"{name}.yaml", sizes)
    return diagram_yaml(choose_pair(d, H200).pair.backward)


def _check(got: dict, want: dict, dtypes: dict[str, str]) -> None:
    for name, dtype in dtypes.items():
        c = compare(name, dtype, got[name], want[name])
        assert c.ok, c


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_a_norms_backward_is_one_pass_over_the_rows(name: str) -> None:
    sizes = {"m": 37, "n": 130}
    text = _backward(name, sizes)
    plan = plan_diagram(load_diagram_text(text), H200)
    families = [kp.family.name for kp in plan.kernels]
    # dX and dW in one kernel; layernorm's dB (a sum of dY alone) is a reduction of its own
    assert families[0] == "rowstages" and families[1:] in ([], ["reduce"]), families
    stages = plan.kernels[0].candidate.param("stages")
    assert stages == (3 if name == "layernorm" else 2)  # mean, variance, then dX's means
    for run in [sizes, {"m": 5, "n": 7}, {"m": 1, "n": 130}]:
        d = load_diagram_text(text, sizes=run)
        result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=7)
        assert result.ok, result.checks


def test_softmax_in_two_stages_with_nan_and_infinities_and_a_mean_down_the_columns() -> None:
    sizes = {"b": 3, "m": 5, "n": 130}
    d = load_diagram_text(SOFTMAX)
    inputs = make_inputs(d, seed=3)
    inputs["X"][0, 0, 7] = np.nan  # a NaN row: NaN throughout, the max too
    inputs["X"][0, 1, :] = -np.inf  # every value -inf: max -inf, then NaN
    inputs["X"][1, 2, 3] = np.inf
    got, want, module = run_at_sizes(SOFTMAX, sizes, sizes, inputs)
    _check(got, want, {"Y": "fp32", "M": "fp32", "S": "fp32", "A": "fp32"})
    assert np.isnan(got["M"][0, 0]) and got["M"][0, 1] == -np.inf and got["M"][1, 2] == np.inf
    assert [launch.kernel.endswith("_store") for launch in module.launches] == [False, True]
    # one build, run at fewer rows and a shorter row (sizes are runtime parameters)
    small = {"b": 2, "m": 3, "n": 33}
    got, want, _ = run_at_sizes(SOFTMAX, sizes, small)
    _check(got, want, {"Y": "fp32", "M": "fp32", "S": "fp32", "A": "fp32"})


def test_a_row_too_long_for_shared_memory_adds_its_column_sums_into_device_memory() -> None:
    text = _backward("rmsnorm", {"m": 3, "n": 25000})  # dW's partials: 100 KB a block
    sizes = {"m": 3, "n": 25000}
    got, want, module = run_at_sizes(text, sizes, sizes)
    d = load_diagram_text(text, sizes=sizes)
    _check(got, want, {o: d.tensor(o).dtype for o in d.outputs})
    assert module.launches[0].dynamic_smem == 0


def test_the_model_reads_the_rows_once_from_device_memory() -> None:
    """Stages after the first read the row again from the L2, not from device memory; the
    column sums' workspace once each way; each block adds its partials once."""
    d = load_diagram_text(_backward("rmsnorm", {"m": 4096, "n": 4096}))
    plan = plan_diagram(d, H200)
    (kp,) = plan.kernels
    m, n = 4096, 4096
    top = next(x for x in kp.transfers if x.upper == "hbm")
    # X and dY read once, dX and dW written, dW's fp32 workspace each way; W (2n bytes) once
    # or, where the model finds a wave's rows too large for the L2, once per block's rows
    once = 2 * m * n + 2 * m * n + 2 * m * n + 2 * n + 2 * 4 * n
    weights, rest = divmod(top.bytes - once, 2 * n)
    rows = kp.candidate.param("rows")
    assert rest == 0 and 1 <= weights <= m // rows, (top.bytes, once)
    l2 = next(x for x in kp.transfers if x.upper == "l2")
    assert l2.bytes > 2 * top.bytes  # X and dY again in the second stage, then the adds


def test_outputs_later_ops_read_are_read_as_stored(tmp_path) -> None:
    d = load_diagram_text(WRITTEN_OUT)
    plan = plan_diagram(d, H200)
    assert [kp.family.name for kp in plan.kernels] == ["rowstages"]
    assert plan.kernels[0].candidate.param("stages") == 2
    for seed in (1, 2):
        result = run_diagram(d, render_plan(plan), backend="cpu", seed=seed)
        assert result.ok, result.checks
