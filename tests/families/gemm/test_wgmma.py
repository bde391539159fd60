"""The Hopper GEMM variant (ncdc/families/gemm/wgmma.py): rendered for sm_90a, run on the
CPU backend at odd sizes through TMA's out-of-bounds fill, the ring wrapping and blocks
running several persistent tiles, and chosen by the model where it is faster."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import ncdc
from ncdc.backends import sass
from ncdc.backends.compile import compile_plan
from ncdc.backends.targets import arch_notes, plan_for_arch, target_hardware
from ncdc.families import classify_kernel
from ncdc.families.gemm.family import FAMILY
from ncdc.families.gemm.wgmma import is_wgmma, pipeline_share
from ncdc.hardware.load import load_hardware
from ncdc.hardware.machine import Hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.graph import build_graph
from ncdc.model.streaming import streamed_axes
from ncdc.model.structure import KernelModel
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram, plan_from_candidates
from ncdc.render import render_plan
from ncdc.verify.buildable import check_buildable
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import run_diagram
from tests import support

DIAGRAMS = support.DIAGRAMS


def compile_plan_for(spec: Path, hw: Hardware, arch: str):
    """What `ncdc compile SPEC --arch ARCH` builds, without its SASS listing."""
    plan, source, notes = plan_for_arch(load_diagram(spec), hw, None, arch)
    report = compile_plan(plan, arch, source=source)
    return dataclasses.replace(report, notes=notes + report.notes)


def one_sm(hw: Hardware) -> Hardware:
    """`hw` with one SM: the persistent grid is one block that runs every tile."""
    return dataclasses.replace(hw, limits=dataclasses.replace(hw.limits, sms=1))


def wgmma_module(
    spec: str, sizes: dict[str, int], bn: int, stages: int, hw: Hardware, cluster: int = 1,
    bm: int = 128,
):  # fmt: skip
    d = load_diagram(DIAGRAMS / spec, sizes)
    kernel = build_graph(d, hw).kernels[0]
    family = classify_kernel(d, kernel)
    cands = FAMILY.candidates(KernelModel(d, kernel), family, hw, streamed_axes(d, kernel), {})
    pick = [
        c
        for c in cands
        if is_wgmma(c)
        and (c.param("bm"), c.param("bn"), c.param("stages"), c.param("cluster"))
        == (bm, bn, stages, cluster)
    ]
    assert len(pick) == 1
    return d, render_plan(plan_from_candidates(d, hw, pick))


@pytest.mark.parametrize(
    ("spec", "sizes", "bn", "sms"),
    [
        # m, n and k tails; 5 k tiles through a ring of 3; one block runs both tiles
        ("matmul.yaml", {"m": 77, "n": 200, "k": 264}, 128, 1),
        # two batches, one tile each, two blocks
        ("batched_matmul.yaml", {"b": 2, "m": 40, "n": 72, "k": 88}, 64, 132),
        # bias and GELU fused; a 256-wide tile over n = 136
        ("mlp.yaml", {"m": 33, "n": 136, "k": 72}, 256, 132),
        # fp8 e4m3 (wgmma k32) with per-tensor scales; k = 80 of a 128-wide k tile
        ("../tests/specs/gemm_fp8_kmajor.yaml", {"m": 100, "n": 72, "k": 80}, 64, 132),
        # fp8 with B [k, n]: staged and transposed to K-major in shared memory; m, n and k
        # tails, two 128-wide n tiles and their k tiles wrap the ring of 3 in one block
        ("fp8_matmul.yaml", {"m": 77, "n": 144, "k": 208}, 128, 1),
        # a batch axis of A alone: the weight B, the same for every batch, through a 2-D map
        (
            "../tests/specs/gemm_shared_weight_batched.yaml",
            {"b": 2, "s": 77, "n": 136, "k": 72},
            128,
            1,
        ),
        # two batch axes (b, h) as one map dimension: a residual over both and a bias over
        # neither fused; one block runs the 2 x 3 batches' m tails
        (
            "../tests/specs/gemm_heads_batched.yaml",
            {"b": 2, "h": 3, "m": 70, "n": 72, "k": 40},
            128,
            1,
        ),
        # the same with B n-contiguous (MN-major), k over two tiles
        (
            "../tests/specs/gemm_heads_mn_major.yaml",
            {"b": 3, "h": 2, "q": 33, "x": 72, "d": 136},
            128,
            132,
        ),
        # batch axes held in part: a weight per head (B's batch: z % h), biases per head
        # and per batch (z / h); one block runs the 2 x 3 batches
        (
            "../tests/specs/gemm_per_head_weight.yaml",
            {"b": 2, "h": 3, "s": 33, "n": 72, "k": 40},
            128,
            1,
        ),
        # a weight per batch shared by the heads (B's batch: z / h % b)
        (
            "../tests/specs/gemm_per_batch_weight.yaml",
            {"b": 3, "h": 2, "s": 33, "n": 72, "k": 40},
            64,
            1,
        ),
        # two batch axes on A and C only: the weight's 2-D map
        (
            "../tests/specs/gemm_heads_shared_weight.yaml",
            {"b": 2, "h": 2, "s": 65, "n": 64, "k": 72},
            64,
            1,
        ),
    ],
)
def test_wgmma_gemm_matches_the_reference(spec: str, sizes: dict, bn: int, sms: int) -> None:
    hw = load_hardware("h200")
    if sms == 1:
        hw = one_sm(hw)
    d, module = wgmma_module(spec, sizes, bn, 3, hw)
    # every case stores its 16-bit C through shared memory and TMA, clipped at the tails
    assert "wgmma" in module.launches[0].kernel and "_tmastore_" in module.launches[0].kernel
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]


@pytest.mark.parametrize(
    ("spec", "sizes", "bn", "sms"),
    [
        # one consumer warpgroup, 64-row tiles: m = 37 (a decode batch), n and k tails, 5 k
        # tiles through the ring of 3, one block running all four n tiles
        ("matmul.yaml", {"m": 37, "n": 200, "k": 264}, 64, 1),
        # m = 100: two 64-row tiles, the second partial; bias and GELU fused
        ("mlp.yaml", {"m": 100, "n": 136, "k": 72}, 128, 132),
        # fp8 with B [k, n] transposed in shared memory, one consumer
        ("fp8_matmul.yaml", {"m": 50, "n": 144, "k": 208}, 128, 1),
    ],
)
def test_skinny_wgmma_gemm_on_one_consumer_matches_the_reference(spec, sizes, bn, sms) -> None:
    hw = load_hardware("h200")
    if sms == 1:
        hw = one_sm(hw)
    d, module = wgmma_module(spec, sizes, bn, 3, hw, bm=64)
    launch = module.launches[0]
    assert "_gemm_wgmma_" in launch.kernel and "_m64_" in launch.kernel
    assert launch.shape.block == (256, 1, 1) and launch.entry_registers == 0
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]


@pytest.mark.parametrize(
    ("spec", "sizes", "bn", "bm", "sms"),
    [
        # int8 x int8 (IGMMA, exact int32 sums) dequantised per row and column: m, n and k
        # tails, 2 k tiles of 128, one block running both n tiles
        ("int8_matmul.yaml", {"m": 100, "n": 72, "k": 208}, 64, 128, 1),
        # one consumer, 64-row tiles
        ("int8_matmul.yaml", {"m": 50, "n": 200, "k": 80}, 128, 64, 132),
        # B [k, n]: staged and transposed to K-major, a ReLU after the scale
        ("../tests/specs/int8_b_kn_relu.yaml", {"m": 100, "n": 144, "k": 208}, 128, 128, 1),
    ],
)
def test_int8_wgmma_gemm_sums_exactly(spec, sizes, bn, bm, sms) -> None:
    hw = load_hardware("h200")
    if sms == 1:
        hw = one_sm(hw)
    d, module = wgmma_module(spec, sizes, bn, 3, hw, bm=bm)
    assert "_gemm_wgmma_int8_" in module.launches[0].kernel
    # scales of powers of two, so that the fp32 epilogue multiplies exactly and the one
    # rounding left is to bf16, as the reference's (other scales round twice: 1 ulp apart)
    rng = np.random.default_rng()
    inputs = dict(make_inputs(d, int(rng.integers(2**31))))
    for name in next(op.scale for op in d.ops if op.kind == "contract"):
        if isinstance(name, str):
            inputs[name] = np.exp2(rng.integers(-8, 4, inputs[name].shape)).astype(np.float64)
    result = run_diagram(d, module, backend="cpu", inputs=inputs)
    assert result.ok and all(c.max_abs_error == 0 for c in result.checks), result.checks


def test_no_wgmma_for_an_exact_int32_result_or_mixed_input_types() -> None:
    """An unscaled int8 GEMM's int32 result stays on mma.sync (the wgmma epilogue goes
    through fp32); int8 weights under bf16 activations widen in the mma.sync main loop."""
    hw = load_hardware("h200")
    for spec, sizes in (
        ("../tests/specs/gemm_int8_exact.yaml", {}),
        ("w8a16_matmul.yaml", {"m": 100}),
    ):  # fmt: skip
        d = load_diagram(DIAGRAMS / spec, sizes)
        kernel = build_graph(d, hw).kernels[0]
        model = KernelModel(d, kernel)
        cands = FAMILY.candidates(model, classify_kernel(d, kernel), hw,
                                  streamed_axes(d, kernel), {})  # fmt: skip
        assert cands and not any(is_wgmma(c) for c in cands), spec


@pytest.mark.parametrize(
    ("a_axes", "bias", "wgmma"),
    [
        ("[b, h, m, k]", "[b, h, m, n]", True),  # over every batch axis, next to each other
        ("[b, h, m, k]", "[n]", True),  # over none: the same for every batch
        ("[b, h, m, k]", "[h, n]", True),  # over h alone: the flat index's last digit
        ("[b, h, m, k]", "[b, n]", True),  # over b alone: its first digit
        ("[b, m, h, k]", "[n]", False),  # b and h apart in A
        ("[h, b, m, k]", "[n]", False),  # in the other order in A
    ],
)
def test_batch_axes_run_on_wgmma_where_each_tensor_holds_a_run_of_them(
    a_axes: str, bias: str, wgmma: bool
) -> None:
    """Several batch axes take the wgmma kernel's flat batch index where every tensor holds
    a run of them, next to each other in C's order, or none; otherwise the mma.sync kernel,
    which indexes each axis, runs the GEMM."""
    text = f"""
