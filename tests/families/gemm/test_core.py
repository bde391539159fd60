"""GEMM kernels: emulated on the CPU against float64 NumPy at small and odd sizes, every
layout and epilogue, and compiled with NVRTC at the diagrams' full sizes with no spills.

Each case renders one GEMM kernel with fixed tiles, warps and stages, so one emulator build
serves every size (sizes are runtime parameters), fills its inputs with fresh random values,
poisons its output with NaN, and compares with the reference evaluator.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends.cpu import EmulatedModule, build
from ncdc.families.gemm.family import FAMILY as GEMM
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram
from ncdc.render import KernelSource, template_env
from ncdc.verify.reference import evaluate, from_storage, make_inputs, to_storage
from ncdc.verify.run import OutputCheck, compare
from tests import support

HW = load_hardware("h100")
ROOT_DIAGRAMS = support.DIAGRAMS
# Allowed error relative to the largest |reference|: 16-bit outputs carry one rounding
# (2^-9 relative) on top of fp32 accumulation; fp8 products are exact in the mma, so an fp8
# GEMM with a bf16 output has the same bound; fp32 differs only by summation order.
# int8 x int8 sums exactly in int32, so an int32 output matches exactly.
TOLERANCE = {"bf16": 1e-2, "fp16": 1e-2, "fp32": 1e-5, "int32": 0.0}


def _source(ks: KernelSource) -> str:
    body = template_env().get_template(ks.template).render(**ks.context)
    exports = "".join(f"NCDC_EXPORT_KERNEL({launch.kernel});\n" for launch in ks.launches)
    return '#include "ncdc_runtime.cuh"\n\n' + body + exports


@cache
def _build(source: str) -> EmulatedModule:
    return build(source)


def run_gemm(
    d: Diagram,
    tiles: dict[str, int],
    index: int = 0,
    warps: int = 4,
    stages: int = 3,
    seed: int = 0,
) -> OutputCheck:
    """Run GEMM kernel `index` of `d` on the emulator; its output against the reference."""
    plan = plan_diagram(d, HW, tiles=tiles)
    kp = plan.kernels[index]
    if kp.splits > 1:  # one launch here: the best unsplit kernel (test_kernel_gemm_splitk.py)
        kp = next(a for a in kernel_alternatives(plan, index, 2000) if a.splits == 1)
    kp = replace(kp, warps=warps, stages=stages)
    ks = GEMM.render(kp, plan)
    (launch,) = ks.launches
    want = evaluate(d, make_inputs(d, seed))
    args: list[object] = []
    out = ""
    for p in launch.params:
        if p.kind == "int64":
            args.append(np.int64(p.value))
        elif p.writes:
            shape = tuple(d.axes[a] for a in d.tensor(p.name).axes)
            args.append(to_storage(np.full(shape, np.nan), p.dtype))
            out = p.name
        else:
            args.append(np.ascontiguousarray(to_storage(want[p.name], p.dtype)))
    _build(_source(ks)).launch(
        launch.kernel, launch.grid, launch.block, args, dynamic_smem=launch.dynamic_smem
    )
    got = next(a for a, p in zip(args, launch.params, strict=True) if p.name == out)
    dtype = d.tensor(out).dtype
    return compare(out, dtype, from_storage(got, dtype), want[out])  # type: ignore[arg-type]


def assert_close(check: OutputCheck) -> None:
    assert check.unexpected_nan == 0, f"{check.unexpected_nan} elements of {check.name} unwritten"
    bound = TOLERANCE[check.dtype] * check.scale
    assert check.max_abs_error <= bound, check


def diagram(name: str, **sizes: int) -> Diagram:
    return load_diagram(f"diagrams/{name}.yaml", sizes)


SMALL = {"m": 32, "n": 32, "k": 16}


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (1, 1, 1), (7, 65, 129), (129, 7, 65)])
def test_matmul_bf16_odd_sizes(m: int, n: int, k: int) -> None:
    # k = 129 and n = 7 make rows that are not 16-byte aligned: the element-wise load path.
    assert_close(run_gemm(diagram("matmul", m=m, n=n, k=k), SMALL, stages=2))


@pytest.mark.parametrize(
    "n,k,suffix", [(72, 40, ""), (72, 37, "_ua"), (77, 40, "_ub"), (77, 37, "_uab")]
)
def test_unaligned_rows_choose_the_element_wise_variant(n: int, k: int, suffix: str) -> None:
    # bf16 rows of 40 or 72 values are whole 16-byte chunks; of 37 or 77 they are not.
    plan = plan_diagram(diagram("matmul", m=100, n=n, k=k), HW)
    kernel = GEMM.render(plan.kernels[0], plan).launches[0].kernel
    assert kernel.endswith("_ak_bn" + suffix), kernel


def test_matmul_bf16_deeper_pipeline_and_larger_tile() -> None:
    d = diagram("matmul", m=96, n=80, k=200)
    assert_close(run_gemm(d, {"m": 64, "n": 64, "k": 32}, warps=4, stages=4))


def test_batched_matmul() -> None:
    assert_close(run_gemm(diagram("batched_matmul", b=3, m=33, n=40, k=24), SMALL))


def test_mlp_bias_gelu_epilogue() -> None:
    assert_close(run_gemm(diagram("mlp", m=65, n=72, k=40), {"m": 64, "n": 32, "k": 32}))


def test_tanh_gelu_epilogue_matches_its_reference() -> None:
    # gelu(approximate=tanh) in the epilogue, at sizes with m, n and k tails; the reference
    # evaluates the same tanh formula (it differs from erf's gelu by up to ~1e-3).
    d = load_diagram("tests/specs/gemm_gelu_tanh.yaml", {"m": 70, "n": 136, "k": 56})
    assert d.ops[-1].fn == "gelu_tanh"
    assert_close(run_gemm(d, {"m": 64, "n": 64, "k": 32}))


def test_gelu_approximate_must_be_none_or_tanh() -> None:
    from ncdc.errors import NcdcError

    text = Path("tests/specs/gemm_gelu_tanh.yaml").read_text().replace("=tanh)", "=cubic)")
    with pytest.raises(NcdcError, match="expected none, tanh"):
        load_diagram_text(text)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (33, 48, 70)])
def test_fp8_matmul_with_scales(m: int, n: int, k: int) -> None:
    # e4m3 inputs, scales sa and sb read from memory, bf16 output.
    check = run_gemm(diagram("fp8_matmul", m=m, n=n, k=k), {"m": 32, "n": 32, "k": 32})
    assert_close(check)


def test_attention_unfused_scores_with_scale() -> None:
    # S = contract(Q, K, over=d) * 1/sqrt(d): B = K is [x, d], k-contiguous.
    d = diagram("attention_unfused", b=2, h=2, q=33, x=40, d=32)
    assert_close(run_gemm(d, {}, index=0))


def test_attention_unfused_pv() -> None:
    # O = contract(P, V, over=x): B = V is [x, d], n-contiguous; P comes from the reference.
    d = diagram("attention_unfused", b=2, h=2, q=33, x=40, d=32)
    assert_close(run_gemm(d, {}, index=2))


LAYOUTS = """
ncdc: 1
name: layouts
axes: {b: 2, g: 2, r: 3, m: 40, n: 24, k: 7}
inputs:
  A: {axes: [b, g, r, k, m], dtype: %(t)s}
  B: {axes: [b, g, n, k], dtype: %(t)s}
  res: {axes: [r, m, n], dtype: %(t)s}
