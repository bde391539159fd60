"""The diagram as the rest of ncdc reads it (ncdc.language.diagram)."""

from __future__ import annotations

from ncdc.language.load import load_diagram


def test_tensors_producers_and_consumers() -> None:
    d = load_diagram("diagrams/attention.yaml", {"b": 1, "h": 2, "q": 8, "x": 16, "d": 32})
    assert [t.name for t in d.inputs] == ["Q", "K", "V"]
    assert d.tensor("S").axes == ("b", "h", "q", "x")
    assert d.size(d.tensor("S")) == 1 * 2 * 8 * 16
    assert d.producer("P").fn == "softmax" and d.producer("Q") is None
    assert [op.out for op in d.consumers("P")] == ["O"]
    o = d.producer("O")
    assert o.inputs == ("P", "V") and o.reduced == ("x",)
    assert d.producer("P").reduced == ()  # softmax keeps its axis
