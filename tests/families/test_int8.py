"""int8 and int32 end to end: quantisation, dequantisation, int8 and weight-only int8
GEMMs, and the SwiGLU MLP, each emulated on the CPU at odd sizes against the float64
reference, priced by the model and compiled with NVRTC at full size with no spills.

GEMM kernels at fixed tiles are covered in test_kernel_gemm.py; these run whole diagrams.
"""

from __future__ import annotations

import importlib.util

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.run import run_diagram, run_spec
from tests import support

ROOT = support.ROOT
H200 = load_hardware("h200")


def run_library(name: str, **sizes: int) -> dict:
    outcome = run_spec(ROOT / "diagrams" / f"{name}.yaml", H200, sizes=sizes)
    checks = {c.name: c for c in outcome.result.checks}
    for c in checks.values():
        assert c.unexpected_nan == 0, c
    return checks


def test_per_row_absmax_quantisation_odd_sizes() -> None:
    # 37 rows of 130: each row's max maps to 127. The kernel scales in fp32 where the
    # reference scales in float64, so a value within an fp32 rounding of a half step may
    # round the other way: at most one step, and never past the saturation bounds.
    checks = run_library("int8_quantize", m=37, k=130)
    assert checks["Q"].scale == 127 and checks["Q"].max_abs_error <= 1, checks["Q"]
    assert checks["s"].ok, checks["s"]


DEQUANTIZE = """
ncdc: 1
name: dequant
axes: {m: 37, k: 130}
inputs:
  Q: {axes: [m, k], dtype: int8}
  s: {axes: [m], dtype: fp32}
  t: {axes: [], dtype: fp32}
ops:
  - Y = cast(Q, to=bf16, scale=[s, t])        # per row, then per tensor
  - Z = cast(Y, to=int8, scale=2.0)           # saturates: |Q| s t 2 reaches past 127
outputs: [Z]
"""


def test_dequantise_per_row_then_requantise_saturating() -> None:
    d = load_diagram_text(DEQUANTIZE)
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=3)
    (check,) = result.checks
    assert check.scale in (127, 128) and check.max_abs_error <= 1, check


def test_swiglu_mlp_odd_sizes() -> None:
    # silu(G) * U in the U GEMM's epilogue, G read back from memory (rounded to bf16 there,
    # as the reference rounds a saved result); f = 100 and d = 72 leave tails in every GEMM.
    checks = run_library("swiglu_mlp", m=37, d=72, f=100)
    assert checks["Y"].ok, checks["Y"]


SWIGLU = (ROOT / "diagrams" / "swiglu_mlp.yaml").read_text()


def test_swiglu_with_no_schedule_plans_three_gemms() -> None:
    # The model chooses the breaks: the gate saved, silu(G) * U in the U GEMM's epilogue.
    d = load_diagram_text(SWIGLU)
    plan = plan_diagram(d, H200)
    assert [kp.family.name for kp in plan.kernels] == ["gemm"] * 3
    assert [kp.kernel.outputs for kp in plan.kernels] == [("G",), ("H",), ("Y",)]


@pytest.mark.parametrize(
    "saved, hint",
    [
        ("H", {"G", "H"}),  # G and U in one kernel
        ("G, U", {"G", "U", "H"}),  # the down GEMM would compute its own operand H
    ],
)
def test_swiglu_refusal_names_the_results_to_save(saved: str, hint: set[str]) -> None:
    from ncdc.errors import PlanError
    from ncdc.verify.buildable import check_buildable

    text = SWIGLU + f"schedule: {{materialize: [{saved}]}}\n"
    with pytest.raises(PlanError) as info:
        check_buildable(load_diagram_text(text), H200)
    line = info.value.line()
    assert "schedule: {materialize: [" in line, line
    named = line.split("materialize: [")[1].split("]")[0]
    assert set(named.split(", ")) == hint, line


def test_a_kernel_runs_after_the_kernel_whose_result_it_reads() -> None:
    # Saving U (not G): silu(G) * U runs in the G GEMM's epilogue, which begins before U's
    # kernel in op order but reads U, so it must launch after it.
    text = (
        SWIGLU.replace("name: swiglu_mlp", "name: swiglu_u") + "schedule: {materialize: [U, H]}\n"
    )
    d = load_diagram_text(text)
    module = render_plan(plan_diagram(d, H200))
    assert [launch.kernel.split("_gemm")[0] for launch in module.launches] == [
        "swiglu_u_0_U", "swiglu_u_1_H", "swiglu_u_2_Y",
    ]  # fmt: skip


