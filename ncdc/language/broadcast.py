"""The broadcast trap: a binary map whose operands each bring an axis the others lack makes a
tensor over all of them, which is rarely what was meant (`add(C, A)` with C[m, n] and
A[m, k] is D[m, n, k], at 8192 x 8192 x 4096 half a TiB).

Such a broadcast is meant when what the result flows into implies its axes: a mask's
positions `sub(J, I)` over [x, q] are added to scores S that are over [b, h, q, x] anyway,
and a product summed over the new axis is a contraction written out. Elsewhere
`broadcast_warnings` names the axes and how to say the broadcast on purpose: `axes=` on the
operation, which states the result's axes.

    >>> from ncdc.language.load import load_diagram_text
    >>> d = load_diagram_text('''{ncdc: 1, name: t, axes: {m: 4, n: 8, k: 2},
    ...   inputs: {X: {axes: [m, n], dtype: fp32}, v: {axes: [k], dtype: fp32}},
    ...   ops: ["Y = mul(X, v)"], outputs: [Y]}''', "t.yaml")
    >>> print(broadcast_warnings(d)[0])  # doctest: +NORMALIZE_WHITESPACE
    t.yaml:3: mul(X, v) broadcasts to [m, n, k]: k comes from v only, so Y holds 64 values
    (256 B fp32) (hint: if that is meant, say so: Y = mul(X, v, axes=[m, n, k]))
"""

from __future__ import annotations

import functools

from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.units import format_bytes

# kinds that give back every axis they take: what flows through them keeps its axes
_KEEPING = ("binary", "map", "cast", "mask", "softmax", "norm")


def broadcast_warnings(diagram: Diagram) -> tuple[str, ...]:
    """One line per binary map that creates an axis no operand has whole and that nothing
    downstream implies (see the module docstring), in the order of the ops."""
    implied = functools.partial(_implied, diagram)
    lines = []
    for op in diagram.ops:
        added = new_axes(diagram, op)
        if added and "axes" not in op.params and not implied(op.out, frozenset(added)):
            lines.append(_warning(diagram, op, added))
    return tuple(lines)


def new_axes(diagram: Diagram, op: Op) -> dict[str, str]:
    """Axis -> the operand that alone brings it, for a binary map none of whose tensor
    operands has all the result's axes; empty for any other op. The operand with the most
    axes (the first of them) is the one the others are read as broadcast onto."""
    if op.kind != "binary":
        return {}
    tensors = [diagram.tensor(o) for o in op.operands if isinstance(o, str)]
    base = max(tensors, key=lambda t: len(t.axes))
    if set(base.axes) >= set(op.axes):
        return {}
    added: dict[str, str] = {}
    for t in tensors:
        for a in t.axes:
            if a not in base.axes:
                added.setdefault(a, t.name)
    return added


def _implied(diagram: Diagram, name: str, added: frozenset[str]) -> bool:
    """Whether every use of `name` implies its `added` axes: no output holds it as it is,
    and each op reading it reads beside it a tensor over all its axes, sums over one of the
    added axes, states its axes (`axes=`), or keeps them into a result that is implied."""
    if name in diagram.outputs:
        return False
    axes = set(diagram.tensor(name).axes)
    for op in diagram.consumers(name):
        others = [diagram.tensor(n) for n in op.inputs if n != name]
        if any(set(t.axes) >= axes for t in others) or "axes" in op.params:
            continue
        if set(op.reduced) & added:
            continue
        kept = added & set(op.axes)
        if not kept or not _implied(diagram, op.out, kept):
            return False
    return True


def _warning(diagram: Diagram, op: Op, added: dict[str, str]) -> str:
    call = op.text.split("=", 1)[1].strip() if "=" in op.text else op.text
    sources = "; ".join(
        f"{' and '.join(axes)} {'comes' if len(axes) == 1 else 'come'} from {who} only"
        for who, axes in _by_operand(added).items()
    )  # fmt: skip
    size = 1
    for a in op.axes:
        size *= diagram.axes[a]
    held = f"{size:,} values ({format_bytes(size * DTYPES[op.dtype].bytes)} {op.dtype})"
    listed = ", ".join(op.axes)
    stated = f"{call[:-1]}, axes=[{listed}])" if call.endswith(")") else call
    where = f"{diagram.source}:{op.line}" if op.line else diagram.source
    return (
        f"{where}: {call} broadcasts to [{listed}]: {sources}, so {op.out} holds {held} "
        f"(hint: if that is meant, say so: {op.out} = {stated})"
    )


def _by_operand(added: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for axis, who in added.items():
        out.setdefault(who, []).append(axis)
    return out