ncdc: 1
name: heads
axes: {{b: 2, h: 3, m: 256, n: 256, k: 128}}
inputs:
  A: {{axes: {a_axes}, dtype: bf16}}
  B: {{axes: [b, h, n, k], dtype: bf16}}
  bias: {{axes: {bias}, dtype: bf16}}
ops:
  - S = contract(A, B, over=k)
  - C = add(S, bias)
outputs: [C]
"""
    hw = load_hardware("h200")
    d = load_diagram_text(text)
    kernel = build_graph(d, hw).kernels[0]
    cands = FAMILY.candidates(KernelModel(d, kernel), classify_kernel(d, kernel), hw,
                              streamed_axes(d, kernel), {})  # fmt: skip
    assert cands and any(is_wgmma(c) for c in cands) == wgmma


def few_sms(hw: Hardware, sms: int) -> Hardware:
    return dataclasses.replace(hw, limits=dataclasses.replace(hw.limits, sms=sms))


@pytest.mark.parametrize(
    ("spec", "sizes", "bn", "sms"),
    [
        # bf16, B [b, k, n] (each CTA multicasts half the k rows of each column block, 3D
        # boxes): 3 tile rows, so the second unit leaves CTA 1 a tile past m, whose A box
        # it does not issue (the emulator refuses a box wholly outside its tensor); n = 72
        # leaves the second column block of B wholly past n, not issued either; 4 SMs: two
        # clusters, each running a unit of both batches; 5 k tiles wrap the ring of 3, the
        # last 40 long (both k shares in bounds)
        ("batched_matmul.yaml", {"b": 2, "m": 300, "n": 72, "k": 296}, 64, 4),
        # fp8, B [n, k] (each CTA multicasts half the n rows), scales fused; m and k tails
        ("../tests/specs/gemm_fp8_kmajor.yaml", {"m": 200, "n": 72, "k": 80}, 64, 2),
        # fp8, B [k, n] staged by the multicast and transposed in each CTA; two n tiles
        ("fp8_matmul.yaml", {"m": 140, "n": 144, "k": 208}, 128, 2),
        # a weight per head (h: the flat batch index's last digit) multicast to the pair
        (
            "../tests/specs/gemm_per_head_weight.yaml",
            {"b": 2, "h": 3, "s": 140, "n": 72, "k": 40},
            64,
            2,
        ),
    ],
)
def test_cluster_gemm_matches_the_reference(spec: str, sizes: dict, bn: int, sms: int) -> None:
    d, module = wgmma_module(spec, sizes, bn, 3, few_sms(load_hardware("h200"), sms), cluster=2)
    launch = module.launches[0]
    assert launch.kernel.endswith("_c2_sm90a") and launch.shape.grid[0] % 2 == 0
    assert "__cluster_dims__(2, 1, 1)" in module.source
    seed = int(np.random.default_rng().integers(2**31))
    result = run_diagram(d, module, backend="cpu", seed=seed)
    assert result.ok, [c for c in result.checks if not c.ok]


def test_cuda_tensor_map_is_encoded_by_the_driver_and_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No GPU here: the driver call is replaced by one that records its arguments.
    driver = pytest.importorskip("cuda.bindings.driver")
    from ncdc.backends import cuda
    from ncdc.families.base import TensorMapSpec

    calls = []

    class Map:
        opaque = list(range(16))

    def encode(*args: object) -> tuple:
        calls.append(args)
        return driver.CUresult.CUDA_SUCCESS, Map()

    monkeypatch.setattr(driver, "cuTensorMapEncodeTiled", encode)
    # a driver past CUDA 13.1: the map's bytes as the driver gave them (no workaround)
    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: (driver.CUresult.CUDA_SUCCESS, 13020))
    monkeypatch.setattr(cuda, "_TENSOR_MAPS", OrderedDict())
    spec = TensorMapSpec("A", "bf16", (136, 77, 2), (272, 272 * 77), (64, 128, 1), 128)
    first = cuda.tensor_map_argument(spec, 0x10000)
    again = cuda.tensor_map_argument(spec, 0x10000)
    assert len(calls) == 1 and first is again and first.dtype.itemsize == 128
    # what CuPy passes by value: a one-element array whose 128 bytes are the driver's map
    assert first.shape == (1,) and first.nbytes == 128
    assert first.tobytes() == b"".join(w.to_bytes(8, "little") for w in range(16))
    dtype, rank, address, dims, strides, box, estrides, _, swizzle, _, _ = calls[0]
    assert (int(dtype), rank, address) == (9, 3, 0x10000)  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert [int(x) for x in dims] == [136, 77, 2] and [int(x) for x in strides] == [272, 20944]
    assert [int(x) for x in box] == [64, 128, 1] and [int(x) for x in estrides] == [1, 1, 1]
    assert int(swizzle) == 3  # CU_TENSOR_MAP_SWIZZLE_128B
    with pytest.raises(Exception, match="not 16-byte aligned"):
        cuda.tensor_map_argument(spec, 0x10008)


def test_the_model_chooses_the_variant_per_shape() -> None:
    # 4096^3 bf16: wgmma at the full peak beats mma.sync at 0.65 of it; 256^3: the 128-row
    # tile pads and 4 tiles leave most SMs idle, so mma.sync's small tiles win; a100: no
    # wgmma at all.
    h200 = load_hardware("h200")
    big = plan_diagram(load_diagram(DIAGRAMS / "matmul.yaml"), h200).kernels[0]
    assert is_wgmma(big.candidate) and big.candidate.threads == 384
    # and in clusters of 2 CTAs along m multicasting B: the pair's L2 -> SMEM traffic per k
    # tile is 2 x 16 KiB of A + 32 KiB of B instead of 2 x 48 KiB, so the kernel is no longer
    # L2-bound but held by its tensor work at the power limit (783 TFLOP/s: 175.5 us, with
    # the launch and the ring's fill 180.3 us)
    assert big.candidate.param("cluster") == 2 and big.candidate.cluster == (("m", 2),)
    assert big.bound == "power" and round(big.predicted_time_s * 1e6, 1) == 180.3
    small = load_diagram(DIAGRAMS / "matmul.yaml", {"m": 256, "n": 256, "k": 256})
    assert not is_wgmma(plan_diagram(small, h200).kernels[0].candidate)
    a100 = plan_diagram(load_diagram(DIAGRAMS / "matmul.yaml"), load_hardware("a100"))
    assert not is_wgmma(a100.kernels[0].candidate)
    # fp8 with B [k, n]: wgmma with B transposed in shared memory (0.87 of the fp8 peak at
    # BN = 128, under the power limit's 1,566 TFLOP/s), in clusters of 2: 105.2 us, beating
    # mma.sync, which runs fp8 at the fp16 rate, by more than 1 / 0.6
    fp8 = plan_diagram(load_diagram(DIAGRAMS / "fp8_matmul.yaml"), h200)
    kp = fp8.kernels[0]
    assert is_wgmma(kp.candidate) and kp.candidate.param("bn") == 128
    assert kp.candidate.param("cluster") == 2 and round(kp.predicted_time_s * 1e6, 1) == 105.2
    mma_sync = [a for a in kernel_alternatives(fp8, 0, 1000) if not is_wgmma(a.candidate)]
    assert kp.predicted_time_s < 0.6 * min(a.predicted_time_s for a in mma_sync)
    # the ring's pace: a 128-wide tile keeps the tensor cores fed with 3 stages, a 64-wide
    # one needs 5 (Little's law on a 1000-cycle TMA latency)
    assert pipeline_share(h200, "bf16", 128, 3, 3) == 1.0
    assert pipeline_share(h200, "bf16", 64, 3, 2) < 0.7 < pipeline_share(h200, "bf16", 64, 5, 2)


def test_an_arch_without_wgmma_falls_back_to_mma_sync(tmp_path: Path) -> None:
    # sm_90 (no "a") has neither wgmma nor setmaxnreg: the h200 plan falls back to the
    # mma.sync kernel with one note (which `ncdc compile` prints), and NVRTC never sees the
    # Hopper source
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    h200 = load_hardware("h200")
    report = compile_plan_for(DIAGRAMS / "matmul.yaml", h200, "sm_90")
    assert report.arch == "sm_90" and len(report.kernels) == 1
    assert report.kernels[0].launch.kernel.startswith("matmul_gemm_bf16_")
    assert report.kernels[0].spill_stores_bytes == 0
    why = "sm_90 lacks wgmma and setmaxnreg; --arch sm_90a builds the Hopper kernel"
    assert report.notes == (why,)
    # sm_90a itself: the Hopper kernel, no note
    assert plan_for_arch(load_diagram(DIAGRAMS / "matmul.yaml"), h200, None, "sm_90a")[2] == ()
    # a profile whose own target is sm_90: check and cost plan the same mma.sync kernel
    text = (Path(ncdc.__file__).parent / "hardware" / "profiles" / "h200.yaml").read_text()
    assert "arch: sm_90a" in text
    profile = tmp_path / "h200_sm90.yaml"
    profile.write_text(text.replace("arch: sm_90a", "arch: sm_90"))
    plan = check_buildable(load_diagram(DIAGRAMS / "matmul.yaml"), load_hardware(str(profile)))
    assert render_plan(plan).launches[0].kernel == report.kernels[0].launch.kernel
    # `ncdc cost --arch sm_90` and `ncdc check --arch sm_90` on h200: the same kernel, the note
    plan = check_buildable(load_diagram(DIAGRAMS / "matmul.yaml"), target_hardware(h200, "sm_90"))
    assert render_plan(plan).launches[0].kernel == report.kernels[0].launch.kernel
    assert arch_notes(load_diagram(DIAGRAMS / "matmul.yaml"), h200, None, "sm_90") == (why,)


@pytest.mark.parametrize("name", ["matmul", "batched_matmul", "mlp", "swiglu_mlp", "fp8_matmul"])
def test_wgmma_main_loops_hold_no_fence_and_advance_their_descriptors(name: str) -> None:
    # The model runs these library GEMMs on h200 in clusters of 2; a consumer warp releases
    # each stage on its own CTA and its peer every k tile. With `.release.cluster` that
    # arrive compiled to MEMBAR.ALL.GPU (and ERRBAR, CGAERRBAR) before each SYNCS.ARRIVE:
    # 8 of the 105 instructions of matmul's loop. The CTA-scope form is the arrive alone.
    # Descriptors rebuilt from addresses per k step took 84 integer instructions per k
    # tile of 4 wgmmas (after the fence's removal); advanced by constants from the ones
    # built before the loop, 45 (a UIADD3 and a UMOV per descriptor, and the ring's work).
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    if sass.find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump and nvdisasm are not installed")
    report = compile_plan_for(DIAGRAMS / f"{name}.yaml", load_hardware("h200"), "sm_90a")
    loops = sass.main_loops(report.cubin)
    for launch in report.module.launches:
        assert launch.kernel.endswith("_c2_sm90a"), launch.kernel  # the clustered kernel
        loop = sass.parse_sass(loops[launch.kernel])
        ops = [i.op for i in loop]
        assert any(i.kind == "tensor" and i.opcode.endswith("GMMA") for i in loop), ops
        assert sum(op.startswith("SYNCS.ARRIVE") for op in ops) == 2, ops  # own and peer
        assert not any(op.startswith(("MEMBAR", "ERRBAR", "CGAERRBAR")) for op in ops), ops
        wgmmas = sum(i.kind == "tensor" for i in loop)
        assert sass.count_classes(loop)["integer"] <= 12 * wgmmas, ops


def kernel_params(cubin: bytes, kernel: str, tmp: Path) -> list[tuple[int, int, int]]:
    """(ordinal, offset, size) of each parameter of `kernel`: cuobjdump's EIATTR_KPARAM_INFO."""
    tool = sass.find_tool("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump is not installed")
    path = tmp / "kernel.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([str(tool), "-elf", str(path)], capture_output=True, text=True).stdout
    section = text[text.index(f"\n.nv.info.{kernel}\n") + 1 :]  # the section, not its table row
    section = section[: section.find("\n.", 1) if "\n." in section[1:] else None]
    pattern = r"Ordinal : (0x[0-9a-f]+)\s+Offset\s+: (0x[0-9a-f]+)\s+Size\s+: (0x[0-9a-f]+)"
    found = [tuple(int(x, 16) for x in row) for row in re.findall(pattern, section)]
    return sorted(found)  # type: ignore[arg-type]


