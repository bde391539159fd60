"""Kernel breaks: an output that later ops read stays in its kernel (which writes several
outputs), ncdc chooses where to save results when the spec does not say, an explicit
schedule is obeyed, and a refusal names the results to save, a hint that, followed, plans."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ncdc.errors import PlanError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.records import plan_to_dict
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.buildable import check_buildable
from ncdc.verify.run import run_diagram

H200 = load_hardware("h200")

PRENORM = """
ncdc: 1
name: prenorm
axes: {m: 256, k: 512, n: 256}
inputs:
  X: {axes: [m, k], dtype: bf16}
  G: {axes: [k], dtype: bf16}
  W: {axes: [k, n], dtype: bf16}
ops:
  - N = rmsnorm(X, over=k, weight=G, eps=1e-6)
  - Y = contract(N, W, over=k)
outputs: [Y]
"""

TWO_STATS = """
ncdc: 1
name: stats
axes: {m: 37, n: 45}
inputs:
  X: {axes: [m, n], dtype: fp32}
ops:
  - A = exp(X)
  - s = sum(A, over=n)
  - t = max(A, over=n)
outputs: [s, t]
"""


def _follow(text: str, hint: str) -> str:
    """The spec with its schedule replaced by the one the hint writes."""
    found = re.search(r"schedule: \{materialize: \[[^\]]*\]\}", hint)
    assert found, hint
    return re.sub(r"(?m)^schedule:.*$\n?", "", text) + found.group(0) + "\n"


def test_add_rmsnorm_is_one_kernel_writing_both_outputs() -> None:
    # H = X + R is an output that the norm also reads: one kernel writes H and Y. At the
    # diagram's 16384 x 4096 bf16 (T = 128 MiB a tensor): read X, R, write H, Y = 4T
    # (+ W) = 541 MB; saving H and reading it back in a second kernel is 5T = 680 MB.
    d = load_diagram("diagrams/add_rmsnorm.yaml")
    fused = plan_diagram(d, H200)
    assert len(fused.kernels) == 1 and set(fused.kernels[0].kernel.outputs) == {"H", "Y"}
    tensor = 16384 * 4096 * 2
    assert 4 * tensor <= fused.top_bytes < 4 * tensor + 5_000_000
    text = Path("diagrams/add_rmsnorm.yaml").read_text()
    two = plan_diagram(load_diagram_text(_follow(text, "schedule: {materialize: [H]}")), H200)
    assert len(two.kernels) == 2 and 5 * tensor <= two.top_bytes < 5 * tensor + 10_000_000
    assert fused.predicted_time_s < two.predicted_time_s
    small = load_diagram("diagrams/add_rmsnorm.yaml", sizes={"m": 37, "n": 1001})
    result = run_diagram(small, render_plan(plan_diagram(small, H200)), backend="cpu", seed=5)
    assert result.ok and {c.name for c in result.checks} == {"H", "Y"}, result.checks


def test_no_schedule_chooses_the_cheapest_breaks_that_build() -> None:
    # rmsnorm then a GEMM: no family runs both in one kernel, so ncdc saves N, and the
    # cost report lists both options, the refused one with why.
    plan = plan_diagram(load_diagram_text(PRENORM), H200)
    assert plan.graph.diagram.schedule.materialize == ("N",)
    breaks = plan_to_dict(plan)["breaks"]
    assert [(b["saved"], b["chosen"]) for b in breaks] == [([], False), (["N"], True)]
    assert breaks[0]["predicted_time_s"] is None and "no kernel family" in breaks[0]["problem"]
    assert breaks[1]["predicted_time_s"] == pytest.approx(plan.predicted_time_s)


def test_an_explicit_schedule_is_obeyed_and_its_refusal_names_what_to_save() -> None:
    # materialize: [] asks for one kernel: refused, the hint names N; followed, it plans.
    text = PRENORM + "schedule: {materialize: []}\n"
    with pytest.raises(PlanError) as refused:
        plan_diagram(load_diagram_text(text), H200)
    assert refused.value.hint == "save these results: schedule: {materialize: [N]}"
    followed = plan_diagram(load_diagram_text(_follow(text, refused.value.hint)), H200)
    assert [kp.family.name for kp in followed.kernels] == ["rowwise", "gemm"]


def test_two_row_ops_on_one_intermediate() -> None:
    # Two reductions of one map run in one kernel (row stages); a softmax and a reduction
    # do not (one row kernel runs one row op). Without a schedule ncdc saves A; with
    # materialize: [] the refusal says so, and its hint, followed, plans and runs.
    both = plan_diagram(load_diagram_text(TWO_STATS), H200)
    assert both.graph.diagram.schedule.materialize == ()
    assert [kp.family.name for kp in both.kernels] == ["rowstages"]
    result = run_diagram(both.graph.diagram, render_plan(both), backend="cpu", seed=2)
    assert result.ok, result.checks
    softmax = TWO_STATS.replace("s = sum(A, over=n)", "s = softmax(A, over=n)")
    chosen = plan_diagram(load_diagram_text(softmax), H200)
    assert chosen.graph.diagram.schedule.materialize == ("A",)
    text = softmax + "schedule: {materialize: []}\n"
    with pytest.raises(PlanError) as refused:
        plan_diagram(load_diagram_text(text), H200)
    assert refused.value.hint == "save these results: schedule: {materialize: [A]}"
    d = load_diagram_text(_follow(text, refused.value.hint))
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=1)
    assert result.ok, result.checks


INT8_ROWS = """
ncdc: 1
name: q
axes: {m: 37, n: 45}
inputs:
  X: {axes: [m, n], dtype: int8}
