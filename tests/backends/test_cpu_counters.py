"""The CPU emulator's access counters (docs/cpu-backend.md, "Access counters"): global
sectors and shared-memory wavefronts per warp-wide access, on hand-written patterns whose
counts are worked out on paper, and on every family that uses shared memory."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from ncdc.backends import cpu
from ncdc.backends.traffic import Counters
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.schema import load_schema, validate
from ncdc.verify.run import device_aligned, run_diagram
from tests import support
from tests.support import SOFTMAX, ncdc

KERNELS = support.EMULATOR_KERNELS
H200 = load_hardware("h200")
A100 = load_hardware("a100")  # mma.sync attention: h200 plans the TMA + wgmma kernel


@pytest.fixture(scope="module")
def counters_lib() -> cpu.EmulatedModule:
    return cpu.build(KERNELS / "counters.cu")


def counted(lib: cpu.EmulatedModule, kernel: str, *args: object) -> Counters:
    return lib.launch(kernel, 1, 32, list(args), counters=True).counters


def test_global_sectors_per_request(counters_lib: cpu.EmulatedModule) -> None:
    x = device_aligned(np.zeros(32 * 8, np.float32))
    out = device_aligned(np.zeros(32, np.float32))
    # 32 lanes x 4 B: 128 B, 4 sectors of 32 B when contiguous (ideal 4); stride 2 spreads
    # them over 256 B (8 sectors), stride 8 puts each lane in a sector of its own (32).
    for stride, sectors in ((1, 4), (2, 8), (8, 32)):
        c = counted(counters_lib, "load_strided", x, out, np.int32(stride))
        assert (c.load_requests, c.load_sectors, c.load_ideal_sectors) == (1, sectors, 4)
    v = device_aligned(np.zeros((32, 4), np.uint32))
    w = device_aligned(np.zeros((32, 4), np.uint32))
    c = counted(counters_lib, "copy_v16", v, w)  # 512 B each way: 16 sectors, no excess
    assert (c.load_sectors, c.store_sectors, c.excess_sectors) == (16, 16, 0)


@pytest.mark.parametrize(
    "size, pitch, wavefronts, ideal",
    [
        (4, 4, 1, 1),  # 32 consecutive words: 32 banks, one wavefront
        (4, 0, 1, 1),  # one word for every lane: a broadcast
        (4, 128, 32, 1),  # 32 words of bank 0: 32-way conflict
        (8, 8, 2, 2),  # 64-bit: two half-warp phases of 128 B, conflict-free
        (8, 16, 4, 2),  # half-warp lanes i and i + 8 share banks: 2 per phase
        (16, 16, 4, 4),  # 128-bit: four quarter-warp phases of 128 B
        (16, 32, 8, 4),  # quarter-warp lanes i and i + 4 share banks: 2 per phase
    ],
)
def test_shared_wavefronts_by_width(
    counters_lib: cpu.EmulatedModule, size: int, pitch: int, wavefronts: int, ideal: int
) -> None:
    out = device_aligned(np.zeros(32, np.float32))
    c = counted(counters_lib, "shared_pitch", out, np.int32(size), np.int32(pitch))
    assert (c.shared_requests, c.shared_wavefronts, c.shared_ideal_wavefronts) == (
        1,
        wavefronts,
        ideal,
    )


@pytest.mark.parametrize("pitch, wavefronts", [(16, 4), (128, 32), (144, 4)])
def test_ldmatrix_and_cp_async_wavefronts(
    counters_lib: cpu.EmulatedModule, pitch: int, wavefronts: int
) -> None:
    # ldmatrix.x4: each 8x8 matrix is 8 rows of 16 B, one phase. Rows 16 B apart fill the
    # 32 banks once; 128 B apart they all sit in banks 0-3 (8 wavefronts per matrix); a
    # 16-byte pad (144) moves row r to banks 4r..4r+3. cp.async's 16-byte writes to the
    # same addresses are quarter-warp phases of the same shape.
    out = device_aligned(np.zeros(32, np.float32))
    c = counted(counters_lib, "ldmatrix_pitch", out, np.int32(pitch))
    assert (c.shared_wavefronts, c.shared_ideal_wavefronts) == (wavefronts, 4)
    src = device_aligned(np.zeros((32, 4), np.uint32))
    c = counted(counters_lib, "cp_async_pitch", src, out, np.int32(pitch))
    assert (c.shared_wavefronts, c.shared_ideal_wavefronts) == (wavefronts, 4)
    assert (c.load_sectors, c.load_ideal_sectors) == (16, 16)


def test_counters_are_off_unless_asked(counters_lib: cpu.EmulatedModule) -> None:
    v = device_aligned(np.zeros((32, 4), np.uint32))
    t = counters_lib.launch("copy_v16", 1, 32, [v, v.copy()])
    assert (t.bytes_read, t.counters) == (512, Counters())


# ---- the families, at small sizes that are multiples of the 16-byte vector ---------------

RMSNORM_STAGED = """
ncdc: 1
name: rms
axes: {m: 4, n: 512}
inputs: {X: {axes: [m, n], dtype: bf16}, W: {axes: [n], dtype: bf16}}
ops: ["Y = rmsnorm(X, over=n, weight=W, eps=1e-6)"]
outputs: [Y]
"""
ELEMENTWISE = """
ncdc: 1
name: ew
axes: {m: 4, n: 256}
inputs: {X: {axes: [m, n], dtype: bf16}, Z: {axes: [m, n], dtype: bf16}}
ops: ["S = silu(X)", "Y = mul(S, Z)"]
outputs: [Y]
"""


@functools.cache
def run_counted(
    spec: str, sizes: tuple[tuple[str, int], ...] = (), profile: str = "h200"
) -> Counters:
    """Counters of one emulated run of a spec file or text on a profile's plan (once per
    module)."""
    d = load_diagram(spec, dict(sizes)) if spec.endswith(".yaml") else load_diagram_text(spec)
    hw = {"h200": H200, "a100": A100}[profile]
    result = run_diagram(d, render_plan(plan_diagram(d, hw)), counters=True)
    assert result.ok and result.counters is not None
    return result.counters


GEMM = ("diagrams/matmul.yaml", (("m", 64), ("n", 64), ("k", 64)), "h200")
ATTENTION = ("diagrams/attention.yaml", (("b", 1), ("h", 1), ("q", 64), ("x", 64)), "a100")
DECODE = ("diagrams/decode_attention.yaml", (("b", 1), ("x", 256)), "h200")


@pytest.mark.parametrize(
    "spec, sizes, profile", [GEMM, ATTENTION, DECODE], ids=["gemm", "attention", "decode"]
)
def test_ldmatrix_and_cp_async_paths_have_no_bank_conflicts(
    spec: str, sizes: tuple, profile: str
) -> None:
    c = run_counted(spec, sizes, profile)
    assert c.shared_requests > 0 and c.bank_conflicts == 0


@pytest.mark.parametrize(
    "tiles",
    [{"m": 32, "n": 64, "k": 16}, {"m": 32, "n": 32, "k": 32}, {"m": 64, "n": 64, "k": 64}],
    ids=["k16", "n32-k32", "k64"],
)
def test_narrow_gemm_tiles_store_without_bank_conflicts(tiles: dict) -> None:
    # rows of 2 and 4 chunks (a 16-bit k tile of 16 or 32, an n tile of 32) are copied one
    # chunk column of 8 rows per 8 lanes: with rows 3 or 5 chunks apart, chunk by chunk along
    # a row put two of a phase's stores in one bank group (1024 wavefronts for 768)
    d = load_diagram("diagrams/matmul.yaml", {"m": 64, "n": 64, "k": 64})
    plan = plan_diagram(d, A100, tiles)
    assert plan.kernels[0].candidate.param("bk") == tiles["k"]
    result = run_diagram(d, render_plan(plan), counters=True)
    assert result.ok and result.counters is not None
    c = result.counters
    assert c.shared_requests > 0 and c.bank_conflicts == 0
    assert c.excess_sectors == 0


@pytest.mark.parametrize(
    "spec, sizes, profile", [GEMM, ATTENTION, DECODE], ids=["gemm", "attention", "decode"]
)
def test_global_access_is_fully_coalesced_at_aligned_sizes(
    spec: str, sizes: tuple, profile: str
) -> None:
    c = run_counted(spec, sizes, profile)
    assert c.load_requests > 0 and c.excess_sectors == 0


def test_hopper_attention_stores_o_through_shared_memory_by_tma() -> None:
    # h200 plans the FlashAttention-3 kernel. Each consumer thread writes its O / l to the
    # V ring as 32-bit words, d_v / 4 = 32 of them: 8 warps x 32 = 256 requests, one
    # wavefront each (the 128-byte swizzle puts a warp's 8 rows in 8 distinct 16-byte
    # chunks, its 4 lanes a row in 4 words of one); then TMA stores the boxes: no thread
    # writes global memory (direct stores from the accumulators took 2048 sectors for an
    # ideal 1024), and O's 128 x 128 x 2 bytes are written once.
    d = load_diagram("diagrams/attention.yaml", {"b": 1, "h": 1, "q": 128, "x": 128})
    plan = plan_diagram(d, H200)
    assert plan.kernels[0].candidate.param("wgmma") == 1
    result = run_diagram(d, render_plan(plan), counters=True)
    c = result.counters
    assert result.ok and c is not None
    assert (c.shared_requests, c.shared_wavefronts, c.bank_conflicts) == (256, 256, 0)
    assert (c.store_requests, c.excess_sectors) == (0, 0)
    assert result.bytes_written == 128 * 128 * 2


def test_rowwise_staged_weight_is_coalesced_and_conflict_free() -> None:
    # The weight is staged once per block in shared memory as 16-byte vectors and read back
    # as 16-byte vectors per run: quarter-warp phases of 128 B each.
    c = run_counted(RMSNORM_STAGED)
    assert c.shared_requests > 0 and c.bank_conflicts == 0
    assert c.load_requests > 0 and c.excess_sectors == 0


def test_elementwise_is_coalesced() -> None:
    c = run_counted(ELEMENTWISE)
    assert (c.load_requests, c.store_requests) == (
        8,
        4,
    )  # 1024 bf16: 128 runs of 8, 4 warp-wide requests a tensor
    assert c.excess_sectors == 0 and c.shared_requests == 0


def test_run_json_with_counters_follows_its_schema() -> None:
    result = ncdc("run", SOFTMAX, "--set", "m=3", "--set", "n=64", "--counters", "--format", "json")
    data = json.loads(result.stdout)
    assert validate(data, load_schema("run")) == []
    assert data["counters"]["bank_conflicts"] == 0 and data["counters"]["load_requests"] > 0
