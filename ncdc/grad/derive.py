"""Reverse mode over a diagram's operations: the lines of its backward pass.

The ops are visited last to first. An op whose result needs a gradient (it depends on an
input the gradient is taken with respect to, and an output depends on it) has the shares
of its result's gradient summed into `d<RESULT>`, and its kind's rule (ncdc.grad.rules)
writes each active operand's share. The gradients of the outputs, `d<OUT>`, are the
backward's inputs; those of the inputs, `d<IN>`, its outputs. The lines read forward
tensors by name: which of them the forward saves and which the backward recomputes is
ncdc.grad.pair's to settle.

    >>> from ncdc.language.load import load_diagram
    >>> b = derive(load_diagram("diagrams/softmax.yaml"))
    >>> [line.text() for line in b.lines]  # doctest: +NORMALIZE_WHITESPACE
    ['dX_1 = mul(dY, Y)', 'dX_2 = sum(dX_1, over=n, dtype=fp32)', 'dX_3 = sub(dY, dX_2)',
     'dX = mul(Y, dX_3, dtype=bf16)']
    >>> b.reads, b.seeds, b.grads
    (('Y',), ('Y',), {'X': 'dX'})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ncdc.errors import SpecError
from ncdc.grad.rules import RULES, Site
from ncdc.grad.tape import Line, Tape
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.language.text import did_you_mean, listing


@dataclass(frozen=True)
class Backward:
    """The derived lines, the forward tensors they read, the outputs whose gradients are
    given (`d<OUT>` for each, in `seeds` order) and each input's gradient name."""

    lines: tuple[Line, ...]
    reads: tuple[str, ...]
    seeds: tuple[str, ...]
    grads: Mapping[str, str]
    names: Mapping[str, str]  # forward tensor -> the name of its gradient (d<NAME>)


def default_wrt(diagram: Diagram) -> tuple[str, ...]:
    """The inputs a gradient is taken for by default: every floating-point input an output
    depends on (integers, such as a varlen mask's lengths, have none)."""
    reaching = _reaching(diagram)
    return tuple(
        t.name for t in diagram.inputs if not DTYPES[t.dtype].integer and t.name in reaching
    )


def derive(diagram: Diagram, wrt: Iterable[str] | None = None) -> Backward:
    """The backward lines of `diagram` for the gradients of `wrt` (default: `default_wrt`).
    A construct with no derivative is one SpecError naming its line and why."""
    wanted = _checked_wrt(diagram, wrt)
    active = _depends(diagram, wanted) & _reaching(diagram)
    tape = Tape({t.name: t.axes for t in diagram.tensors})
    names = {t.name: _gradient_name(diagram, tape, t.name) for t in diagram.tensors
             if t.name in active}  # fmt: skip
    seeds = tuple(o for o in diagram.outputs if o in active)
    shares: dict[str, list[str]] = {o: [names[o]] for o in seeds}
    for o in seeds:
        tape.axes[names[o]] = diagram.tensor(o).axes
    renames: dict[str, str] = {}
    for op in reversed(diagram.ops):
        if op.out not in active:
            continue
        found = shares.pop(op.out, [])
        if not found:
            continue
        g = _gathered(diagram, tape, op.out, found, names[op.out], renames)
        site = Site(diagram, tape, op, g, active, renames)
        for operand, share in RULES[op.kind](site):
            shares.setdefault(operand, []).append(share)
    grads = {}
    flat = []  # scalars reached only through piecewise-constant ops: no zeros to make
    for name in wanted:
        found = shares.pop(name, [])
        if not found:  # reached only through piecewise-constant ops: a gradient of zeros
            t = diagram.tensor(name)
            if not t.axes:
                flat.append(name)
                continue
            found = [tape.arrange(tape.zeros(t.axes), t.axes, t.dtype)]
        grads[name] = _gathered(diagram, tape, name, found, names[name], renames, exact=True)
    lines = _live(tuple(line.renamed(renames) for line in tape.lines), set(grads.values()))
    read = {a for line in lines for a in line.args}
    seeds = tuple(o for o in seeds if names[o] in read)  # not those no gradient flows from
    if not seeds:
        raise SpecError(
            f"no gradient flows from the outputs to {listing(list(wanted))}: every path goes "
            "through piecewise-constant operations (comparisons, logic, floor), whose "
            "gradient is zero", where=diagram.source,
        )  # fmt: skip
    if flat:
        others = [n for n in wanted if n not in flat]
        raise SpecError(
            f"no gradient flows to the scalar {listing(flat)}: only piecewise-constant "
            "operations (comparisons, logic, floor) read it, and a scalar of zeros has no "
            "axis to write it over",
            where=diagram.source,
            hint="leave it out: " + " ".join(f"--wrt {n}" for n in others),
        )
    made = {line.out for line in lines}
    forward = {t.name for t in diagram.tensors}
    reads = tuple(dict.fromkeys(
        a for line in lines for a in (*line.args, *_keyword_tensors(line))
        if isinstance(a, str) and a in forward and a not in made
    ))  # fmt: skip
    return Backward(lines, reads, seeds, grads, {k: renames.get(v, v) for k, v in names.items()})


