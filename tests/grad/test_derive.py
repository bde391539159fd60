"""Reverse mode (ncdc.grad.derive): every derived gradient matches central finite
differences of the forward, in float64 and unrounded, for the library's training diagrams
under every way of getting what the backward reads, and for a diagram that takes every
rule; a construct with no derivative is one clear error."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.grad.derive import default_wrt, derive
from ncdc.grad.pair import every_way, make_pair
from ncdc.language.load import load_diagram, load_diagram_text
from tests.grad.helpers import compare
from tests.support import DIAGRAMS

# Small sizes, every query seeing a key (q <= x: a row that sees none has lse = -inf)
TRAINING = {
    "attention": {"b": 1, "h": 2, "q": 3, "x": 5, "d": 4},
    "attention_causal": {"b": 1, "h": 2, "q": 3, "x": 5, "d": 4},
    "attention_lse": {"b": 1, "h": 1, "q": 3, "x": 5, "d": 4},
    "gqa_attention": {"b": 1, "g": 2, "r": 2, "q": 3, "x": 4, "d": 3},
    "mlp": {"m": 3, "k": 4, "n": 5},
    "layernorm": {"m": 3, "n": 5},
    "rmsnorm": {"m": 3, "n": 5},
    "softmax": {"m": 3, "n": 5},
    "vocab_cross_entropy": {"t": 3, "v": 7},
    "cross_entropy": {"t": 3, "v": 7},  # the label's logit picked by a gather
    "embedding": {"t": 6, "v": 4, "d": 3},  # rows picked many times: a scatter-add
    "prefix_lm_attention": {"b": 1, "h": 1, "q": 3, "x": 5, "d": 4},  # a rule of positions
    "swiglu_mlp": {"m": 3, "d": 4, "f": 5},
    "matmul": {"m": 3, "n": 4, "k": 5},
}
# Finite differences at step 1e-5 are good to about 1e-10 here; a wrong rule is off by O(1).
TOLERANCE = 1e-8

EVERY_RULE = """
ncdc: 1
name: every_rule
axes: {m: 3, n: 4, k: 2}
inputs:
  X: {axes: [m, n], dtype: fp32}
  Y: {axes: [n, m], dtype: fp32}     # woven into X's order: its gradient permuted back
  v: {axes: [n], dtype: fp32}
  u: {axes: [m], dtype: fp32}
  W: {axes: [n, k], dtype: fp32}
ops:
  - A = add(X, Y)
  - B = div(A, v)                    # broadcast: dv summed over m
  - C = tanh(B)
  - D = sigmoid(C)
  - E = mul(D, u)
  - F = log_softmax(E, over=m)       # over the first axis
  - G = sum(F, over=m)
  - H = mean(E, over=n)
  - I = sub(H, u)
  - J = gelu(X, approximate=tanh)
  - K = gelu(J)
  - L = square(K)
  - L1 = add(L, 1)
  - N = sqrt(L1)
  - P = rsqrt(N)
  - R = recip(P)
  - R1 = neg(R)
  - S = exp(R1)
  - S1 = add(S, 2)
  - T = log(S1)
  - Wm = window(X, query=m, key=n, left=1)   # read by exp, not a softmax: masked again
  - Z2 = exp(Wm)
  - O1 = contract(X, v, over=n)      # dX an outer product
  - O2 = contract(X, W, over=n)
  - O3 = logsumexp(X, over=[m, n])
  - O4 = erf(X)
outputs: [G, I, T, Z2, O1, O2, O3, O4]
"""


# The derivatives through comparisons: a step, a sign, a pick (ties split in halves), a
# where, the largest of a row (ties shared), an output later ops read, a share given to a
# comparison's result (no gradient flows on from it), and an output no gradient flows from.
PICKS = """
ncdc: 1
name: picks
axes: {m: 3, n: 5}
inputs:
  X: {axes: [m, n], dtype: fp32}
  A: {axes: [m, n], dtype: fp32}
  v: {axes: [n], dtype: fp32}
ops:
  - R = relu(X)
  - B = abs(A)
  - C = max(R, B)
  - D = min(X, v)
  - M = gt(X, 0.2)
  - E = where(M, A, D)
  - F = max(E, over=n)
  - P = ge(X, 0)
  - G = mul(X, P)
  - H = floor(X)