ops:
  - Y = softmax(X, over=m, dtype=fp32)
outputs: [Y]
"""

STRIDED_BIAS = """
ncdc: 1
name: sb
axes: {m: 37, n: 45}
inputs:
  X: {axes: [m, n], dtype: bf16}
  B: {axes: [n, m], dtype: bf16}
ops:
  - Z = add(X, B)
  - Y = softmax(Z, over=n)
outputs: [Y]
"""


def test_an_int8_row_input_plans() -> None:
    # The row kernels read int8 exactly (computing in fp32): nothing to store differently.
    plan = check_buildable(load_diagram_text(INT8_ROWS), H200)
    assert [kp.kernel.inputs for kp in plan.kernels] == [("X",)]


def test_a_row_operand_strided_along_the_row_runs_in_the_reduction_kernel() -> None:
    # softmax over n, last in X but not in the bias B[n, m]: once refused ("put n last"),
    # now read strided by the reduction family (test_kernel_reduce runs it).
    plan = check_buildable(load_diagram_text(STRIDED_BIAS), H200)
    assert [kp.family.name for kp in plan.kernels] == ["reduce"]


LONG = """
ncdc: 1
name: attention_backward
axes: {b: 1, h: 1, q: 256, x: 256, d: 128}
inputs:
  Q: {axes: [b, h, q, d], dtype: bf16}
  K: {axes: [b, h, x, d], dtype: bf16}
  V: {axes: [b, h, x, d], dtype: bf16}
  L: {axes: [b, h, q], dtype: fp32}
  dO: {axes: [b, h, q, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d) * 0.08838834764831845
  - M = causal(S, query=q, key=x)
  - T = sub(M, L)
  - P = exp(T, dtype=bf16)
  - dP = contract(dO, V, over=d, dtype=bf16)
  - dV = contract(P, dO, over=q, dtype=bf16)
  - A = mul(dP, P)
  - R = sum(A, over=x, dtype=fp32)
  - U = sub(dP, R)
  - dS = mul(P, U, dtype=bf16)
  - dQ = contract(dS, K, over=x, scale=0.08838834764831845, dtype=bf16)
  - dK = contract(dS, Q, over=q, scale=0.08838834764831845, dtype=bf16)
outputs: [dQ, dK, dV]
"""


def test_a_long_diagram_whose_fewest_saves_do_not_build_descends_from_all_saved() -> None:
    # attention's backward (what ncdc grad derives): none of the 64 sets of fewest saves
    # builds (each leaves two contractions in one kernel, or two kernels waiting on each
    # other); dropping saves one at a time from all saved does
    from ncdc.plan.breaks import choose_breaks

    chosen, options = choose_breaks(load_diagram_text(LONG), load_hardware("h200"), {})
    assert chosen.schedule.breaks_given and options
    assert sum(o.chosen for o in options) == 1
    best = min(o.predicted_time_s for o in options if o.predicted_time_s is not None)
    assert next(o for o in options if o.chosen).predicted_time_s == best
    # S, its causal mask and exp(M - L) in one GEMM's epilogue; P, dP, dS saved between GEMMs
    assert {"P", "dP", "dS"} <= set(chosen.schedule.materialize)
    assert "S" not in chosen.schedule.materialize


def test_results_of_positions_alone_are_never_saved_and_impossible_sets_are_skipped() -> None:
    # A mask rule's terms depend on no input: recomputed, never a kernel break; a set of
    # breaks whose kernels would each read what the other saves is weighed as not building
    from ncdc.plan.breaks import breakable_results, choose_breaks

    d = load_diagram("tests/specs/attn_sinks_window_odd.yaml")
    assert breakable_results(d) == ["S", "M", "P"]
    chosen, options = choose_breaks(d, H200, {})
    assert chosen.schedule.materialize == ()
    assert all(o.predicted_time_s is None for o in options if not o.chosen and o.problem)
