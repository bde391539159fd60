"""The one-line operation syntax (ncdc.language.parse)."""

from __future__ import annotations

from ncdc.language.load import load_diagram_text

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


def test_keyword_colon_form_is_read_too():
    # DESIGN.md writes `over: k`; YAML reads such a line as a one-key mapping.
    d = load_diagram_text(BASE.replace("over=k", "over: k"))
    assert d.ops[0].over == ("k",)


def test_infinities_are_numbers_and_inf_is_no_name():
    from ncdc.errors import SpecError
    from ncdc.language.parse import parse_op_text

    st = parse_op_text("M = where(K, S, -inf)", "x")
    assert st.args == ("K", "S", float("-inf"))
    assert parse_op_text("M = where(K, info, +inf)", "x").args == ("K", "info", float("inf"))
    text = BASE.replace("B: {axes: [k, n]", "inf: {axes: [k, n]").replace("A, B,", "A, inf,")
    try:
        load_diagram_text(text)
    except SpecError as e:
        assert "'inf' is reserved" in e.message
    else:
        raise AssertionError("a tensor named inf was accepted")