outputs: [C, E, F, G, H]
"""


def test_comparisons_steps_and_picks_match_finite_differences() -> None:
    d = load_diagram_text(PICKS)
    backward = derive(d)
    assert backward.seeds == ("C", "E", "F", "G")  # floor's H passes no gradient on
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"X", "A", "v"} and max(errors.values()) < TOLERANCE, (ways, errors)


def test_ties_split_as_torch_splits_them() -> None:
    """At a tie a finite difference is no derivative: torch's conventions instead, a max's
    gradient shared by the tied values, max(a, b)'s halved, relu's 0 at 0."""
    import numpy as np

    from ncdc.verify.reference import evaluate

    text = PICKS.replace("axes: {m: 3, n: 5}", "axes: {m: 1, n: 4}")
    d = load_diagram_text(text)
    pair = make_pair(d, derive(d), every_way(d, derive(d))[0])
    x = np.array([[0.0, 1.0, 1.0, -2.0]])
    values = {"X": x, "A": np.array([[0.0, 1.0, -3.0, 5.0]]), "v": np.array([0.0, 2.0, 1.0, -2.0])}
    forward = evaluate(pair.forward, values, rounded=False)
    grads = {f"d{o}": np.zeros_like(forward[o]) for o in ("C", "E", "G")}
    grads["dF"] = np.ones_like(forward["F"])  # only F's gradient: the row's largest of E
    inputs = {t.name: forward.get(t.name, grads.get(t.name)) for t in pair.backward.inputs}
    got = evaluate(pair.backward, inputs, rounded=False)
    # E = where(X > 0.2, A, min(X, v)) = [0, 1, -3, -2]: its max, 1, is A's at n=1 alone;
    # min(X, v) ties at n=0 (0, 0) and n=3 (-2, -2): halves where E takes D, none here
    assert np.array_equal(got["dA"], [[0.0, 1.0, 0.0, 0.0]])
    assert np.array_equal(got["dX"], [[0.0, 0.0, 0.0, 0.0]])
    grads["dF"][...] = 0.0
    grads["dC"] = np.ones_like(forward["C"])  # C = max(relu(X), |A|) = [0, 1, 3, 5]
    inputs = {t.name: forward.get(t.name, grads.get(t.name)) for t in pair.backward.inputs}
    got = evaluate(pair.backward, inputs, rounded=False)
    # n=0: relu(0) = |0|, a tie: each side half, and relu's and abs's slopes at 0 are 0;
    # n=1: relu(1) = |1|, a tie: half to X (slope 1), half to A (sign +1)
    assert np.array_equal(got["dX"], [[0.0, 0.5, 0.0, 0.0]])
    assert np.array_equal(got["dA"], [[0.0, 0.5, -1.0, 1.0]])


# Gathers and scatter-adds, each the other's gradient: a table per batch entry (the index's
# b matched by name), a table shared by every entry, and a scatter-add whose operand has the
# index's axes inside and in another order.
SCATTERS = """
ncdc: 1
name: scatters
axes: {b: 2, s: 5, v: 3, d: 4}
inputs:
  E: {axes: [b, v, d], dtype: fp32}
  T: {axes: [v, d], dtype: fp32}
  G: {axes: [d, s, b], dtype: fp32}
  ids: {axes: [b, s], dtype: int32}
ops:
  - Y = gather(E, ids, axis=v)
  - Z = gather(T, ids, axis=v)
  - A = mul(Y, Z)
  - S = scatter_add(G, ids, axis=v)
  - R = tanh(S)
  - Q = scatter_add(A, ids, axis=v, over=s)
outputs: [A, R, Q]
"""


def test_gathers_and_scatters_match_finite_differences() -> None:
    d = load_diagram_text(SCATTERS)
    backward = derive(d)
    assert {line.fn for line in backward.lines} >= {"gather", "scatter_add"}
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"E", "T", "G"} and max(errors.values()) < TOLERANCE, (ways, errors)


SCANS = """
ncdc: 1
name: scans
axes: {b: 3, s: 6, d: 4}
inputs:
  X: {axes: [b, s], dtype: fp32}
  W: {axes: [s, d], dtype: fp32}
ops:
  - A = cumsum(X, over=s)                    # along the innermost axis
  - B = cumsum(W, over=s, reverse=true)      # along an outer one, from its end
  - Y = tanh(A)
  - Z = mul(B, B)
outputs: [Y, Z]
"""


def test_running_sums_match_finite_differences() -> None:
    """A running sum's gradient is the running sum of its gradient from the other end."""
    d = load_diagram_text(SCANS)
    backward = derive(d)
    lines = {line.text() for line in backward.lines}
    assert any("cumsum(" in t and "reverse=true" in t for t in lines)  # dX: from the end
    assert any("cumsum(" in t and "reverse" not in t for t in lines)  # dW: from the start
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"X", "W"} and max(errors.values()) < TOLERANCE, (ways, errors)


SELECTED = """
ncdc: 1
name: picks
axes: {t: 3, e: 7, j: 2}
inputs:
  X: {axes: [t, e], dtype: fp32}
ops:
  - I = topk(X, over=e, k=j)
  - V = gather(X, I, axis=e)        # each row's two largest values
  - A = argmin(X, over=e)
  - M = gather(X, A, axis=e)        # and its smallest
  - Y = tanh(V)
  - Z = mul(M, M)
outputs: [Y, Z]
"""