def test_cuda_launch_arguments_match_the_kernels_parameter_layout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The wgmma kernel's parameters as ptxas laid them out (cuobjdump): pointers and sizes 8
    # bytes, each tensor map 128 bytes at a 64-byte-aligned constant-bank address (sm_90
    # parameters start at c[0x0][0x210]). The cuda backend hands CuPy one object per
    # parameter, in order, each pointing at exactly that many bytes: the driver copies them
    # into those offsets.
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    driver = pytest.importorskip("cuda.bindings.driver")
    from ncdc.backends import cuda

    report = compile_plan_for(DIAGRAMS / "fp8_matmul.yaml", load_hardware("h200"), "sm_90a")
    launch = report.module.launches[0]
    assert "wgmma" in launch.kernel
    # the kernel the model picks runs in clusters of 2 (compile-time cluster dims: the
    # launch is the plain one, its grid even) and compiles clean, multicasting B
    assert launch.kernel.endswith("_c2_sm90a") and launch.grid[0] % 2 == 0
    assert report.kernels[0].spill_stores_bytes == 0 and report.notes == ()
    if sass.find_tool("nvdisasm") is not None:
        assert "UTMALDG.2D.MULTICAST" in sass.disassemble(report.cubin)
    layout = kernel_params(report.cubin, launch.kernel, tmp_path)
    assert [o for o, _, _ in layout] == list(range(len(launch.params)))

    class Map:
        opaque = [0x0123456789ABCDEF + i for i in range(16)]

    monkeypatch.setattr(
        driver, "cuTensorMapEncodeTiled", lambda *a: (driver.CUresult.CUDA_SUCCESS, Map())
    )
    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: (driver.CUresult.CUDA_SUCCESS, 13020))
    monkeypatch.setattr(cuda, "_TENSOR_MAPS", OrderedDict())

    device = {p.name: 0x100000 * (i + 1) for i, p in enumerate(launch.params)}
    maps = 0
    args = cuda.device_arguments(launch.params, device)
    for p, arg, (_, offset, size) in zip(launch.params, args, layout, strict=True):
        if p.kind == "tensormap":
            maps += 1
            assert size == 128 and (0x210 + offset) % 64 == 0
            assert arg.shape == (1,) and arg.tobytes() == np.array(Map.opaque, "<u8").tobytes()
        elif p.kind in ("tensor", "workspace"):
            # the buffer's device address, 8 bytes by value: a pointer parameter's bytes
            assert size == 8 and arg.dtype == np.uint64 and int(arg) == device[p.name]
        else:
            assert size == np.asarray(arg).nbytes == 8
    assert maps == 3  # A, B and the TMA-stored C