ops:
  - H = contract(A, B, over=k) * 0.5
  - Y = add(H, res)
  - C = silu(Y)
outputs: [C]
"""


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_m_contiguous_a_k_contiguous_b_and_a_broadcast_batch_axis(dtype: str) -> None:
    # A is m-contiguous (ldmatrix .trans), B k-contiguous, B and the residual lack batch
    # axes of A (pitch 0, as K of grouped-query attention), k = 7 is 14-byte rows.
    d = load_diagram_text(LAYOUTS % {"t": dtype})
    assert_close(run_gemm(d, {"m": 32, "n": 32, "k": 16}))


def test_fp8_transposed_operands_fp32_output() -> None:
    # 8-bit data has no ldmatrix .trans: an m-contiguous A and k-contiguous B in e4m3.
    text = """
ncdc: 1
name: fp8_layouts
axes: {m: 4096, n: 4096, k: 4096}
inputs:
  A: {axes: [k, m], dtype: fp8_e4m3}
  B: {axes: [n, k], dtype: fp8_e4m3}
  sa: {axes: [], dtype: fp32}
ops:
  - C = contract(A, B, over=k, scale=[sa], dtype=fp32)
outputs: [C]
"""
    d = load_diagram_text(text, sizes={"m": 33, "n": 48, "k": 70})
    assert_close(run_gemm(d, {"m": 32, "n": 32, "k": 32}))


def test_fp32_cuda_core_path_odd_sizes() -> None:
    text = """
