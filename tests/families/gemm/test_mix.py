"""The gemm family's loop-mix estimates (ncdc.families.gemm.mix)."""

from __future__ import annotations

import dataclasses

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram


def test_fp8_mma_on_sm90_is_two_hmmas_and_four_fadds():
    # Hopper has no fp8 mma.sync: per m16n8k32 ptxas emits two HMMA.16816 and four FADDs.
    # Ada (sm_89) has the fp8 mma: one instruction. Warp tile 64 x 32, k tile 64: two k32
    # steps of 4 x 4 MMAs.
    axes = {"m": 512, "n": 512, "k": 512}
    tiles = {"m": 128, "n": 128, "k": 64}
    d = load_diagram("diagrams/fp8_matmul.yaml", axes)
    hopper = plan_diagram(d, load_hardware("h200"), tiles).kernels[0]
    ada = plan_diagram(d, load_hardware("l40s"), tiles).kernels[0]
    assert hopper.instructions is not None and ada.instructions is not None
    c = dict(hopper.candidate.params)
    mmas = (64 // 32) * (c["bm"] // c["warps_m"] // 16) * (c["bn"] // c["warps_n"] // 8)
    assert hopper.instructions.classes["tensor"] == 2 * mmas
    assert hopper.instructions.classes["fp32"] == 4 * mmas
    assert ada.instructions.classes["tensor"] == mmas and not ada.instructions.classes["fp32"]


def test_a_wgmma_k_tile_is_its_wgmmas_and_their_descriptors() -> None:
    # one consumer warp's k tile of 64 (bf16: 4 wgmma k16) over a 128 x 256 tile: 16 of
    # the block's rows times 256 columns times 64 of k, twice for the multiply-add
    from ncdc.families.gemm.mix import (
        WGMMA_INTEGER_FIXED,
        WGMMA_INTEGER_PER_MMA,
        WGMMA_PER_TILE,
        wgmma_mix,
    )
    from ncdc.model.launch import Candidate, LaunchShape

    c = Candidate({}, {}, {}, {}, (("wgmma", 1), ("bn", 256), ("bk", 64)),
                  (LaunchShape((1, 1, 1), (384, 1, 1)),))  # fmt: skip
    mix = wgmma_mix(c, "bf16")
    assert mix.classes["tensor"] == 4
    assert mix.classes["integer"] == 4 * WGMMA_INTEGER_PER_MMA + WGMMA_INTEGER_FIXED
    assert mix.classes["barrier"] == WGMMA_PER_TILE["barrier"] + 1  # one CTA's empty arrive
    clustered = dataclasses.replace(c, params=(*c.params, ("cluster", 2)))
    assert wgmma_mix(clustered, "bf16").classes["barrier"] == WGMMA_PER_TILE["barrier"] + 2
    assert mix.tensor_flops == 2 * 16 * 256 * 64
    assert wgmma_mix(c, "fp8_e4m3").classes["tensor"] == 2  # k32 a wgmma
