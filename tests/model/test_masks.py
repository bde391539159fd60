"""Mask rules (ncdc.model.masks): read from a diagram, their tile classes and their band,
each checked against the rule evaluated pair by pair by the float64 reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.model.graph import build_graph
from ncdc.model.masks import (
    Call,
    Const,
    MaskRule,
    Pos,
    TileClass,
    read_mask_rule,
    rule_band,
    tile_class,
    tile_classes,
)
from ncdc.verify.reference import evaluate, make_inputs

HEAD = """ncdc: 1
name: rule
axes: {b: 1, h: 1, q: 53, x: 71, d: 32}
inputs:
  Q: {axes: [b, h, q, d], dtype: bf16}
  K: {axes: [b, h, x, d], dtype: bf16}
  V: {axes: [b, h, x, d], dtype: bf16}
ops:
  - S = contract(Q, K, over=d)
  - I = index(q)
  - J = index(x)
"""
TAIL = """  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""
# Rules as users write them: (ops computing K0 from I and J, the select)
RULES = {
    "prefix": (["C = le(J, I)", "F = lt(J, 9)", "K0 = or(C, F)"], "M = where(K0, S, -inf)"),
    "sinks": (
        ["C = le(J, I)", "W0 = sub(I, 12)", "W = gt(J, W0)", "N = lt(J, 3)",
         "A = or(W, N)", "K0 = and(C, A)"],
        "M = where(K0, S, -inf)",
    ),
    "band": (["D = sub(J, I)", "A = ge(D, -7)", "B = le(D, 5)", "K0 = and(A, B)"],
             "M = where(K0, S, -inf)"),
    "inverted": (["C = gt(J, I)", "K0 = or(C, 0)"], "M = where(K0, -inf, S)"),
    "stripes": (["D = sub(I, J)", "A = abs(D)", "E = mul(A, 3)", "K0 = lt(E, 20)"],
                "M = where(K0, S, -inf)"),
    "data": (["C = le(J, I)", "G = gt(S, 0.5)", "K0 = and(C, G)"], "M = where(K0, S, -inf)"),
    "nothing": (["C = lt(J, 0)", "E = ge(I, 0)", "K0 = and(C, E)"], "M = where(K0, S, -inf)"),
}  # fmt: skip


def spec(name: str) -> str:
    ops, select = RULES[name]
    return HEAD + "".join(f"  - {o}\n" for o in [*ops, select]) + TAIL


def kept(name: str) -> np.ndarray:
    """[q, x]: where the float64 reference keeps the pair (M is finite)."""
    d = load_diagram_text(spec(name))
    m = evaluate(d, make_inputs(d, seed=1))["M"]
    axes = d.tensor("M").axes  # the condition's axes come first: (x, q, b, h) or so
    order = [axes.index(a) for a in ("q", "x", "b", "h")]
    return np.isfinite(np.transpose(m, order)[:, :, 0, 0])


def rule_of(name: str) -> MaskRule:
    d = load_diagram_text(spec(name))
    rule = read_mask_rule(build_graph(d, load_hardware("h200")).kernels[0])
    assert rule is not None
    return rule


@pytest.mark.parametrize("name", sorted(RULES))
def test_tile_classes_agree_with_the_rule_pair_by_pair(name: str) -> None:
    # Every MASKED tile keeps no pair and every KEPT tile keeps all, at odd tile sizes.
    keep, rule = kept(name), rule_of(name)
    for g_q, s_x in [(16, 16), (7, 13), (53, 71)]:
        classes = tile_classes(rule, 53, 71, g_q, s_x)
        for (t, row), u in itertools.product(enumerate(classes), range(len(classes[0]))):
            tile = keep[t * g_q : (t + 1) * g_q, u * s_x : (u + 1) * s_x]
            got = row[u]
            if got == TileClass.MASKED:
                assert not tile.any(), (name, t, u)
            elif got == TileClass.KEPT:
                assert tile.all(), (name, t, u)


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_band_holds_every_kept_pair(name: str) -> None:
    keep, rule = kept(name), rule_of(name)
    lo, hi = rule_band(rule)
    i, j = np.nonzero(keep)
    if lo is not None:
        assert (j - i >= lo).all(), name
    if hi is not None:
        assert (j - i <= hi).all(), name


