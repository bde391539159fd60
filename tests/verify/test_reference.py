"""The float64 reference: rounding to each dtype at the edges, and the semantics of each op."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.verify.reference import evaluate, from_storage, make_inputs, round_to, to_storage
from ncdc.verify.run import compare


@pytest.mark.parametrize(
    "x, want",
    [
        (1.0625, 1.0),  # tie between 1.0 (even code 0x38) and 1.125: to even
        (1.1875, 1.25),  # tie between 1.125 (odd) and 1.25 (even)
        (448.0, 448.0),  # largest finite e4m3
        (464.0, 448.0),  # above it saturates (cvt.rn.satfinite), no infinity in e4m3
        (-1e9, -448.0),
        (2.0**-9, 2.0**-9),  # smallest subnormal
        (2.0**-10, 0.0),  # half of it: tie to even (zero)
    ],
)
def test_e4m3_rounding(x, want):
    assert round_to(np.array([x]), "fp8_e4m3")[0] == want


def test_e5m2_saturates_and_nan_stays():
    got = round_to(np.array([57344.0, 65000.0, np.nan]), "fp8_e5m2")
    assert got[0] == 57344.0 and got[1] == 57344.0 and np.isnan(got[2])


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int32"])
def test_storage_round_trip(dtype):
    x = round_to(np.random.default_rng(0).standard_normal(100) * 4, dtype)
    assert np.array_equal(from_storage(to_storage(x, dtype), dtype), x)


@pytest.mark.parametrize(
    "dtype, x, want",
    [
        # round to nearest, ties to even, then saturate; NaN to 0 (cvt.rni.sat)
        ("int8", [2.5, 3.5, -2.5, 126.6, 127.5, 300.0, -128.4, -1000.0, np.nan],
         [2, 4, -2, 127, 127, 127, -128, -128, 0]),
        ("int32", [0.5, 1.5, -7.5, 3e9, -3e9, np.nan],
         [0, 2, -8, 2**31 - 1, -(2**31), 0]),
    ],
)  # fmt: skip
def test_integer_rounding_saturates(dtype, x, want):
    assert round_to(np.array(x), dtype).tolist() == want
    assert from_storage(to_storage(round_to(np.array(x), dtype), dtype), dtype).tolist() == want


def test_an_unwritten_integer_reads_as_the_minimum():
    # Outputs are poisoned with NaN; an integer buffer holds its type's minimum instead.
    assert to_storage(np.array([np.nan]), "int8").tolist() == [-128]
    assert to_storage(np.array([np.nan]), "int32").tolist() == [-(2**31)]


def test_bf16_ties_to_even():
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: rounds to the even mantissa (1.0).
    assert round_to(np.array([1 + 2**-8, 1 + 3 * 2**-8]), "bf16").tolist() == [1.0, 1 + 2**-6]


MASKED = """
ncdc: 1
name: m
axes: {q: 3, x: 2}
inputs: {S: {axes: [q, x], dtype: fp32}}
ops:
  - M = causal(S, query=q, key=x)
  - P = softmax(M, over=x)
