"""The cost model beyond the paper: FLOPs counted by hand, time as the largest of the
compute and transfer times, bound names, waves, streaming legality, the JSON form."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from ncdc.errors import SpecError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.cost import time_kernel
from ncdc.model.overlap import SATURATION_WARPS
from ncdc.model.structure import KernelModel
from ncdc.model.values import TileChoice
from ncdc.plan.search import plan_diagram
from ncdc.verify.buildable import cost_note
from tests.support import ncdc


def test_time_is_the_largest_and_the_sum():
    # Section 7: predicted = the launch latency (3 us on the h200 profile's `achievable`)
    # then the max over compute units and boundaries; no overlap = the launch plus their sum.
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/softmax.yaml"), hw)
    k = plan.kernels[0]
    times = [*k.compute.values(), *(t.time_s for t in k.transfers)]
    assert hw.launch_s == 3e-6
    assert k.predicted_time_s == pytest.approx(hw.launch_s + max(times))
    assert k.predicted_time_no_overlap_s == pytest.approx(hw.launch_s + sum(times))
    assert plan.bound == "hbm" and plan.bound_kind == "memory"


def test_transfer_time_is_bytes_over_the_upper_bandwidth():
    # A level the device shares (HBM, L2) runs at its achievable (measured copy) bandwidth
    # once enough warps are in flight (8 per SM; 12 here); SMEM is per SM, so it runs at the pace of the busiest
    # SM: 16384 rows, one a block, give 16384 blocks, 125 on the busiest of 132 SMs, a
    # share 125 x 132 / 16384 = 1.00708 of the average.
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/layernorm.yaml"), hw)
    k = plan.kernels[0]
    assert (k.grid, k.warps * k.blocks_per_sm) == (16384, 12)
    share = {"hbm": 1.0, "l2": 1.0, "smem": 125 * 132 / 16384}
    for t in plan.transfers:
        bandwidth = hw.achieved_bandwidth(
            t.upper
        )  # h200: 3.53 TB/s HBM (STREAM triad), not the 4.8 datasheet
        assert t.time_s == pytest.approx(t.bytes / bandwidth * share[t.upper])
    # layernorm reads X once and writes Y once (plus W, B per block of rows)
    assert plan.transfers[0].bytes >= 2 * 16384 * 4096 * 2


def test_waves_round_up():
    # Section 7: waves = groups / (SMs x blocks per SM), rounded up.
    hw = load_hardware("h100")
    k = plan_diagram(load_diagram("diagrams/matmul.yaml"), hw).kernels[0]
    assert k.waves == math.ceil(k.grid / (hw.limits.sms * k.blocks_per_sm))
    assert k.compute["tensor"] >= 2 * 4096**3 / hw.achieved_rate("tensor", "bf16")


def test_attention_tiles_keep_enough_warps_per_sm():
    # 64 queries per block (4 warps) at 144 KiB of SMEM run one block per SM, half the
    # warps latency hiding needs. The search takes at least 8 warps per SM: two or more
    # 4-warp blocks of 64 queries, whose independent instruction streams hide part of each
    # other's softmax (`overlap_compute`; one 8-warp block of 128 queries marches in step
    # and serialises its MMA phase and softmax), and stays held by on-chip traffic, not HBM.
    # (a100: on sm_90a the FlashAttention-3 variant, 3 warpgroups of 64 rows, wins)
    hw = load_hardware("a100")
    k = plan_diagram(load_diagram("diagrams/attention.yaml"), hw).kernels[0]
    assert (k.block_tile["q"], k.warps) == (64, 4) and k.blocks_per_sm >= 2
    assert k.warps * k.blocks_per_sm >= SATURATION_WARPS
    assert k.bound in ("smem", "l2", "tensor")
    # h200: one 12-warp block per SM whose two consumer warpgroups ping-pong
    fa3 = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200")).kernels[0]
    assert (fa3.block_tile["q"], fa3.warps, fa3.blocks_per_sm) == (128, 12, 1)
    assert fa3.candidate.pingpong


def test_decode_splits_fill_every_sm():
    # One sequence, 8 heads, 16k keys: 8 blocks would leave 124 of 132 SMs idle and HBM
    # starved (8 x 4 warps over the device); the keys are split until every SM has blocks
    # enough for HBM (the merge's traffic weighed against it), and the time is then HBM
    # bytes / bandwidth after the launch latency of each launch (the split pass, then the
    # merge) and the first wave's pipeline fill, within the latency term's few percent.
    hw = load_hardware("h200")
    plan = plan_diagram(load_diagram("diagrams/decode_attention.yaml", {"b": 1, "h": 8}), hw)
    k = plan.kernels[0]
    assert k.grid >= hw.limits.sms and k.bound == "hbm"
    top = plan.transfers[0]
    assert len(k.candidate.launches) == 2
    expected = 2 * hw.launch_s + k.fill_s + top.bytes / top.bandwidth_bytes_per_s
    assert k.predicted_time_s == pytest.approx(expected, rel=0.05)
    # the same tiles without the split: the idle SMs show in the HBM time
    c = k.candidate
    first = dataclasses.replace(c.main, grid=(1, *c.main.grid[1:]))
    single = dataclasses.replace(c, splits=1, launches=(first, *c.launches[1:]))
    choice = TileChoice(k.tiles, k.block_tile, single)
    model = KernelModel(plan.graph.diagram, k.kernel)
    one = time_kernel(model, hw, choice)
    assert one.grid == 8
    assert one.predicted_time_s > 10 * k.predicted_time_s


def test_causal_over_full_matches_flashattention2_on_a100():
    # FlashAttention-2's tiles (128 queries, 64 keys, 8 warps here, one block per SM) at
    # b = 1, h = 32, q = x = 4096, d = 128, bf16 on an A100: measured 1.494 ms full and
    # 0.879 ms causal, a ratio 0.59 (liangan1/GPU_travel performance/flash-attn/README.md
    # @07d0469). The model: 0.516 of the work (`causal_fraction`), and the busiest of 108
    # slots carries 1.11 x the mean (`causal_imbalance`, longest tiles first): 0.587.
    hw = load_hardware("a100")
    axes = {"b": 1, "h": 32, "q": 4096, "x": 4096, "d": 128}
    tiles = {"q": 128, "x": 64}
    causal = plan_diagram(load_diagram("diagrams/attention_causal.yaml", axes), hw, tiles)
    full = plan_diagram(load_diagram("diagrams/attention.yaml", axes), hw, tiles)
    assert causal.predicted_time_s / full.predicted_time_s == pytest.approx(0.59, abs=0.02)
    assert full.predicted_time_s == pytest.approx(1.494e-3, rel=0.05)


def test_fp8_mma_sync_on_hopper_runs_at_the_fp16_rate():
    # Hopper has no fp8 mma.sync: ptxas emits two fp16 HMMAs per m16n8k32, so an fp8 GEMM
    # built on mma.sync is priced at the fp16 mma.sync rate (989.4 TFLOP/s x 4 / 6: one
    # HMMA every 6 cycles against the peak's 4), not that share of the 1978.9 TFLOP/s fp8
    # peak that needs wgmma.
    from ncdc.model.cost import unit_rate

    h200 = load_hardware("h200")
    assert unit_rate(h200, "tensor", "fp8_e4m3") == pytest.approx(989.4e12 * 4 / 6, rel=1e-3)
    assert unit_rate(load_hardware("l40s"), "tensor", "fp8_e4m3") == pytest.approx(733e12)


# ---- variable-length attention priced with its expected lengths -------------------------

H200 = load_hardware("h200")
_VARLEN = """
ncdc: 1
name: varlen
axes: {h: 1, q: 256, x: 256, n: 4, d: 64}
inputs:
  Q: {axes: [h, q, d], dtype: bf16}
  K: {axes: [h, x, d], dtype: bf16}
  V: {axes: [h, x, d], dtype: bf16}
  lens: {axes: [n], dtype: int32, expected: LENGTHS}
