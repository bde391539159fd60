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
        "ncdc: 1\nname: t\naxes: {m: 4, n: 8}\n"
        f"inputs: {{{inputs}}}\nops: [{ops}]\noutputs: [Y]\n"
    )


@pytest.mark.parametrize(
    "ops, inputs, message",
    [
        ("'Y = relu(X)'", None, "its derivative is a step"),
        ("'Y = abs(X)'", None, "its derivative is the sign"),
        ("'Y = max(X, 0.5)'", None, "larger (smaller) operand"),
        ("'Y = max(X, over=n)'", None, "the gradient of a max goes to the largest"),
        ("'Y = cast(X, to=int8)'", None, "rounds to whole numbers"),
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
