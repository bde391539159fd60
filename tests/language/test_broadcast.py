"""The broadcast trap (ncdc.language.broadcast): a binary map that makes an axis no operand
has whole, and nothing downstream implies, is warned of by name; one stated with `axes=`,
or one whose use implies its axes, is not."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.language.broadcast import broadcast_warnings, new_axes
from ncdc.language.load import load_diagram, load_diagram_text
from tests import support

LIBRARY = sorted(support.DIAGRAMS.glob("*.yaml")) + sorted(support.SPECS.glob("*.yaml"))


def _diagram(ops: list[str], outputs: str, inputs: str = "") -> object:
    text = (
        "ncdc: 1\nname: t\naxes: {m: 8, n: 4, k: 2}\ninputs:\n"
        "  X: {axes: [m, n], dtype: bf16}\n  v: {axes: [k], dtype: bf16}\n"
        "  A: {axes: [m, k], dtype: bf16}\n"
        + inputs
        + "ops:\n"
        + "".join(f"  - {op}\n" for op in ops)
        + f"outputs: [{outputs}]\n"
    )
    return load_diagram_text(text, "t.yaml")


def _uses(*extra: str) -> list[str]:
    # every input read once, so the spec validates: v and A through a harmless product
    return [*extra, "U = contract(A, v, over=k)"]


def test_a_vector_over_a_new_axis_is_named_with_its_size_and_how_to_mean_it():
    d = _diagram(_uses("Y = mul(X, v)"), "Y, U")
    (line,) = broadcast_warnings(d)
    # Y is m x n x k = 8 x 4 x 2 = 64 bf16 values, 128 bytes
    assert line.startswith("t.yaml:9: mul(X, v) broadcasts to [m, n, k]: k comes from v only")
    assert "so Y holds 64 values (128 B bf16)" in line
    assert line.endswith("(hint: if that is meant, say so: Y = mul(X, v, axes=[m, n, k]))")


def test_the_issue_trap_two_matrices_sharing_one_axis():
    # add(C, A) with C[m, n] and A[m, k]: D[m, n, k], k from A alone
    d = _diagram(_uses("D = add(X, A)"), "D, U")
    assert new_axes(d, d.ops[0]) == {"k": "A"}
    assert "add(X, A) broadcasts to [m, n, k]: k comes from A only" in broadcast_warnings(d)[0]


def test_axes_stated_say_the_broadcast_is_meant():
    d = _diagram(_uses("Y = mul(X, v, axes=[m, n, k])"), "Y, U")
    assert d.tensor("Y").axes == ("m", "n", "k")
    assert broadcast_warnings(d) == ()


def test_axes_stated_in_another_order_are_refused_with_the_order_to_write():
    with pytest.raises(SpecError) as info:
        _diagram(_uses("Y = mul(X, v, axes=[k, m, n])"), "Y, U")
    line = info.value.line()
    assert "mul(X, v) has axes ['m', 'n', 'k']; 'axes' says ['k', 'm', 'n']" in line
    assert "write axes=[m, n, k]" in line


def test_a_broadcast_onto_a_tensor_with_every_axis_is_no_trap():
    # a bias over n woven over m; a scalar; a number
    d = _diagram(_uses("Y = add(X, b)", "Z = mul(Y, 2)"), "Z, U", "  b: {axes: [n], dtype: bf16}\n")
    assert new_axes(d, d.ops[0]) == {} and broadcast_warnings(d) == ()


def test_positions_added_to_scores_over_all_their_axes_are_implied():
    # D[k, m] = j - i is an outer product of two positions, but it meets S over [m, n, k]
    ops = ["I = index(m)", "J = index(k)", "D = sub(J, I)", "T = mul(D, w)",
           "Y = add(S, T)"]  # fmt: skip
    inputs = "  S: {axes: [m, n, k], dtype: fp32}\n  w: {axes: [n], dtype: fp32}\n"
    d = _diagram(_uses(*ops, "Z = add(Y, X)", "Q = add(Z, v)"), "Q, U", inputs)
    assert [op.out for op in d.ops if new_axes(d, op)] == ["D", "T"]
    assert broadcast_warnings(d) == ()


def test_a_product_summed_over_its_new_axis_is_a_contraction_written_out():
    d = _diagram(_uses("Y = mul(X, v)", "s = sum(Y, over=k)"), "s, U")
    assert broadcast_warnings(d) == ()
    # summed over an axis it had anyway, k stays: still a trap
    d = _diagram(_uses("Y = mul(X, v)", "s = sum(Y, over=n)"), "s, U")
    assert "mul(X, v) broadcasts" in broadcast_warnings(d)[0]


def test_a_broadcast_saved_as_an_output_is_a_trap_even_where_another_use_implies_it():
    inputs = "  S: {axes: [m, n, k], dtype: fp32}\n"
    d = _diagram(_uses("Y = mul(X, v)", "Z = add(S, Y)"), "Y, Z, U", inputs)
    assert len(broadcast_warnings(d)) == 1


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_no_library_diagram_or_spec_falls_into_it(path):
    assert broadcast_warnings(load_diagram(path)) == ()
