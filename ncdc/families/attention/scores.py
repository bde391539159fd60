"""The score path of a fused attention kernel: what runs between the logits S = Q K^T and the
softmax. Elementwise transforms (a scale, soft-capping, ALiBi's positions, an additive bias)
become C statements over the scaled logit of query `ncdc_i` and key `ncdc_j`; the masks
(causal, window, varlen) become the bands and lengths the kernel's key loop skips and
selects by. What the score path cannot run is refused with what to write instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.codegen import ELEMENTWISE_KINDS, Statement, needed_ops, op_statements, size_name
from ncdc.language.diagram import Diagram, Op
from ncdc.model.masks import (
    COMPARE,
    EXACT_ARITHMETIC,
    EXACT_INTEGERS,
    LOGIC,
    Call,
    Const,
    Data,
    Pos,
    Term,
    as_fp32,
    mask_select,
    read_mask_rule,
    rule_band,
    whole_term,
)

if TYPE_CHECKING:
    from ncdc.model.graph import Kernel


# what the score path runs between S and softmax: a gather reads memory the fused kernel does
# not stage, so it is saved first (the kernel-break search puts it in a kernel of its own)
LOG2E = 1.4426950408889634
SCORE_KINDS = tuple(k for k in ELEMENTWISE_KINDS if k not in ("gather", "permute", "slice"))


@dataclass(frozen=True)
class ScoreInput:
    """A tensor the logits read at each (query, key): a bias, a per-head slope."""

    name: str
    dtype: str
    offset: str  # C++ offset of the (batch...) slice from the batch indices
    q_pitch: str  # elements between neighbours along the query axis; 0 when it has none
    x_pitch: str


@dataclass(frozen=True)
class ScoreSplit:
    """The base-2 logit as pair(ncdc_s, ncdc_i, ncdc_j) + key(ncdc_j) + row(ncdc_i)
    (`split_logit`): a kernel computes the key part once per key, and drops the row part,
    the same for every key of a row, from the softmax (adding it back to a log-sum-exp).
    `identity`: the pair part is ncdc_s times log2 e alone (one FFMA a score with the key
    part); `shift`: the key and row parts are linear in the positions (or constant), so a
    kernel may take both from one origin, keeping them small where fp32 must resolve them,
    and step the key part along a tile by its coefficient (`step`: one FFMA a key)."""

    pair: tuple[Statement, ...]
    pair_result: str
    key: tuple[Statement, ...]
    key_result: str
    row: tuple[Statement, ...]
    row_result: str
    identity: bool
    shift: bool
    step: tuple[Statement, ...] = ()  # shift: the key part's coefficient of the key
    step_result: str = "0.0f"


@dataclass(frozen=True)
class Scores:
    """What the diagram does to the scaled logits S before softmax: elementwise statements
    (biases, soft-capping, position terms) and masks, each mask a band of keys around the
    diagonal or per-sequence lengths (`Visible` in ncdc_attention.cuh)."""

    statements: tuple[Statement, ...] = ()  # computing `result` from ncdc_s, ncdc_i, ncdc_j
    result: str = "ncdc_s"
    inputs: tuple[ScoreInput, ...] = ()
    batch: tuple[str, ...] = ()  # batch axes whose index a statement reads
    lo: tuple[str, ...] = ()  # C++: key j is seen by query i when j >= i + each of these
    hi: tuple[str, ...] = ()  # and j <= i + each of these
    bounded: bool = False  # some mask bounds the keys above: launch the longest tiles first
    window: bool = False  # a window mask
    lengths: str = ""  # the int32 lengths tensor of a varlen mask
    lengths_offset: str = "0"
    sequences: str = ""  # the axis along which sequences are packed; "" for padded ones
    # a mask rule's tile classes (`rule_tile`): C++ over the tile's queries ncdc_i0..ncdc_i1
    # and keys ncdc_j0..ncdc_j1, and the statements computing the logit where it keeps a pair
    tile_rule: str = ""
    kept_statements: tuple[Statement, ...] = ()
    kept_result: str = "ncdc_s"
    # the rule's class of a tile given the values its data tensors take over the tile (the
    # interval of tile_data[k] is ncdc_dv[k]), for a block table of a data mask; the inputs
    # read along the queries or the keys (not both: a tile's interval is then a warp's min
    # and max over its rows or keys), "" and () when the rule reads none
    tile_rule_data: str = ""
    tile_data: tuple[ScoreInput, ...] = ()
    # the base-2 logit in a pair, a key and a row part (`split_logit`), without a mask rule
    split: ScoreSplit | None = None

    @property
    def plain(self) -> bool:
        return not self.statements

    def in_log2(self, kept: bool = False) -> tuple[tuple[Statement, ...], str]:
        """The statements and result of the logit (where the rule keeps a pair, if `kept`)
        times log2 e, the base-2 logit a kernel's exponent takes: the multiply folds into a
        final constant scale (`fold_scales`: a soft cap's then issues no FMUL of its own)."""
        made, result = self.statements, self.result
        if kept:
            made, result = self.kept_statements, self.kept_result
        log2 = Statement("ncdc_log2", "op_mul", (result, f"{LOG2E!r}f"))
        return tuple(fold_scales([*made, log2])), "ncdc_log2"

    @property
    def kept_identity(self) -> bool:
        """Whether the logits a mask rule keeps are the scaled logits themselves."""
        return bool(self.tile_rule) and not self.kept_statements and self.kept_result == "ncdc_s"


def read_scores(
    kernel: Kernel, diagram: Diagram, first: Op, soft: Op, batch: tuple[str, ...],
    q_axis: str, x_axis: str, loaded: frozenset[str] = frozenset(),
) -> Scores:  # fmt: skip
    """The score path from the logits S = first to the softmax's operand: masks last (each
    reading the one before, the first reading the transformed logits), and before them the
    elementwise ops and indices, compiled to statements over the scaled logit `ncdc_s` of
    query `ncdc_i` and key `ncdc_j`. PlanError, with what to write instead, for what the
    score path cannot run. Ops whose results are `loaded` compute Q or K as they load
    (ncdc.families.attention.loads), not the scores."""
    unfused = f"or run it unfused: schedule: {{materialize: [{first.out}, {soft.out}]}}"
    masks: list[Op] = []
    name = str(soft.operands[0])
    by_out = {op.out: op for op in kernel.ops}
    while name in by_out and by_out[name].kind == "mask":
        masks.insert(0, by_out[name])
        name = str(by_out[name].operands[0])
    logits = name  # what the masks read: S, or S transformed
    allowed = {*batch, q_axis, x_axis}
    for op in kernel.ops:
        if op.kind == "mask" and op not in masks:
            raise PlanError(
                unsupported(kernel, op, "masks applied last, just before softmax"),
                hint=f"apply {op.fn} to the logits softmax reads: write the other operations "
                f"first, then {op.out} = {op.fn}(<their result>, ...), " + unfused,
            )
        if op.kind in SCORE_KINDS and op.out not in loaded and not set(op.axes) <= allowed:
            axis = next(a for a in op.axes if a not in allowed)
            raise PlanError(
                unsupported(kernel, op, f"logits over ({', '.join(sorted(allowed))})"),
                hint=f"drop the axis {axis} from {op.out}'s operands, " + unfused,
            )
    sc = mask_bands(diagram, kernel, masks, batch, q_axis, x_axis, unfused)
    chain = needed_ops(kernel.ops, [logits], [*kernel.inputs, first.out])
    for op in kernel.ops:
        if op.kind in SCORE_KINDS and op not in masks and op not in chain and op.out not in loaded:
            raise PlanError(
                unsupported(kernel, op, "elementwise operations on the logits only"),
                hint=f"remove {op.out} = {op.fn}(...) from the kernel (compute it beforehand "
                f"and pass it as an input), " + unfused,
            )
    if not chain:
        return sc
    reader = ScoreValues(kernel, diagram, first, batch, q_axis, x_axis, chain, unfused)
    maps = logit_maps(kernel.ops, logits)
    statements: list[Statement] = []
    for op in chain:
        statements += logit_statements(op, reader.value, reader.index, maps)
    statements = fold_scales(statements)
    split = _split(chain, diagram, first.out, logits, q_axis, x_axis, reader, statements)
    tile_rule, kept, kept_result = "", [], "ncdc_s"
    tile_rule_data = ""
    tile_data: tuple[ScoreInput, ...] = ()
    rule, select = read_mask_rule(kernel), mask_select(kernel)
    if rule and select and select.out == logits and (rule.query, rule.key) == (q_axis, x_axis):
        # the logits where the rule keeps a pair: the select's other operand
        a, b = select.operands[1:]
        kept_operand = a if b == -math.inf else b
        if isinstance(kept_operand, str):
            tile_rule = rule_tile(rule.keep, q_axis, x_axis, reader.index)
            tile_data = tile_data_inputs(rule.keep, reader.inputs)
            if tile_data:
                given = {t.name: f"ncdc_dv[{k}]" for k, t in enumerate(tile_data)}
                tile_rule_data = rule_tile(rule.keep, q_axis, x_axis, reader.index, given)
            for op in needed_ops(kernel.ops, [kept_operand], [*kernel.inputs, first.out]):
                kept += logit_statements(op, reader.value, reader.index, maps)
            kept = fold_scales(kept)
            kept_result = reader.value(kept_operand)
            split = None
    return Scores(
        tuple(statements), reader.value(logits), tuple(reader.inputs.values()),
        tuple(a for a in batch if a in reader.needs_batch), sc.lo, sc.hi, sc.bounded, sc.window,
        sc.lengths, sc.lengths_offset, sc.sequences, tile_rule, tuple(kept), kept_result,
        tile_rule_data, tile_data, split,
    )  # fmt: skip


def _split(
    chain: Sequence[Op], diagram: Diagram, first: str, logits: str, q_axis: str, x_axis: str,
    reader: ScoreValues, statements: Sequence[Statement],
) -> ScoreSplit | None:  # fmt: skip
    """The score path's `split_logit` as statements: each part's terms times log2 e, summed,
    after the path's statements their bases read."""
    parts = split_logit(chain, diagram, first, logits, q_axis, x_axis)
    if parts is None:
        return None
    pair, key, row = parts
    stepped = linear(key, row)
    made: list[tuple[tuple[Statement, ...], str]] = []
    # the key part's coefficient of the position where it is linear: its terms' factors
    step = [replace(t, base="") for t in key] if stepped else []
    for name, terms in zip(("pair", "key", "row", "step"), (*parts, step), strict=True):
        out: list[Statement] = []
        total = ""
        for k, t in enumerate(terms):
            value = "ncdc_s" if t.base == first else reader.value(t.base) if t.base else ""
            var = f"ncdc_{name}{k}"
            # the factors times coef log2 e first (the same for every score: hoisted), then
            # the base times their product
            factor = f"{t.coef * LOG2E!r}f"
            for i, f in enumerate(t.factors):
                out.append(Statement(f"{var}_{i}", "op_mul", (reader.value(f), factor)))
                factor = f"{var}_{i}"
            out.append(Statement(var, "op_mul", (value, factor)) if value else
                       Statement(var, "op_id", (factor,)))  # fmt: skip
            if total:
                out.append(Statement(f"ncdc_{name}_sum{k}", "op_add", (total, var)))
                var = f"ncdc_{name}_sum{k}"
            total = var
        if not total:
            out.append(Statement(f"ncdc_{name}", "op_id", ("0.0f",)))
            total = f"ncdc_{name}"
        made.append((tuple(_reads(statements, out)) + tuple(out), total))
    (ps, pr), (ks, kr), (rs, rr), (ss, sr) = made
    return ScoreSplit(ps, pr, ks, kr, rs, rr, pair_identity(pair, first), stepped, ss, sr)


def _reads(statements: Sequence[Statement], made: Sequence[Statement]) -> list[Statement]:
    """The path's statements whose values `made` reads, in order (what a part recomputes)."""
    names = {st.out for st in statements}
    live = {n for st in made for a in st.args for n in re.findall(r"\bncdc_e_\w+", a)}
    needed = []
    for st in reversed(statements):
        if st.out in live:
            needed.append(st)
            live |= {n for a in st.args for n in re.findall(r"\bncdc_e_\w+", a) if n in names}
    return needed[::-1]


@dataclass(frozen=True)
class LogitTerm:
    """One addend of the logit (`logit_terms`): coef x factors x base, where the factors are
    values over the batch axes alone (a slope per head) and `base` a value over `over`, a
    subset of "s" (the scaled logit), "q" (the query) and "x" (the key); `index`: the base
    is the query's or the key's position itself."""

    coef: float
    factors: tuple[str, ...]
    base: str
    over: frozenset[str]
    index: bool = False


def logit_terms(
    chain: Sequence[Op], diagram: Diagram, first: str, logits: str, q_axis: str, x_axis: str
) -> list[LogitTerm]:
    """The logit `logits` as a sum of terms through the score path's sums, differences,
    negations and products by constants or tensors over the batch axes alone, each term with
    the axes its base reads (a value made otherwise, by a map, a product of two positions or
    a rounding to a stored type, is the base of one term). ALiBi's slope[h] (j - i) is
    slope j - slope i.

        >>> from ncdc.language.load import load_diagram
        >>> d = load_diagram("diagrams/alibi_attention.yaml")
        >>> chain = [op for op in d.ops if op.out in ("I", "J", "D", "A", "B")]
        >>> [(t.coef, t.factors, t.base, sorted(t.over), t.index)
        ...  for t in logit_terms(chain, d, "S", "B", "q", "x")]  # doctest: +NORMALIZE_WHITESPACE
        [(1.0, (), 'S', ['s'], False), (1.0, ('slope',), 'J', ['x'], True),
         (-1.0, ('slope',), 'I', ['q'], True)]
    """
    from ncdc.families.codegen import read_as_stored

    by_out = {op.out: op for op in chain}
    seen: dict[str, frozenset[str]] = {}

    def over(name: str) -> frozenset[str]:
        if name not in seen:
            if name == first:
                seen[name] = frozenset("s")
            elif name in by_out:
                op = by_out[name]
                if op.kind == "index":
                    axis = op.params["axis"]
                    seen[name] = frozenset("q" if axis == q_axis else "x" if axis == x_axis else "")
                else:
                    seen[name] = frozenset().union(*(over(i) for i in op.inputs))
            else:
                axes = diagram.tensor(name).axes
                seen[name] = frozenset(("q",) * (q_axis in axes) + ("x",) * (x_axis in axes))
        return seen[name]

    def whole(name: str) -> list[LogitTerm]:
        op = by_out.get(name)
        index = op is not None and op.kind == "index" and over(name) in ({"q"}, {"x"})
        return [LogitTerm(1.0, (), name, over(name), index)]

    def terms(name: str | float) -> list[LogitTerm]:
        if not isinstance(name, str):
            return [LogitTerm(float(name), (), "", frozenset())]
        op = by_out.get(name)
        if op is None or op.kind == "index" or op.scale or read_as_stored(op, diagram):
            return whole(name)
        a = op.operands[0]
        if op.kind == "map" and op.fn == "neg":
            return [replace(t, coef=-t.coef) for t in terms(a)]
        if op.kind == "binary" and op.fn in ("add", "sub"):
            b = terms(op.operands[1])
            sign = -1.0 if op.fn == "sub" else 1.0
            return terms(a) + [replace(t, coef=sign * t.coef) for t in b]
        if op.kind == "binary" and op.fn == "mul":
            for x, y in (op.operands, op.operands[::-1]):
                if not isinstance(y, str):
                    return [replace(t, coef=t.coef * float(y)) for t in terms(x)]
                if not over(y) and y not in by_out:  # a tensor over batch axes alone
                    return [replace(t, factors=(*t.factors, y)) for t in terms(x)]
        return whole(name)

    return terms(logits)


def split_logit(
    chain: Sequence[Op], diagram: Diagram, first: str, logits: str, q_axis: str, x_axis: str
) -> tuple[list[LogitTerm], list[LogitTerm], list[LogitTerm]] | None:
    """The logit's terms (`logit_terms`) as three parts: those over the scaled logit (or
    both positions), those over the key alone, those over the query alone or neither; None
    where there is no key or query part to split off (the logit is one pair part).

        >>> from ncdc.language.load import load_diagram
        >>> d = load_diagram("diagrams/alibi_attention.yaml")
        >>> chain = [op for op in d.ops if op.out in ("I", "J", "D", "A", "B")]
        >>> [[t.base for t in part] for part in split_logit(chain, d, "S", "B", "q", "x")]
        [['S'], ['J'], ['I']]
    """
    found = logit_terms(chain, diagram, first, logits, q_axis, x_axis)
    pair = [t for t in found if "s" in t.over or t.over >= {"q", "x"}]
    key = [t for t in found if t.over == {"x"}]
    row = [t for t in found if t not in pair and t not in key]
    return (pair, key, row) if key or row else None


def pair_identity(pair: Sequence[LogitTerm], first: str) -> bool:
    """Whether a split's pair part is the scaled logit `first` alone."""
    return [(t.coef, t.factors, t.base) for t in pair] == [(1.0, (), first)]


def linear(key: Sequence[LogitTerm], row: Sequence[LogitTerm]) -> bool:
    """Whether a split's key and row parts are the positions times constants or per-head
    values, or constants: linear in the positions (ScoreSplit.shift)."""
    return all(t.index or not t.base for t in [*key, *row])


# What the score path computes are logits, whose error counts in absolute terms (softmax
# sees their differences): a map there may take a form accurate to fp32 ulps of its largest
# values rather than of tiny ones, when that form issues fewer instructions.
LOGIT_FORMS = {"op_tanh": "op_tanh_logit"}
# The ops through which an absolute error stays an absolute error of the same size or a
# constant multiple of it: sums, differences, negation, a multiply by a constant, the value
# operands of `where`, and the masks.
_LINEAR = ("add", "sub", "neg")


def logit_maps(ops: Sequence[Op], result: str) -> frozenset[str]:
    """The results of the maps among `ops` that may take their logit form (LOGIT_FORMS):
    those that reach `result` (the logits) only through sums, differences, negations,
    multiplies by constants, `where`'s value operands and masks; not through a product of two
    tensors, a division, a compare or another map, where a tiny value's relative error would
    count.

        >>> from ncdc.language.diagram import Op
        >>> def op(out, kind, fn, *args):
        ...     return Op(out, fn, kind, args, (), ("q", "x"), "fp32")
        >>> ops = [op("T", "map", "tanh", "C"), op("L", "binary", "mul", "T", 50.0),
        ...        op("U", "map", "tanh", "G"), op("D", "binary", "div", "S", "U"),
        ...        op("M", "binary", "add", "L", "D")]
        >>> sorted(logit_maps(ops, "M"))  # U divides: its relative error counts
        ['T']
    """
    readers: dict[str, list[Op]] = {}
    for op in ops:
        for o in op.operands:
            if isinstance(o, str):
                readers.setdefault(o, []).append(op)

    def linear(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == result:
            return True
        found = readers.get(name, [])
        if not found or name in seen:
            return False
        for r in found:
            if any(isinstance(f, str) for f in r.scale):  # times a tensor
                return False
            constant = r.fn == "mul" and any(not isinstance(o, str) for o in r.operands)
            value = r.fn == "where" and name in r.operands[1:] and name != r.operands[0]
            if not (r.kind == "mask" or r.fn in _LINEAR or constant or value):
                return False
            if not linear(r.out, seen | {name}):
                return False
        return True

    return frozenset(op.out for op in ops if op.kind == "map" and f"op_{op.fn}" in LOGIT_FORMS
                     and linear(op.out))  # fmt: skip


def logit_statements(
    op: Op, value: Callable[[str], str], index: Callable[[str], str], maps: frozenset[str]
) -> list[Statement]:
    """`op_statements` of a score-path op, in its logit form (LOGIT_FORMS) if it is one of
    `maps` (`logit_maps`)."""
    made = op_statements(op, value, index, f"ncdc_e_{op.out}")
    if op.out not in maps:
        return made
    return [replace(st, fn=LOGIT_FORMS.get(st.fn, st.fn)) for st in made]


def fold_scales(statements: list[Statement]) -> list[Statement]:
    """The statements with their multiplications by constants folded: a product of a product
    by constants multiplies the first operand once, and op_tanh_logit takes the scale of its
    argument and of its result (`m tanh(k x)`: one FMUL before the exponential, one FFMA
    after). Every variable keeps its value (to fp32 rounding: the constants multiply in
    double, then round once); one no longer read is dropped by the compiler.

        >>> made = fold_scales([Statement("c", "op_mul", ("s", "0.02f")),
        ...                     Statement("t", "op_tanh_logit", ("c",)),
        ...                     Statement("l", "op_mul", ("t", "50.0f"))])
        >>> [(st.fn, st.args) for st in made]  # doctest: +NORMALIZE_WHITESPACE
        [('op_mul', ('s', '0.02f')), ('op_tanh_logit', ('s', '0.02f', '1.0f')),
         ('op_tanh_logit', ('s', '0.02f', '50.0f'))]
    """
    scaled: dict[str, tuple[str, float]] = {}  # a variable = base * factor
    capped: dict[str, tuple[str, float, float]] = {}  # a variable = m tanh(k base)
    out: list[Statement] = []
    for st in statements:
        if st.fn == "op_mul" and len(st.args) == 2:
            terms = [_literal(a) for a in st.args]
            if terms[0] is not None and terms[1] is None:
                terms.reverse()
                st = replace(st, args=st.args[::-1])
            x, c = st.args[0], terms[1]
            if c is not None and terms[0] is None:
                base, k = scaled.get(x, (x, 1.0))
                if x in capped and _fits(capped[x][2] * c):
                    b, kk, m = capped[x]
                    capped[st.out] = (b, kk, m * c)
                    args = (b, repr(kk) + "f", repr(m * c) + "f")
                    st = replace(st, fn="op_tanh_logit", args=args)
                elif _fits(k * c):
                    scaled[st.out] = (base, k * c)
                    st = replace(st, args=(base, repr(k * c) + "f"))
        elif st.fn == "op_tanh_logit" and len(st.args) == 1:
            base, k = scaled.get(st.args[0], (st.args[0], 1.0))
            capped[st.out] = (base, k, 1.0)
            st = replace(st, args=(base, repr(k) + "f", "1.0f"))
        elif st.fn == "op_tanh_logit":  # folded already
            inner, outer = _literal(st.args[1]), _literal(st.args[2])
            if inner is not None and outer is not None:
                capped[st.out] = (st.args[0], inner, outer)
        out.append(st)
    return out


def _literal(arg: str) -> float | None:
    """The value of a finite float literal (codegen.float_literal's form), else None."""
    try:
        return float(arg[:-1]) if arg.endswith("f") else None
    except ValueError:
        return None


def _fits(c: float) -> bool:
    """Whether a folded factor is a normal fp32 number (the fold then changes no result
    beyond rounding)."""
    return 2.0**-126 <= abs(c) < 2.0**127


def rule_tile(
    term: Term, q_axis: str, x_axis: str, index: Callable[[str], str],
    data: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """C++ of the interval a mask rule's term takes over a tile of queries ncdc_i0..ncdc_i1
    and keys ncdc_j0..ncdc_j1 (ncdc::attn::Iv, `iv_class` of it the tile's class), the
    device's copy of ncdc.model.masks.tile_class: a batch position is its block's index
    (`index`), a tensor's values are unknown unless `data` gives C++ of their interval over
    the tile (by name), and inexact arithmetic is unknown.

        >>> from ncdc.model.masks import Call, Const, Data, Pos
        >>> rule_tile(Call("le", (Pos("x"), Pos("q"))), "q", "x", str)
        'iv_le(iv_range(ncdc_j0, ncdc_j1), iv_range(ncdc_i0, ncdc_i1))'
        >>> rule_tile(Call("lt", (Pos("x"), Const(0.5))), "q", "x", str)
        'iv_lt(iv_range(ncdc_j0, ncdc_j1), iv(0.5))'
        >>> rule_tile(Call("eq", (Data("dq"), Data("dx"))), "q", "x", str, {"dx": "ncdc_dv[0]"})
        'iv_eq(iv_unknown(), ncdc_dv[0])'
    """
    if isinstance(term, Pos):
        if term.axis == q_axis:
            return "iv_range(ncdc_i0, ncdc_i1)"
        if term.axis == x_axis:
            return "iv_range(ncdc_j0, ncdc_j1)"
        return f"iv(double({index(term.axis)}))"
    if isinstance(term, Const):
        v = term.value
        if math.isinf(v):
            return "iv(kIvBig)" if v > 0 else "iv(-kIvBig)"
        # the fp32 literal the score path compares with
        return f"iv({as_fp32(v)!r})" if abs(v) < EXACT_INTEGERS else "iv_unknown()"
    if isinstance(term, Data):
        return (data or {}).get(term.name, "iv_unknown()")
    exact = term.fn in (*LOGIC, *COMPARE, "where") or (
        term.fn in EXACT_ARITHMETIC and all(whole_term(a) for a in term.args)
    )
    if not exact:
        return "iv_unknown()"
    args = ", ".join(rule_tile(a, q_axis, x_axis, index, data) for a in term.args)
    return f"iv_{term.fn}({args})"


def tile_data_inputs(term: Term, inputs: Mapping[str, ScoreInput]) -> tuple[ScoreInput, ...]:
    """The score inputs among a rule's `Data` terms whose values over a tile a warp can bound
    by a min and max: those along the queries or the keys (or neither), not both (a mask
    tensor over both would be a whole tile of values to read), in order of first use.

        >>> from ncdc.model.masks import Call, Data
        >>> ids = {n: ScoreInput(n, "int32", "0", q, x) for n, q, x in
        ...        (("dq", "1", "0"), ("dx", "0", "1"), ("m", "ncdc_size_x", "1"))}
        >>> rule = Call("and", (Call("eq", (Data("dq"), Data("dx"))), Data("m")))
        >>> [t.name for t in tile_data_inputs(rule, ids)]
        ['dq', 'dx']
    """
    names: list[str] = []

    def walk(t: Term) -> None:
        if isinstance(t, Data) and t.name not in names:
            names.append(t.name)
        elif isinstance(t, Call):
            for a in t.args:
                walk(a)

    walk(term)
    found = (inputs[n] for n in names if n in inputs)
    return tuple(t for t in found if t.q_pitch == "0" or t.x_pitch == "0")


class ScoreValues:
    """The C expressions of the score path's values: the scaled logit, each transformed
    score, and the tensors it reads (as score inputs with their pitches), and of its
    indices (query, key, a batch axis)."""

    def __init__(
        self, kernel: Kernel, diagram: Diagram, first: Op, batch: tuple[str, ...],
        q_axis: str, x_axis: str, chain: list[Op], unfused: str,
        given: Mapping[str, str] | None = None,
    ):  # fmt: skip
        self.kernel, self.diagram, self.first, self.batch = kernel, diagram, first, batch
        self.q_axis, self.x_axis, self.unfused = q_axis, x_axis, unfused
        self.produced = {op.out for op in chain}
        self.given = dict(given or {})  # other values the statements read: name -> C
        self.inputs: dict[str, ScoreInput] = {}
        self.needs_batch: list[str] = []

    def value(self, n: str) -> str:
        if n == self.first.out:
            return "ncdc_s"
        if n in self.given:
            return self.given[n]
        if n in self.produced:
            return f"ncdc_e_{n}"
        t = self.diagram.tensor(n)
        allowed = {*self.batch, self.q_axis, self.x_axis}
        # int32: a document id or a length a rule compares (exact as a float below 2^24)
        if t.dtype not in ("fp32", "fp16", "bf16", "int32") or not set(t.axes) <= allowed:
            raise PlanError(
                f"attention kernel {self.kernel.name}: the logits read {n} ({t.dtype}, axes "
                f"{list(t.axes)}); expected a bf16, fp16, fp32 or int32 tensor over "
                f"({', '.join(sorted(allowed))})",
                hint=f"declare {n} as fp32 over some of those axes, " + self.unfused,
            )
        if n not in self.inputs:
            pitch = {a: pitch_of(t.axes, a, {}) for a in t.axes}
            self.inputs[n] = ScoreInput(
                n, t.dtype,
                " + ".join(f"ncdc_i_{a} * {pitch[a]}" for a in self.batch if a in t.axes) or "0",
                pitch.get(self.q_axis, "0"), pitch.get(self.x_axis, "0"),
            )  # fmt: skip
        terms = [f"ncdc_p_{n}"]  # a broadcast axis (pitch 0) adds no term
        terms += [f"ncdc_i * ncdc_q_{n}"] if self.inputs[n].q_pitch != "0" else []
        terms += [f"ncdc_j * ncdc_x_{n}"] if self.inputs[n].x_pitch != "0" else []
        return f"ncdc::to_float(ncdc::ld_global({' + '.join(terms)}))"

    def index(self, axis: str) -> str:
        if axis == self.q_axis:
            return "ncdc_i"
        if axis == self.x_axis:
            return "ncdc_j"
        self.needs_batch.append(axis)
        return f"ncdc_b_{axis}"


def mask_bands(
    diagram: Diagram,
    kernel: Kernel, masks: list[Op], batch: tuple[str, ...], q_axis: str, x_axis: str,
    unfused: str,
) -> Scores:  # fmt: skip
    """The masks as bands i + lo <= j <= i + hi (C++ over the sizes) and lengths."""
    lo: list[str] = []
    hi: list[str] = []
    lengths, lengths_offset, sequences = "", "0", ""
    window = False
    for op in masks:
        if (op.params.get("query"), op.params.get("key")) != (q_axis, x_axis):
            raise PlanError(
                unsupported(kernel, op, f"a mask over ({q_axis}, {x_axis})"),
                hint=f"write {op.fn}({op.operands[0]}, query={q_axis}, key={x_axis}), " + unfused,
            )
        if op.fn in ("causal", "window"):
            shift = (
                f"(ncdc_size_{x_axis} - ncdc_size_{q_axis})" if op.params["align"] == "end" else "0"
            )
            if op.fn == "causal":
                hi.append(shift)
            else:
                window = True
                lo.append(f"{shift} - {op.params['left']}ll")
                hi.append(f"{shift} + {op.params['right']}ll")
        elif op.fn == "varlen":
            if lengths:
                raise PlanError(
                    unsupported(kernel, op, "one varlen mask"),
                    hint=f"remove {op.out} = varlen(...): one lengths tensor per kernel",
                )
            lengths = op.params["lengths"]
            t_axes = diagram.tensor(lengths).axes
            pitch = {a: pitch_of(t_axes, a, {}) for a in t_axes}
            lengths_offset = (
                " + ".join(f"ncdc_i_{a} * {pitch[a]}" for a in batch if a in t_axes) or "0"
            )
            own = [a for a in t_axes if a not in batch]
            sequences = own[0] if own else ""
    rule_lo, rule_hi = _rule_band(kernel, q_axis, x_axis, unfused)
    lo += rule_lo
    hi += rule_hi
    return Scores(lo=tuple(lo), hi=tuple(hi), bounded=bool(hi), window=window, lengths=lengths,
                  lengths_offset=lengths_offset, sequences=sequences)  # fmt: skip


def _rule_band(
    kernel: Kernel, q_axis: str, x_axis: str, unfused: str
) -> tuple[list[str], list[str]]:
    """The band of the kernel's mask rule (ncdc.model.masks.rule_band) as the key loop's
    bounds, which the cost model prices too (ncdc.model.geometry.mask_band)."""
    rule = read_mask_rule(kernel)
    if rule is None or rule.query is None:
        return [], []
    lo, hi = rule_band(rule)
    if lo is None and hi is None:
        return [], []
    if (rule.query, rule.key) != (q_axis, x_axis):
        select = mask_select(kernel)
        assert select is not None
        raise PlanError(
            unsupported(kernel, select, f"a mask rule over the positions of {q_axis} and {x_axis}"),
            hint=f"compare index({x_axis}) with index({q_axis}), " + unfused,
        )
    return ([f"{lo}ll"] if lo is not None else []), ([f"{hi}ll"] if hi is not None else [])


def pitch_of(axes: tuple[str, ...], axis: str, fixed: Mapping[str, str]) -> str:
    """Elements between neighbours along `axis` of a row-major tensor, as C++ over the size
    parameters (the head sizes are numbers)."""
    after = axes[axes.index(axis) + 1 :]
    return " * ".join(fixed.get(a, size_name(a)) for a in after) or "1"


def unsupported(kernel: Kernel, op: Op, expected: str) -> str:
    return (
        f"attention kernel {kernel.name}: no code for {op.fn} ({op.out}) here; "
        f"the generator covers {expected}"
    )