@pytest.mark.parametrize(
    "header, family",
    [("ncdc_hopper.cuh", "ncdc.families.gemm.wgmma"),
     ("ncdc_attention_hopper.cuh", "ncdc.families.attention.wgmma")],
)  # fmt: skip
def test_setmaxnreg_budgets_fill_the_pool_ptxas_gives(header, family):
    """Producer + two consumers' setmaxnreg budgets (the header's constants) add up to at
    most the three warpgroups' entry registers, the count the launch declares and ptxas must
    give (ncdc.backends.compile.check_entry_registers): more would hang the last .inc.
    CUTLASS's and FlashAttention-3's budgets fill the pool exactly, as these do."""
    import importlib

    from ncdc.backends.cpu import include_dir

    text = (include_dir() / header).read_text()
    producer, consumer = map(
        int, re.search(r"kProducerRegs = (\d+), kConsumerRegs = (\d+);", text).groups()
    )
    module = importlib.import_module(family)
    assert module.LAUNCH_REGISTERS == 65536 // module.THREADS // 8 * 8 == 168
    assert producer + 2 * consumer == 3 * module.LAUNCH_REGISTERS
    assert consumer == module.CONSUMER_REGISTERS
    assert producer == getattr(module, "PRODUCER_REGISTERS", producer)