outputs: [P]
"""


def test_causal_is_aligned_at_the_end_and_masked_rows_are_zero():
    # 3 queries, 2 keys: key j is masked for query i when j > i + (2 - 3) = i - 1.
    d = load_diagram_text(MASKED)
    out = evaluate(d, {"S": np.zeros((3, 2))})
    assert out["P"].tolist() == [[0.0, 0.0], [1.0, 0.0], [0.5, 0.5]]


def test_softmax_of_huge_logits_stays_finite():
    d = load_diagram("diagrams/softmax.yaml", {"m": 2, "n": 3})
    out = evaluate(d, {"X": np.array([[1e4, -1e4, 0.0], [3.0, 3.0, 3.0]])})
    # Y is a bf16 output: stored, so rounded to bf16 (1/3 -> 0.333984375).
    assert np.array_equal(out["Y"], round_to(np.array([[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]]), "bf16"))


def test_layernorm_matches_definition():
    d = load_diagram("diagrams/layernorm.yaml", {"m": 4, "n": 16})
    inputs = make_inputs(d, seed=3)
    x, w, b = inputs["X"], inputs["W"], inputs["B"]
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    assert np.array_equal(evaluate(d, inputs)["Y"], round_to(want, "bf16"))  # a bf16 output


def test_gqa_shares_kv_heads():
    d = load_diagram(
        "diagrams/gqa_attention.yaml", {"b": 1, "g": 2, "r": 3, "q": 4, "x": 5, "d": 8}
    )
    env = evaluate(d, make_inputs(d, seed=1))
    q, k, v = env["Q"], env["K"], env["V"]
    s = np.einsum("grqd,gxd->grqx", q[0], k[0]) * 0.08838834764831845
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = round_to(np.einsum("grqx,gxd->grqd", p, v[0]), "bf16")  # O is stored as bf16
    assert np.allclose(env["O"][0], want, rtol=0, atol=1e-12)


def test_compare_flags_unwritten_elements_and_errors():
    want = np.array([1.0, 2.0, 4.0])
    assert compare("Y", "bf16", want.copy(), want).ok
    unwritten = compare("Y", "bf16", np.array([1.0, np.nan, 4.0]), want)
    assert not unwritten.ok and unwritten.unexpected_nan == 1
    wrong = compare("Y", "fp32", np.array([1.0, 2.001, 4.0]), want)
    assert not wrong.ok and wrong.max_abs_error == pytest.approx(0.001)
    nan_kept = compare("Y", "fp32", np.array([np.nan]), np.array([np.nan]))
    assert nan_kept.ok  # a NaN input must come out NaN, and it did


INF = np.inf


@pytest.mark.parametrize(
    ("got", "want", "mismatched"),
    [
        ([1.0, 12345.0], [1.0, np.nan], 1),  # garbage where the reference is NaN (issue 31)
        ([1.0, 7.0], [1.0, INF], 1),
        ([1.0, -INF], [1.0, INF], 1),
        ([1.0, INF], [1.0, 2.0], 1),
        ([INF, -INF], [np.nan, np.nan], 2),
    ],
)
def test_compare_flags_every_disagreement_of_kind(got, want, mismatched):
    # Issue 31: positions where the reference is not finite were never compared, so a
    # kernel writing 12345 where the reference is NaN passed `ncdc run`.
    check = compare("Y", "fp32", np.array(got), np.array(want))
    assert not check.ok and check.nonfinite_mismatch == mismatched
    assert check.unexpected_nan == 0 and check.max_abs_error == 0.0
    assert check.reference_nonfinite == int(np.count_nonzero(~np.isfinite(want)))


def test_compare_matches_nan_with_nan_and_an_infinity_with_itself():
    want = np.array([np.nan, INF, -INF, 2.0])
    check = compare("Y", "fp32", want.copy(), want)
    assert check.ok and check.nonfinite_mismatch == 0 and check.reference_nonfinite == 3
    assert check.scale == 2.0  # the tolerance is relative to the largest finite |reference|


MATERIALISED_BF16 = """
ncdc: 1
name: saved_bf16
axes: {m: 37, n: 53}
inputs: {X: {axes: [m, n], dtype: fp32}, W: {axes: [n], dtype: fp32}}
ops:
  - H = mul(X, W, dtype=bf16)
  - Y = exp(H, dtype=fp32)