def test_bands_are_tight_for_the_rules_users_write() -> None:
    # prefix: j <= max(i, 8); sinks: causal above, open below; a band; keeps-nothing
    assert rule_band(rule_of("prefix")) == (None, 8)
    assert rule_band(rule_of("sinks")) == (None, 0)
    assert rule_band(rule_of("band")) == (-7, 5)
    assert rule_band(rule_of("inverted")) == (None, 0)  # not(j > i): causal
    assert rule_band(rule_of("stripes")) == (None, None)  # 3|i - j| < 20: not affine
    assert rule_band(rule_of("data")) == (None, 0)  # the data side leaves the causal one
    lo, hi = rule_band(rule_of("nothing"))
    assert lo is not None and hi is not None and lo > hi


def test_classes_are_exact_where_interval_arithmetic_is() -> None:
    # A band rule's tiles: every tile wholly inside is KEPT, every one outside MASKED.
    rule, keep = rule_of("band"), kept("band")
    for t, row in enumerate(tile_classes(rule, 53, 71, 8, 8)):
        for u, c in enumerate(row):
            tile = keep[t * 8 : (t + 1) * 8, u * 8 : (u + 1) * 8]
            want = TileClass.KEPT if tile.all() else TileClass.MASKED if not tile.any() else 1
            assert c == want, (t, u)


def test_a_rule_on_data_is_partial_where_the_positions_do_not_decide() -> None:
    rule = rule_of("data")
    assert tile_class(rule, (0, 7), (40, 47)) == TileClass.MASKED  # above the diagonal
    assert tile_class(rule, (40, 47), (0, 7)) == TileClass.PARTIAL  # S decides


def test_rules_are_read_only_from_a_select_of_minus_infinity_before_softmax() -> None:
    assert rule_of("prefix").query == "q" and rule_of("prefix").key == "x"
    d = load_diagram_text(spec("prefix").replace("where(K0, S, -inf)", "where(K0, S, 0)"))
    assert read_mask_rule(build_graph(d, load_hardware("h200")).kernels[0]) is None


@pytest.mark.parametrize(("ops", "query"), [
    # a rule on data alone (a non-causal document mask): the rows are Q's only axis K lacks
    (["K0 = eq(S, S)"], "q"),
    # a head's position beside the query's: a batch position, constant over a tile
    (["I = index(q)", "J = index(x)", "H = index(h)", "C = le(J, I)", "E = ge(J, H)",
      "K0 = and(C, E)"], "q"),
    (["J = index(x)", "H = index(h)", "K0 = ge(J, H)"], "q"),
])  # fmt: skip
def test_the_query_axis_of_a_rule_that_names_none_or_more(ops: list[str], query: str) -> None:
    head = HEAD.replace("h: 1", "h: 3").replace("  - I = index(q)\n  - J = index(x)\n", "")
    d = load_diagram_text(head + "".join(
        f"  - {o}\n" for o in [*ops, "M = where(K0, S, -inf)"]) + TAIL)  # fmt: skip
    rule = read_mask_rule(build_graph(d, load_hardware("h200")).kernels[0])
    assert rule is not None and (rule.query, rule.key) == (query, "x")
    if "C = le(J, I)" in ops:
        assert rule_band(rule) == (None, 0)  # the causal band, read beside the head's term


def test_grouped_query_heads_leave_a_data_rule_without_a_query() -> None:
    # Q [b, g, r, q, d] against K [b, g, x, d]: r and q are both the queries' axes, and a
    # rule that names neither leaves the rows unknown (no band, no tile classes)
    text = (HEAD.replace("Q: {axes: [b, h, q, d]", "Q: {axes: [b, h, r, q, d]")
            .replace("h: 1,", "h: 1, r: 2,").replace("  - I = index(q)\n  - J = index(x)\n", "")
            + "  - K0 = eq(S, S)\n  - M = where(K0, S, -inf)\n" + TAIL)  # fmt: skip
    rule = read_mask_rule(build_graph(load_diagram_text(text), load_hardware("h200")).kernels[0])
    assert rule is not None and rule.query is None
    named = text.replace("K0 = eq(S, S)", "I = index(q)\n  - J = index(x)\n  - K0 = le(J, I)")
    rule = read_mask_rule(build_graph(load_diagram_text(named), load_hardware("h200")).kernels[0])
    assert rule is not None and rule.query == "q"


def test_whole_number_arithmetic_only_is_bounded() -> None:
    # 0.5 j < i is not bounded (a rounding could cross the edge); 2 j < i is
    half = MaskRule("q", "x", Call("lt", (Call("mul", (Pos("x"), Const(0.5))), Pos("q"))))
    double = MaskRule("q", "x", Call("lt", (Call("mul", (Pos("x"), Const(2))), Pos("q"))))
    assert tile_class(half, (0, 3), (100, 103)) == TileClass.PARTIAL
    assert tile_class(double, (0, 3), (100, 103)) == TileClass.MASKED
