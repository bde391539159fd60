"""Streaming legality (ncdc.model.streaming, docs/cost-model.md section 5)."""

from __future__ import annotations

import pytest

from ncdc.errors import PlanError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram

ATTENTION = """
ncdc: 1
name: att
axes: {q: 256, x: 512, d: 64}
inputs: {Q: {axes: [q, d], dtype: bf16}, K: {axes: [x, d], dtype: bf16},
         V: {axes: [x, d], dtype: bf16}}
ops: ["S = contract(Q, K, over=d)", "P = softmax(S, over=x)", "O = contract(P, V, over=x)"]
outputs: [O]
"""


def test_stream_of_a_saved_softmax_is_refused():
    # Section 5: plain softmax, whose output still has the axis, does not stream.
    text = """
ncdc: 1
name: s
axes: {q: 64, x: 64}
inputs: {S: {axes: [q, x], dtype: bf16}}
ops: ["P = softmax(S, over=x)"]
outputs: [P]
schedule: {stream: [x]}
"""
    with pytest.raises(PlanError, match="cannot stream x: softmax P over x is saved"):
        plan_diagram(load_diagram_text(text), load_hardware("napkin"))


def test_stream_through_layernorm_is_refused():
    text = """
ncdc: 1
name: ln
axes: {m: 64, n: 64, k: 32}
inputs: {X: {axes: [m, n], dtype: bf16}, W: {axes: [n, k], dtype: bf16}}
ops: ["Y = layernorm(X, over=n)", "Z = contract(Y, W, over=n)"]
outputs: [Z]
schedule: {stream: [n]}
"""
    with pytest.raises(PlanError, match="cannot stream n: layernorm Y over n"):
        plan_diagram(load_diagram_text(text), load_hardware("napkin"))


def test_online_softmax_streams():
    plan = plan_diagram(load_diagram_text(ATTENTION), load_hardware("napkin"))
    assert "x" in plan.kernels[0].tiles["l1"].stream