ops:
  - S = contract(Q, K, over=d) * 0.125
  - W = varlen(S, query=q, key=x, lengths=lens)
  - M = causal(W, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
schedule: {stream: x}
"""


def _varlen_plan(lengths: str) -> Any:
    text = _VARLEN.replace("LENGTHS", lengths)
    if lengths == "none":
        text = text.replace(", expected: none", "")
    d = load_diagram_text(text)
    return plan_diagram(d, load_hardware("h200"), tiles={"q": 64, "x": 64}).kernels[0]


def test_varlen_priced_with_expected_lengths() -> None:
    # Causal within packed sequences [0, 100), [], [100, 101), [101, 201) of 256 tokens, in
    # 64 x 64 tiles (cost.ragged_spans): the 4 query tiles visit 1, 2, 2, 3 key chunks, 512
    # keys loaded of the dense 4 x 256; one sequence of all 256 tokens is plain causal: 1, 2,
    # 3, 4 chunks, 640 keys. K and V (64 bf16 a key) are loaded per visited key.
    ragged, whole, dense = (
        _varlen_plan("[100, 0, 1, 100]"),
        _varlen_plan("[256, 0, 0, 0]"),
        (_varlen_plan("none")),
    )
    # L2 -> SMEM: each query tile's K and V chunks (HBM reads each tensor once either way)
    loads = {name: kp.transfers[1].bytes for name, kp in
             (("ragged", ragged), ("whole", whole), ("dense", dense))}  # fmt: skip
    assert loads["whole"] - loads["ragged"] == 2 * (640 - 512) * 64 * 2
    assert loads["dense"] == loads["whole"]  # no lengths stated: every key (within causal)
    # the 4 blocks each take a slot of their own (4 of 132 SMs): the busiest block sets the
    # time, 3 chunks ragged and 4 whole, whatever the mean (2 and 2.5)
    assert ragged.compute["tensor"] / whole.compute["tensor"] == pytest.approx(3 / 4)


def test_cost_notes_varlen_priced_dense(tmp_path: Path) -> None:
    spec = tmp_path / "varlen.yaml"
    spec.write_text(_VARLEN.replace(", expected: LENGTHS", ""))
    out = ncdc("cost", str(spec))
    assert out.returncode == 0 and "lengths lens are data, priced dense" in out.stdout
    stated = plan_diagram(load_diagram_text(_VARLEN.replace("LENGTHS", "[1, 2, 3, 4]")), H200)
    assert cost_note([stated], abstract=False) is None


@pytest.mark.parametrize(
    "lengths, sizes, message",
    [
        ("[1, 2]", {}, "lens has 4 values at these sizes; `expected` lists 2"),
        ("[1, -2, 3, 4]", {}, "expected a list of whole numbers from 0 to 2147483647"),
        ("300", {}, "expected a list of whole numbers"),
        ("[100, 100, 100, 1]", {}, "expected lengths of lens sum to 301, more than min(q, x)"),
        ("[1, 2, 3, 4]", {"n": 3}, "lens has 3 values at these sizes"),
    ],
)
def test_expected_lengths_are_validated(lengths: str, sizes: dict, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_diagram_text(_VARLEN.replace("LENGTHS", lengths), "spec.yaml", sizes=sizes)
    line = info.value.line()
    assert message in line and "hint:" in line and "\n" not in line