def test_picked_values_match_finite_differences() -> None:
    """The positions take no gradient; the values picked by them take it through their
    gathers (a scatter-add over the picks, a pick in each row)."""
    d = load_diagram_text(SELECTED)
    backward = derive(d)
    assert {line.fn for line in backward.lines} >= {"scatter_add", "where"}
    assert {"I", "A"} <= set(backward.reads)  # the forward's picks, read back
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"X"} and max(errors.values()) < TOLERANCE, (ways, errors)


def test_a_scalar_only_compared_is_named_with_what_to_leave_out() -> None:
    inputs = "X: {axes: [m, n], dtype: fp32}, p: {axes: [], dtype: fp32}"
    d = load_diagram_text(_spec("'G = gt(X, p)', 'Y = mul(X, G)'", inputs), "t.yaml")
    with pytest.raises(SpecError, match="no gradient flows to the scalar p") as e:
        derive(d)
    assert e.value.hint == "leave it out: --wrt X"
    assert derive(d, ["X"]).grads == {"X": "dX"}


def test_no_gradient_flowing_at_all_is_one_clear_error() -> None:
    d = load_diagram_text(_spec("'Y = floor(X)'"), "t.yaml")
    with pytest.raises(SpecError, match="no gradient flows from the outputs to X"):
        derive(d)


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_library_gradients_match_finite_differences_every_way(name: str) -> None:
    d = load_diagram(DIAGRAMS / f"{name}.yaml", TRAINING[name])
    backward = derive(d)
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == set(default_wrt(d))
        assert max(errors.values()) < TOLERANCE, (ways, errors)


def test_every_rule_matches_finite_differences() -> None:
    d = load_diagram_text(EVERY_RULE)
    backward = derive(d)
    ways = every_way(d, backward)
    for chosen in (ways[0], ways[-1]):  # everything saved; everything recomputed
        errors = compare(d, make_pair(d, backward, chosen))
        assert max(errors.values()) < TOLERANCE, errors


def test_wrt_names_the_gradients_taken() -> None:
    d = load_diagram(DIAGRAMS / "attention.yaml", TRAINING["attention"])
    b = derive(d, ["V"])
    assert b.grads == {"V": "dV"}
    assert [line.out for line in b.lines] == ["dV"]  # dV = contract(P, dO, over=q)
    assert b.reads == ("P",)


def test_integer_inputs_take_no_gradient() -> None:
    d = load_diagram(DIAGRAMS / "varlen_attention.yaml")
    assert "lens" not in default_wrt(d) and derive(d).grads.keys() == {"Q", "K", "V"}


def _spec(ops: str, inputs: str = "X: {axes: [m, n], dtype: bf16}") -> str:
    return (
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8, k: 3}\n"
        f"inputs: {{{inputs}}}\nops: [{ops}]\noutputs: [Y]\n"
    )


@pytest.mark.parametrize(
    "ops, inputs, message",
    [
        ("'Y = cast(X, to=int8)'", None, "rounds to whole numbers"),
        ("'Y = cummax(X, over=n)'", None, "cummax has no gradient in ncdc"),
        ("'Y = contract(X, A, over=n, scale=s)'",
         "X: {axes: [m, n], dtype: bf16}, A: {axes: [n], dtype: bf16}, s: {axes: [], dtype: fp32}",
         "scale tensor s"),
    ],
)  # fmt: skip
def test_no_derivative_is_one_clear_error(ops: str, inputs: str | None, message: str) -> None:
    d = load_diagram_text(_spec(ops, inputs or "X: {axes: [m, n], dtype: bf16}"), "t.yaml")
    with pytest.raises(SpecError) as e:
        derive(d)
    line = e.value.line()
    assert message in line and line.startswith("t.yaml:") and "cannot differentiate" in line


@pytest.mark.parametrize(
    "wrt, message",
    [(["Z"], "not an input"), (["n"], "not an input")],
)
def test_wrt_refusals(wrt: list[str], message: str) -> None:
    d = load_diagram_text(_spec("'Y = exp(X)'"), "t.yaml")
    with pytest.raises(SpecError, match=message):
        derive(d, wrt)


def test_wrt_integer_and_unreached_inputs_are_refused() -> None:
    d = load_diagram(DIAGRAMS / "varlen_attention.yaml")
    with pytest.raises(SpecError, match="whole numbers"):
        derive(d, ["lens"])


def test_a_tensor_named_like_a_gradient_is_refused() -> None:
    spec = _spec("'dX = exp(X)', 'Y = exp(dX)'")
    with pytest.raises(SpecError, match="the diagram has a tensor dX"):
        derive(load_diagram_text(spec))