def _live(lines: tuple[Line, ...], wanted: set[str]) -> tuple[Line, ...]:
    """`lines` without those nothing wanted reads, directly or not: a share given to a
    comparison's result (no gradient flows on from it) leaves such lines."""
    needed = set(wanted)
    kept = []
    for line in reversed(lines):
        if line.out in needed:
            kept.append(line)
            needed.update(a for a in (*line.args, *_keyword_tensors(line)) if isinstance(a, str))
    return tuple(reversed(kept))


def _keyword_tensors(line: Line) -> list[str]:
    """The tensors a line names by keyword: a varlen mask's lengths, a grouped
    contraction's offsets."""
    return [str(v) for k, v in line.keywords if k in ("lengths", "offsets")]


def _checked_wrt(diagram: Diagram, wrt: Iterable[str] | None) -> tuple[str, ...]:
    if wrt is None:
        found = default_wrt(diagram)
        if not found:
            raise SpecError("no floating-point input reaches an output: nothing to derive",
                            where=diagram.source)  # fmt: skip
        return found
    inputs = {t.name: t for t in diagram.inputs}
    reaching = _reaching(diagram)
    out = []
    for name in wrt:
        if name not in inputs:
            raise SpecError(
                f"--wrt {name}: not an input; the inputs are {listing(inputs)}",
                where=diagram.source, hint=did_you_mean(name, inputs),
            )  # fmt: skip
        if DTYPES[inputs[name].dtype].integer:
            raise SpecError(f"--wrt {name}: {inputs[name].dtype} holds whole numbers, which "
                            "have no gradient", where=diagram.source)  # fmt: skip
        if name not in reaching:
            raise SpecError(f"--wrt {name}: no output depends on it", where=diagram.source)
        out.append(name)
    return tuple(dict.fromkeys(out))


def _depends(diagram: Diagram, wanted: Iterable[str]) -> set[str]:
    """The tensors that depend on `wanted` (themselves included)."""
    found = set(wanted)
    for op in diagram.ops:
        if any(n in found for n in op.inputs if _differentiable_operand(op, n)):
            found.add(op.out)
    return found


def _differentiable_operand(op, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a gradient can flow from `op`'s result into `name` (not into a varlen
    mask's lengths, which only say where keys are, nor a grouped contraction's offsets)."""
    return name not in (op.params.get("lengths"), op.params.get("offsets"))


def _reaching(diagram: Diagram) -> set[str]:
    """The tensors some output depends on (the outputs included)."""
    found = set(diagram.outputs)
    for op in reversed(diagram.ops):
        if op.out in found:
            found |= set(op.inputs)
    return found


def _gradient_name(diagram: Diagram, tape: Tape, name: str) -> str:
    """`d<NAME>`, reserved on the tape; a forward tensor already called that is refused."""
    grad = f"d{name}"
    if any(t.name == grad for t in diagram.tensors):
        raise SpecError(
            f"the gradient of {name} is called {grad}, but the diagram has a tensor {grad}",
            where=diagram.source, hint=f"rename {grad}",
        )  # fmt: skip
    tape.fresh(grad)
    return grad


def _gathered(
    diagram: Diagram, tape: Tape, name: str, shares: list[str], grad: str,
    renames: dict[str, str], exact: bool = False,
) -> str:  # fmt: skip
    """The sum of `name`'s shares, called `grad` (`d<NAME>`) where one line can take that
    name; with `exact` (an input's gradient, a backward output) always `grad`. An output
    that later ops also read has `grad` as its given gradient, one of the shares: the sum
    is then called anew."""
    dtype = diagram.tensor(name).dtype
    if len(shares) > 1 and grad in shares:
        grad = tape.fresh(f"{grad}_all")
    total = shares[0]
    for i, share in enumerate(shares[1:]):
        last = i == len(shares) - 2
        out = grad if last else tape.fresh(f"{grad}_sum")
        tape.axes[out] = diagram.tensor(name).axes
        tape.lines.append(Line(out, "add", (total, share), (("dtype", dtype),)))
        total = out
    if total == grad:
        return grad
    made = {line.out for line in tape.lines}
    if total in made and total not in renames and total not in renames.values():
        renames[total] = grad
        tape.axes[grad] = tape.axes[total]
        return grad
    if not exact:
        return total
    tape.axes[grad] = diagram.tensor(name).axes
    tape.lines.append(Line(grad, "mul", (total, 1.0), (("dtype", dtype),)))
    return grad