outputs: [Y]
schedule: {materialize: [H]}
"""


def test_a_materialised_result_is_rounded_to_its_dtype_and_a_fused_one_is_not():
    d = load_diagram_text(MATERIALISED_BF16)
    inputs = make_inputs(d, seed=3)
    exact = inputs["X"] * inputs["W"]
    saved = evaluate(d, inputs)
    assert np.array_equal(saved["H"], round_to(exact, "bf16"))
    assert np.array_equal(saved["Y"], round_to(np.exp(round_to(exact, "bf16")), "fp32"))
    fused = evaluate(d, inputs, materialized=())
    assert np.array_equal(fused["H"], exact)  # never stored: kept in full precision


def test_an_fp32_output_after_a_saved_bf16_intermediate_meets_the_fp32_tolerance():
    # Two kernels, H stored as bf16 between them: the reference must read H rounded, as the
    # second kernel does, or the fp32 output is off by a bf16 rounding (about 4e-3).
    from ncdc.hardware.load import load_hardware
    from ncdc.plan.search import plan_diagram
    from ncdc.render import render_plan
    from ncdc.verify.run import run_diagram

    d = load_diagram_text(MATERIALISED_BF16)
    module = render_plan(plan_diagram(d, load_hardware("h200")))
    assert len(module.launches) == 2
    result = run_diagram(d, module, backend="cpu", seed=5)
    (check,) = result.checks
    assert check.ok and check.max_rel_error < 1e-6, check


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int32"])
def test_a_scalar_is_stored_as_a_0d_array(dtype):
    # A kernel writes a scalar output through a pointer: its buffer must be an array.
    stored = to_storage(np.float64(1.5), dtype)
    assert isinstance(stored, np.ndarray) and stored.shape == ()
    back = from_storage(stored, dtype)
    assert isinstance(back, np.ndarray) and back.shape == ()


GATHER = """
ncdc: 1
name: g
axes: {t: 6, v: 7, d: 3}
inputs:
  E: {axes: [v, d], dtype: fp32}
  Z: {axes: [t, v], dtype: fp32}
  ids: {axes: [t], dtype: int32}
ops:
  - Y = gather(E, ids, axis=v)
  - P = gather(Z, ids, axis=v)
outputs: [Y, P]
"""


def test_gather_picks_rows_and_labels_and_draws_indices_in_range():
    d = load_diagram_text(GATHER)
    inputs = make_inputs(d, seed=1)
    ids = inputs["ids"].astype(int)
    assert ids.min() >= 0 and ids.max() < 7  # the size of v, the axis it selects along
    out = evaluate(d, inputs)
    np.testing.assert_array_equal(out["Y"], inputs["E"][ids])
    np.testing.assert_array_equal(out["P"], inputs["Z"][np.arange(6), ids])


def test_an_index_out_of_range_gives_nan_not_a_read():
    d = load_diagram_text(GATHER)
    inputs = make_inputs(d, seed=1)
    inputs["ids"][[1, 4]] = [7, -1]  # one past the end, and negative
    out = evaluate(d, inputs)
    assert np.isnan(out["Y"][[1, 4]]).all() and np.isfinite(np.delete(out["Y"], [1, 4], 0)).all()
    assert np.isnan(out["P"][[1, 4]]).all()


def test_scatter_add_sums_each_value_into_the_row_its_index_names():
    text = """
ncdc: 1
name: scatter
axes: {b: 2, s: 3, v: 4, d: 2}
inputs:
  G: {axes: [b, s, d], dtype: fp32}
  ids: {axes: [b, s], dtype: int32}
ops:
  - Y = scatter_add(G, ids, axis=v)
  - P = scatter_add(G, ids, axis=v, over=s)
outputs: [Y, P]
"""
    d = load_diagram_text(text)
    inputs = make_inputs(d, seed=2)
    ids, g = inputs["ids"].astype(int), inputs["G"]
    assert ids.min() >= 0 and ids.max() < 4  # drawn within v
    out = evaluate(d, inputs)
    y, p = np.zeros((4, 2)), np.zeros((2, 4, 2))
    for b in range(2):
        for s in range(3):
            y[ids[b, s]] += g[b, s]
            p[b, ids[b, s]] += g[b, s]
    np.testing.assert_allclose(out["Y"], y, rtol=0, atol=1e-6)  # rounded to fp32
    np.testing.assert_allclose(out["P"], p, rtol=0, atol=1e-6)
    inputs["ids"][1, 2] = 4  # out of range: NaN throughout, never a write elsewhere
    out = evaluate(d, inputs)
    assert np.isnan(out["Y"]).all() and np.isnan(out["P"]).all()


def test_ids_compared_for_equality_come_in_runs():
    # document ids of packed sequences (doc[q] == doc[x]): nondecreasing runs, so that both
    # outcomes of the comparison occur
    text = """
