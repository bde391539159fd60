"""The backward rules (ncdc.grad.rules), line by line where a line says it all; their
numbers are checked against finite differences in tests/grad/test_derive.py."""

from __future__ import annotations

from ncdc.grad.derive import derive
from ncdc.language.load import load_diagram, load_diagram_text
from tests.support import DIAGRAMS


def _texts(d) -> list[str]:
    return [line.text() for line in derive(d).lines]


def test_contract_gives_two_contractions_with_the_scale() -> None:
    d = load_diagram(DIAGRAMS / "attention.yaml")
    lines = _texts(d)
    assert "dQ = contract(dS, K, over=x, scale=0.08838834764831845, dtype=bf16)" in lines
    assert "dK = contract(dS, Q, over=q, scale=0.08838834764831845, dtype=bf16)" in lines
    assert "dV = contract(P, dO, over=q, dtype=bf16)" in lines


def test_softmax_rule_and_a_mask_read_only_by_softmax() -> None:
    d = load_diagram(DIAGRAMS / "attention_causal.yaml")
    lines = _texts(d)
    # dS = P * (dP - sum_x(dP * P)), the row sum reassociated through O = P V into
    # sum_d(dO * O) (FlashAttention's D: every key of a row at once is not needed); the
    # causal mask passes dM through (P is 0 where it drops)
    assert lines[2:6] == [
        "dM_1 = mul(dO, O)", "dM_2 = sum(dM_1, over=d, dtype=fp32)", "dM_3 = sub(dP, dM_2)",
        "dM = mul(P, dM_3, dtype=bf16)",
    ]  # fmt: skip
    assert "dQ = contract(dM, K, over=x, scale=0.08838834764831845, dtype=bf16)" in lines


def test_a_softmax_read_by_anything_but_an_output_contraction_keeps_its_row_sum() -> None:
    """The reassociation needs O = contract(P, V) an output (the backward has it) and P
    read by nothing else: a P saved as well, or an O that is not an output, keep
    sum_x(dP * P)."""
    import re

    text = (DIAGRAMS / "attention.yaml").read_text()
    also = _texts(load_diagram_text(text.replace("outputs: [O]", "outputs: [O, P]"), "a.yaml"))
    assert any(re.search(r"= mul\(dP\w*, P\)$", line) for line in also), also
    inner = text.replace(
        "  - O = contract(P, V, over=x)", "  - R = contract(P, V, over=x)\n  - O = exp(R)"
    )
    assert inner != text
    kept = _texts(load_diagram_text(inner, "a.yaml"))
    assert any(re.search(r"= mul\(dP\w*, P\)$", line) for line in kept), kept
    assert not any("mul(dO, O)" in line for line in also + kept)


def test_bias_gradient_sums_over_the_broadcast_axis() -> None:
    assert "dbias = sum(dZ, over=m, dtype=bf16)" in _texts(load_diagram(DIAGRAMS / "mlp.yaml"))


def test_cast_passes_the_gradient_straight_through_times_its_scale() -> None:
    d = load_diagram_text(
        "ncdc: 1\nname: c\naxes: {m: 4}\ninputs: {X: {axes: [m], dtype: bf16}}\n"
        "ops: ['Y = cast(X, to=fp8_e4m3, scale=0.5)']\noutputs: [Y]\n"
    )
    assert _texts(d) == ["dX = mul(dY, 0.5, dtype=bf16)"]


def test_norm_statistics_are_fp32_and_recomputed_from_x() -> None:
    lines = _texts(load_diagram(DIAGRAMS / "rmsnorm.yaml"))
    assert lines[:4] == [
        "dY_1 = square(X)", "dY_2 = mean(dY_1, over=n, dtype=fp32)",
        "dY_3 = add(dY_2, 1e-06, dtype=fp32)", "dY_4 = rsqrt(dY_3, dtype=fp32)",
    ]  # fmt: skip
    assert lines[-1] == "dX = mul(dY_11, dY_4, dtype=bf16)"
