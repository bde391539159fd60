"""ncdc.language.bind: a diagram's sizes from its inputs' shapes, by axis name."""

from __future__ import annotations

import pytest

from ncdc.errors import ArrayError
from ncdc.language.bind import bind_sizes
from ncdc.language.diagram import MAX_AXIS_SIZE
from ncdc.language.load import load_diagram
from tests import support


def test_shapes_size_every_axis_they_carry_and_leave_the_rest() -> None:
    d = load_diagram(support.DIAGRAMS / "attention.yaml")
    q, k, v = (tuple(d.axes[a] for a in t.axes) for t in d.inputs)
    b, h, s, dk = (3, 5, 77, d.axes[d.inputs[0].axes[3]])
    sizes = bind_sizes(d, [(b, h, s, dk), (b, h, 51, dk), (b, h, 51, v[3])])
    assert list(sizes) == list(d.axes)  # the diagram's axis order
    assert [sizes[a] for a in d.inputs[0].axes] == [3, 5, 77, dk]
    assert sizes[d.inputs[1].axes[2]] == 51


def test_axes_no_input_carries_keep_the_diagrams_size() -> None:
    d = load_diagram(support.DIAGRAMS / "matmul.yaml")
    carried = {a for t in d.inputs for a in t.axes}
    assert set(d.axes) == carried  # matmul: every axis on an input
    assert bind_sizes(d, [(d.axes["m"], d.axes["k"]), (d.axes["k"], d.axes["n"])]) == dict(d.axes)


@pytest.mark.parametrize(
    "shapes, message",
    [
        ([(8,), (8, 8)], r"input A: expected 2 dimensions \[m, k\], found shape \(8,\)"),
        ([(8, 9), (10, 8)], r"input B: axis k \(dimension 0\) is 10, but input A gives k=9"),
        ([(0, 9), (9, 8)], r"input A: axis m \(dimension 0\) is 0; sizes are 1 to"),
        ([(8, 9), (9, MAX_AXIS_SIZE + 1)], r"input B: axis n \(dimension 1\) is"),
    ],
)
def test_shapes_that_do_not_fit_are_named_with_their_input_and_axis(shapes, message) -> None:
    d = load_diagram(support.DIAGRAMS / "matmul.yaml")
    with pytest.raises(ArrayError, match=message):
        bind_sizes(d, shapes)
