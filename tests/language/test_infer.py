"""Inference (ncdc.language.infer): every result's axes and dtype from its operation and
operands, in dependency order.
"""

from __future__ import annotations

import pytest

from ncdc.language.load import load_diagram, load_diagram_text
from tests import support

ROOT = support.ROOT


BASE = """ncdc: 1
name: mm
axes: {m: 64, n: 32, k: 16}
inputs:
  A: {axes: [m, k], dtype: bf16}
  B: {axes: [k, n], dtype: bf16}
ops:
  - C = contract(A, B, over=k)
outputs: [C]
"""


def test_attention_shapes():
    d = load_diagram(ROOT / "diagrams/attention.yaml")
    assert d.tensor("S").axes == ("b", "h", "q", "x")
    assert d.tensor("O").axes == ("b", "h", "q", "d")
    assert d.ops[0].scale == (0.08838834764831845,)
    assert d.schedule.stream == ("x",)


def test_gqa_is_plain_weaving():
    # K and V are not woven over r: S and O gain r from Q alone.
    d = load_diagram(ROOT / "diagrams/gqa_attention.yaml")
    assert d.tensor("K").axes == ("b", "g", "x", "d")
    assert d.tensor("S").axes == ("b", "g", "r", "q", "x")
    assert d.tensor("O").axes == ("b", "g", "r", "q", "d")


def test_ops_may_be_written_in_any_order():
    text = BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - C = exp(D)\n  - D = contract(A, B, over=k)\n"
    )
    d = load_diagram_text(text)
    assert [op.out for op in d.ops] == ["D", "C"]


def test_broadcast_binary_and_cast():
    text = """
ncdc: 1
name: q8
axes: {m: 4, n: 8}
inputs:
  X: {axes: [m, n], dtype: fp32}
  s: {axes: [], dtype: fp32}
  b: {axes: [n], dtype: bf16}
ops:
  - Y = add(X, b)
  - Z = cast(Y, to=fp8_e4m3, scale=s)
  - W = mul(Z, 0.5)
outputs: [W]
"""
    d = load_diagram_text(text)
    assert d.tensor("Y").axes == ("m", "n") and d.tensor("Y").dtype == "fp32"
    assert d.tensor("Z").dtype == "fp8_e4m3" and d.ops[1].scale == ("s",)
    assert d.ops[2].operands == ("Z", 0.5)


COMPARE = """ncdc: 1
name: cmp
axes: {m: 4, n: 8}
inputs:
  X: {axes: [m, n], dtype: bf16}
  T: {axes: [m], dtype: fp32}
ops:
  - G = gt(X, T)
  - Y = where(G, X, -inf)
  - N = not(G)
  - Z = where(N, 1, 0)
outputs: [Y, Z]
"""


def test_where_has_its_values_type_and_comparisons_their_widest():
    d = load_diagram_text(COMPARE)
    assert d.tensor("G").dtype == "fp32" and d.tensor("G").axes == ("m", "n")
    assert d.tensor("Y").dtype == "bf16"  # X's, not the fp32 condition's
    assert d.tensor("Z").dtype == "fp32"  # numbers only: the condition's
    assert d.ops[1].operands == ("G", "X", float("-inf"))


def test_where_takes_three_operands_and_finite_scales_stay_finite():
    from ncdc.errors import SpecError

    for bad, message in [
        ("Y = where(G, X)", "where expects 3 operand(s)"),
        ("Y = mul(X, inf) * 2", "only allowed on contract"),
        ("Y = cast(X, to=fp32, scale=inf)", "expected a finite number"),
    ]:
        text = COMPARE.replace("Y = where(G, X, -inf)", bad)
        try:
            load_diagram_text(text)
        except SpecError as e:
            assert message in e.message, (bad, e.message)
        else:
            raise AssertionError(bad)


GATHER = """
ncdc: 1
name: g
axes: {t: 5, v: 11, d: 8}
inputs:
  E: {axes: [v, d], dtype: bf16}
  Z: {axes: [t, v], dtype: bf16}
  ids: {axes: [t], dtype: int32}
ops:
  - Y = gather(E, ids, axis=v)
  - P = gather(Z, ids, axis=v, dtype=fp32)
outputs: [Y, P]
"""


def test_gather_replaces_the_axis_by_the_index_axes_the_source_lacks():
    d = load_diagram_text(GATHER)
    # an embedding: E's v replaced by ids' t, in place
    assert d.tensor("Y").axes == ("t", "d") and d.tensor("Y").dtype == "bf16"
    # a label per row: ids' t is Z's own, so v goes and nothing comes in
    assert d.tensor("P").axes == ("t",) and d.tensor("P").dtype == "fp32"
    assert d.ops[0].params["axis"] == "v" and d.ops[0].operands == ("E", "ids")


