"""A diagram as the YAML a spec is written in (format 1): what `ncdc grad` writes, and what a
compiled kernel's `.json` keeps where the diagram it was compiled from has no file (a spec
given as text or built in a program) or its file says something else now.

    >>> from ncdc.language.load import load_diagram_text
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: scaled   # a comment the text does not keep
    ... axes: {m: 4, n: 8}
    ... inputs: {X: {axes: [m, n], dtype: bf16}}
    ... ops: ["Y = mul(X, 2)"]
    ... outputs: [Y]
    ... schedule: {deterministic: true}
    ... ''')
    >>> print(diagram_yaml(d), end="")
    ncdc: 1
    name: scaled
    doc: ""
    axes: {m: 4, n: 8}
    inputs:
      X: {axes: [m, n], dtype: bf16}
    ops:
      - Y = mul(X, 2)
    outputs: [Y]
    schedule: {deterministic: true}
    >>> diagram_yaml(load_diagram_text(diagram_yaml(d))) == diagram_yaml(d)
    True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from ncdc.language.diagram import Diagram, Schedule, Tensor


def diagram_yaml(d: Diagram) -> str:
    """`d` as spec text that loads back to the same diagram (comments and layout aside)."""
    ops = [op.text for op in d.ops]
    return diagram_text(d.name, d.doc, d.axes, d.inputs, ops, d.outputs, d.schedule)


def diagram_text(
    name: str, doc: str, axes: Mapping[str, int], inputs: Iterable[Tensor], ops: Iterable[str],
    outputs: Iterable[str], schedule: Schedule | None = None,
) -> str:  # fmt: skip
    """A diagram as the YAML a spec is written in (format 1)."""
    sizes = ", ".join(f"{a}: {n}" for a, n in axes.items())
    lines = ["ncdc: 1", f"name: {name}", f"doc: {json.dumps(doc)}", f"axes: {{{sizes}}}", "inputs:"]
    for t in inputs:
        expected = f", expected: [{', '.join(map(str, t.expected))}]" if t.expected else ""
        lines.append(f"  {t.name}: {{axes: [{', '.join(t.axes)}], dtype: {t.dtype}{expected}}}")
    lines.append("ops:")
    lines += [f"  - {json.dumps(text) if ':' in text or '#' in text else text}" for text in ops]
    lines.append(f"outputs: [{', '.join(outputs)}]")
    if schedule is not None and (rest := schedule_text(schedule)):
        lines.append(f"schedule: {{{rest}}}")
    return "\n".join(lines) + "\n"


def schedule_text(s: Schedule) -> str:
    parts = [f"{key}: [{', '.join(value)}]" for key, value in
             (("group", s.group), ("stream", s.stream)) if value]  # fmt: skip
    if s.tiles:
        parts.append("tiles: {" + ", ".join(f"{a}: {n}" for a, n in s.tiles.items()) + "}")
    if s.breaks_given:
        parts.append(f"materialize: [{', '.join(s.materialize)}]")
    if s.deterministic:
        parts.append("deterministic: true")
    return ", ".join(parts)
