"""The paper's Hopper analysis (sec. 5.6-5.7, App. B.1) and sec. 6's optima, expressed with
the model: warpgroup budgets, the continuous search on the napkin machine, and the matmul
tile the H100's ridge asks for. Numbers are computed from the model and the profiles; the
formulas are those of docs/cost-model.md sec. 6 and the paper's sec. 5.6."""

from __future__ import annotations

import math

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.hardware.overrides import apply_overrides
from ncdc.language.dtypes import DTYPES
from ncdc.language.load import load_diagram_text
from ncdc.model.overlap import WarpgroupBudget, warpgroups_fit
from ncdc.model.structure import KernelModel
from ncdc.plan.search import plan_diagram

KIB = 1024


def napkin(capacity_bytes: int):
    return apply_overrides(load_hardware("napkin"), [f"l1.capacity={capacity_bytes}"])


def matmul(a: int, b: int, c: int, dtype: str = "bf16", out: str = "") -> str:
    kw = f", dtype={out}" if out else ""
    return (
        f"ncdc: 1\nname: t\naxes: {{a: {a}, b: {b}, c: {c}}}\n"
        f"inputs: {{A: {{axes: [a, b], dtype: {dtype}}}, B: {{axes: [b, c], dtype: {dtype}}}}}\n"
        f'ops: ["C = contract(A, B, over=b{kw})"]\noutputs: [C]\n'
    )


@pytest.mark.parametrize("m_values", [1 << 14, 1 << 16, 1 << 18])
def test_continuous_search_finds_the_square_root_optimum(m_values):
    # Sec. 6: M = g_a g_c + s (g_a + g_c) values, best at square groups g = -s + sqrt(s^2
    # + M). Powers of two land within a factor 2 of it; the continuous search (steps of
    # 2^(1/16) above 32) within 6%, on axes long enough that tails pad little.
    s = 8
    text = matmul(65536, 64, 65536)
    plan = plan_diagram(load_diagram_text(text), napkin(2 * m_values), {"b": s}, continuous=True)
    group = plan.kernels[0].tiles["l1"].group
    best = -s + math.sqrt(s * s + m_values)
    for axis in ("a", "c"):
        assert group[axis] == pytest.approx(best, rel=0.06), (axis, group, best)
    powers = plan_diagram(load_diagram_text(text), napkin(2 * m_values), {"b": s})
    assert plan.transfers[0].values <= powers.transfers[0].values


def test_sec5_6_three_warpgroups_from_the_h100_budgets():
    # Sec. 5.6: (M_max - M_TB) / M_WG per resource: shared memory (228 KiB per SM, 48 KiB
    # a block keeps, 48 KiB a warpgroup) 3.75 ("3.7"), registers (the 256 KiB register file,
    # 74.75 KiB a warpgroup) 3.42 ("3.4"): 3 warpgroups.
    h100 = load_hardware("h100")
    budget = WarpgroupBudget(48 * KIB, 48 * KIB, 0, 74.75 * KIB)
    n, per = warpgroups_fit(h100, budget)
    assert (round(per["smem"], 2), round(per["registers"], 2)) == (3.75, 3.42)
    assert n == 3 and per["threads"] == 16


def _b1_model():
    """The matmul of App. B.1: fp16 operands, fp32 accumulators, long shared axis."""
    text = matmul(1 << 16, 1 << 16, 1 << 16, "fp16", "fp32")
    diagram = load_diagram_text(text)
    plan = plan_diagram(diagram, napkin(1 << 40))
    return KernelModel(diagram, plan.kernels[0].kernel)


def test_app_b1_tile_side_memory_at_the_h100_ridge():
    # App. B.1: a g x g tile reuses each value it loads g times (FLOPs / H in values -> g
    # for a long shared axis), so reaching the H100's ridge (989.4 TFLOP/s over 3.35 TB/s,
    # ~295 FLOP per unit moved, the paper counting values) needs g ~295; its memory, fp32
    # accumulators and a g-deep chunk of each fp16 operand, is 4 g^2 + 2 (2 g^2) = 8 g^2
    # bytes: ~681 KiB at g = 295.3, three times an SM's 228 KiB.
    model = _b1_model()
    ridge = load_hardware("h100").ridge_point("tensor", "fp16", "hbm")
    assert round(ridge) == 295
    g = round(ridge)
    values, _ = model.transfer({"a": g, "c": g})
    # within 2%: the output's own a c values and a tail group of 65536 / 295 lower it a little
    assert model.flops / values == pytest.approx(ridge, rel=0.02)
    _, nbytes = model.resident({"a": ridge, "c": ridge}, {"b": ridge})
    assert round(nbytes / KIB) == 681


def test_app_b1_practical_tile_side_under_the_warpgroup_budget():
    # What an SM has left for a warpgroup's tile after the block's 48 KiB (sec. 5.6's
    # M_max - M_TB = 180 KiB) holds 8 g^2 bytes for g ~151: the practical side.
    model = _b1_model()
    h100 = load_hardware("h100")
    room = h100.limits.smem_per_sm_bytes - 48 * KIB

    def fits(g: int) -> bool:
        return model.resident({"a": g, "c": g}, {"b": g})[1] <= room

    g = max(x for x in range(1, 400) if fits(x))
    assert g == 151


def test_sec5_7_one_kv_block_of_three_warpgroups():
    # Sec. 5.7: the warpgroups sec. 5.6 fits on an SM (3), each holding w_q = 128 query rows,
    # stream one K/V block of s_x = 64 keys at d = 128, S = QK^T in fp8 and P V in fp16.
    # Per block: 1.26 us of tensor work against 0.97 us to bring K (fp8) and V (fp16) from
    # HBM at the SM's share of the datasheet bandwidth, so compute-bound; and the SMs together
    # at that pace reach 1.32 PFLOP/s, the configuration's ideal.
    h100 = load_hardware("h100")
    warpgroups, _ = warpgroups_fit(h100, WarpgroupBudget(48 * KIB, 48 * KIB, 0, 74.75 * KIB))
    w_q, s_x, d = 128, 64, 128
    sms = h100.limits.sms
    flops = 2 * warpgroups * w_q * s_x * d  # each of S = QK^T and O += P V, per block and SM
    compute_s = flops / (h100.rate("tensor", "fp8_e4m3") / sms) + flops / (
        h100.rate("tensor", "fp16") / sms
    )
    kv_bytes = s_x * d * (DTYPES["fp8_e4m3"].bytes + DTYPES["fp16"].bytes)
    transfer_s = kv_bytes / (h100.bandwidth("hbm") / sms)
    assert round(compute_s * 1e6, 2) == 1.26
    assert round(transfer_s * 1e6, 2) == 0.97
    assert round(2 * flops * sms / compute_s / 1e15, 2) == 1.32
