"""Block-scaled contractions (docs/diagram-language.md, *Block scales*): the contraction over
a block's values, its scales, and the sum over the blocks, run as one wgmma GEMM on sm_90a
that promotes each block's partial sums into an fp32 total (DeepSeek-V3's fp8 GEMMs).
Emulated against the reference at sizes with tails, with planted faults the emulator
catches; where it cannot run as one kernel, the blocks are saved and summed apart."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends import sass
from ncdc.families.gemm.mix import WGMMA_BLOCK_COLUMNS, WGMMA_BLOCK_FIXED, wgmma_mix
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.templates import include
from ncdc.verify.run import run_diagram
from tests import support
from tests.families.gemm.test_wgmma import compile_plan_for, one_sm, wgmma_module

DIAGRAMS = support.DIAGRAMS
LIBRARY = "fp8_block_scaled_matmul.yaml"  # A per row and block, B per 128 x 128 block
COLS = "../tests/specs/gemm_block_scaled_cols.yaml"  # B per column and block
BF16 = "../tests/specs/gemm_block_scaled_bf16.yaml"
PAIR = "../tests/specs/gemm_block_scaled_pair.yaml"


def _seed() -> int:
    return int(np.random.default_rng().integers(2**31))


@pytest.mark.parametrize(
    ("spec", "sizes", "bm", "bn", "sms"),
    [
        # 128 x 128 blocks of B: its blocks of columns a batch axis A lacks (A's map 2-D);
        # an m tail, 3 blocks of one k tile through a ring of 3, one block runs all 4 tiles
        (LIBRARY, {"m": 200, "nb": 2, "kb": 3}, 128, 128, 1),
        # one consumer (64-row tiles), two n tiles a block of B, over many blocks
        (LIBRARY, {"m": 50, "nb": 3, "kb": 2}, 64, 64, 132),
        # scales per column and block: m, n tails; one block runs all 4 tiles, so the
        # column scales' two buffers and the total carry across tiles
        (COLS, {"m": 200, "n": 136, "kb": 3}, 128, 128, 1),
        # one consumer, 4 n tiles, the last partial
        (COLS, {"m": 50, "n": 200, "kb": 2}, 64, 64, 132),
        # bf16: two k tiles a block; a batch axis; per-block, per-(batch, column, block) and
        # constant scales; a bias after the sum
        (BF16, {"z": 2, "m": 130, "n": 72, "kb": 3}, 128, 64, 1),
        # a scale per row, column and block, read per value; fp16 C
        (PAIR, {"m": 70, "n": 136, "kb": 2}, 128, 128, 132),
    ],
)
def test_block_scaled_gemm_matches_the_reference(spec, sizes, bm, bn, sms) -> None:
    hw = load_hardware("h200")
    if sms == 1:
        hw = one_sm(hw)
    d, module = wgmma_module(spec, sizes, bn, 3, hw, bm=bm)
    _matches(d, module)


def _matches(d, module) -> None:
    assert [launch.kernel for launch in module.launches if "_blocks_" in launch.kernel]
    assert len(module.launches) == 1  # the sum over the blocks is in the GEMM
    result = run_diagram(d, module, backend="cpu", seed=_seed())
    assert result.ok, [c for c in result.checks if not c.ok]


@pytest.mark.parametrize(
    ("fault", "planted"),
    [
        # a block's partial sums carried into the next block (never restarted)
        ("bool carry = BT > 0 ? j > 0 : kb > 0;", "bool carry = kb > 0 || j > 0;"),
        # every block promoted with the first block's scales
        ("read_scales(out, site, kb)", "read_scales(out, site, 0)"),
        # the column scales read from the other block's buffer
        (
            "const float* read = buf + 2 * q;",
            "const float* read = cols + ((turn + 1) % 2) * Cfg::BN + 2 * q;",
        ),
        # the column scales read before every thread has written them (no barrier)
        ("named_bar_sync(3 + unsigned(consumer), 128);", ""),
        # the two rows' scales swapped
        ("sc.rows[h] * (e ? cs.y : cs.x)", "sc.rows[1 - h] * (e ? cs.y : cs.x)"),
        # the columns' pair swapped
        ("sc.rows[h] * (e ? cs.y : cs.x)", "sc.rows[h] * (e ? cs.x : cs.y)"),
    ],
)
def test_planted_promotion_faults_are_caught(fault: str, planted: str) -> None:
    header = (Path(include.__file__).parent / "ncdc_hopper.cuh").read_text()
    assert header.count(fault) == 1
    d, module = wgmma_module(
        COLS, {"m": 200, "n": 136, "kb": 3}, 128, 3, one_sm(load_hardware("h200"))
    )
    source = module.source.replace('#include "ncdc_hopper.cuh"', header.replace(fault, planted))
    assert source != module.source
    result = run_diagram(d, dataclasses.replace(module, source=source), backend="cpu", seed=_seed())
    assert not result.ok


def test_block_scaled_gemm_in_clusters_matches_the_reference() -> None:
    # the clustered kernel the model picks at full size: B's share multicast to both CTAs
    # of a pair of m tiles (B the same for both: its blocks of columns a batch A lacks)
    d, module = wgmma_module(
        LIBRARY, {"m": 200, "nb": 2, "kb": 3}, 128, 3, one_sm(load_hardware("h200")), cluster=2
    )
    assert "_c2_" in module.launches[0].kernel
    _matches(d, module)


def test_the_column_scales_buffers_are_race_free(tmp_path: Path) -> None:
    # Under the emulator's race detector (ThreadSanitizer over the block's threads): an odd
    # number of blocks and an fp32 C stored directly (no barrier in the epilogue), one SM
    # running every tile. The buffers go by the consumer's promotions over all its tiles; by
    # the block within a tile, a tile's first block writes the buffer the last tile's last
    # block may still be read from, which the detector reports.
    from ncdc.backends import cpu
    from ncdc.errors import NcdcError

    try:
        cpu.sanitizer_runtime("race")
    except NcdcError:
        pytest.skip("no ThreadSanitizer runtime")
    spec = tmp_path / "cols_fp32.yaml"
    spec.write_text((DIAGRAMS / COLS).read_text().replace("dtype=bf16)", "dtype=fp32)"))
    hw = one_sm(load_hardware("h200"))
    d, module = wgmma_module(str(spec), {"m": 200, "n": 136, "kb": 3}, 128, 3, hw)
    assert "_tmastore_" not in module.launches[0].kernel
    result = run_diagram(d, module, seed=_seed(), sanitize="race")
    assert result.ok, result.checks
    header = (Path(include.__file__).parent / "ncdc_hopper.cuh").read_text()
    fault = "float* buf = cols + (turn % 2) * Cfg::BN;"
    assert header.count(fault) == 1
    planted = header.replace(fault, "float* buf = cols + (kb % 2) * Cfg::BN;")
    source = module.source.replace('#include "ncdc_hopper.cuh"', planted)
    with pytest.raises(NcdcError, match="data race|wrote .* read"):
        run_diagram(d, dataclasses.replace(module, source=source), seed=_seed(), sanitize="race")


def _breaks(plan) -> dict[tuple[str, ...], str]:
    return {option.saved: option.problem for option in plan.breaks}


def test_the_blocks_fuse_only_where_the_wgmma_kernel_sums_them() -> None:
    d = load_diagram(DIAGRAMS / LIBRARY)
    h200 = plan_diagram(d, load_hardware("h200"))
    (kp,) = h200.kernels
    params = dict(kp.candidate.params)
    assert kp.family.name == "gemm" and params["wgmma"] == 1
    assert (params["block_tiles"], params["block_cols"]) == (1, 0)
    assert kp.family.roles["blocks"] == ("kb",) and kp.family.roles["k"] == ("kk",)
    assert kp.family.roles["n"] == ("nb", "nn")
    # no GPU without wgmma sums the blocks in its GEMM: P is saved and summed apart, and
    # the fused plan's refusal says what it needs
    a100 = plan_diagram(d, load_hardware("a100"))
    assert [k.family.name for k in a100.kernels] == ["gemm", "reduce"]
    why = _breaks(a100)[()]
    assert "sums a contraction's blocks (kb)" in why and "sm_90a" in why
    # blocks that are not just outside kk in A: not one k axis the TMA copies read
    text = (DIAGRAMS / LIBRARY).read_text().replace("[m, kb, kk]", "[kb, m, kk]")
    moved = plan_diagram(load_diagram_text(text), load_hardware("h200"))
    assert len(moved.kernels) == 2 and "just before kk" in _breaks(moved)[()]
    # P rounded to bf16 before the sum is what the reference computes: not fused
    text = (DIAGRAMS / LIBRARY).read_text().replace("dtype=fp32)", "dtype=bf16)")
    assert len(plan_diagram(load_diagram_text(text), load_hardware("h200")).kernels) == 2


@pytest.mark.parametrize(("spec", "columns"), [(LIBRARY, 0), (COLS, 1)])
def test_the_promotion_is_priced_in_the_main_loop(spec: str, columns: int) -> None:
    plan = plan_diagram(load_diagram(DIAGRAMS / spec), load_hardware("h200"))
    c = plan.kernels[0].candidate
    assert c.param("block_cols") == columns
    mix = wgmma_mix(c, "fp8_e4m3")
    plain = dataclasses.replace(
        c, params=tuple(p for p in c.params if not p[0].startswith("block"))
    )
    plain_mix = wgmma_mix(plain, "fp8_e4m3")
    bn = c.param("bn")
    # an FFMA a value and block; with column scales an FMUL too, and their shared reads
    assert mix.classes["fp32"] - plain_mix.classes.get("fp32", 0) == bn // 2 * (1 + columns)
    assert mix.classes.get("smem", 0) == (bn // 8 + 1) * columns
    extra = WGMMA_BLOCK_FIXED["integer"] + columns * WGMMA_BLOCK_COLUMNS["integer"]
    assert mix.classes["integer"] - plain_mix.classes["integer"] == extra
    assert mix.tensor_flops == plain_mix.tensor_flops
    # the fused kernel's FLOPs: the contraction's over all of k, and per value of P its two
    # scales' multiplications and the sum's add
    m, n, kb, k = 4096, 4096, 32, 32 * 128
    assert plan.flops == 2 * m * n * k + 3 * m * n * kb


@pytest.mark.parametrize(("spec", "loads", "shared"), [(LIBRARY, 4, 0), (COLS, 3, 1)])
def test_the_block_scaled_loop_issues_what_the_estimate_counts(spec, loads, shared) -> None:
    # The compiled main loop: fp8 wgmma (QGMMA), no spill; per block a thread's scales are
    # two loads a row scale tensor (its two rows) and one a column scale tensor; column
    # scales shared through one STS and bn / 8 LDS.64, and an FMUL a value beside each
    # FFMA; the estimate within 10% of it.
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    if sass.find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump and nvdisasm are not installed")
    report = compile_plan_for(DIAGRAMS / spec, load_hardware("h200"), "sm_90a")
    (kernel,) = report.kernels
    assert kernel.spill_stores_bytes == kernel.spill_loads_bytes == 0
    loop = sass.parse_sass(sass.main_loops(report.cubin)[kernel.launch.kernel])
    counts = sass.count_classes(loop)
    c = report.plan.kernels[0].candidate
    bn = c.param("bn")
    assert any(i.opcode.startswith("QGMMA") for i in loop)
    assert counts["global"] == loads and counts["smem"] == (bn // 8 + 1) * shared
    assert bn // 2 * (1 + shared) <= counts["fp32"] <= bn // 2 * (1 + shared) + 2
    assert sum(counts.values()) == pytest.approx(wgmma_mix(c, "fp8_e4m3").slots, rel=0.10)


def test_a_scale_named_twice_multiplies_twice(tmp_path: Path) -> None:
    # the tensor is one member of the kernel's epilogue, its factor taken twice
    text = (DIAGRAMS / LIBRARY).read_text().replace("scale=[sa, sb]", "scale=[sa, sb, sa]")
    spec = tmp_path / "twice.yaml"
    spec.write_text(text)
    d, module = wgmma_module(
        str(spec), {"m": 100, "nb": 2, "kb": 2}, 64, 3, load_hardware("h200"), bm=64
    )
    _matches(d, module)


def test_blocks_of_rows_run_as_the_batch_b_lacks(tmp_path: Path) -> None:
    # A scaled per 128 x 128 block (m split as mb x mm): mb a batch axis of A and C alone,
    # B read through a 2-D map for every mb; B scaled per column and block
    spec = tmp_path / "rows.yaml"
    spec.write_text(
        (DIAGRAMS / "../tests/specs/gemm_block_scaled_cols.yaml")
        .read_text()
        .replace("axes: {m: 4096,", "axes: {mb: 32, mm: 128,")
        .replace("A: {axes: [m, kb, kk]", "A: {axes: [mb, mm, kb, kk]")
        .replace("sa: {axes: [m, kb]", "sa: {axes: [mb, kb]")
    )
    d, module = wgmma_module(str(spec), {"mb": 2, "n": 136, "kb": 2}, 128, 3, load_hardware("h200"))
    _matches(d, module)
