"""The formulas of docs/cost-model.md (FlashAttention on a Napkin, Figs. 9-12 and section 6),
reproduced by the generic model on the abstract two-level `napkin` profile (l0 -> l1).

H is the l0 -> l1 transfer in values (`plan.transfers[0].values`); l1's capacity is set
in bytes with apply_overrides.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ncdc.hardware.load import load_hardware
from ncdc.hardware.overrides import apply_overrides
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram

BIG = 1 << 40  # an l1 that holds everything


def napkin(capacity_bytes: int = BIG):
    return apply_overrides(load_hardware("napkin"), [f"l1.capacity={capacity_bytes}"])


def spec(axes: dict, inputs: dict, ops: list[str], outputs: list[str], schedule: str = "") -> str:
    ins = ", ".join(f"{n}: {{axes: [{', '.join(a)}], dtype: {t}}}" for n, (a, t) in inputs.items())
    text = (
        f"ncdc: 1\nname: t\naxes: {axes}\ninputs: {{{ins}}}\n"
        f"ops: {ops}\noutputs: {outputs}\n".replace("'", '"')
    )
    return text + (f"schedule: {schedule}\n" if schedule else "")


def h_values(text: str, hw=None, tiles=None) -> int:
    plan = plan_diagram(load_diagram_text(text), hw or napkin(), tiles)
    return plan.transfers[0].values


def matmul(a: int, b: int, c: int, dtype: str = "bf16", out: str = "") -> str:
    kw = f", dtype={out}" if out else ""
    return spec({"a": a, "b": b, "c": c}, {"A": (["a", "b"], dtype), "B": (["b", "c"], dtype)},
                [f"C = contract(A, B, over=b{kw})"], ["C"])  # fmt: skip


def attention(q: int, x: int, d: int, dtype: str = "bf16", schedule: str = "") -> str:
    # every intermediate in the inputs' type, as the paper counts p bytes per value
    return spec(
        {"q": q, "x": x, "d": d},
        {"Q": (["q", "d"], dtype), "K": (["x", "d"], dtype), "V": (["x", "d"], dtype)},
        [
            f"S = contract(Q, K, over=d, dtype={dtype})",
            "P = softmax(S, over=x)",
            f"O = contract(P, V, over=x, dtype={dtype})",
        ],
        ["O"],
        schedule,
    )


def test_fig9_softmax_then_contraction_unfused_whole_arrays():
    # Fig. 9, counted literally: load S, save P; load P and V, save O:
    # H = 3qx + xd + qd. (The paper prints 4qx + xd, assuming x > d; see docs/cost-model.md.)
    q, x, d = 64, 128, 32
    text = spec({"q": q, "x": x, "d": d}, {"S": (["q", "x"], "fp32"), "V": (["x", "d"], "fp32")},
                ["P = softmax(S, over=x)", "O = contract(P, V, over=x)"], ["O"],
                "{materialize: [P]}")  # fmt: skip
    assert h_values(text) == 3 * q * x + x * d + q * d


@pytest.mark.parametrize("g_a", [1, 2, 8, 32, 64])
def test_fig11_one_woven_axis(g_a):
    # Fig. 11: F: (a, x), (w) -> (a, y) woven over a, modelled as a contraction with
    # W = (x, y), so w = x y: H = a x + a y + a w / g_a.
    a, x, y = 64, 16, 8
    text = spec({"a": a, "x": x, "y": y}, {"X": (["a", "x"], "fp32"), "W": (["x", "y"], "fp32")},
                ["Y = contract(X, W, over=x)"], ["Y"])  # fmt: skip
    w = x * y
    assert h_values(text, tiles={"a": g_a, "y": y}) == a * x + a * y + a * w // g_a


@pytest.mark.parametrize(("g_a", "g_b"), [(1, 1), (4, 2), (16, 8), (64, 8)])
def test_fig12_two_woven_axes(g_a, g_b):
    # Fig. 12: F: (a, x), (w, b) -> (a, y, b) woven over a and b, W = (x, y, b), w = x y:
    # H = a b x / g_b + a b w / g_a + a b y, with N = a b / (g_a g_b) groups.
    a, b, x, y = 64, 8, 16, 4
    text = spec({"a": a, "b": b, "x": x, "y": y},
                {"X": (["a", "x"], "fp32"), "W": (["x", "y", "b"], "fp32")},
                ["Y = contract(X, W, over=x)"], ["Y"])  # fmt: skip
    w = x * y
    tiles = {"a": g_a, "b": g_b, "y": y}
    assert h_values(text, tiles=tiles) == a * b * x // g_b + a * b * w // g_a + a * b * y


@pytest.mark.parametrize(("g_a", "g_c"), [(8, 8), (16, 64), (128, 32)])
def test_matmul_fixed_tiles(g_a, g_c):
    # Section 6: H = a b c (1/g_a + 1/g_c) + a c.
    a, b, c = 256, 128, 512
    h = h_values(matmul(a, b, c), tiles={"a": g_a, "c": g_c})
    assert h == a * b * c // g_a + a * b * c // g_c + a * c


def test_matmul_everything_fits():
    # Section 6, no tiling: H = a b + b c + a c.
    a, b, c = 64, 32, 128
    assert h_values(matmul(a, b, c)) == a * b + b * c + a * c


@pytest.mark.parametrize("m_values", [1 << 12, 1 << 14, 1 << 16])
def test_matmul_optimum_near_square_root(m_values):
    # Section 6: the best groups are square, g = -s + sqrt(s^2 + M); with power-of-two
    # candidates the choice is within one step (a factor of 2) of it.
    s = 8
    plan = plan_diagram(load_diagram_text(matmul(2048, 2048, 2048)), napkin(2 * m_values),
                        {"b": s})  # fmt: skip
    group = plan.kernels[0].tiles["l1"].group
    best = -s + math.sqrt(s * s + m_values)
    for axis in ("a", "c"):
        assert best / 2 <= group[axis] <= best * 2, (axis, group, best)


def test_attention_unfused_and_fused_per_batch_and_head():
    # Section 6: unfused (S, P saved) H = 4qx + 2qd + 2xd; fused with g_q and streamed x,
    # H = 2qd + 2qxd/g_q, times b h for batch and heads.
    b, h, q, x, d = 2, 3, 256, 512, 64
    axes = {"b": b, "h": h, "q": q, "x": x, "d": d}
    ins = {n: (["b", "h", ax, "d"], "bf16") for n, ax in (("Q", "q"), ("K", "x"), ("V", "x"))}
    ops = ["S = contract(Q, K, over=d)", "P = softmax(S, over=x)", "O = contract(P, V, over=x)"]
    unfused = spec(axes, ins, ops, ["O"], "{materialize: [S, P]}")
    assert h_values(unfused) == b * h * (4 * q * x + 2 * q * d + 2 * x * d)
    fused = spec(axes, ins, ops, ["O"], "{stream: [x]}")
    for g_q in (16, 64, 256):
        tiles = {"b": 1, "h": 1, "q": g_q, "d": d}
        assert h_values(fused, tiles=tiles) == b * h * (2 * q * d + 2 * q * x * d // g_q)


def _slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_matmul_transfer_falls_as_inverse_square_root_of_memory():
    # Section 6: H* ~ 2abc / sqrt(M) + ac, so log(H* - ac) against log(M) has slope -1/2.
    n = 2048
    text = load_diagram_text(matmul(n, n, n))
    caps = [1 << k for k in range(14, 24, 2)]
    hs = [plan_diagram(text, napkin(c)).transfers[0].values - n * n for c in caps]
    assert _slope(caps, hs) == pytest.approx(-0.5, abs=0.1)


def test_attention_transfer_falls_as_inverse_of_memory():
    # Section 6: H* ~ 2qd + 4qxd^2 / M, so log(H* - 2qd) against log(M) has slope -1.
    q, x, d = 4096, 4096, 64
    text = load_diagram_text(attention(q, x, d))
    caps = [1 << k for k in range(15, 21)]
    hs = [plan_diagram(text, napkin(c)).transfers[0].values - 2 * q * d for c in caps]
    assert _slope(caps, hs) == pytest.approx(-1.0, abs=0.1)


def _dominant_bytes(text: str, capacity: int, output_bytes: int) -> float:
    plan = plan_diagram(load_diagram_text(text), napkin(capacity))
    return plan.transfers[0].bytes - output_bytes


def test_fp16_to_fp8_cuts_matmul_traffic_by_2_83():
    # Section 6, precision: dominant traffic ~ p^(1 + 1/2) at fixed capacity in bytes, so
    # fp16 -> fp8 divides it by 2^1.5 ~ 2.83 (geometric mean over a capacity sweep, as
    # power-of-two tiles move in steps of 2).
    n = 2048
    ratios = []
    for k in range(15, 23):
        wide = _dominant_bytes(matmul(n, n, n, "fp16"), 1 << k, 2 * n * n)
        narrow = _dominant_bytes(matmul(n, n, n, "fp8_e4m3", "fp8_e4m3"), 1 << k, n * n)
        ratios.append(wide / narrow)
    assert math.exp(np.mean(np.log(ratios))) == pytest.approx(2**1.5, rel=0.15)


def test_fp16_to_fp8_cuts_attention_traffic_by_4():
    # Section 6, precision: attention's dominant traffic ~ p^2, so fp16 -> fp8 divides it
    # by 4 at the same capacity in bytes.
    q, x, d = 4096, 4096, 64
    for k in (16, 17, 18):
        wide = _dominant_bytes(attention(q, x, d, "fp16"), 1 << k, 2 * 2 * q * d)
        narrow = _dominant_bytes(attention(q, x, d, "fp8_e4m3"), 1 << k, 1 * 2 * q * d)
        assert wide / narrow == pytest.approx(4, rel=0.1)


def test_grouped_query_attention_shares_key_value_traffic():
    # Section 6: with K and V not woven over r, a group holding the r query heads of one
    # K/V head loads K and V once for all of them: K/V traffic falls by r against
    # multi-head attention with g r heads at the same query tile.
    b, g, r, q, x, d = 1, 2, 4, 128, 512, 32
    ops = ["S = contract(Q, K, over=d)", "P = softmax(S, over=x)", "O = contract(P, V, over=x)"]
    gqa = spec({"b": b, "g": g, "r": r, "q": q, "x": x, "d": d},
               {"Q": (["b", "g", "r", "q", "d"], "bf16"), "K": (["b", "g", "x", "d"], "bf16"),
                "V": (["b", "g", "x", "d"], "bf16")}, ops, ["O"])  # fmt: skip
    mha = spec({"b": b, "h": g * r, "q": q, "x": x, "d": d},
               {n: (["b", "h", ax, "d"], "bf16") for n, ax in (("Q", "q"), ("K", "x"), ("V", "x"))},
               ops, ["O"])  # fmt: skip
    qo = 2 * b * g * r * q * d
    kv_gqa = h_values(gqa, tiles={"q": 32, "r": r, "g": 1, "b": 1, "d": d}) - qo
    kv_mha = h_values(mha, tiles={"q": 32, "h": 1, "b": 1, "d": d}) - qo
    assert kv_mha == r * kv_gqa
    assert kv_gqa == 2 * b * g * (q // 32) * x * d


def test_section6_fa3_shares_of_peak_follow_from_a_66_percent_softmax_overhead():
    # Sec. 6: FlashAttention-3 measures 75% (fp16) and 60% (fp8) of the H100's peak. A
    # warp's softmax runs between its MMAs on the same scores (`overlap_compute` with one
    # instruction stream: serial). The softmax costs 66% of the fp8 MMA time; the fp16 MMAs
    # take twice as long, so there it is 33%: shares 1 / 1.33 = 0.752 and 1 / 1.66 = 0.602.
    from ncdc.model.overlap import overlap_compute

    softmax = 0.66 * 0.5  # seconds, against fp8 MMAs of 0.5 s and fp16 MMAs of 1 s
    for mma, share in ((1.0, 0.75), (0.5, 0.60)):
        serial = overlap_compute({"tensor": mma, "cuda": softmax}, True, 1)
        assert mma / serial == pytest.approx(share, abs=0.005)
    # with the softmax of one stream hidden under another's MMAs, the peak again
    assert overlap_compute({"tensor": 1.0, "cuda": 0.33}, True, 10**6) == pytest.approx(1.0)


def test_section5_6_warpgroups_per_sm_from_smem_and_register_budgets():
    # Sec. 5.6 (H100): 228 KB of shared memory per SM, 48 KB per thread block and 48 KB per
    # warpgroup give (228 - 48) / 48 = 3.75 ("3.7"); 256 KB of registers per SM (the h100
    # profile's rf level) at 74.75 KB per warpgroup give 3.42 ("3.4"); 3 warpgroups run.
    from ncdc.model.overlap import warpgroups_per_sm

    rf_kb = load_hardware("h100").level("rf").capacity_bytes / 1024
    smem = warpgroups_per_sm(228, 48, 48)
    regs = warpgroups_per_sm(rf_kb, 0, 74.75)
    assert (round(smem, 2), round(regs, 2)) == (3.75, 3.42)
    assert math.floor(min(smem, regs)) == 3


def test_section5_7_fused_attention_is_compute_bound_from_g_q_295_on_h100():
    # Sec. 5.7: fused attention moves p (2qd + 2qxd / g_q) bytes for 4qxd FLOPs per head, an
    # intensity of 2 g_q / p for long keys, g_q at fp16; the H100's ridge is its datasheet
    # 989.4 TFLOP/s over 3.35 TB/s = 295 FLOP/byte, so compute-bound from g_q >= 295. Here
    # H is the generic model's (KernelModel.transfer) with g_q = 295 and x = 2^20 keys.
    from ncdc.model.structure import KernelModel

    h100 = load_hardware("h100")
    ridge = h100.ridge_point("tensor", "fp16", "hbm")
    assert round(ridge) == 295
    q, x, d = 295 * 4, 1 << 20, 128
    diagram = load_diagram_text(attention(q, x, d, dtype="fp16"))
    plan = plan_diagram(diagram, napkin())
    model = KernelModel(diagram, plan.kernels[0].kernel)
    _, nbytes = model.transfer({"q": 295, "d": d})
    assert 4 * q * x * d / nbytes == pytest.approx(ridge, rel=0.01)
