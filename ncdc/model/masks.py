"""Mask rules: a mask written as a plain diagram, read back as an expression.

A diagram masks attention's logits with a rule of comparisons and logic on positions, index
tensors and values, and one select before the softmax:

    - I = index(q)
    - J = index(x)
    - C = le(J, I)              # causal: key j at or before query i
    - F = lt(J, 64)             # a prefix of 64 keys every query sees (prefix-LM)
    - K = or(C, F)
    - M = where(K, S, -inf)     # (or where(N, -inf, S) with N true where keys are dropped)
    - P = softmax(M, over=x)

`read_mask_rule` finds that select and turns the ops behind its condition into a `Term`: a
tree of `Pos` (index(axis): the query's i, the key's j, a batch index), `Const`, `Data` (a
tensor's values, which only a run knows) and `Call` (an elementwise operation of the
language, by its record's name). A `MaskRule` is that tree with the axes it masks.

From a rule, without running it:

- `tile_class(rule, (i0, i1), (j0, j1))`: whether every (query, key) pair of a tile is
  dropped (`MASKED`), every one kept (`KEPT`), or it cannot say (`PARTIAL`), by interval
  arithmetic; exact where it answers MASKED or KEPT (positions are whole numbers, and only
  operations that stay exact on them are bounded), conservative otherwise. A block-sparse
  plan reads these classes (`tile_classes`) to skip MASKED tiles and drop the mask code from
  KEPT ones.
- `rule_band(rule)`: the band i + lo <= j <= i + hi outside which no pair is kept, for any
  sizes (None for an unbounded side). The fused attention kernel skips the key tiles outside
  it, as it does a causal or window mask's, and the cost model prices the same tiles
  (ncdc.model.geometry.mask_band); inside it the rule runs per score.

    >>> rule = MaskRule("q", "x", Call("or", (Call("le", (Pos("x"), Pos("q"))),
    ...                                       Call("lt", (Pos("x"), Const(64))))))
    >>> rule_band(rule)                      # j - i <= 63: nothing kept above that
    (None, 63)
    >>> tile_class(rule, (0, 15), (0, 15)).name, tile_class(rule, (0, 15), (100, 115)).name
    ('KEPT', 'MASKED')
    >>> tile_class(rule, (64, 79), (70, 85)).name   # the diagonal
    'PARTIAL'
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ncdc.language.diagram import Op
    from ncdc.model.graph import Kernel


@dataclass(frozen=True)
class Pos:
    """The position along `axis` (`index(axis)`): a whole number from 0."""

    axis: str


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Data:
    """The values of tensor `name` (an input, or a result the rule does not look into)."""

    name: str


@dataclass(frozen=True)
class Call:
    """An elementwise operation of the language (`fn`, its op record's name) of terms."""

    fn: str
    args: tuple[Term, ...]


Term = Pos | Const | Data | Call


@dataclass(frozen=True)
class MaskRule:
    """Keys along `key` are kept for the query at position i along `query` where `keep` is
    true (not 0); `query` is None for a rule that names no query position."""

    query: str | None
    key: str
    keep: Term


class TileClass(enum.IntEnum):
    """What a rule does to a tile of (query, key) pairs."""

    MASKED = 0  # every pair dropped: the tile need not be visited
    PARTIAL = 1  # some may be kept and some dropped: the mask runs per pair
    KEPT = 2  # every pair kept: the tile needs no mask


# ---- reading a rule from a kernel ----------------------------------------------------------

LOGIC = ("and", "or", "not")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def read_mask_rule(kernel: Kernel) -> MaskRule | None:
    """The rule of the select `where(C, S, -inf)` (or `where(C, -inf, S)`) that the kernel's
    softmax reads (through masks, if any), or the backward's P recomputed from it, else
    None. Its query axis is the position beside the key's that the rule compares, or, in
    attention, the queries' axis of the logits' contraction (`_rows_axes`), which a rule of
    data alone (a document mask) names none of; None where neither decides."""
    found = _masking_select(kernel)
    if found is None:
        return None
    select, key, query = found
    by_out = {op.out: op for op in kernel.ops}
    cond, a, b = select.operands
    keep = _term(cond, by_out)
    if b == -math.inf and a != -math.inf:
        pass
    elif a == -math.inf and b != -math.inf:
        keep = Call("not", (keep,))
    else:
        return None
    rows = None
    if key is None:  # the backward: the key is the position that is not the queries'
        others = sorted({p.axis for p in positions(keep)} - {query})
        if len(others) != 1:
            return None
        key = others[0]
    else:
        rows = _rows_axes(kernel, key)
    queries = sorted({p.axis for p in positions(keep)} - {key})
    if rows is not None:  # the logits' contraction: a batch position (index(h)) is no query
        queries = [a for a in queries if a in rows] or (rows if len(rows) == 1 else [])
    return MaskRule(queries[0] if len(queries) == 1 else None, key, keep)


def _rows_axes(kernel: Kernel, key: str) -> list[str] | None:
    """The axes Q has and K lacks in the contraction that makes the logits over `key` (K the
    operand that carries the key), as the attention family reads them (`attention_roles`):
    the queries' axis, and grouped-query heads beside it; None where the kernel has no such
    contraction. A rule's query is the one of them it names, else the only one; a position
    it reads of another axis (a head's, `index(h)`) is a batch position, constant over a
    tile.

        >>> from ncdc.hardware.load import load_hardware
        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.model.graph import build_graph
        >>> k = build_graph(load_diagram("diagrams/attention.yaml"),
        ...                 load_hardware("h200")).kernels[0]
        >>> _rows_axes(k, "x")
        ['q']
        >>> k = build_graph(load_diagram("diagrams/gqa_attention.yaml"),
        ...                 load_hardware("h200")).kernels[0]
        >>> _rows_axes(k, "x")   # Q [b, g, r, q, d] against K [b, g, x, d]
        ['r', 'q']
    """
    first = next((op for op in kernel.ops if op.kind == "contract" and key in op.axes), None)
    names = [o for o in first.operands if isinstance(o, str)] if first else []
    axes = [a for n in names if (a := kernel.axes_of(n)) is not None]
    if first is None or len(axes) != 2 or sum(key in a for a in axes) != 1:
        return None
    k_axes, q_axes = sorted(axes, key=lambda a: key not in a)
    return [a for a in q_axes if a in first.axes and a not in k_axes]


def mask_select(kernel: Kernel) -> Op | None:
    """The `where` op whose rule `read_mask_rule` reads, else None."""
    found = _masking_select(kernel) if read_mask_rule(kernel) is not None else None
    return None if found is None else found[0]


def _masking_select(kernel: Kernel) -> tuple[Op, str | None, str | None] | None:
    """The `where` op (through masks) that turns the scores into what the kernel's softmax
    reads, with the key axis (the softmax's), or, in attention's fused backward, what P =
    exp(M - L) is recomputed from, with the query axis (that P's contraction dV = P dO sums
    over); None where there is no such select."""
    by_out = {op.out: op for op in kernel.ops}
    key = query = None
    soft = next((op for op in kernel.ops if op.kind == "softmax" and len(op.over) == 1), None)
    if soft is not None:
        name, (key,) = str(soft.operands[0]), soft.over
    else:
        exp = next((op for op in kernel.ops if op.fn == "exp" and op.operands[0] in by_out
                    and by_out[str(op.operands[0])].fn == "sub"), None)  # fmt: skip
        use = exp and next((c for c in kernel.ops if c.kind == "contract"
                            and exp.out in c.operands and len(c.over) == 1), None)  # fmt: skip
        if exp is None or use is None:
            return None
        name, (query,) = str(by_out[str(exp.operands[0])].operands[0]), use.over
    while name in by_out and by_out[name].kind == "mask":
        name = str(by_out[name].operands[0])
    select = by_out.get(name)
    if select is None or select.fn != "where":
        return None
    return select, key, query


def _term(operand: str | float, by_out: Mapping[str, Op]) -> Term:
    if not isinstance(operand, str):
        return Const(float(operand))
    op = by_out.get(operand)
    if op is None:
        return Data(operand)
    if op.kind == "index":
        return Pos(op.params["axis"])
    if op.kind in ("map", "binary") and not op.scale:
        return Call(op.fn, tuple(_term(o, by_out) for o in op.operands))
    return Data(operand)  # a cast, a mask, a gather...: bounded by nothing


def positions(term: Term) -> list[Pos]:
    """Every position the term reads."""
    if isinstance(term, Pos):
        return [term]
    if isinstance(term, Call):
        return [p for a in term.args for p in positions(a)]
    return []


# ---- tile classes: interval arithmetic -----------------------------------------------------

Interval = tuple[float, float]  # lo <= value <= hi; a truth value is within (0, 1)
UNKNOWN: Interval = (-math.inf, math.inf)
EXACT_INTEGERS = 2**24  # fp32 holds every whole number up to here: positions compare exactly
# the arithmetic that stays exact on whole numbers: the only arithmetic intervals bound
EXACT_ARITHMETIC = ("add", "sub", "mul", "neg", "abs", "min", "max")


def tile_class(
    rule: MaskRule, queries: tuple[int, int], keys: tuple[int, int],
    data: Mapping[str, Interval] | None = None,
) -> TileClass:  # fmt: skip
    """The class of the tile of queries i0..i1 and keys j0..j1 (inclusive) under `rule`;
    `data`: the interval a tensor's values take over the tile, by name (a data mask's block
    table, as the Hopper attention kernel builds it), unknown for the others.

        >>> docs = MaskRule("q", "x", Call("eq", (Data("dq"), Data("dx"))))
        >>> tile_class(docs, (0, 63), (0, 63)).name
        'PARTIAL'
        >>> [tile_class(docs, (0, 63), (0, 63), {"dq": (2, 2), "dx": dx}).name
        ...  for dx in ((2, 2), (0, 1), (1, 3))]
        ['KEPT', 'MASKED', 'PARTIAL']
    """
    ranges = {rule.key: keys}
    if rule.query is not None:
        ranges[rule.query] = queries
    lo, hi = _truth(_interval(rule.keep, ranges, data or {}))
    return TileClass.KEPT if lo else TileClass.PARTIAL if hi else TileClass.MASKED


def tile_classes(
    rule: MaskRule, queries: int, keys: int, g_q: int, s_x: int
) -> tuple[tuple[TileClass, ...], ...]:
    """The class of every tile of g_q queries by s_x keys (the last ones cut at the axes),
    one row per query tile.

        >>> rule = MaskRule("q", "x", Call("le", (Pos("x"), Pos("q"))))   # causal
        >>> [[c.value for c in row] for row in tile_classes(rule, 128, 128, 64, 64)]
        [[1, 0], [2, 1]]
    """
    return tuple(
        tuple(
            tile_class(rule, (i, min(i + g_q, queries) - 1), (j, min(j + s_x, keys) - 1))
            for j in range(0, keys, s_x)
        )
        for i in range(0, queries, g_q)
    )


def tile_class_grid(rule: MaskRule, rows: Any, cols: Any) -> Any:
    """`tile_class` of every tile at once: `rows` and `cols` are NumPy arrays of shape
    (n, 2) holding the first and last query of each query tile and the first and last key
    of each key tile; the result is an int array (queries, keys) of TileClass values, the
    same interval arithmetic on arrays (a long sequence has a quarter million tiles).

        >>> import numpy as np
        >>> causal = MaskRule("q", "x", Call("le", (Pos("x"), Pos("q"))))
        >>> spans = np.array([[0, 63], [64, 127]])
        >>> tile_class_grid(causal, spans, spans).tolist()
        [[1, 0], [2, 1]]
    """
    import numpy as np

    ranges = {rule.key: (cols[None, :, 0], cols[None, :, 1])}
    if rule.query is not None:
        ranges[rule.query] = (rows[:, None, 0], rows[:, None, 1])
    lo, hi = _interval_grid(rule.keep, ranges)
    shape = (len(rows), len(cols))
    surely, possibly = _truth_grid((np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)))
    return np.where(surely, int(TileClass.KEPT), np.where(possibly, int(TileClass.PARTIAL), 0))