def test_gather_refuses_a_float_index_and_an_axis_the_source_lacks():
    from ncdc.errors import SpecError

    for bad, message in [
        ("Y = gather(E, Z, axis=v)", "expected int32"),
        ("Y = gather(E, ids, axis=t)", "gather along 't', but E has axes"),
        ("Y = gather(Z, E, axis=v)", "the index E of gather is bf16"),
        ("Y = gather(E, ids, axis=3)", "expected an axis name for 'axis'"),
    ]:
        try:
            load_diagram_text(GATHER.replace("Y = gather(E, ids, axis=v)", bad))
        except SpecError as e:
            assert message in e.message, (bad, e.message)
        else:
            raise AssertionError(bad)


SCATTER = """
ncdc: 1
name: scatter
axes: {b: 2, s: 3, v: 5, d: 4}
inputs:
  G: {axes: [b, s, d], dtype: bf16}
  H: {axes: [d, b, s], dtype: fp32}
  ids: {axes: [b, s], dtype: int32}
ops:
  - Y = scatter_add(G, ids, axis=v)
  - P = scatter_add(G, ids, axis=v, over=s, dtype=fp32)
  - Q = scatter_add(H, ids, axis=v)
outputs: [Y, P, Q]
"""


def test_scatter_add_replaces_the_index_axes_it_sums_by_the_axis() -> None:
    d = load_diagram_text(SCATTER)
    # every index axis summed: b and s go, v comes in where b was
    assert d.tensor("Y").axes == ("v", "d") and d.tensor("Y").dtype == "bf16"
    # over s only: b matched by name (a table per batch entry)
    assert d.tensor("P").axes == ("b", "v", "d") and d.tensor("P").dtype == "fp32"
    assert d.tensor("Q").axes == ("d", "v")
    assert d.ops[0].kind == "scatter" and d.ops[0].over == ("b", "s")
    assert d.ops[1].over == ("s",) and d.ops[1].params["axis"] == "v"


def test_scatter_add_refuses_what_it_cannot_place() -> None:
    from ncdc.errors import SpecError

    first = "Y = scatter_add(G, ids, axis=v)"
    for bad, message in [
        ("Y = scatter_add(G, H, axis=v)", "the index H of scatter_add is fp32"),
        ("Y = scatter_add(G, ids, axis=d)", "scatter_add adds along 'd', but G has that axis"),
        ("Y = scatter_add(G, ids, axis=b)", "but G has that axis"),
        ("Y = scatter_add(ids, ids, axis=v)", "it sums floats"),
        ("Y = scatter_add(G, ids, axis=v, over=d)", "scatter_add over 'd', but ids has axes"),
        ("Y = scatter_add(G, ids, axis=w)", "unknown axis"),
        ("Y = scatter_add(G, ids, axis=3)", "expected an axis name for 'axis'"),
    ]:
        try:
            load_diagram_text(SCATTER.replace(first, bad))
        except SpecError as e:
            assert message in e.message, (bad, e.message)
        else:
            raise AssertionError(bad)
    scalar = SCATTER.replace("ids: {axes: [b, s]", "ids: {axes: []")
    with pytest.raises(SpecError, match="and ids has none"):
        load_diagram_text(scalar)
    lacking = SCATTER.replace("G: {axes: [b, s, d]", "G: {axes: [s, d]")
    with pytest.raises(SpecError, match=r"the index ids has axes \['b'\] that G lacks"):
        load_diagram_text(lacking)


def test_a_select_is_laid_out_as_its_values() -> None:
    """where(C, A, B) takes A's (and B's) axes first, then the condition's new ones: a mask
    rule over (x, q) selecting scores over (b, h, q, x) keeps the scores' layout."""
    d = load_diagram_text(
        "ncdc: 1\nname: sel\naxes: {b: 2, q: 3, x: 5}\n"
        "inputs:\n  S: {axes: [b, q, x], dtype: fp32}\n  T: {axes: [x], dtype: fp32}\n"
        "ops:\n  - I = index(q)\n  - J = index(x)\n  - C = le(J, I)\n"
        "  - M = where(C, S, -inf)\n  - N = where(C, T, 0)\noutputs: [M, N]\n",
        "sel.yaml",
    )
    assert d.tensor("C").axes == ("x", "q")
    assert d.tensor("M").axes == ("b", "q", "x")
    assert d.tensor("N").axes == ("x", "q")  # T's x first, then the condition's q
