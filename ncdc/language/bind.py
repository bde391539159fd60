"""Axis sizes from the shapes of a diagram's inputs: what a call with arrays (`ncdc.load`)
or a run on the user's data (`ncdc run --inputs`) is sized by.

    >>> from ncdc.language.load import load_diagram
    >>> d = load_diagram("diagrams/matmul.yaml")
    >>> bind_sizes(d, [(96, 40), (40, 72)])
    {'m': 96, 'n': 72, 'k': 40}
    >>> bind_sizes(d, [(96, 40), (41, 72)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ncdc.errors.ArrayError: input B: axis k (dimension 0) is 41, but input A gives k=40 ...
"""

from __future__ import annotations

from collections.abc import Sequence

from ncdc.errors import ArrayError
from ncdc.language.diagram import MAX_AXIS_SIZE, Diagram


def bind_sizes(diagram: Diagram, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """The diagram's sizes (in its axis order) with those the inputs' `shapes` (in
    `inputs:` order) give; an ArrayError for a shape of the wrong rank, two inputs that
    disagree on an axis, or a size out of range. Axes no input carries keep their size."""
    sizes = dict(diagram.axes)
    given: dict[str, str] = {}
    for t, shape in zip(diagram.inputs, shapes, strict=True):
        if len(shape) != len(t.axes):
            raise ArrayError(
                f"input {t.name}: expected {len(t.axes)} dimensions [{', '.join(t.axes)}], "
                f"found shape {tuple(shape)}"
            )
        for i, (axis, n) in enumerate(zip(t.axes, shape, strict=True)):
            if axis in given:
                if sizes[axis] != n:
                    raise ArrayError(
                        f"input {t.name}: axis {axis} (dimension {i}) is {n}, but input "
                        f"{given[axis]} gives {axis}={sizes[axis]}",
                        hint="inputs that share an axis have one size along it",
                    )
                continue
            if not 1 <= n <= MAX_AXIS_SIZE:
                raise ArrayError(
                    f"input {t.name}: axis {axis} (dimension {i}) is {n}; sizes are 1 to "
                    f"{MAX_AXIS_SIZE}"
                )
            sizes[axis], given[axis] = int(n), t.name
    return sizes