def test_no_cluster_whose_last_k_share_lies_past_k() -> None:
    """batched_matmul's B is [b, k, n] (MN-major): a cluster splits each k tile of 64 into
    two shares of 32 rows, and a last k tile of 8 (k = 264) would leave the second share
    wholly past k, stale rows that reach every output: no cluster is offered there, and
    one is at k = 296 (a last tile of 40)."""

    hw = load_hardware("h200")

    def clusters(k: int) -> set[int]:
        d = load_diagram(DIAGRAMS / "batched_matmul.yaml", {"b": 2, "m": 300, "n": 72, "k": k})
        found = kernel_alternatives(plan_diagram(d, hw), 0, 1000)
        return {
            dict(kp.candidate.params).get("cluster", 1) for kp in found if is_wgmma(kp.candidate)
        }

    assert clusters(264) == {1} and clusters(296) == {1, 2}


def test_an_mn_major_b_tile_is_whole_column_blocks() -> None:
    """fp8_matmul's B is [k, n] (MN-major): its tile is whole 128-byte column blocks, 128
    fp8 values, so no 64-wide n tile is offered (the header's static_assert refuses it;
    at 512^3 the model used to pick one, and its compile failed)."""
    d = load_diagram(DIAGRAMS / "fp8_matmul.yaml", {"m": 512, "n": 512, "k": 512})
    found = kernel_alternatives(plan_diagram(d, load_hardware("h200")), 0, 1000)
    widths = {kp.candidate.param("bn") for kp in found if is_wgmma(kp.candidate)}
    assert widths and 64 not in widths
