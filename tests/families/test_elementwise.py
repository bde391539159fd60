"""Elementwise chains on the CPU emulator against float64 NumPy."""

from __future__ import annotations

import numpy as np

from ncdc.hardware.load import load_hardware
from ncdc.verify.reference import round_to
from tests import support
from tests.runtime_sizes import run_at_sizes

H200 = load_hardware("h200")

CHAIN = """
ncdc: 1
name: chain
axes: {b: 2, m: 3, n: 64}
inputs:
  X: {axes: [b, m, n], dtype: bf16}
  B: {axes: [n], dtype: bf16}
  C: {axes: [m, b], dtype: fp32}
ops:
  - "H = add(X, B)"
  - "G = gelu(H)"
  - "K = mul(G, C)"
  - "L = max(K, -0.25)"
  - "Y = silu(L)"
outputs: [Y]
"""

QUANT = """
ncdc: 1
name: quant
axes: {m: 3, n: 64}
inputs: {X: {axes: [m, n], dtype: fp32}, s: {axes: [], dtype: fp32}}
ops: ["Q = cast(X, to=fp8_e4m3, scale=[s, 4.0])"]
outputs: [Q]
"""

MASK = """
ncdc: 1
name: mask
axes: {q: 5, x: 64}
inputs: {S: {axes: [q, x], dtype: fp32}}
ops: ["M = causal(S, query=q, key=x)", "E = exp(M)"]
outputs: [E]
"""


def run(text: str, plan_sizes: dict, sizes: dict, inputs: dict | None = None) -> tuple:
    """Render at `plan_sizes`, run at `sizes` (runtime parameters), outputs NaN-poisoned."""
    return run_at_sizes(text, plan_sizes, sizes, inputs)


def test_chain_with_broadcasting_any_size() -> None:
    # One build: vector runs of 8 where n % 8 == 0, one element at a time otherwise.
    for b, m, n in [(2, 3, 64), (1, 1, 1), (2, 3, 7), (3, 5, 65), (1, 2, 129)]:
        got, want, module = run(CHAIN, {"b": 2, "m": 3, "n": 64}, {"b": b, "m": m, "n": n})
        y, ref = got["Y"], want["Y"]
        assert not np.isnan(y).any()
        assert np.max(np.abs(y - ref) / (np.abs(ref) + 1e-2)) < 1e-5, (b, m, n)
    assert module.launches[0].kernel.startswith("chain_elementwise_fp32_")


def test_fp8_quantise_saturates_and_rounds_to_even() -> None:
    x = np.random.default_rng(0).standard_normal((3, 64)) * 60.0
    x[0, :6] = [1e6, -1e6, 112.0 + 8.0, 448.0 / 4 + 1.0, 0.0, -0.0]  # saturate, ties, zeros
    x = x.astype(np.float32).astype(np.float64)
    inputs = {"X": x, "s": np.float64(0.5)}
    got, _, _ = run(QUANT, {"m": 3, "n": 64}, {"m": 3, "n": 64}, inputs)
    expected = round_to(x * 0.5 * 4.0, "fp8_e4m3")
    assert np.array_equal(got["Q"], expected)
    assert got["Q"][0, 0] == 448.0 and got["Q"][0, 1] == -448.0


def test_causal_mask_aligned_at_the_end() -> None:
    got, want, _ = run(MASK, {"q": 5, "x": 64}, {"q": 5, "x": 9})
    assert np.array_equal(got["E"] == 0.0, want["E"] == 0.0)
    assert np.allclose(got["E"], want["E"], rtol=1e-5)


