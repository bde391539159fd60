"""Inference: each parsed statement checked against its op record and given its result's
axes, dtype and parameters, in dependency order (an operation may use a later line's
result).

Shapes follow from the axis names: a contraction keeps the axes of both operands but the
ones it sums over, a reduction drops its axes, a binary map weaves (broadcasts) its operands
by name, and every other kind keeps its operand's axes. One function per kind of operation.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ncdc.errors import SpecError
from ncdc.language.checks import Checks
from ncdc.language.diagram import MAX_AXIS_SIZE, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.language.hints import keyword_hint, operation_hint
from ncdc.language.ops import (
    GELU_APPROXIMATIONS,
    MASK_ALIGN,
    MAX_TOPK,
    OPERATIONS,
    REDUCE_MAX,
    OpRecord,
)
from ncdc.language.parse import Statement
from ncdc.language.text import did_you_mean, listing, shown
from ncdc.language.yamlsrc import YamlPath

_EXAMPLES = {
    "reduce": "s = sum(X, over=n)",
    "softmax": "P = softmax(S, over=x)",
    "norm": "Y = layernorm(X, over=n, weight=W, bias=B)",
    "cast": "Y = cast(X, to=fp8_e4m3, scale=s)",
    "mask": "M = causal(S, query=q, key=x)",
    "window": "M = window(S, query=q, key=x, left=4095)",
    "varlen": "M = varlen(S, query=q, key=x, lengths=L)",
    "gather": "Y = gather(E, ids, axis=v)",
    "scatter": "dE = scatter_add(dY, ids, axis=v)",
    "contract": "C = contract(A, B, over=k)",
    "scan": "Y = cumsum(X, over=n)",
    "topk": "I = topk(X, over=v, k=j)",
    "select": "I = argmax(X, over=v)",
    "permute": "Y = permute(X, axes=[b, h, s, d])",
    "slice": "Q = slice(QKV, axis=f, start=0, into=d)",
    "shift": "P = shift(X, axis=s, by=1)",
    "roll": "R = roll(X, axis=d, by=64)",
}


@dataclass
class Result:
    """What a kind's inference gives (the rest of an `Op` comes from the statement)."""

    operands: tuple[str | float, ...]
    axes: tuple[str, ...]
    dtype: str
    over: tuple[str, ...] = ()
    scale: tuple[str | float, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    fn: str = ""  # when the statement stands for another operation (gelu approximate=tanh)


class Site:
    """One statement being inferred: where it is, what it may read, and the checks that
    fail there."""

    def __init__(
        self, checks: Checks, st: Statement, i: int, axes: Mapping[str, int],
        known: dict[str, Tensor], defined: dict[str, Tensor], rec: OpRecord,
    ):  # fmt: skip
        self.checks, self.st, self.axes, self.known, self.defined, self.rec = (
            checks, st, axes, known, defined, rec,
        )  # fmt: skip
        self.path: YamlPath = ("ops", i)
        kw = st.kwargs.get("dtype")
        self.asked = checks.dtype(kw, self.path) if kw is not None else None

    def fail(self, message: str, hint: str | None = None) -> SpecError:
        return self.checks.fail(self.path, message, hint)

    def tensor(self, arg: Any, what: str) -> Tensor:
        """The tensor an argument names, known by now."""
        st = self.st
        if not isinstance(arg, str):
            raise self.fail(f"expected a tensor as {what} of {st.fn}, found {shown(arg)}")
        if arg not in self.known:
            hint = did_you_mean(arg, self.defined) or "declare it under inputs or compute it"
            raise self.fail(f"unknown tensor '{arg}' in '{st.text}'", hint)
        return self.known[arg]

    def over(self, t: Tensor) -> tuple[str, ...]:
        """The axes of `over=`, each an axis of `t`."""
        names = self.st.kwargs.get("over")
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not names or not all(isinstance(a, str) for a in names):
            raise self.fail(f"expected axis names for 'over', found {shown(names)}")
        for a in names:
            self.checks.known_axis(a, self.axes, self.path)
            if a not in t.axes:
                raise self.fail(
                    f"{self.st.fn} over '{a}', but {t.name} has axes {list(t.axes)}",
                    f"choose one of {listing(t.axes)}",
                )
        return tuple(names)

    def out_dtype(self) -> str | None:
        """The `dtype=` the statement asks its result in, if any (checked first)."""
        return self.asked

    def scales(self, axes: tuple[str, ...]) -> tuple[str | float, ...]:
        """The factors of `scale=` (and a trailing `* c`): numbers, or tensors over some of
        the result's `axes`."""
        st = self.st
        raw = st.kwargs.get("scale", [])
        items = raw if isinstance(raw, list) else [raw]
        if st.trailing_scale is not None:
            items = items + [st.trailing_scale]
        out: list[str | float] = []
        for item in items:
            if not isinstance(item, str):
                out.append(self.checks.number(item, self.path, "scale"))
                continue
            t = self.known.get(item)
            if t is None:
                raise self.fail(
                    f"unknown scale tensor '{item}'", "declare it as an input with `axes: []`"
                )
            if not set(t.axes) <= set(axes):
                raise self.fail(
                    f"scale {item} has axes {list(t.axes)}; expected a scalar or axes of "
                    f"the result {list(axes)}",
                    "per tensor `axes: []`, per row or column `axes: [m]`",
                )
            out.append(item)
        return tuple(out)


def infer_ops(
    checks: Checks,
    statements: list[Statement],
    axes: Mapping[str, int],
    inputs: dict[str, Tensor],
    defined: dict[str, Tensor],
) -> list[Op]:
    """Infer shapes in dependency order, so an op may refer to a later line.

    The order is that of repeated passes over the lines, each taking every line whose
    operands are known by then; computed with counts of unmet operands (Kahn's algorithm) so
    that it takes time linear in the ops, not quadratic.
    """
    producer = {st.out: i for i, st in enumerate(statements)}
    waiting = [0] * len(statements)
    dependents: list[list[int]] = [[] for _ in statements]
    for i, st in enumerate(statements):
        deps = {n for n in st.names() if n in defined and n not in inputs}
        if st.out in deps:
            waiting[i] = len(statements) + 1  # reads itself: never ready, a cycle
            continue
        for d in deps:
            dependents[producer[d]].append(i)
        waiting[i] = len(deps)
    now = [i for i, n in enumerate(waiting) if n == 0]
    later: list[int] = []
    known = dict(inputs)
    ops: dict[str, Op] = {}
    while now or later:
        if not now:
            now, later = sorted(later), []
        i = heapq.heappop(now)
        op = infer_op(checks, statements[i], i, axes, known, defined)
        ops[op.out], known[op.out] = op, Tensor(op.out, op.axes, op.dtype)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0 and j > i:  # the current pass still reaches j
                heapq.heappush(now, j)
            elif waiting[j] == 0:
                later.append(j)
    if len(ops) < len(statements):
        pending = [i for i, st in enumerate(statements) if st.out not in ops]
        i = pending[0]
        cycle = " -> ".join(statements[j].out for j in pending)
        raise checks.fail(
            ("ops", i),
            f"operations depend on each other in a cycle: {cycle} -> {statements[i].out}",
            "a result cannot feed its own inputs",
        )
    return list(ops.values())  # inference order is a topological order


def infer_op(
    checks: Checks,
    st: Statement,
    i: int,
    axes: Mapping[str, int],
    known: dict[str, Tensor],
    defined: dict[str, Tensor],
) -> Op:
    """Check one parsed statement against its op record and infer its result."""
    rec = _record(checks, st, ("ops", i))
    site = Site(checks, st, i, axes, known, defined, rec)
    r = _KINDS[rec.kind](site)
    return Op(
        out=st.out, fn=r.fn or st.fn, kind=rec.kind, operands=r.operands, over=r.over,
        axes=r.axes, dtype=r.dtype, scale=r.scale, params=r.params,
        line=checks.doc.line(site.path), text=st.text,
    )  # fmt: skip


def _record(checks: Checks, st: Statement, path: YamlPath) -> OpRecord:
    """The statement's op record, its operands and keyword arguments checked."""
    rec = OPERATIONS.get(st.fn)
    if rec is None:
        raise checks.fail(
            path,
            f"unknown operation '{st.fn}'; expected one of {listing(sorted(OPERATIONS))}",
            operation_hint(st.fn) or did_you_mean(st.fn, OPERATIONS),
        )
    if st.fn == "max" and len(st.args) == 1:
        rec = REDUCE_MAX
    if len(st.args) != rec.operands:
        raise checks.fail(
            path, f"{st.fn} expects {rec.operands} operand(s), found {len(st.args)}: '{st.text}'"
        )
    for key in st.kwargs:
        if key not in rec.keywords:
            raise checks.fail(
                path,
                f"{st.fn} has no argument '{key}'; expected "
                f"{listing(sorted(rec.keywords)) or 'none'}",
                keyword_hint(st.fn, key, st.kwargs[key], tuple(rec.keywords))
                or did_you_mean(key, rec.keywords),
            )
    for key in rec.required:
        if key not in st.kwargs:
            example = _EXAMPLES.get(st.fn, _EXAMPLES.get(rec.kind, ""))
            raise checks.fail(path, f"{st.fn} needs '{key}='", f"e.g. {example}")
    if st.trailing_scale is not None and rec.kind != "contract":
        raise checks.fail(
            path,
            f"a trailing '* {st.trailing_scale}' is only allowed on contract",
            f"scale in an op of its own: mul(X, {st.trailing_scale})",
        )
    return rec


def _contract(site: Site) -> Result:
    st = site.st
    a, b = site.tensor(st.args[0], "first operand"), site.tensor(st.args[1], "second operand")
    shared = [x for x in a.axes if x in b.axes]
    if "over" in st.kwargs:
        red = site.over(a)
        for x in red:
            if x not in b.axes:
                raise site.fail(
                    f"contract over '{x}', but {b.name} has axes {list(b.axes)}",
                    "both operands need the axis",
                )
    elif len(shared) == 1:
        red = (shared[0],)
    else:
        raise site.fail(
            f"contract of {a.name} and {b.name} shares axes "
            f"{shared}; expected 'over=' to say which are summed",
            f"e.g. contract({a.name}, {b.name}, over={(shared or ['k'])[-1]})",
        )
    out_axes = tuple(dict.fromkeys(x for x in a.axes + b.axes if x not in red))
    params = _groups(site, a, b, red) if "offsets" in st.kwargs else {}
    out_axes = tuple(x for x in out_axes if x != params.get("group"))
    scale = site.scales(out_axes)
    dtype = site.out_dtype() or _contract_dtype(a.dtype, b.dtype, bool(scale))
    return Result((a.name, b.name), out_axes, dtype, red, scale, params)


def _groups(site: Site, a: Tensor, b: Tensor, red: tuple[str, ...]) -> dict[str, Any]:
    """A grouped contraction's offsets: int32 over one axis `e` of the second operand (the
    groups), each the end of a run of rows along the one axis of the first operand the
    second lacks (`rows`); run `e` meets slice `e` of the second operand."""
    name = site.st.kwargs["offsets"]
    offsets = site.known.get(name) if isinstance(name, str) else None
    example = f"contract({a.name}, {b.name}, over={red[0]}, offsets=ends)"
    if offsets is None:
        raise site.fail(
            f"expected an offsets tensor for 'offsets', found {shown(name)}",
            "declare it as an input: ends: {axes: [e], dtype: int32}, the row each group "
            f"ends at, and write {example}",
        )
    if offsets.dtype != "int32" or len(offsets.axes) != 1:
        raise site.fail(
            f"offsets {offsets.name} is {offsets.dtype} over {list(offsets.axes)}; expected "
            "int32 over one axis, the groups",
            f"declare it as {offsets.name}: {{axes: [e], dtype: int32}}",
        )
    (group,) = offsets.axes
    if group in a.axes and group not in b.axes:
        raise site.fail(
            f"{a.name} has the groups' axis '{group}'; a grouped contraction takes its "
            "weights per group second",
            f"write contract(rows, weights, over=..., offsets={offsets.name})",
        )
    if group not in b.axes or group in red:
        raise site.fail(
            f"offsets {offsets.name} is over '{group}', which {b.name} does not keep "
            f"(its axes {list(b.axes)}, summed over {list(red)})",
            f"one slice of {b.name} per group: give {b.name} the axis '{group}', as "
            "W: {axes: [e, k, n]}",
        )
    rows = [x for x in a.axes if x not in b.axes]
    shared = [x for x in a.axes if x in b.axes and x not in red]
    if len(rows) != 1 or shared:
        raise site.fail(
            f"a grouped contraction takes rows along one axis of {a.name} that {b.name} "
            f"lacks; {a.name} has {listing(rows) or 'none'}"
            + (f" and shares {listing(shared)} with {b.name}" if shared else ""),
            f"e.g. X: {{axes: [t, k]}}, W: {{axes: [e, k, n]}}, then {example}",
        )
    return {"offsets": offsets.name, "group": group, "rows": rows[0]}


def _contract_dtype(a: str, b: str, scaled: bool) -> str:
    """Contractions of 8-bit inputs give fp32 unless told (int8 x int8: its exact int32
    accumulator, unless scaled); otherwise the wider input type."""
    if a == b == "int8" and not scaled:
        return "int32"
    if DTYPES[a].bytes == 1 and DTYPES[b].bytes == 1:
        return "fp32"
    return max((a, b), key=lambda d: DTYPES[d].rank)


def _index(site: Site) -> Result:
    (axis,) = site.st.args
    if not isinstance(axis, str):
        raise site.fail(f"expected an axis name for index, found {shown(axis)}",
                        "e.g. I = index(q)")  # fmt: skip
    site.checks.known_axis(axis, site.axes, site.path)
    # int32 ranks below every float: sub(J, I) * slope is bf16
    return Result((), (axis,), site.out_dtype() or "int32", params={"axis": axis})


def _gather(site: Site) -> Result:
    """T with its axis `axis` replaced, in place, by the index's axes that T lacks (those it
    has are matched by name: a label per row picks from that row)."""
    st = site.st
    src = site.tensor(st.args[0], "source")
    index = site.tensor(st.args[1], "index")
    axis = st.kwargs["axis"]
    if not isinstance(axis, str):
        example = f"gather({src.name}, {index.name}, axis={src.axes[-1] if src.axes else 'v'})"
        raise site.fail(f"expected an axis name for 'axis', found {shown(axis)}", f"e.g. {example}")
    site.checks.known_axis(axis, site.axes, site.path)
    if axis not in src.axes:
        raise site.fail(
            f"gather along '{axis}', but {src.name} has axes {list(src.axes)}",
            f"choose one of {listing(src.axes)}",
        )
    if index.dtype != "int32":
        raise site.fail(
            f"the index {index.name} of gather is {index.dtype}; expected int32",
            f"declare it as {index.name}: {{axes: {list(index.axes)}, dtype: int32}}, or "
            f"round it: cast({index.name}, to=int32)",
        )
    if axis in index.axes:
        raise site.fail(
            f"the index {index.name} has the gathered axis '{axis}' itself",
            f"index {src.name} along '{axis}' by a tensor over other axes",
        )
    own = [b for b in index.axes if b not in src.axes]
    params: dict[str, Any] = {"axis": axis}
    if "within" in st.kwargs or "into" in st.kwargs:
        params.update(_pages(site, src, index, axis, own))
    out: list[str] = []
    for a in src.axes:
        if a == axis:
            out += [*own[:-1], params["into"]] if "into" in params else own
        elif a != params.get("within"):
            out.append(a)
    return Result((src.name, index.name), tuple(out), site.out_dtype() or src.dtype,
                  params=params)  # fmt: skip


def _pages(
    site: Site, src: Tensor, index: Tensor, axis: str, own: list[str]
) -> dict[str, Any]:  # fmt: skip
    """A paged gather's `within` (the rows of a page, an axis of the source) and `into`
    (the result's axis): the index's last axis of its own counts a sequence's pages, and
    position i of `into` reads row i % |within| of page index[.., i // |within|], as a
    block table maps a sequence into a paged KV cache."""
    st = site.st
    example = f"gather({src.name}, {index.name}, axis={axis}, within=slot, into=x)"
    within, into = st.kwargs.get("within"), st.kwargs.get("into")
    for key, name in (("within", within), ("into", into)):
        if not isinstance(name, str):
            raise site.fail(
                f"a paged gather names the rows of a page ('within') and the result's axis "
                f"('into'); found {key}={shown(name)}",
                f"e.g. {example}",
            )
        site.checks.known_axis(name, site.axes, site.path)
    if within == axis or within not in src.axes:
        raise site.fail(
            f"'within' names the axis of {src.name} that runs along a page, other than "
            f"'{axis}'; found '{within}' in {list(src.axes)}",
            f"choose one of {listing([a for a in src.axes if a != axis])}",
        )
    if into in src.axes or into in index.axes:
        has = src.name if into in src.axes else index.name
        raise site.fail(f"{has} already has the axis '{into}' that 'into' names",
                        f"name a new axis for the gathered rows: {example}")  # fmt: skip
    if not own:
        raise site.fail(
            f"the block table {index.name} has no axis of its own to count pages along",
            f"give it one: {index.name}: {{axes: [b, n], dtype: int32}}",
        )
    assert isinstance(within, str) and isinstance(into, str)  # checked above
    pages, rows = own[-1], site.axes[within]
    if site.axes[into] > site.axes[pages] * rows:
        raise site.fail(
            f"{into} of {site.axes[into]} rows is more than the {site.axes[pages]} pages of "
            f"{rows} rows ({pages} x {within}) that {index.name} maps",
            f"keep {into} at most {site.axes[pages] * rows}, or give {index.name} more pages",
        )
    return {"within": within, "into": into, "pages": pages}


def _scatter(site: Site) -> Result:
    """G with the index's axes it sums over (`over=`, all of the index's axes unless given)
    replaced, in place of the first, by `axis`: the adjoint of gather. The index's other
    axes are matched by name (a table per batch entry)."""
    st = site.st
    src = site.tensor(st.args[0], "operand")
    index = site.tensor(st.args[1], "index")
    axis = st.kwargs["axis"]
    if not isinstance(axis, str):
        raise site.fail(f"expected an axis name for 'axis', found {shown(axis)}",
                        f"e.g. scatter_add({src.name}, {index.name}, axis=v)")  # fmt: skip
    site.checks.known_axis(axis, site.axes, site.path)
    if index.dtype != "int32":
        raise site.fail(
            f"the index {index.name} of scatter_add is {index.dtype}; expected int32",
            f"declare it as {index.name}: {{axes: {list(index.axes)}, dtype: int32}}",
        )
    if axis in src.axes or axis in index.axes:
        has = src.name if axis in src.axes else index.name
        raise site.fail(
            f"scatter_add adds along '{axis}', but {has} has that axis already",
            "scatter along an axis that the operand and the index lack (the gathered axis)",
        )
    missing = [a for a in index.axes if a not in src.axes]
    if missing:
        raise site.fail(
            f"the index {index.name} has axes {missing} that {src.name} lacks",
            f"give {src.name} every axis of {index.name} ({listing(index.axes)})",
        )
    over = site.over(index) if "over" in st.kwargs else index.axes
    if not over:
        raise site.fail(
            f"scatter_add sums over the axes of its index, and {index.name} has none",
            f"give {index.name} the axes of {src.name} it indexes (e.g. [t] for one id a token)",
        )
    out: list[str] = []
    for a in src.axes:
        if a not in over:
            out.append(a)
        elif axis not in out:
            out.append(axis)
    if DTYPES[site.out_dtype() or src.dtype].integer:
        raise site.fail(
            f"scatter_add sums {site.out_dtype() or src.dtype} values; it sums floats",
            "cast the operand to a float type first",
        )
    return Result((src.name, index.name), tuple(out), site.out_dtype() or src.dtype, over,
                  params={"axis": axis})  # fmt: skip


def _unary(site: Site) -> Result:
    """A map, softmax, norm, mask, cast or reduction of one tensor."""
    st, kind = site.st, site.rec.kind
    src = site.tensor(st.args[0], "operand")
    red = site.over(src) if "over" in site.rec.keywords else ()
    out_axes = tuple(a for a in src.axes if a not in red) if kind == "reduce" else src.axes
    r = Result((src.name,), out_axes, site.out_dtype() or src.dtype, red)
    if kind == "norm":
        r.params = _norm_params(site, red)
    elif kind == "mask":
        r.params = _mask_params(site, src)
    elif kind == "cast":
        r.dtype = site.checks.dtype(st.kwargs["to"], site.path)
        r.params = {"to": r.dtype}
        r.scale = site.scales(out_axes)
    if st.fn == "gelu" and "approximate" in st.kwargs:
        form = st.kwargs["approximate"]
        if form not in GELU_APPROXIMATIONS:
            raise site.fail(
                f"gelu approximate={shown(form)}; expected {listing(sorted(GELU_APPROXIMATIONS))}",
                f"e.g. gelu({src.name}, approximate=tanh)",
            )
        r.fn = GELU_APPROXIMATIONS[form]
    return r


def _scan(site: Site) -> Result:
    """A running sum, max or min along one axis: the operand's axes, its dtype (int32 for
    an integer operand: a running sum outgrows int8)."""
    st = site.st
    src = site.tensor(st.args[0], "operand")
    over = site.over(src)
    if len(over) != 1:
        raise site.fail(
            f"{st.fn} runs along one axis; 'over' names {len(over)}: {list(over)}",
            f"one at a time: {st.fn}({src.name}, over={over[0]}), then over the next",
        )
    example = f"{st.fn}({src.name}, over={over[0]}, reverse=true): from the axis's end"
    reverse = _flag(site, "reverse", False, example)
    dtype = site.out_dtype() or ("int32" if DTYPES[src.dtype].integer else src.dtype)
    return Result((src.name,), src.axes, dtype, over, params={"reverse": reverse})


def _permute(site: Site) -> Result:
    """X's values with its axes in the order `axes=` gives (each of X's axes once)."""
    st = site.st
    src = site.tensor(st.args[0], "operand")
    names = st.kwargs["axes"]
    names = [names] if isinstance(names, str) else names
    order = f"axes=[{', '.join(reversed(src.axes))}]"
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        raise site.fail(f"expected axis names for 'axes', found {shown(names)}", f"e.g. {order}")
    for a in names:
        site.checks.known_axis(a, site.axes, site.path)
    if sorted(names) != sorted(src.axes):
        raise site.fail(
            f"permute puts {src.name}'s axes {list(src.axes)} in another order; 'axes' names "
            f"{names}",
            f"each of {src.name}'s axes once, e.g. {order}",
        )
    return Result((src.name,), tuple(names), site.out_dtype() or src.dtype)


def _slice(site: Site) -> Result:
    """Values read along `axis` at a fixed offset from each position: the result has the
    operand's axes with `axis` replaced, in place, by `into` (a slice; itself when left
    out, and always for shift and roll). Every read outside the axis is a 0 (a roll wraps)."""
    st = site.st
    src = site.tensor(st.args[0], "operand")
    axis = st.kwargs["axis"]
    example = _EXAMPLES[st.fn]
    if not isinstance(axis, str):
        raise site.fail(f"expected an axis name for 'axis', found {shown(axis)}", f"e.g. {example}")
    site.checks.known_axis(axis, site.axes, site.path)
    if axis not in src.axes:
        raise site.fail(f"{st.fn} along '{axis}', but {src.name} has axes {list(src.axes)}",
                        f"choose one of {listing(src.axes)}")  # fmt: skip
    key = "start" if st.fn == "slice" else "by"
    offset = st.kwargs.get(key, 0)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise site.fail(f"expected a whole number for '{key}', found {shown(offset)}",
                        f"e.g. {example}")  # fmt: skip
    into = st.kwargs.get("into", axis)
    if not isinstance(into, str):
        raise site.fail(
            f"'into' names the axis of the result (its size is the slice's length), found "
            f"{shown(into)}",
            f"declare an axis of that size and name it: {example}",
        )
    site.checks.known_axis(into, site.axes, site.path)
    if into != axis and into in src.axes:
        raise site.fail(f"{src.name} already has the axis '{into}' that 'into' names",
                        f"name a new axis for the slice: {example}")  # fmt: skip
    size = site.axes[axis]
    if abs(offset) >= MAX_AXIS_SIZE:
        raise site.fail(f"{key}={offset} is beyond any axis size (at most {MAX_AXIS_SIZE})")
    start = {"slice": offset, "shift": -offset, "roll": -offset}[st.fn]
    if st.fn != "roll" and (start >= size or start + site.axes[into] <= 0):
        what = f"{key}={offset}" if st.fn == "slice" else f"by {offset}"
        raise site.fail(f"{st.fn} {what} along {axis} of {size} reads nothing: all zeros",
                        f"an offset that reaches into {axis}, under {size} either way")  # fmt: skip
    axes = tuple(into if a == axis else a for a in src.axes)
    return Result((src.name,), axes, site.out_dtype() or src.dtype,
                  params={"axis": axis, "start": start, "into": into,
                          "wrap": st.fn == "roll"})  # fmt: skip


def _flag(site: Site, key: str, default: bool, example: str) -> bool:
    """A keyword that is true or false (written true, false, or as a YAML boolean)."""
    value = site.st.kwargs.get(key, default)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if not isinstance(value, bool):
        raise site.fail(f"expected true or false for '{key}', found {shown(value)}",
                        f"e.g. {example}")  # fmt: skip
    return value


def _select(site: Site) -> Result:
    """The int32 positions of the best values along one axis: argmax and argmin drop the
    axis, topk replaces it in place by the axis `k=` names (its size is k)."""
    st = site.st
    src = site.tensor(st.args[0], "operand")
    over = site.over(src)
    if len(over) != 1:
        raise site.fail(
            f"{st.fn} picks along one axis; 'over' names {len(over)}: {list(over)}",
            f"one axis: {st.fn}({src.name}, over={over[0]}{', k=j' if st.fn == 'topk' else ''})",
        )
    (axis,) = over
    dtype = site.out_dtype() or "int32"
    if dtype != "int32":
        raise site.fail(f"{st.fn} gives positions, int32; dtype={dtype} asked",
                        f"its values: gather({src.name}, {st.out}, axis={axis})")  # fmt: skip
    if st.fn != "topk":
        return Result((src.name,), tuple(a for a in src.axes if a != axis), dtype, over,
                      params={"k": 1, "largest": st.fn == "argmax"})  # fmt: skip
    picks = st.kwargs["k"]
    example = f"topk({src.name}, over={axis}, k=j) with j: 8 under axes"
    if not isinstance(picks, str):
        raise site.fail(
            f"k names the axis of the picks (its size is k), found {shown(picks)}",
            f"declare an axis of size {picks} and name it: {example}"
            if isinstance(picks, int)
            else f"e.g. {example}",
        )
    site.checks.known_axis(picks, site.axes, site.path)
    if picks in src.axes:
        raise site.fail(f"{src.name} already has the axis '{picks}' that k names",
                        f"name a new axis for the picks: {example}")  # fmt: skip
    k = site.axes[picks]
    if not 1 <= k <= min(MAX_TOPK, site.axes[axis]):
        raise site.fail(
            f"topk picks {k} ({picks}) of the {site.axes[axis]} values along {axis}; it picks "
            f"1 to {min(MAX_TOPK, site.axes[axis])}",
            f"make {picks} at most {MAX_TOPK} and at most the size of {axis}",
        )
    largest = _flag(site, "largest", True, f"topk({src.name}, over={axis}, k={picks}, "
                                           "largest=false): the smallest")  # fmt: skip
    axes = tuple(picks if a == axis else a for a in src.axes)
    return Result((src.name,), axes, dtype, over,
                  params={"k": k, "largest": largest, "picks": picks})  # fmt: skip


def _norm_params(site: Site, red: tuple[str, ...]) -> dict[str, Any]:
    """A norm's eps and its weight and bias, over the normalised axes only."""
    params: dict[str, Any] = {
        "eps": site.checks.number(site.st.kwargs.get("eps", 1e-5), site.path, "eps")
    }
    for key in ("weight", "bias"):
        if key in site.st.kwargs:
            w = site.tensor(site.st.kwargs[key], key)
            if set(w.axes) - set(red):
                raise site.fail(
                    f"{key} {w.name} has axes {list(w.axes)}; expected only the normalised "
                    f"axes {list(red)}"
                )
            params[key] = w.name
    return params


def _mask_params(site: Site, src: Tensor) -> dict[str, Any]:
    """query and key axes of a mask, its alignment, window extents and lengths tensor."""
    st = site.st
    params: dict[str, Any] = {}
    for key in ("query", "key"):
        ax = st.kwargs[key]
        if not isinstance(ax, str):
            raise site.fail(f"expected an axis name for '{key}', found {shown(ax)}")
        site.checks.known_axis(ax, site.axes, site.path)
        if ax not in src.axes:
            raise site.fail(
                f"{st.fn} {key} axis '{ax}' is not an axis of {src.name} {list(src.axes)}",
                f"choose one of {listing(src.axes)}",
            )
        params[key] = ax
    if params["query"] == params["key"]:
        raise site.fail(f"{st.fn} needs two different axes for query and key")
    if st.fn in ("causal", "window"):
        align = st.kwargs.get("align", "end")
        if align not in MASK_ALIGN:
            raise site.fail(
                f"expected align=end or align=start, found {shown(align)}",
                "end: the last query sees the last key (bottom-right); start: top-left",
            )
        params["align"] = align
    if st.fn == "window":
        for key, default in (("left", None), ("right", 0)):
            n = st.kwargs.get(key, default)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_AXIS_SIZE:
                raise site.fail(
                    f"expected a whole number of keys from 0 to {MAX_AXIS_SIZE} for "
                    f"'{key}', found {shown(n)}",
                    "e.g. window(S, query=q, key=x, left=4095): the key itself and "
                    "the 4095 before it",
                )
            params[key] = n
    if st.fn == "varlen":
        params["lengths"] = _lengths(site, src, params).name
    return params


def _lengths(site: Site, src: Tensor, params: Mapping[str, Any]) -> Tensor:
    """A varlen mask's int32 lengths: over batch axes of the scores (padded sequences), then
    at most one axis of its own (sequences packed along the query and key axes)."""
    name = site.st.kwargs["lengths"]
    lengths = site.known.get(name) if isinstance(name, str) else None
    if lengths is None:
        raise site.fail(
            f"expected a lengths tensor for 'lengths', found {shown(name)}",
            "declare it as an input: L: {axes: [b], dtype: int32}",
        )
    if lengths.dtype != "int32":
        raise site.fail(
            f"lengths {lengths.name} is {lengths.dtype}; expected int32",
            f"declare it as {lengths.name}: {{axes: {list(lengths.axes)}, dtype: int32}}",
        )
    own = [a for a in lengths.axes if a not in src.axes]
    rows = {params["query"], params["key"]} & set(lengths.axes)
    if len(own) > 1 or rows or (own and own[0] != lengths.axes[-1]):
        raise site.fail(
            f"lengths {lengths.name} has axes {list(lengths.axes)}; expected batch "
            f"axes of {src.name} (padded sequences), then at most one axis of its "
            "own (sequences packed along the query and key axes)",
            f"e.g. {lengths.name}: {{axes: [b], dtype: int32}}, or axes: [n] with "
            "`n` the number of packed sequences",
        )
    return lengths


def _binary(site: Site) -> Result:
    st = site.st
    tensors = [site.tensor(arg, "operand") for arg in st.args if isinstance(arg, str)]
    if not tensors:
        raise site.fail(f"{st.fn} needs at least one tensor operand")
    for arg in st.args:
        if not isinstance(arg, str):
            site.checks.number(arg, site.path, "operand", infinite=True)
    # where(C, A, B) has the type of its values, and their axes first (a select of the
    # scores is laid out as the scores); a condition of 0s and 1s adds no type
    typed = [site.known[a] for a in st.args[1:] if isinstance(a, str)] if st.fn == "where" else []
    ordered = [*typed, *tensors] if typed else tensors
    out_axes = tuple(dict.fromkeys(a for t in ordered for a in t.axes))
    params = {"axes": _declared_axes(site, out_axes)} if "axes" in st.kwargs else {}
    dtype = site.out_dtype() or max(
        (t.dtype for t in typed or tensors), key=lambda d: DTYPES[d].rank
    )
    return Result(tuple(st.args), out_axes, dtype, params=params)


def _declared_axes(site: Site, out_axes: tuple[str, ...]) -> tuple[str, ...]:
    """A binary map's `axes=`: the result's axes as the broadcast makes them (the first
    operand's order first), stated so that a broadcast adding an axis reads as meant."""
    names = site.st.kwargs["axes"]
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        raise site.fail(f"expected axis names for 'axes', found {shown(names)}")
    for a in names:
        site.checks.known_axis(a, site.axes, site.path)
    if tuple(names) != out_axes:
        args = ", ".join(str(a) for a in site.st.args)
        raise site.fail(
            f"{site.st.fn}({args}) has axes {list(out_axes)}; 'axes' says {names}",
            f"write axes=[{', '.join(out_axes)}]: the first operand's axes, then the others' "
            "new ones",
        )
    return out_axes


_KINDS: dict[str, Callable[[Site], Result]] = {
    "contract": _contract,
    "index": _index,
    "gather": _gather,
    "scatter": _scatter,
    "scan": _scan,
    "select": _select,
    "permute": _permute,
    "slice": _slice,
    "binary": _binary,
    **dict.fromkeys(("map", "softmax", "norm", "mask", "cast", "reduce"), _unary),
}