ncdc: 1
name: fp32_matmul
axes: {m: 4096, n: 4096, k: 4096}
inputs:
  A: {axes: [m, k], dtype: fp32}
  B: {axes: [k, n], dtype: fp32}
ops:
  - C = contract(A, B, over=k)
outputs: [C]
"""
    for sizes in ({"m": 65, "n": 33, "k": 7}, {"m": 64, "n": 64, "k": 64}):
        d = load_diagram_text(text, sizes=sizes)
        assert_close(run_gemm(d, {"m": 32, "n": 64, "k": 16}))


def test_int8_matmul_per_row_and_per_column_scales_odd_sizes() -> None:
    # int32 accumulators dequantised by sa[m] and sb[n] in the epilogue; k = 70 is a partial
    # k tile and 70-byte rows, which are not 16-byte aligned (the element-wise load path).
    d = diagram("int8_matmul", m=33, n=40, k=70)
    assert_close(run_gemm(d, {"m": 32, "n": 32, "k": 32}))


INT8_LAYOUTS = """
ncdc: 1
name: int8_layouts
axes: {m: 4096, n: 4096, k: 4096}
inputs:
  A: {axes: [k, m], dtype: int8}
  B: {axes: [k, n], dtype: int8}
ops:
  - C = contract(A, B, over=k%(scale)s)
