"""The backward rule of each kind of operation: given the gradient `g` of an op's result,
write the lines of each active operand's share of its gradient (ncdc.grad.derive sums the
shares). One function per kind, as the inference has one per kind (ncdc.language.infer).

Every share comes out over its tensor's axes, in its tensor's order, stored in its
tensor's dtype; statistics a rule reduces (a row's sum, mean, variance) are fp32.

- contract: two contractions, the gradient with the other operand, over the axes the
  other operand kept (a product with it where it kept none; over the longest, then a sum
  over the rest, where it kept several: a GEMM sums one axis); numbers in the scale carry
  over, tensors in it are woven into the gradient first.
- map, binary: the record's derivative (ncdc.language.ops), summed over the axes an
  operand was broadcast along.
- reduce: sum and mean broadcast the gradient back; logsumexp multiplies it by softmax.
- softmax: dS = P * (dP - sum(dP * P)); log_softmax: dX = dY - exp(Y) * sum(dY).
- layernorm, rmsnorm: the normalised values and the row statistics recomputed from X,
  dX = r * (dXh - mean(dXh) - Xh * mean(dXh * Xh)) (no mean term for rmsnorm).
- cast to a float type: the gradient times the scale (rounding passed straight through).
- gather: a pick in each row gives its gradient back where the position is the index; an
  embedding's rows (picked any number of times) a scatter-add of the gradient by the index.
- scatter: the gradient gathered by the same index.
- permute: the gradient put back in the operand's order.
- slice, shift, roll: the gradient read back at the opposite offset (a slice's from the
  result's axis into the operand's, zeros where nothing read the operand).
- select (argmax, argmin, topk): none; positions are whole numbers (a value picked by a
  gather of them takes its gradient through the gather).
- scan: a running sum's gradient is the running sum of its gradient from the other end; a
  running max or min is refused (its gradient goes to where each running value came from).
- mask: the gradient where the mask keeps a score, zero where it drops one (nothing to do
  when only softmax and logsumexp read the mask: their gradients are zero where P is). The
  same for a select `where(C, S, -inf)` (or `where(C, -inf, S)`) that only they read, through
  any masks and such selects between: the gradient passes to S as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from ncdc.errors import SpecError
from ncdc.grad.tape import Line, Tape
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.language.ops import record

STAT = "fp32"  # the dtype of the row statistics a rule reduces


@dataclass(frozen=True)
class Site:
    """One op being differentiated: the diagram, the tape, the op, the gradient of its
    result and the tensors that need a gradient."""

    diagram: Diagram
    tape: Tape
    op: Op
    g: str
    active: Collection[str]
    renames: Mapping[str, str] = field(default_factory=dict)  # tape line -> its final name

    def line_of(self, name: str) -> Line | None:
        """The tape line that computes `name` (under its final name)."""
        return next(
            (ln for ln in self.tape.lines if self.renames.get(ln.out, ln.out) == name), None
        )

    def tensor(self, name: str) -> Tensor:
        return self.diagram.tensor(name)

    def wants(self, name: object) -> bool:
        return isinstance(name, str) and name in self.active

    def refuse(self, why: str, hint: str | None = None) -> SpecError:
        return SpecError(
            f"cannot differentiate '{self.op.text}': {why}",
            where=f"{self.diagram.source}:{self.op.line}" if self.op.line else self.diagram.source,
            hint=hint,
        )

    def stem(self, name: str) -> str:
        return f"d{name}"

    def share(self, value: str, target: str) -> str:
        """`value` summed over the axes `target` lacks and put in `target`'s axis order and
        dtype."""
        t = self.tensor(target)
        extra = tuple(a for a in self.tape.axes[value] if a not in t.axes)
        if extra:
            value = self.tape.emit("sum", (value,), self.stem(target), over=extra, dtype=t.dtype)
        return self.tape.arrange(value, t.axes, t.dtype)


Share = tuple[str, str]  # (operand, the name of its share of the gradient)


def _contract(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    c = 1.0
    for number in (f for f in op.scale if not isinstance(f, str)):
        c *= float(number)
    g = s.g
    for f in op.scale:
        if isinstance(f, str):
            if s.wants(f):
                raise s.refuse(f"the gradient of the scale tensor {f} is not derived",
                               f"multiply by {f} in a mul op of its own")  # fmt: skip
            g = tape.emit("mul", (g, f), s.stem(op.out), dtype=s.tensor(op.out).dtype)
    a, b = (str(x) for x in op.operands)
    if op.grouped:
        return _grouped_shares(s, g, a, b, c)
    shares = []
    for mine, other in ((a, b), (b, a)):
        if s.wants(mine):
            shares.append((mine, _contract_share(s, g, mine, other, c)))
    return shares


def _grouped_shares(s: Site, g: str, a: str, b: str, c: float) -> list[Share]:
    """A grouped contraction's gradient for its rows: dA = g times each row's slice of B,
    a grouped contraction by the same offsets over the axes B keeps of its own. Its
    weights' gradient (a sum over each group's rows) is not derived."""
    op, tape = s.op, s.tape
    if s.wants(b):
        raise s.refuse(
            f"the gradient of the grouped weights {b} of {op.out} is not derived",
            f"differentiate with respect to {a}, or the other inputs",
        )
    if not s.wants(a):
        return []
    t, group = s.tensor(a), op.params["group"]
    kept = tuple(x for x in s.tensor(b).axes if x not in t.axes and x != group)
    if len(kept) != 1:
        raise s.refuse(
            f"the gradient of {a} through the grouped {op.out} sums over {list(kept)}",
            "keep one axis of the weights out of the rows",
        )
    scale = c if c != 1.0 else None
    made = tape.emit("contract", (g, b), s.stem(a), over=kept, offsets=op.params["offsets"],
                     scale=scale, dtype=t.dtype)  # fmt: skip
    return [(a, tape.arrange(made, t.axes, t.dtype))]


def _contract_share(s: Site, g: str, mine: str, other: str, c: float) -> str:
    """d mine = g times `other` over the axes `other` kept of its own (they are in g), or g
    woven with `other` where it kept none (an outer product is a binary mul)."""
    tape, t = s.tape, s.tensor(mine)
    kept = tuple(a for a in s.tensor(other).axes if a not in t.axes)
    scale = c if c != 1.0 else None
    if not kept:
        product = tape.emit("mul", (g, other), s.stem(mine), dtype=None if scale else t.dtype)
        if scale:
            product = tape.emit("mul", (product, scale), s.stem(mine), dtype=t.dtype)
        return s.share(product, mine)
    for pair in ((g, other), (other, g)):  # the operand order that gives mine's axis order
        axes = tuple(dict.fromkeys(x for n in pair for x in tape.axes[n] if x not in kept))
        if axes == t.axes:
            break
    else:
        pair = (g, other)
    if len(kept) > 1:  # a GEMM sums one axis: the longest, then a sum over the others
        longest = max(kept, key=lambda a: s.diagram.axes[a])
        made = tape.emit("contract", pair, s.stem(mine), over=longest, scale=scale, dtype=STAT)
        return s.share(made, mine)
    made = tape.emit("contract", pair, s.stem(mine), over=kept, scale=scale, dtype=t.dtype)
    return tape.arrange(made, t.axes, t.dtype)


def _elementwise(s: Site) -> list[Share]:
    """map and binary: the record's derivative, per operand."""
    op = s.op
    kept = _masking_select(op)
    if kept is not None and _read_by_softmax(s.diagram, op.out):
        return [(kept, s.g)] if s.wants(kept) else []
    rec = record(op.kind, op.fn)
    if not rec.derivative:
        raise s.refuse(rec.no_derivative)
    env = {"g": s.g, "y": op.out, "x": op.operands[0], "a": op.operands[0]}
    env.update(zip(("b", "c"), op.operands[1:], strict=False))
    shares = []
    for operand, expr in zip(op.operands, rec.derivative, strict=True):
        if not expr or not s.wants(operand):  # "": piecewise constant in it, no gradient
            continue
        t = s.tensor(str(operand))
        broadcast = set(s.tape.axes[op.out]) != set(t.axes)
        value = s.tape.expand(expr, env, s.stem(t.name), STAT if broadcast else t.dtype)
        if not isinstance(value, str):
            raise AssertionError(f"derivative of {op.fn} is a number")
        shares.append((t.name, s.share(value, t.name)))
    return shares


