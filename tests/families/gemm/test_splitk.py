"""Split-k GEMMs: partial sums per k range in an fp32 workspace, merged in split order with
the epilogue. Emulated on the CPU against the float64 reference at odd sizes (k a multiple
of neither the k tile nor the split), chosen by the model for a grid too small for the GPU
and not for a large one.
"""

from __future__ import annotations

import importlib.util

import pytest

from ncdc.families.gemm.splitk import is_splitk
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram, plan_from_candidates
from ncdc.render import render_plan
from ncdc.verify.run import run_diagram

H200 = load_hardware("h200")

CASES = {
    # bf16, B n-contiguous, scaled, bias and GELU after the merge
    "bf16_bias_gelu": """
ncdc: 1
name: sk
axes: {m: 40, n: 72, k: 300}
inputs:
  A: {axes: [m, k], dtype: bf16}
  B: {axes: [k, n], dtype: bf16}
  bias: {axes: [n], dtype: bf16}
ops: ["H = contract(A, B, over=k) * 0.5", "Z = add(H, bias)", "Y = gelu(Z)"]
outputs: [Y]
""",
    # fp16, A m-contiguous and B k-contiguous, rows not 16-byte aligned (k = 301)
    "fp16_transposed_unaligned": """
ncdc: 1
name: sk
axes: {m: 40, n: 72, k: 301}
inputs:
  A: {axes: [k, m], dtype: fp16}
  B: {axes: [n, k], dtype: fp16}
ops: ["Y = contract(A, B, over=k)"]
outputs: [Y]
""",
    # weight-only int8: B widened in the main loop, its per-column scale after the merge
    "w8a16_column_scale": """
ncdc: 1
name: sk
axes: {m: 40, n: 72, k: 300}
inputs:
  A: {axes: [m, k], dtype: bf16}
  W: {axes: [n, k], dtype: int8}
  s: {axes: [n], dtype: fp32}
ops: ["Y = contract(A, W, over=k, scale=s, dtype=bf16)"]
outputs: [Y]
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_split_k_matches_the_reference(case: str) -> None:
    d = load_diagram_text(CASES[case], f"{case}.yaml")
    plan = plan_diagram(d, H200)
    # a split-k candidate of 32 x 32 tiles with at least 3 splits: every tile edge and a
    # short last split
    split = [
        kp.candidate
        for kp in kernel_alternatives(plan, 0, 2000)
        if kp.candidate is not None and is_splitk(kp.candidate) and kp.candidate.splits >= 3
        and kp.candidate.param("bm") == 32 and kp.candidate.param("bn") == 32
    ]  # fmt: skip
    assert split, "no split-k candidate for a 2 x 3 tile grid"
    c = split[0]
    assert d.axes["k"] % c.param("k_per_split") != 0  # the last split is short
    module = render_plan(plan_from_candidates(d, H200, [c]))
    assert [launch.grid for launch in module.launches] == [s.grid for s in c.launches]
    assert module.launches[0].grid[2] == c.splits
    for seed in (0, 1):
        for check in run_diagram(d, module, backend="cpu", seed=seed).checks:
            assert check.ok, check


@pytest.mark.parametrize("hw", ["h200", "a100"])
def test_split_k_is_chosen_for_a_grid_that_cannot_fill_the_gpu(hw: str) -> None:
    gpu = load_hardware(hw)
    small = plan_diagram(
        load_diagram("diagrams/matmul.yaml", {"m": 512, "n": 512, "k": 16384}), gpu
    )
    (kp,) = small.kernels
    assert kp.candidate is not None and is_splitk(kp.candidate) and kp.splits > 1
    assert len(kp.candidate.launches) == 2
    # it beats every unsplit candidate the same search priced
    unsplit = [
        a.predicted_time_s for a in kernel_alternatives(small, 0, 2000)
        if a.candidate is not None and a.candidate.splits == 1
    ]  # fmt: skip
    assert unsplit and kp.predicted_time_s < min(unsplit)
    big = plan_diagram(load_diagram("diagrams/matmul.yaml"), gpu).kernels[0]
    assert big.candidate is not None and big.splits == 1 and not is_splitk(big.candidate)


@pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="cuda.bindings (NVRTC) is not installed",
)
@pytest.mark.parametrize(("hw", "arch"), [("a100", "sm_80"), ("h200", "sm_90a")])
def test_split_k_compiles_without_spills(hw: str, arch: str) -> None:
    from ncdc.backends.cache import cached_compile

    d = load_diagram("diagrams/mlp.yaml", {"m": 512, "n": 512, "k": 16384})
    module = render_plan(plan_diagram(d, load_hardware(hw)))
    assert len(module.launches) == 2
    compiled = cached_compile(module.source, arch, name=module.name)
    for launch in module.launches:
        res = compiled.resources[launch.kernel]
        assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0, res
