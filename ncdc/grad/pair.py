"""The training pair as two ordinary diagrams: the forward, which also saves what the
backward reads, and the backward, whose inputs are the forward's inputs and saved results
and `d<OUT>` for each output, and whose outputs are `d<IN>` for each input.

Each intermediate the backward reads is got one of three ways (`WAYS`): saved by the
forward (an extra output), recomputed by the backward (its op, and what that op reads in
turn), or, for a softmax (log-softmax) result, recomputed from its row log-sum-exp, which
the forward saves instead: softmax(M) = exp(M - logsumexp(M)), a vector per row where P is
a matrix. Inputs and outputs are at hand.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.grad.derive import derive
    >>> d = load_diagram("diagrams/attention.yaml")
    >>> p = make_pair(d, derive(d), {"P": "lse", "S": "recompute"})
    >>> p.saved, p.recomputed
    (('lse_P',), ('S', 'P'))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ncdc.errors import SpecError
from ncdc.grad.derive import Backward
from ncdc.grad.tape import Line
from ncdc.language.diagram import Diagram, Op, Schedule, Tensor
from ncdc.language.load import load_diagram_text
from ncdc.language.names import MAX_NAME_LENGTH
from ncdc.language.write import diagram_text

SAVE, RECOMPUTE, LSE = "save", "recompute", "lse"
WAYS = {
    SAVE: "the forward saves it",
    RECOMPUTE: "the backward recomputes it from what its op reads",
    LSE: "the forward saves its row log-sum-exp; the backward recomputes exp(x - lse)",
}


class Undecided(Exception):
    """The backward reads `name`, an intermediate with no way chosen yet."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Pair:
    """The two diagrams (YAML text, loaded back), what the forward saves for the backward,
    what the backward recomputes, and the way chosen for each intermediate it reads."""

    forward: Diagram
    backward: Diagram
    forward_text: str
    backward_text: str
    saved: tuple[str, ...]
    recomputed: tuple[str, ...]
    ways: Mapping[str, str]


def ways_of(diagram: Diagram, name: str) -> tuple[str, ...]:
    """The ways the backward can get the intermediate `name`."""
    op = diagram.producer(name)
    assert op is not None and name not in diagram.outputs
    if _positions_only(diagram, name):  # a few integer operations a value: never worth a save
        return (RECOMPUTE,)
    lse = (LSE,) if op.kind == "softmax" or op.fn == "log_softmax" else ()
    return (SAVE, RECOMPUTE, *lse)


def _positions_only(diagram: Diagram, name: str) -> bool:
    """`name` is computed from positions (index) and numbers alone: a mask rule's parts."""
    op = diagram.producer(name)
    if op is None:
        return False
    return op.kind == "index" or all(
        not isinstance(o, str) or _positions_only(diagram, o) for o in op.operands
    )


@dataclass
class _Build:
    """What resolving the backward's reads has gathered so far."""

    saved: list[str]
    given: list[str]  # forward inputs and outputs the backward reads
    recompute: list[Op]
    forward_lines: list[str]
    backward_lines: list[str]
    taken: set[str]


def make_pair(
    diagram: Diagram, backward: Backward, ways: Mapping[str, str], suffix: str = "",
    *, schedule: bool = True,
) -> Pair:  # fmt: skip
    """The pair with each intermediate the backward reads got as `ways` says; Undecided
    for the first one it reads that `ways` does not name. The forward keeps the spec's
    schedule (`schedule=False`: leaves out its group and stream, which saving an
    intermediate can make illegal)."""
    b = _Build([], [], [], [], [], {t.name for t in diagram.tensors} | _made(backward))
    todo, seen = list(backward.reads), set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        todo += _resolve(diagram, name, ways, b)
    fwd_name, bwd_name = _names(diagram, suffix)
    forward_text = _forward_text(diagram, fwd_name, b, schedule)
    backward_text = _backward_text(diagram, backward, bwd_name, b)
    used = {k: v for k, v in ways.items() if k in seen}
    order = [op.out for op in diagram.ops]
    recomputed = tuple(sorted((op.out for op in b.recompute), key=order.index))
    return Pair(
        _loaded(forward_text, fwd_name), _loaded(backward_text, bwd_name), forward_text,
        backward_text, tuple(b.saved), recomputed, used,
    )  # fmt: skip


def _made(backward: Backward) -> set[str]:
    return {line.out for line in backward.lines} | {f"d{n}" for n in backward.seeds}


def _resolve(diagram: Diagram, name: str, ways: Mapping[str, str], b: _Build) -> list[str]:
    """Get `name` for the backward; the names that getting it reads in turn."""
    op = diagram.producer(name)
    if op is None or name in diagram.outputs:
        b.given.append(name)
        return []
    if name not in ways:
        raise Undecided(name)
    way = ways[name]
    if way not in ways_of(diagram, name):
        raise SpecError(
            f"{name} cannot be got by '{way}'; its ways are {', '.join(ways_of(diagram, name))}",
            where=diagram.source,
        )
    if way == SAVE:
        b.saved.append(name)
        return []
    b.recompute.append(op)
    if way == RECOMPUTE:
        return list(op.inputs)
    return _from_lse(diagram, op, b)