ncdc: 1
name: docs
axes: {q: 40}
inputs: {doc: {axes: [q], dtype: int32}}
ops: ["P = eq(doc, 2)"]
outputs: [P]
"""
    ids = make_inputs(load_diagram_text(text), seed=2)["doc"]
    assert (np.diff(ids) >= 0).all() and ids[0] in (0, 1)


def test_an_int32_is_computed_on_in_fp32_as_the_kernels_read_it():
    # exact below 2^24; past it, ids that differ in their last bits compare equal, as the
    # kernels' fp32 comparison has them (the exact function keeps them apart)
    text = """
ncdc: 1
name: ids
axes: {q: 3}
inputs: {a: {axes: [q], dtype: int32}, b: {axes: [q], dtype: int32}}
ops: ["E = eq(a, b)"]
outputs: [E]
"""
    d = load_diagram_text(text)
    a, b = np.array([5.0, 2.0**24, 2.0**24 + 3]), np.array([5.0, 2.0**24 + 1, 2.0**24 + 4])
    assert evaluate(d, {"a": a, "b": b})["E"].tolist() == [1.0, 1.0, 1.0]
    assert evaluate(d, {"a": a, "b": b}, rounded=False)["E"].tolist() == [1.0, 0.0, 0.0]


def test_a_contraction_summed_as_hopper_fp8_tensor_cores_sum():
    """With `sums`, the reference adds an fp8 contraction up as Hopper's QGMMA does: 32
    products and the running result a step, in the order of k (a last, short step too),
    each step cut as the published model says (tests/backends/test_cpu_hopper.py holds the
    model, written apart); without it, exactly. NaN still propagates."""
    from ncdc.hardware.arch import WGMMA_FP8_SUM
    from tests.backends.test_cpu_hopper import tensor_core_dot

    d = load_diagram("diagrams/fp8_matmul.yaml", {"m": 3, "n": 5, "k": 70})
    rng = np.random.default_rng(7)
    codes = np.flatnonzero(np.isfinite(from_storage(np.arange(256, dtype=np.uint8), "fp8_e4m3")))
    inputs = {
        "A": from_storage(rng.choice(codes, (3, 70)).astype(np.uint8), "fp8_e4m3"),
        "B": from_storage(rng.choice(codes, (70, 5)).astype(np.uint8), "fp8_e4m3"),
        "sa": np.float64(0.5),
        "sb": np.float64(2.0),
    }
    exact = evaluate(d, inputs, materialized=(), rounded=False)["C"]
    summed = evaluate(d, inputs, materialized=(), rounded=False, sums={"C": WGMMA_FP8_SUM})["C"]
    a, b = inputs["A"], inputs["B"]
    for i in range(3):
        for j in range(5):
            c = np.float32(0.0)
            for k0 in range(0, 70, 32):
                c = tensor_core_dot(a[i, k0 : k0 + 32], b[k0 : k0 + 32, j], float(c), "e4m3")
            assert summed[i, j] == float(c), (i, j)
    assert not np.array_equal(summed, exact)
    assert np.allclose(summed, exact, rtol=2.0**-9)
    inputs["A"][1, 3] = np.nan
    with_nan = evaluate(d, inputs, materialized=(), rounded=False, sums={"C": WGMMA_FP8_SUM})
    assert np.isnan(with_nan["C"][1]).all() and np.isfinite(with_nan["C"][[0, 2]]).all()