# ---- NVRTC at full size: the kernel `ncdc cost` prices is the one that compiles clean ----

# int8_matmul and w8a16_matmul compile in test_kernel_gemm.py; swiglu_mlp's G and Y kernels
# are plain bf16 GEMMs (as mlp's): here the row-wise quantisation and the side-operand
# epilogue.
COMPILED = {"int8_quantize": ("int8_quantize",), "swiglu_mlp": ("swiglu_mlp_1_H",)}


@pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="cuda.bindings (NVRTC) is not installed",
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_library_kernels_compile_without_spills(arch: str) -> None:
    from ncdc.backends.cache import cached_compile
    from ncdc.families import get_family
    from ncdc.language.load import load_diagram
    from ncdc.render import template_env

    hw = load_hardware({"sm_80": "a100", "sm_90a": "h200"}[arch])  # the arch's own profile
    for name, kernels in COMPILED.items():
        plan = plan_diagram(load_diagram(ROOT / "diagrams" / f"{name}.yaml"), hw)
        for kp in plan.kernels:
            if kp.kernel.name not in kernels:
                continue
            ks = get_family(kp.family.name).render(kp, plan)
            body = template_env().get_template(ks.template).render(**ks.context)
            exports = "".join(f"NCDC_EXPORT_KERNEL({la.kernel});\n" for la in ks.launches)
            source = '#include "ncdc_runtime.cuh"\n\n' + body + exports
            kernel = ks.launches[0].kernel
            res = cached_compile(source, arch, name=kernel).resources[kernel]
            assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0, (kernel, res)


# ---- the model prices these paths --------------------------------------------------------


def _model(name: str, **sizes: int):
    from ncdc.language.load import load_diagram
    from ncdc.model.graph import build_graph
    from ncdc.model.structure import KernelModel

    d = load_diagram(ROOT / "diagrams" / f"{name}.yaml", sizes)
    (kernel,) = build_graph(d, H200).kernels
    return d, KernelModel(d, kernel)


def test_int8_runs_at_the_int8_rate_and_weight_only_at_the_bf16_rate() -> None:
    from ncdc.model.structure import contract_unit

    d, _ = _model("int8_matmul")
    assert contract_unit(d, d.ops[0]) == ("tensor", "int8")
    d, _ = _model("w8a16_matmul")
    assert contract_unit(d, d.ops[0]) == ("tensor", "bf16")


def test_int8_bytes_and_scales_traffic() -> None:
    # int8_matmul at m = n = k = 64: A and B 64 * 64 one byte each, sa and sb 64 fp32 each,
    # C 64 * 64 bf16: 4096 + 4096 + 256 + 256 + 8192 bytes through HBM at least once.
    _, model = _model("int8_matmul", m=64, n=64, k=64)
    assert model.top_bytes == 4096 + 4096 + 256 + 256 + 8192
    # w8a16 at m = 16, n = 256, k = 64: X 16 * 64 bf16, W 256 * 64 int8, s 256 fp32, C bf16.
    _, model = _model("w8a16_matmul", m=16, n=256, k=64)
    assert model.top_bytes == 2048 + 16384 + 1024 + 8192


def test_weight_only_widening_is_priced_per_block_row() -> None:
    # 2 m n k = 2 * 32 * 256 * 64 tensor FLOPs; the per-column scale is one multiply per
    # output (32 * 256); every block along m widens all 256 * 64 weights it reads, at
    # WIDEN_OPS_PER_VALUE (2) each: m tiles of 32 -> 1 block row, of 16 -> 2.
    from ncdc.model.structure import WIDEN_OPS_PER_VALUE

    _, model = _model("w8a16_matmul", m=32, n=256, k=64)
    whole = model.tile_flops({"m": 32, "n": 128}, {"k": 64})
    half = model.tile_flops({"m": 16, "n": 128}, {"k": 64})
    assert whole[("tensor", "bf16")] == 2 * 32 * 256 * 64
    assert whole[("cuda", "fp32")] == 32 * 256 + 256 * 64 * WIDEN_OPS_PER_VALUE
    assert half[("cuda", "fp32")] == 32 * 256 + 2 * 256 * 64 * WIDEN_OPS_PER_VALUE