def test_an_odd_innermost_size_keeps_vector_runs() -> None:
    # n = 130 is no multiple of the vector width (8 fp16): only the run that crosses the end
    # of each row goes one element at a time, so the bytes issued per element stay those of
    # n = 128 (X, b and Y, plus c[m] and s once per run) to a few percent; one element at a
    # time everywhere reloads c and s per element, about 2.2 times as much.

    from ncdc.verify.run import run_spec

    spec = support.SPECS / "ew_broadcast_binary.yaml"
    per_element = {}
    for n in (128, 130):
        outcome = run_spec(spec, H200, sizes={"m": 200, "n": n})
        assert outcome.result.ok
        issued = outcome.result.bytes_read + outcome.result.bytes_written
        per_element[n] = issued / (200 * n)
    assert per_element[130] < 1.06 * per_element[128], per_element


def test_comparisons_logic_and_where_with_nan_and_infinities() -> None:
    from ncdc.language.load import load_diagram_text
    from ncdc.verify.reference import make_inputs

    # One build at the spec's sizes, run at others (odd inner sizes): 1 and 0 from the
    # comparisons, -inf from the select, NaN compared as IEEE 754 does (false; ne: true)
    text = (support.SPECS / "ew_compare_where.yaml").read_text()
    for m, n in [(37, 130), (3, 7), (5, 64)]:
        d = load_diagram_text(text, sizes={"m": m, "n": n})
        inputs = make_inputs(d, seed=m)
        inputs["X"][0, :3] = [np.nan, 0.25, -0.5]
        got, want, _ = run(text, {"m": 37, "n": 130}, {"m": m, "n": n}, inputs)
        w, ref = got["W"], want["W"]
        assert np.array_equal(w, ref), (m, n)
        assert w[0, 0] == -np.inf  # NaN > T and NaN <= -0.5 are false: dropped


def test_gather_reads_the_selected_rows_at_any_size() -> None:
    from ncdc.language.load import load_diagram_text
    from ncdc.verify.reference import make_inputs

    # One build, run at other sizes (the table's size v a runtime parameter too): the first
    # and last rows, repeats, and rows of 130 and 7 values (a vector run and a tail, or none)
    text = (support.SPECS / "gather_embedding_odd.yaml").read_text()
    for t, v, d in [(37, 101, 130), (4, 3, 7)]:
        diagram = load_diagram_text(text, sizes={"t": t, "v": v, "d": d})
        inputs = make_inputs(diagram, seed=t)
        inputs["ids"][:3] = [0, v - 1, v - 1]
        sizes = {"t": t, "v": v, "d": d}
        got, want, _ = run(text, {"t": 37, "v": 101, "d": 130}, sizes, inputs)
        assert np.array_equal(got["Y"], want["Y"]), sizes
        assert np.array_equal(got["Y"][1], inputs["E"][v - 1].astype(np.float32))
        assert got["ncdc_status"].tolist() == [0]  # no index out of range
    inputs["ids"][2] = 3  # one past the end of the last run's table
    got, want, _ = run(text, {"t": 37, "v": 101, "d": 130}, sizes, inputs)
    assert got["ncdc_status"].tolist() == [1] and np.isnan(got["Y"][2]).all()
    assert np.array_equal(got["Y"][:2], want["Y"][:2])


def test_an_output_later_ops_read_is_read_as_stored() -> None:
    """A bf16 result saved as an output and read by a later op: the later op reads the
    bf16 value (what is stored, and what the reference reads), not the fp32 it came from."""
    text = """
ncdc: 1
name: stored
axes: {m: 5, n: 45}
inputs: {X: {axes: [m, n], dtype: fp32}}
ops: ["A = mul(X, 1.37, dtype=bf16)", "E = add(A, 0.001, dtype=fp32)"]
outputs: [A, E]
"""
    sizes = {"m": 5, "n": 45}
    got, want, _ = run_at_sizes(text, sizes, sizes)
    assert np.array_equal(got["A"], want["A"])
    # within fp32's rounding (the fp32 sum of bf16 A: 3e-3 off where A was read unrounded)
    assert np.max(np.abs(got["E"] - want["E"])) <= 1e-6 * np.max(np.abs(want["E"]))
