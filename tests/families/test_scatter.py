"""The scatter family on the CPU emulator against float64 NumPy (np.add.at): odd sizes,
rows picked many times or never, every layout of the operand and the index, NaN and inf,
an index out of range, and the traffic the model prices."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.errors import IndexRangeError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.model.graph import build_graph
from ncdc.plan.search import plan_diagram
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import compare, run_spec
from tests import support
from tests.runtime_sizes import run_at_sizes

H200 = load_hardware("h200")
TEXT = (support.SPECS / "scatter_add_odd.yaml").read_text()
PLANNED = {"t": 37, "v": 101, "d": 130}

LAYOUTS = """
ncdc: 1
name: layouts
axes: {b: 3, s: 7, v: 5, d: 9}
inputs:
  G: {axes: [d, b, s], dtype: fp32}
  A: {axes: [b, s, d], dtype: fp16}
  ids: {axes: [b, s], dtype: int32}
ops:
  - Q = scatter_add(G, ids, axis=v)              # [d, v]: the index's axes inside
  - P = scatter_add(A, ids, axis=v, over=s)      # [b, v, d]: a table per batch entry
outputs: [Q, P]
"""


def _checked(got: dict, want: dict, names: list[str], dtypes: dict[str, str]) -> None:
    for name in names:
        c = compare(name, dtypes[name], got[name], want[name])
        assert c.ok, c


def test_every_value_lands_in_its_row_at_any_size() -> None:
    """One build at the spec's sizes, run at others (sizes are runtime parameters): the
    first and last rows, rows picked many times, rows never picked (exactly 0, not the
    poison), and every token on one row (all adds contend for the same addresses)."""
    for t, v, d in [(37, 101, 130), (4, 3, 7), (50, 2, 1), (37, 1, 130)]:
        sizes = {"t": t, "v": v, "d": d}
        diagram = load_diagram_text(TEXT, sizes=sizes)
        for same in (False, True):
            inputs = make_inputs(diagram, seed=t + v + same)
            if same:
                inputs["ids"][:] = v - 1
            else:
                inputs["ids"][: min(t, 3)] = [0, v - 1, v - 1][: min(t, 3)]
            got, want, _ = run_at_sizes(TEXT, PLANNED, sizes, inputs)
            _checked(got, want, ["dE"], {"dE": "bf16"})
            never = sorted(set(range(v)) - set(inputs["ids"].astype(int).tolist()))
            assert (got["dE"][never] == 0).all(), sizes
            assert got["ncdc_status"].tolist() == [0]


def test_every_layout_of_the_operand_and_the_index() -> None:
    sizes = {"b": 3, "s": 7, "v": 5, "d": 9}
    got, want, module = run_at_sizes(LAYOUTS, sizes, sizes)
    _checked(got, want, ["Q", "P"], {"Q": "fp32", "P": "fp16"})
    assert len(module.launches) == 4  # two kernels, each its adds and its store


def test_nan_and_inf_reach_their_row_only_and_a_bad_index_adds_nothing() -> None:
    sizes = {"t": 9, "v": 4, "d": 6}
    diagram = load_diagram_text(TEXT, sizes=sizes)
    inputs = make_inputs(diagram, seed=5)
    inputs["ids"][:] = [0, 1, 1, 2, 2, 3, 3, 0, 1]
    inputs["w"] = np.abs(inputs["w"]) + 0.5  # signs kept
    inputs["G"][1, 0] = np.nan  # row 1
    inputs["G"][3, 1] = np.inf  # row 2: inf
    inputs["G"][5, 2], inputs["G"][6, 2] = np.inf, -np.inf  # row 3: inf - inf is NaN
    got, want, _ = run_at_sizes(TEXT, PLANNED, sizes, inputs)
    _checked(got, want, ["dE"], {"dE": "bf16"})
    assert np.isnan(got["dE"][1, 0]) and got["dE"][2, 1] == np.inf and np.isnan(got["dE"][3, 2])
    assert np.isfinite(got["dE"][0]).all()
    inputs["G"] = np.ones_like(inputs["G"])
    inputs["w"] = np.ones_like(inputs["w"])
    inputs["ids"][4] = 4  # one past the end
    inputs["ids"][5] = -1
    got, _, _ = run_at_sizes(TEXT, PLANNED, sizes, inputs)
    assert got["ncdc_status"].tolist() == [1]
    # the other tokens still added: rows 0..3 get 2, 3, 1, 1 ones (tokens 4 and 5 dropped)
    assert got["dE"][:, 0].tolist() == [2.0, 3.0, 1.0, 1.0]


def test_a_scatter_after_a_contraction_or_before_another_op_gets_a_kernel_of_its_own(
    tmp_path,
) -> None:
    """The family runs elementwise ops into one scatter-add: a contraction before it or an
    op reading its sum after it are kernels of their own, chosen by the break search."""
    text = """
ncdc: 1
name: around
axes: {t: 5, k: 6, v: 4, d: 3}
inputs:
  X: {axes: [t, k], dtype: fp32}
  W: {axes: [k, d], dtype: fp32}
  ids: {axes: [t], dtype: int32}
ops:
  - S = contract(X, W, over=k)
  - D = scatter_add(S, ids, axis=v)
  - Y = tanh(D)
outputs: [Y]
"""
    plan = plan_diagram(load_diagram_text(text), H200)
    assert [kp.family.name for kp in plan.kernels][1:] == ["scatter", "elementwise"]
    spec = tmp_path / "around.yaml"
    spec.write_text(text)
    assert run_spec(spec, H200, backend="cpu").result.ok


def test_the_model_prices_the_adds_and_the_workspace() -> None:
    """From device memory: G, w and ids once, the result once, and the fp32 workspace once
    each way; into the SMs each add is 4 bytes at the L2."""
    d = load_diagram_text(TEXT)
    plan = plan_diagram(d, H200)
    (kp,) = plan.kernels
    t, v, dd = (d.axes[a] for a in ("t", "v", "d"))
    top = next(x for x in kp.transfers if x.upper == "hbm")
    assert top.bytes == t * dd * 2 + dd * 4 + t * 4 + v * dd * 2 + 2 * v * dd * 4
    l2 = next(x for x in kp.transfers if x.upper == "l2")
    assert l2.bytes >= t * dd * 2 + t * dd * 4  # the operand read and every add
    graph = build_graph(d, H200)
    assert graph.kernels[0].woven == ("t", "d")  # blocks split the values added


def test_every_candidate_adds_the_same_sums() -> None:
    """Each thread count and values-per-pass the search may pick, with a tail of values past
    the end of a pass and an index out of range among a pass's values."""
    from ncdc.plan.feedback import kernel_alternatives
    from ncdc.plan.search import plan_from_candidates
    from ncdc.render import render_plan
    from ncdc.verify.run import run_diagram

    d = load_diagram_text(TEXT, sizes={"t": 37, "v": 11, "d": 13})
    picks = {kp.candidate.params: kp.candidate
             for kp in kernel_alternatives(plan_diagram(d, H200), 0, 50)}  # fmt: skip
    assert {dict(p)["unroll"] for p in picks} == {1, 4} and len(picks) == 4
    for c in picks.values():
        module = render_plan(plan_from_candidates(d, H200, [c]))
        result = run_diagram(d, module, backend="cpu", seed=5)
        assert result.ok, (c.params, result.checks)
        bad = make_inputs(d, seed=6)
        bad["ids"][36] = 11  # the last value, in the last pass's tail
        with pytest.raises(IndexRangeError, match=r"ids\[36\] = 11 is out of range"):
            run_diagram(d, module, backend="cpu", inputs=bad)