def _truth_grid(v: tuple[Any, Any]) -> tuple[Any, Any]:
    return (v[0] > 0) | (v[1] < 0), ~((v[0] == 0) & (v[1] == 0))


def _interval_grid(t: Term, ranges: Mapping[str, tuple[Any, Any]]) -> tuple[Any, Any]:
    """`_interval` on arrays of tiles (NumPy broadcasting); the same cases, in the same order."""
    import numpy as np

    def boolean(surely: Any, possibly: Any) -> tuple[Any, Any]:
        return np.where(surely, 1.0, 0.0), np.where(possibly, 1.0, 0.0)

    if isinstance(t, Pos):
        lo, hi = ranges.get(t.axis, (0, math.inf))
        return np.asarray(lo, float), np.asarray(hi, float)
    if isinstance(t, (Const, Data)):
        v = _interval(t, ranges={}, data={})
        return np.asarray(v[0]), np.asarray(v[1])
    args = [_interval_grid(a, ranges) for a in t.args]
    if t.fn in LOGIC:
        truths = [_truth_grid(a) for a in args]
        if t.fn == "not":
            return boolean(~truths[0][1], ~truths[0][0])
        join = np.logical_and if t.fn == "and" else np.logical_or
        surely, possibly = truths[0]
        for s, p in truths[1:]:
            surely, possibly = join(surely, s), join(possibly, p)
        return boolean(surely, possibly)
    if t.fn in COMPARE:
        (a0, a1), (b0, b1) = args
        fn = t.fn
        if fn == "eq":
            same = (a0 == a1) & (a1 == b0) & (b0 == b1)
            return boolean(same, ~((a1 < b0) | (b1 < a0)))
        if fn == "ne":
            e = _interval_grid(Call("eq", t.args), ranges)
            return boolean(e[1] == 0, e[0] == 0)
        if fn in ("gt", "ge"):
            (a0, a1), (b0, b1) = (b0, b1), (a0, a1)
            fn = "lt" if fn == "gt" else "le"
        if fn == "lt":
            return boolean(a1 < b0, a0 < b1)
        return boolean(a1 <= b0, a0 <= b1)
    if t.fn == "where":
        surely, possibly = _truth_grid(args[0])
        (a0, a1), (b0, b1) = args[1:]
        lo = np.where(surely, a0, np.where(possibly, np.minimum(a0, b0), b0))
        hi = np.where(surely, a1, np.where(possibly, np.maximum(a1, b1), b1))
        return lo, hi
    if not all(whole_term(a) for a in t.args):
        return np.asarray(-math.inf), np.asarray(math.inf)
    (a0, a1), *rest = args
    if t.fn == "add":
        return a0 + rest[0][0], a1 + rest[0][1]
    if t.fn == "sub":
        return a0 - rest[0][1], a1 - rest[0][0]
    if t.fn == "neg":
        return -a1, -a0
    if t.fn == "abs":
        low = np.where((a0 <= 0) & (a1 >= 0), 0.0, np.minimum(abs(a0), abs(a1)))
        return low, np.maximum(abs(a0), abs(a1))
    if t.fn in ("min", "max"):
        f = np.minimum if t.fn == "min" else np.maximum
        return f(a0, rest[0][0]), f(a1, rest[0][1])
    if t.fn == "mul":
        b0, b1 = rest[0]
        with np.errstate(invalid="ignore"):
            p = [np.where((x == 0) | (y == 0), 0.0, x * y) for x in (a0, a1) for y in (b0, b1)]
        return np.minimum.reduce(p), np.maximum.reduce(p)
    return np.asarray(-math.inf), np.asarray(math.inf)