outputs: [C]
"""


@pytest.mark.parametrize(
    "scale, dtype",
    [("", "int32"), (", scale=[s], dtype=fp16", "fp16")],
)
def test_int8_gathered_fragments_int32_exact_or_dequantised(scale: str, dtype: str) -> None:
    # m-contiguous A and n-contiguous B: 8-bit fragments gathered byte by byte. With no
    # scale the int32 accumulator is stored as it is and must match exactly; k = 200 is
    # several k tiles and a partial one.
    text = INT8_LAYOUTS % {"scale": scale}
    if scale:
        text = text.replace("inputs:\n", "inputs:\n  s: {axes: [], dtype: fp32}\n")
    d = load_diagram_text(text, sizes={"m": 37, "n": 41, "k": 200 if not scale else 70})
    check = run_gemm(d, {"m": 32, "n": 32, "k": 32})
    assert check.dtype == dtype
    assert_close(check)


def test_weight_only_int8_k_contiguous_weights_odd_sizes() -> None:
    # bf16 x int8: W widened to bf16 in registers, per-column scale in the epilogue; k = 70
    # leaves a partial k tile and rows that are not 16-byte aligned for X.
    d = diagram("w8a16_matmul", m=37, n=40, k=70)
    assert_close(run_gemm(d, {"m": 32, "n": 32, "k": 32}))


def test_weight_only_int8_n_contiguous_weights_fp16() -> None:
    # W over [k, n]: each fragment register pairs two k rows of one column.
    text = (ROOT_DIAGRAMS / "w8a16_matmul.yaml").read_text()
    text = text.replace("axes: [n, k], dtype: int8", "axes: [k, n], dtype: int8")
    text = text.replace("dtype: bf16, doc: activations", "dtype: fp16, doc: activations")
    d = load_diagram_text(text, sizes={"m": 33, "n": 48, "k": 80})
    assert_close(run_gemm(d, {"m": 32, "n": 32, "k": 32}))


# ---- NVRTC at full size -------------------------------------------------------------------

GEMM_DIAGRAMS = (
    "matmul", "batched_matmul", "mlp", "fp8_matmul", "attention_unfused", "int8_matmul",
    "w8a16_matmul",
)  # fmt: skip


@pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="cuda.bindings (NVRTC) is not installed",
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_full_size_kernels_compile_without_spills(arch: str) -> None:
    from ncdc.backends.cache import cached_compile

    sources = []
    # each arch's own profile's plan (h100's wgmma kernels are sm_90a code: clusters, TMA)
    hw = load_hardware("a100") if arch == "sm_80" else HW
    for name in GEMM_DIAGRAMS:
        if name.startswith("fp8") and arch == "sm_80":
            continue  # fp8 tensor cores start at sm_89
        plan = plan_diagram(diagram(name), hw)
        for kp in plan.kernels:
            if kp.family.name == "gemm":
                sources.append(GEMM.render(kp, plan))
    assert len(sources) >= 6
    for ks in sources:
        kernel = ks.launches[0].kernel
        res = cached_compile(_source(ks), arch, name=kernel).resources[kernel]
        assert res.spill_stores_bytes == 0 and res.spill_loads_bytes == 0, res
        assert res.registers <= 255


H200 = load_hardware("h200")
# Issue slots per HMMA.16816's work (4096 tensor FLOPs) in the k loop: 1 for the HMMA, 0.25
# for its share of the ldmatrix of a 64 x 64 warp tile, and the copies, pointer steps,
# barrier and branch of one k tile. The wgmma variant's HGMMA.64x256x16 does 32 HMMAs' work
# per warp (ncdc.backends.sass.mma_flops) in one slot, and its k loop is far under.
MAX_ISSUE_PER_MMA = 2.5


@pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
    reason="cuda.bindings (NVRTC) is not installed",
)
@pytest.mark.parametrize(("name", "tiles"), [("matmul", None), ("mlp", {"n": 128})])
def test_main_loop_issues_few_instructions_per_mma(name: str, tiles: dict | None) -> None:
    """The k loop of the library GEMMs on the H200 profile (matmul: the wgmma variant; mlp
    in 256 x 128 tiles: mma.sync), read from the SASS: copies are pointer increments and
    cp.async with byte counts worked out once per block tile, so the loop issues at most
    MAX_ISSUE_PER_MMA instructions per HMMA's work (about 8 before)."""
    from ncdc.backends import sass
    from ncdc.backends.cache import cached_compile

    if sass.find_tool("cuobjdump") is None or sass.find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump and nvdisasm are not installed")
    plan = plan_diagram(diagram(name), H200, tiles)
    (ks,) = [GEMM.render(kp, plan) for kp in plan.kernels]
    kernel = ks.launches[0].kernel
    cubin = cached_compile(_source(ks), "sm_90a", name=kernel).cubin
    loop = sass.main_loop(sass.parse_sass(sass.disassemble(cubin)))
    mix = sass.count_classes(loop)
    flops = sum(sass.mma_flops(i) for i in loop)
    assert flops >= 64 * sass.MMA_FLOPS["16816"], mix
    assert len(loop) * sass.MMA_FLOPS["16816"] <= MAX_ISSUE_PER_MMA * flops, mix
    assert mix["global"] == 0 and mix["fp16"] == 0, "the epilogue is outside the k loop"
