"""The backward diagram as it is written: op lines in the language's own syntax, each with
the axes of its result, and fresh names that clash with nothing of the forward.

A line is emitted once: asking again for the same operation on the same operands gives
the name already made (so a rule may spell a subexpression twice, as `gelu_tanh`'s
derivative spells its tanh). Derivatives held by the op records (ncdc.language.ops) are
nested expressions, `mul(g, sub(1, square(y)))`; `expand` writes one line per call.

    >>> t = Tape({"Y": ("m", "n"), "dY": ("m", "n")})
    >>> t.expand("mul(g, sub(1, square(y)))", {"g": "dY", "y": "Y"}, "t", "bf16")
    't_2'
    >>> [line.text() for line in t.lines]
    ['t = square(Y)', 't_1 = sub(1, t)', 't_2 = mul(dY, t_1, dtype=bf16)']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ncdc.language.names import MAX_NAME_LENGTH
from ncdc.language.ops import OPERATIONS

Arg = str | float
Value = str | float | int | tuple[str, ...]


@dataclass(frozen=True)
class Line:
    """One operation line: `out = fn(args, key=value...)`."""

    out: str
    fn: str
    args: tuple[Arg, ...]
    keywords: tuple[tuple[str, Value], ...] = ()

    def text(self) -> str:
        parts = [_spelled(a) for a in self.args]
        parts += [f"{k}={_spelled(v)}" for k, v in self.keywords]
        return f"{self.out} = {self.fn}({', '.join(parts)})"

    def renamed(self, names: Mapping[str, str]) -> Line:
        args = tuple(names.get(a, a) if isinstance(a, str) else a for a in self.args)
        return Line(names.get(self.out, self.out), self.fn, args, self.keywords)


def _spelled(v: Value) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(v) + "]" if len(v) != 1 else v[0]
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return v if isinstance(v, str) else repr(v)


class Tape:
    """The lines written so far, the axes of every name (the forward's and the new ones),
    and the names taken."""

    def __init__(self, axes: Mapping[str, tuple[str, ...]]):
        self.axes: dict[str, tuple[str, ...]] = dict(axes)
        self.lines: list[Line] = []
        self._made: dict[tuple, str] = {}
        self._counts: dict[str, int] = {}

    def fresh(self, stem: str) -> str:
        """A name starting with `stem` that nothing holds yet (`stem` itself when free)."""
        stem = stem[: MAX_NAME_LENGTH - 4]
        if stem not in self.axes:
            self.axes[stem] = ()
            return stem
        while True:
            self._counts[stem] = self._counts.get(stem, 0) + 1
            name = f"{stem}_{self._counts[stem]}"
            if name not in self.axes:
                self.axes[name] = ()
                return name

    def emit(self, fn: str, args: Sequence[Arg], stem: str, **keywords: Value | None) -> str:
        """The name of `fn(args, keywords)`, writing its line unless it was written."""
        kw: tuple[tuple[str, Value], ...] = tuple(
            (k, v) for k, v in keywords.items() if v is not None
        )
        key = (fn, tuple(args), kw)
        if key in self._made:
            return self._made[key]
        out = self.fresh(stem)
        self.axes[out] = self._result_axes(fn, tuple(args), dict(kw))
        self.lines.append(Line(out, fn, tuple(args), kw))
        self._made[key] = out
        return out

    def _result_axes(self, fn: str, args: tuple[Arg, ...], kw: dict) -> tuple[str, ...]:
        """The axes inference gives (ncdc.language.infer): kept, woven, reduced, contracted."""
        if fn == "index":
            return (str(args[0]),)
        if fn in ("slice", "roll", "shift"):
            into = str(kw.get("into", kw["axis"]))
            return tuple(into if a == kw["axis"] else a for a in self.axes[str(args[0])])
        if fn == "permute":
            order = kw["axes"]
            return (order,) if isinstance(order, str) else tuple(order)
        if fn in ("gather", "scatter_add"):  # as ncdc.language.infer places the axis
            source, index = self.axes[str(args[0])], self.axes[str(args[1])]
            axis = str(kw["axis"])
            if fn == "gather":
                new = [a for a in index if a not in source]
                return tuple(b for a in source for b in (new if a == axis else [a]))
            over = kw.get("over", index)
            over = (over,) if isinstance(over, str) else tuple(over)
            first = next(a for a in source if a in over)
            return tuple(axis if a == first else a for a in source if a not in over or a == first)
        ordered = (*args[1:], args[0]) if fn == "where" else args  # a select: its values first
        tensors = [self.axes[a] for a in ordered if isinstance(a, str)]
        union = tuple(dict.fromkeys(a for axes in tensors for a in axes))
        over = kw.get("over", ())
        over = (over,) if isinstance(over, str) else tuple(over)
        kind = OPERATIONS[fn].kind if fn in OPERATIONS else "map"
        if kind in ("contract", "reduce") or (fn == "max" and len(args) == 1):
            if "offsets" in kw:  # a grouped contraction drops its groups' axis
                over = over + self.axes[str(kw["offsets"])]
            return tuple(a for a in union if a not in over)
        return union

    def expand(self, expr: str, env: Mapping[str, Arg], stem: str, dtype: str | None) -> Arg:
        """Write the nested expression `expr` (calls of the language's operations on the
        names of `env` and numbers), its outermost call stored as `dtype`."""
        tree, rest = _parse(_tokens(expr))
        assert not rest, f"trailing tokens in {expr!r}"
        return self._write(tree, env, stem, dtype)

    def _write(self, tree: object, env: Mapping[str, Arg], stem: str, dtype: str | None) -> Arg:
        if isinstance(tree, float):
            return tree
        if isinstance(tree, str):
            return env[tree]
        assert isinstance(tree, tuple)
        fn: str = tree[0]
        children: list[object] = tree[1]
        args = [self._write(c, env, stem, None) for c in children]
        return self.emit(fn, args, stem, dtype=dtype)

    def zeros(self, axes: Sequence[str]) -> str:
        """A tensor of zeros over `axes`, in that order: each axis's `index` times 0, woven
        by adds (an index the kernel has; no memory)."""
        made = ""
        for a in axes:
            zero = self.emit("mul", (self.emit("index", (a,), f"i_{a}"), 0.0), f"zero_{a}")
            made = zero if not made else self.emit("add", (made, zero), "zero")
        return made

    def arrange(self, name: str, axes: Sequence[str], dtype: str) -> str:
        """`name` broadcast (and permuted) to exactly `axes`, in order: it has a subset of
        them. Adding zeros over `axes` first puts them in that order (a binary map's result
        takes its first operand's axes first)."""
        assert set(self.axes[name]) <= set(axes), (name, self.axes[name], axes)
        if self.axes[name] == tuple(axes):
            return name
        return self.emit("add", (self.zeros(axes), name), name, dtype=dtype)


_TOKEN = re.compile(r"\s*(?:([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|([(),]))")


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        assert m and m.end() > pos, f"bad derivative expression {expr!r} at {pos}"
        out.append(m.group(m.lastindex or 0))
        pos = m.end()
    return out


def _parse(tokens: list[str]) -> tuple[object, list[str]]:
    """A call `fn(arg, ...)`, a name or a number, and the tokens after it."""
    head, rest = tokens[0], tokens[1:]
    if re.fullmatch(r"[-+]?\d.*", head):
        return float(head), rest
    if not rest or rest[0] != "(":
        return head, rest
    children, rest = [], rest[1:]
    while rest[0] != ")":
        child, rest = _parse(rest)
        children.append(child)
        if rest[0] == ",":
            rest = rest[1:]
    return (head, children), rest[1:]