def _truth(v: Interval) -> tuple[bool, bool]:
    """(surely true, possibly true) of a value read as a truth value (not 0)."""
    surely = v[0] > 0 or v[1] < 0
    possibly = not (v[0] == 0 and v[1] == 0)
    return surely, possibly


def _bool(surely: bool, possibly: bool) -> Interval:
    return (1.0 if surely else 0.0, 1.0 if possibly else 0.0)


def _interval(
    t: Term, ranges: Mapping[str, tuple[int, int]], data: Mapping[str, Interval]
) -> Interval:
    """The values `t` takes over the tile (an axis not in `ranges`: any position; a tensor
    not in `data`: any value)."""
    if isinstance(t, Pos):
        lo, hi = ranges.get(t.axis, (0, math.inf))
        return (float(lo), float(hi))
    if isinstance(t, Const):
        if math.isinf(t.value):
            return (t.value, t.value)
        v = as_fp32(t.value)  # the constant the kernel compares with (a float literal)
        return (v, v) if abs(v) < EXACT_INTEGERS else UNKNOWN
    if isinstance(t, Data):
        given = data.get(t.name, UNKNOWN)
        return UNKNOWN if math.isnan(given[0]) or math.isnan(given[1]) else given
    args = [_interval(a, ranges, data) for a in t.args]
    if t.fn in LOGIC:
        truths = [_truth(a) for a in args]
        if t.fn == "not":
            return _bool(not truths[0][1], not truths[0][0])
        if t.fn == "and":
            return _bool(all(s for s, _ in truths), all(p for _, p in truths))
        return _bool(any(s for s, _ in truths), any(p for _, p in truths))
    if t.fn in COMPARE:
        return _compare(t.fn, *args)
    if t.fn == "where":
        surely, possibly = _truth(args[0])
        if surely:
            return args[1]
        if not possibly:
            return args[2]
        return (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]))
    return _arithmetic(t.fn, args, whole=all(whole_term(a) for a in t.args))


