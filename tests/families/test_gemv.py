"""GEMV kernels: a vector or a few rows times a matrix, emulated on the CPU against the
float64 reference at odd sizes (k and n multiples of neither the 16-byte vector nor the
tile), both layouts of W, 16-byte and scalar loads, an epilogue; priced memory-bound and
chosen over a padded GEMM for a skinny shape; compiled at decode size without spills.
"""

from __future__ import annotations

import importlib.util

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.run import run_diagram

H200 = load_hardware("h200")


def _diagram(axes: str, x: str, w: str, dtype: str, ops: str = "") -> str:
    extra = f"  bias: {{axes: [n], dtype: {dtype}}}\n" if ops else ""
    chain = ops or '"y = contract(x, W, over=k)"'
    return (
        "ncdc: 1\nname: gv\n"
        f"axes: {{{axes}}}\n"
        f"inputs:\n  x: {{axes: [{x}], dtype: {dtype}}}\n  W: {{axes: [{w}], dtype: {dtype}}}\n"
        f"{extra}ops: [{chain}]\noutputs: [y]\n"
    )


CASES = {
    # two kernels in one module (one build), rows of W not 16-byte aligned (k = 37, n = 45):
    # scalar loads, W k-contiguous (one warp per column) and W n-contiguous
    "vector_scalar": """
ncdc: 1
name: gv
axes: {k: 37, n: 45}
inputs: {x: {axes: [k], dtype: bf16}, W: {axes: [n, k], dtype: bf16},
         V: {axes: [k, n], dtype: bf16}}
ops: ["y = contract(x, W, over=k)", "z = contract(x, V, over=k)"]
outputs: [y, z]
""",
    # five rows, W n-contiguous, 16-byte loads (n = 104), a column tail per block and a k
    # tail per slice, with a bias and SiLU after the sum
    "rows_nc_bias_silu": _diagram(
        "m: 5, k: 37, n: 104", "m, k", "k, n", "fp16",
        '"h = contract(x, W, over=k)", "z = add(h, bias)", "y = silu(z)"',
    ),
    # three rows, fp32, W k-contiguous with 16-byte loads (k = 68) and a k tail per warp step
    "rows_kc_fp32": _diagram("m: 3, k: 68, n: 45", "m, k", "n, k", "fp32"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_emulated_gemv_matches_the_reference(case: str) -> None:
    d = load_diagram_text(CASES[case], f"{case}.yaml")
    plan = plan_diagram(d, H200)
    module = render_plan(plan)
    names = [launch.kernel for launch in module.launches]
    assert all("_gemv_" in n for n in names), names
    layouts = {"_kc_" if "_kc_" in n else "_nc_" for n in names}
    assert layouts == ({"_kc_", "_nc_"} if case == "vector_scalar" else {case[4:8]}), names
    # rows of W 16-byte aligned: 16-byte loads; else one element at a time
    assert all(("_v1_" in n) == (case == "vector_scalar") for n in names), names
    for check in run_diagram(d, module, backend="cpu", seed=0).checks:
        assert check.ok, check


def test_decode_layer_is_priced_as_a_stream_of_w() -> None:
    plan = plan_diagram(load_diagram("diagrams/gemv.yaml"), H200)
    (kp,) = plan.kernels
    assert kp.family.name == "gemv" and kp.candidate is not None
    assert kp.candidate.param("gemv") == 1
    assert kp.bound == "hbm"
    w_bytes = 4096 * 11008 * 2
    hbm = kp.transfers[0]
    assert w_bytes <= hbm.bytes <= 1.25 * w_bytes  # W once, x and y on top
    # within a third of W at the achieved HBM bandwidth
    assert kp.predicted_time_s <= 1.33 * w_bytes / H200.achieved_bandwidth("hbm")


SKINNY = """
ncdc: 1
name: skinny
axes: {m: 4, k: 4096, n: 11008}
inputs:
  X: {axes: [m, k], dtype: bf16}
  W: {axes: [n, k], dtype: bf16}
ops: ["Y = contract(X, W, over=k)"]
outputs: [Y]
"""


def test_a_skinny_gemm_takes_the_gemv_kernel_over_a_padded_mma_tile() -> None:
    d = load_diagram_text(SKINNY, "skinny.yaml")
    plan = plan_diagram(d, H200)
    (kp,) = plan.kernels
    assert kp.family.name == "gemv" and kp.candidate is not None
    assert kp.candidate.param("gemv") == 1
    # the GEMM family's kernels (16-row mma tiles, split-k or not) were in the same search
    gemms = [
        a for a in kernel_alternatives(plan, 0, 5000)
        if a.candidate is not None and not dict(a.candidate.params).get("gemv")
    ]  # fmt: skip
    assert gemms and kp.predicted_time_s < min(a.predicted_time_s for a in gemms)
    unsplit = min(a.predicted_time_s for a in gemms if a.splits == 1)
    assert kp.predicted_time_s < 0.6 * unsplit


@pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="cuda.bindings (NVRTC) is not installed",
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_decode_gemv_compiles_without_spills(arch: str) -> None:
    from ncdc.backends.cache import cached_compile
    from ncdc.families.gemv import FAMILY
    from ncdc.render import template_env

    hw = H200 if arch == "sm_90a" else load_hardware("a100")
    diagrams = (load_diagram("diagrams/gemv.yaml"), load_diagram_text(SKINNY, "skinny.yaml"))
    for d in diagrams:
        plan = plan_diagram(d, hw)
        (kp,) = plan.kernels
        ks = FAMILY.render(kp, plan)
        body = template_env().get_template(ks.template).render(**ks.context)
        (launch,) = ks.launches
        source = '#include "ncdc_runtime.cuh"\n\n' + body
        res = cached_compile(source, arch, name=launch.kernel).resources[launch.kernel]
        assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0, res