def _reduce(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    t = s.tensor(x)
    g = s.g
    if op.fn == "max":  # to the largest values, shared equally by a tie (torch.amax's rule)
        top = tape.emit("eq", (x, op.out), s.stem(x))
        ties = tape.emit("sum", (top,), s.stem(x), over=op.over, dtype=STAT)
        # at least 1 wherever the max is the row's (always, from the forward): also with
        # values that did not come from it (a backward run alone on random inputs)
        ties = tape.emit("max", (ties, 1.0), s.stem(x), dtype=STAT)
        share = tape.emit("mul", (tape.emit("div", (top, ties), s.stem(x)), g), s.stem(x))
        return [(x, s.share(share, x))]
    if op.fn == "logsumexp":  # d x = g * exp(x - lse), the softmax of x
        p = tape.emit("exp", (tape.emit("sub", (x, op.out), s.stem(x)),), s.stem(x))
        return [(x, tape.emit("mul", (p, g), s.stem(x), dtype=t.dtype))]
    if op.fn == "mean":  # g / (the count over the axes), counted at run time: sizes --set
        ones = tape.emit("add", (tape.zeros(op.over), 1.0), "one")
        count = tape.emit("sum", (ones,), "count", over=op.over, dtype=STAT)
        g = tape.emit("div", (g, count), s.stem(x))
    return [(x, tape.emit("add", (tape.zeros(t.axes), g), s.stem(x), dtype=t.dtype))]


def _softmax(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    stem, y = s.stem(x), op.out
    row = _row_through_output(s) or tape.emit(
        "sum", (tape.emit("mul", (s.g, y), stem),), stem, over=op.over, dtype=STAT
    )
    inner = tape.emit("sub", (s.g, row), stem)
    return [(x, tape.emit("mul", (y, inner), stem, dtype=s.tensor(x).dtype))]


def _row_through_output(s: Site) -> str | None:
    """sum(dP * P) over a softmax's rows where P's one reader is an output O = contract(P, V)
    (times numbers): then dP = contract(dO, V), and reassociating the sum,
    sum_x dP P = sum_x sum_e dO V P = sum_e dO O, the row's dot of dO and O (e summed by the
    contraction). FlashAttention's D: a vector from two tensors the backward has whole,
    where sum(dP * P) needs every key of a row at once, which a backward blocked over keys
    never holds. None where the shape is not that."""
    op, tape, y = s.op, s.tape, s.op.out
    readers = [r for r in s.diagram.ops if y in r.inputs]
    if len(readers) != 1 or readers[0].kind != "contract":
        return None
    reader = readers[0]
    if reader.out not in s.diagram.outputs or any(isinstance(f, str) for f in reader.scale):
        return None
    (other,) = [str(o) for o in reader.operands if o != y] or [y]
    line = s.line_of(s.g)
    if line is None or line.fn != "contract" or other not in line.args or other == y:
        return None
    (given,) = [a for a in line.args if a != other] or [""]
    over = tuple(a for a in tape.axes[reader.out] if a not in s.tensor(y).axes)
    rows = tuple(a for a in s.tensor(y).axes if a not in op.over)
    if not given or not over or tuple(a for a in tape.axes[reader.out] if a not in over) != rows:
        return None
    stem = s.stem(str(op.operands[0]))
    product = tape.emit("mul", (given, reader.out), stem)
    return tape.emit("sum", (product,), stem, over=over, dtype=STAT)


def _norm(s: Site) -> list[Share]:
    op = s.op
    if op.fn == "log_softmax":
        return _log_softmax(s)
    tape, x, stem = s.tape, str(op.operands[0]), s.stem(op.out)
    r = xh = ""
    if s.wants(x) or s.wants(op.params.get("weight")):
        r, xh = _normalised(s)
    shares = []
    for key in ("weight", "bias"):
        w = op.params.get(key)
        if s.wants(w):
            value = tape.emit("mul", (s.g, xh), stem) if key == "weight" else s.g
            shares.append((str(w), s.share(value, str(w))))
    if not s.wants(x):
        return shares
    gx = s.g
    if "weight" in op.params:
        gx = tape.emit("mul", (s.g, op.params["weight"]), stem)
    m2 = tape.emit("mean", (tape.emit("mul", (gx, xh), stem),), stem, over=op.over, dtype=STAT)
    inner = tape.emit("sub", (gx, tape.emit("mul", (xh, m2), stem)), stem)
    if op.fn == "layernorm":
        m1 = tape.emit("mean", (gx,), stem, over=op.over, dtype=STAT)
        inner = tape.emit("sub", (inner, m1), stem)
    dx = tape.emit("mul", (inner, r), s.stem(x), dtype=s.tensor(x).dtype)
    return [*shares, (x, dx)]


def _normalised(s: Site) -> tuple[str, str]:
    """A norm's reciprocal deviation r (fp32, over the rows) and normalised values Xh,
    recomputed from X. Written only as a share reads them (an unread line is an error)."""
    op, tape, x, stem = s.op, s.tape, str(s.op.operands[0]), s.stem(s.op.out)
    centred = x
    if op.fn == "layernorm":
        mean = tape.emit("mean", (x,), stem, over=op.over, dtype=STAT)
        centred = tape.emit("sub", (x, mean), stem)
    var = tape.emit("mean", (tape.emit("square", (centred,), stem),), stem, over=op.over,
                    dtype=STAT)  # fmt: skip
    eps = float(op.params["eps"])
    r = tape.emit("rsqrt", (tape.emit("add", (var, eps), stem, dtype=STAT),), stem, dtype=STAT)
    return r, tape.emit("mul", (centred, r), stem)


def _log_softmax(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    stem = s.stem(x)
    row = tape.emit("sum", (s.g,), stem, over=op.over, dtype=STAT)
    p = tape.emit("exp", (op.out,), stem)
    return [(x, tape.emit("sub", (s.g, tape.emit("mul", (p, row), stem)), stem,
                          dtype=s.tensor(x).dtype))]  # fmt: skip


def _cast(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    for f in op.scale:
        if s.wants(f):
            raise s.refuse(f"the gradient of the scale tensor {f} of a cast is not derived")
    if not s.wants(x):
        return []
    if DTYPES[op.params["to"]].integer:
        raise s.refuse(
            f"a cast to {op.params['to']} rounds to whole numbers: its derivative is zero",
            "cast to a float type, or pass the gradient straight through outside ncdc",
        )
    t = s.tensor(x)
    factors = list(op.scale) or [1.0]  # the rounding passes the gradient straight through
    g = s.g
    for i, f in enumerate(factors):
        g = tape.emit("mul", (g, f), s.stem(x), dtype=t.dtype if i == len(factors) - 1 else None)
    return [(x, tape.arrange(g, t.axes, t.dtype))]


def _masking_select(op: Op) -> str | None:
    """The scores a select `where(C, S, -inf)` or `where(C, -inf, S)` keeps (S), or None
    where `op` is not such a select."""
    if op.fn != "where" or len(op.operands) != 3:
        return None
    _, a, b = op.operands
    if b == float("-inf") and isinstance(a, str):
        return a
    if a == float("-inf") and isinstance(b, str):
        return b
    return None


def _read_by_softmax(diagram: Diagram, name: str) -> bool:
    """Only softmax and logsumexp read `name`, directly or through masks and masking selects:
    their gradients are products with P = exp(x - lse), zero wherever -inf was put."""
    readers = diagram.consumers(name)
    return bool(readers) and name not in diagram.outputs and all(
        c.kind == "softmax" or c.fn == "logsumexp"
        or ((c.kind == "mask" and c.operands[0] == name)
            or (_masking_select(c) == name)) and _read_by_softmax(diagram, c.out)
        for c in readers
    )  # fmt: skip


def _mask(s: Site) -> list[Share]:
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    if _read_by_softmax(s.diagram, op.out):  # nothing to mask again
        return [(x, s.g)]
    keys = {k: v for k, v in op.params.items() if k in ("query", "key", "align", "left",
                                                        "right", "lengths")}  # fmt: skip
    t = s.tensor(x)
    dropped = tape.emit(op.fn, (tape.zeros(t.axes),), "keep", **keys)  # 0 kept, -inf dropped
    keep = tape.emit("exp", (dropped,), "keep")
    return [(x, tape.emit("mul", (s.g, keep), s.stem(x), dtype=t.dtype))]


def _gather(s: Site) -> list[Share]:
    """Values picked by index along an axis. Where the indices run over axes of the source
    (a pick in each row, as a label's logit), each picked value's gradient goes back to its
    place alone: the gradient where the position along the axis is the index, else 0. Where
    they do not (an embedding's rows), a row may be picked many times and its gradient is
    the sum of theirs: a scatter-add over the indices' own axes. Indices take none."""
    op, tape = s.op, s.tape
    source, ids = (str(o) for o in op.operands[:2])
    if not s.wants(source):
        return []
    axis, t = op.params["axis"], s.tensor(source)
    if "into" in op.params:
        raise s.refuse(
            f"the gradient of the paged cache {source} is not derived (a block table's pages "
            "may hold any row, and no scatter-add writes through one)",
            f"differentiate with respect to the other inputs (--wrt), or write "
            f"{op.out} as an input of its own for training",
        )
    if set(s.tensor(ids).axes) <= set(t.axes) - {axis}:
        here = tape.emit("eq", (tape.emit("index", (axis,), f"i_{axis}"), ids), s.stem(source))
        picked = tape.emit("where", (here, s.g, 0.0), s.stem(source))
        return [(source, s.share(picked, source))]
    own = tuple(a for a in s.tensor(ids).axes if a not in t.axes)  # matched ones are kept
    over = own if len(own) < len(s.tensor(ids).axes) else None
    added = tape.emit("scatter_add", (s.g, ids), s.stem(source), axis=axis, over=over,
                      dtype=t.dtype)  # fmt: skip
    return [(source, s.share(added, source))]


def _scatter(s: Site) -> list[Share]:
    """A scatter-add's operand: each value went to one place, so its gradient is the
    gradient there, gathered back by the same index."""
    op, tape = s.op, s.tape
    source, ids = (str(o) for o in op.operands[:2])
    if not s.wants(source):
        return []
    t = s.tensor(source)
    picked = tape.emit("gather", (s.g, ids), s.stem(source), axis=op.params["axis"],
                       dtype=t.dtype)  # fmt: skip
    return [(source, s.share(picked, source))]


def _scan(s: Site) -> list[Share]:
    """dX[i] = sum of g[j] over the j whose running sum took X[i]: j >= i, or j <= i for a
    scan from the end. A running max or min passes its gradient to the value each position
    took it from, an index a diagram cannot yet write a scatter-add along."""
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    if op.fn != "cumsum":
        raise s.refuse(
            f"{op.fn} has no gradient in ncdc: it passes to the value each position took its "
            "running extreme from",
            f"stop the gradient there: make {x} an input of the backward, or compute "
            f"{op.out} in a diagram of its own",
        )
    back = not op.params.get("reverse", False)
    g = tape.emit("cumsum", (s.g,), s.stem(x), over=op.over[0], reverse="true" if back else None,
                  dtype=s.tensor(x).dtype)  # fmt: skip
    return [(x, g)]


def _slice(s: Site) -> list[Share]:
    """A value read at an offset takes its gradient back from the same offset the other
    way: a slice's from the result's axis (zeros where nothing read it), a roll's rolled
    back."""
    op, tape = s.op, s.tape
    x = str(op.operands[0])
    if not s.wants(x):
        return []
    p, t = op.params, s.tensor(x)
    if p.get("wrap"):
        back = tape.emit("roll", (s.g,), s.stem(x), axis=p["axis"], by=int(p["start"]),
                         dtype=t.dtype)  # fmt: skip
    else:
        into = None if p["into"] == p["axis"] else p["axis"]
        back = tape.emit("slice", (s.g,), s.stem(x), axis=p["into"], start=-int(p["start"]),
                         into=into, dtype=t.dtype)  # fmt: skip
    return [(x, s.share(back, x))]


def _permute(s: Site) -> list[Share]:
    """The gradient put back in the operand's axis order."""
    x = str(s.op.operands[0])
    return [(x, s.share(s.g, x))] if s.wants(x) else []


RULES: dict[str, Callable[[Site], list[Share]]] = {
    "contract": _contract,
    "map": _elementwise,
    "binary": _elementwise,
    "reduce": _reduce,
    "softmax": _softmax,
    "norm": _norm,
    "cast": _cast,
    "mask": _mask,
    "index": lambda s: [],
    "gather": _gather,
    "scatter": _scatter,
    "scan": _scan,
    "slice": _slice,
    "select": lambda s: [],  # positions: whole numbers, piecewise constant
    "permute": _permute,
}