def _from_lse(diagram: Diagram, op: Op, b: _Build) -> list[str]:
    """softmax(M) = exp(M - L) and log_softmax(M) = M - L with L = logsumexp(M): the
    forward's own logsumexp of M over the same axes when it has one, else a new output."""
    source, over = str(op.operands[0]), op.over
    found = [
        o for o in diagram.ops
        if o.fn == "logsumexp" and o.operands == op.operands and o.over == over
    ]  # fmt: skip
    if found:
        lse, reads = found[0].out, [source, found[0].out]
    else:
        lse, reads = _fresh(b.taken, f"lse_{op.out}"), [source]
        b.forward_lines.append(
            Line(lse, "logsumexp", (source,), (("over", over), ("dtype", "fp32"))).text()
        )
        b.saved.append(lse)
    dtype = ("dtype", diagram.tensor(op.out).dtype)
    if op.kind == "softmax":
        shifted = _fresh(b.taken, f"{op.out}_shifted")
        b.backward_lines += [
            Line(shifted, "sub", (source, lse)).text(),
            Line(op.out, "exp", (shifted,), (dtype,)).text(),
        ]
    else:
        b.backward_lines.append(Line(op.out, "sub", (source, lse), (dtype,)).text())
    return reads


def _fresh(taken: set[str], stem: str) -> str:
    stem = stem[: MAX_NAME_LENGTH - 4]
    name, i = stem, 0
    while name in taken:
        i += 1
        name = f"{stem}_{i}"
    taken.add(name)
    return name


def _names(diagram: Diagram, suffix: str) -> tuple[str, str]:
    names = (f"{diagram.name}{suffix}_fwd", f"{diagram.name}{suffix}_bwd")
    if len(names[1]) > MAX_NAME_LENGTH:
        raise SpecError(
            f"the training pair's names ({names[1]}) pass {MAX_NAME_LENGTH} characters",
            where=diagram.source, hint="shorten the diagram's name",
        )  # fmt: skip
    return names


def _forward_text(diagram: Diagram, name: str, b: _Build, schedule: bool) -> str:
    saves = ", ".join(b.saved) or "nothing more"
    doc = f"{diagram.doc} Forward of the training pair (ncdc grad): also saves {saves}."
    ops = [op.text for op in diagram.ops] + b.forward_lines
    outputs = list(diagram.outputs) + [n for n in b.saved if n not in diagram.outputs]
    kept = diagram.schedule if schedule else replace(diagram.schedule, group=(), stream=())
    return diagram_text(name, doc.strip(), diagram.axes, diagram.inputs, ops, outputs, kept)


def _backward_text(diagram: Diagram, backward: Backward, name: str, b: _Build) -> str:
    given = set(b.given)
    inputs = [t for t in diagram.inputs if t.name in given]
    inputs += [diagram.tensor(n) for n in diagram.outputs if n in given]
    inputs += [_saved_tensor(diagram, n, b) for n in b.saved]
    inputs += [Tensor(f"d{o}", diagram.tensor(o).axes, diagram.tensor(o).dtype)
               for o in backward.seeds]  # fmt: skip
    order = {op.out: i for i, op in enumerate(diagram.ops)}
    ops = [op.text for op in sorted(b.recompute, key=lambda o: order[o.out])
           if not _from_lse_op(op, b)]  # fmt: skip
    ops += b.backward_lines + [line.text() for line in backward.lines]
    wrt = ", ".join(backward.grads)
    doc = f"Backward of {diagram.name} (ncdc grad): the gradients of {wrt}."
    # the spec's request for sums in one order holds for its backward too
    schedule = Schedule(deterministic=True) if diagram.schedule.deterministic else None
    return diagram_text(
        name, doc, diagram.axes, inputs, ops, list(backward.grads.values()), schedule
    )


def _from_lse_op(op: Op, b: _Build) -> bool:
    """Whether the backward recomputes `op`'s result from a log-sum-exp line of its own."""
    return any(line.startswith(f"{op.out} = ") for line in b.backward_lines)


def _saved_tensor(diagram: Diagram, name: str, b: _Build) -> Tensor:
    if name in {t.name for t in diagram.tensors}:
        return diagram.tensor(name)
    line = next(x for x in b.forward_lines if x.startswith(f"{name} = "))
    source = line.split("(", 1)[1].split(",", 1)[0]
    over = set(_over_of(line))
    return Tensor(name, tuple(a for a in diagram.tensor(source).axes if a not in over), "fp32")


def _over_of(line: str) -> list[str]:
    text = line.split("over=", 1)[1]
    if text.startswith("["):
        return [a.strip() for a in text[1:].split("]", 1)[0].split(",")]
    return [text.split(",", 1)[0].split(")", 1)[0].strip()]


def _loaded(text: str, name: str) -> Diagram:
    """The written diagram read back as a spec is (a failure here is ncdc's own bug)."""
    return load_diagram_text(text, f"{name}.yaml")


MAX_WAYS = 64  # combinations of ways weighed for one diagram


def every_way(diagram: Diagram, backward: Backward) -> list[dict[str, str]]:
    """Every combination of ways for the intermediates the backward reads (each named only
    where the ways chosen before it make the backward read it), up to MAX_WAYS, in a
    fixed order: saves first."""
    found: list[dict[str, str]] = []

    def walk(ways: dict[str, str]) -> None:
        if len(found) >= MAX_WAYS:
            return
        try:
            _reads_resolved(diagram, backward, ways)
        except Undecided as e:
            for way in ways_of(diagram, e.name):
                walk({**ways, e.name: way})
            return
        found.append(ways)

    walk({})
    return found


def _reads_resolved(diagram: Diagram, backward: Backward, ways: Mapping[str, str]) -> None:
    """Resolve the backward's reads under `ways` (Undecided at the first it does not name),
    without writing the diagrams."""
    b = _Build([], [], [], [], [], {t.name for t in diagram.tensors} | _made(backward))
    todo, seen = list(backward.reads), set()
    while todo:
        name = todo.pop(0)
        if name not in seen:
            seen.add(name)
            todo += _resolve(diagram, name, ways, b)