def as_fp32(v: float) -> float:
    """`v` rounded to fp32, as the kernels hold constants (finite values below 2^24 here).

    >>> as_fp32(0.7) < 0.7, as_fp32(0.5) == 0.5
    (True, True)
    """
    return float(struct.unpack("<f", struct.pack("<f", v))[0])


def whole_term(t: Term) -> bool:
    """Whether a term's values are whole numbers the kernel computes exactly (positions,
    whole constants, and sums, differences, products, minima and maxima of them)."""
    if isinstance(t, Pos):
        return True
    if isinstance(t, Const):
        return float(t.value).is_integer() and abs(t.value) < EXACT_INTEGERS
    if isinstance(t, Call) and t.fn in EXACT_ARITHMETIC:
        return all(whole_term(a) for a in t.args)
    return isinstance(t, Call) and (t.fn in LOGIC or t.fn in COMPARE)


def _arithmetic(fn: str, args: list[Interval], whole: bool) -> Interval:
    """Exact bounds of the operations that stay exact on whole numbers; UNKNOWN otherwise
    (a rounding could move a value across a comparison's edge)."""
    if not whole:
        return UNKNOWN
    if fn == "add":
        return (args[0][0] + args[1][0], args[0][1] + args[1][1])
    if fn == "sub":
        return (args[0][0] - args[1][1], args[0][1] - args[1][0])
    if fn == "neg":
        return (-args[0][1], -args[0][0])
    if fn == "abs":
        lo, hi = args[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if fn in ("min", "max"):
        f = min if fn == "min" else max
        return (f(args[0][0], args[1][0]), f(args[0][1], args[1][1]))
    if fn == "mul":
        products = [a * b for a in args[0] for b in args[1] if not (a == 0 or b == 0)] or [0.0]
        if any(a == 0 for a in args[0]) or any(b == 0 for b in args[1]):
            products.append(0.0)
        return (min(products), max(products))
    return UNKNOWN


def _compare(fn: str, a: Interval, b: Interval) -> Interval:
    """A comparison of two intervals: surely true, surely false, or either."""
    if fn == "eq":
        same = a[0] == a[1] == b[0] == b[1]
        return _bool(same, not (a[1] < b[0] or b[1] < a[0]))
    if fn == "ne":
        lo, hi = _compare("eq", a, b)
        return _bool(not hi, not lo)
    if fn in ("gt", "ge"):
        a, b = b, a
        fn = "lt" if fn == "gt" else "le"
    if fn == "lt":
        return _bool(a[1] < b[0], a[0] < b[1])
    return _bool(a[1] <= b[0], a[0] <= b[1])


# ---- the band a rule implies ---------------------------------------------------------------

Band = tuple[float, float]  # lo <= j - i <= hi; lo > hi for a rule that keeps nothing
FULL: Band = (-math.inf, math.inf)
EMPTY: Band = (math.inf, -math.inf)


def rule_band(rule: MaskRule) -> tuple[int | None, int | None]:
    """(lo, hi): every pair the rule keeps has i + lo <= j <= i + hi, whatever the sizes
    (positions from 0 up); None for a side the rule leaves open. A rule that names no query
    position bounds no band.

        >>> window = Call("gt", (Pos("x"), Call("sub", (Pos("q"), Const(128)))))
        >>> rule_band(MaskRule("q", "x", Call("and", (window, Call("le", (Pos("x"),
        ...                                                              Pos("q")))))))
        (-127, 0)
    """
    if rule.query is None:
        return None, None
    lo, hi = _band(rule.keep, rule.query, rule.key, negate=False)
    if lo > hi:  # keeps nothing: a band no key is in
        return 1, 0
    return (None if math.isinf(lo) else int(lo)), (None if math.isinf(hi) else int(hi))


def _band(t: Term, query: str, key: str, negate: bool) -> Band:
    """The range of j - i over the pairs where `t` (negated: where it is false) holds."""
    if isinstance(t, Call) and t.fn == "not":
        return _band(t.args[0], query, key, not negate)
    if isinstance(t, Call) and t.fn in ("and", "or"):
        parts = [_band(a, query, key, negate) for a in t.args]
        meet = (t.fn == "and") != negate  # De Morgan: not (a or b) = not a and not b
        if meet:
            return (max(p[0] for p in parts), min(p[1] for p in parts))
        return (min(p[0] for p in parts), max(p[1] for p in parts))
    if isinstance(t, Call) and t.fn in COMPARE:
        fn = _NEGATED[t.fn] if negate else t.fn
        left, right = (_affine(a, query, key) for a in t.args)
        if left is None or right is None:
            return FULL
        a, b, c = (x - y for x, y in zip(left, right, strict=True))
        return _atom_band(fn, (a, b, c))
    if isinstance(t, Const):
        kept = (t.value != 0) != negate
        return FULL if kept else EMPTY
    return FULL  # a value read as a truth value, data: anything


_NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def _affine(t: Term, query: str, key: str) -> tuple[int, int, int] | None:
    """(a, b, c) with t = a i + b j + c for whole a, b, c, else None."""
    if isinstance(t, Pos):
        return (1, 0, 0) if t.axis == query else (0, 1, 0) if t.axis == key else None
    if isinstance(t, Const):
        whole = float(t.value).is_integer() and abs(t.value) < EXACT_INTEGERS
        return (0, 0, int(t.value)) if whole else None
    if not isinstance(t, Call) or t.fn not in ("add", "sub", "neg", "mul"):
        return None
    args = [_affine(a, query, key) for a in t.args]
    if any(a is None for a in args):
        return None
    x = args[0]
    assert x is not None
    if t.fn == "neg":
        return (-x[0], -x[1], -x[2])
    y = args[1]
    assert y is not None
    if t.fn == "add":
        return (x[0] + y[0], x[1] + y[1], x[2] + y[2])
    if t.fn == "sub":
        return (x[0] - y[0], x[1] - y[1], x[2] - y[2])
    if x[:2] == (0, 0):  # mul: one side a constant
        return (x[2] * y[0], x[2] * y[1], x[2] * y[2])
    if y[:2] == (0, 0):
        return (y[2] * x[0], y[2] * x[1], y[2] * x[2])
    return None


def _atom_band(fn: str, e: tuple[int, int, int]) -> Band:
    """The range of d = j - i over whole i, j >= 0 where a i + b j + c `fn` 0."""
    a, b, c = e
    if fn == "ne":
        return FULL
    if fn == "lt":  # e < 0 is e + 1 <= 0 on whole numbers
        fn, c = "le", c + 1
    elif fn == "gt":  # e > 0 is -e + 1 <= 0
        fn, a, b, c = "le", -a, -b, -c + 1
    elif fn == "ge":
        fn, a, b, c = "le", -a, -b, -c
    if a == b == 0:
        holds = c <= 0 if fn == "le" else c == 0
        return FULL if holds else EMPTY
    if a == -b:  # b (j - i) + c `fn` 0: a bound on d itself
        d = -c / b
        if fn == "eq":
            return (d, d) if d.is_integer() else EMPTY
        return (-math.inf, math.floor(d)) if b > 0 else (math.ceil(d), math.inf)
    if a == 0 or b == 0:
        # one position alone: an upper bound on j bounds d from above (i >= 0), one on i
        # bounds it from below (j >= 0); a lower bound on either leaves d open
        coef, top = (b, True) if a == 0 else (a, False)
        if fn == "eq":
            bound = -c / coef
            if not bound.is_integer() or bound < 0:
                return EMPTY
            return (-math.inf, bound) if top else (-bound, math.inf)
        if coef < 0:
            return FULL  # a lower bound on the position
        bound = math.floor(-c / coef)
        if bound < 0:
            return EMPTY  # no position is that small
        return (-math.inf, float(bound)) if top else (-float(bound), math.inf)
    return FULL
