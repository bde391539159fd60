"""Save or recompute, by price: every way of getting what the backward reads
(ncdc.grad.pair.every_way) is written as a pair, both diagrams planned and rendered as
`ncdc check` would (ncdc.verify.buildable), and the pair with the least predicted forward
plus backward time is taken (ties: the one that holds fewer bytes between the passes).
`save` and `recompute` name intermediates whose way the user fixes: saved, or not saved
(recomputed, by its op or from its log-sum-exp, whichever is cheaper).

Nothing here knows attention: for it the prices find FlashAttention's choice, because a
forward that saves P (or S) cannot stay one fused kernel and writes a q x x matrix, while
the row log-sum-exp is a vector the fused kernel already has.

    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.language.load import load_diagram
    >>> c = choose_pair(load_diagram("diagrams/softmax.yaml"), load_hardware("h200"))
    >>> c.pair.saved, len(c.alternatives)
    ((), 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ncdc.errors import PlanError, SpecError, UsageError
from ncdc.grad.derive import Backward, derive
from ncdc.grad.pair import SAVE, Pair, every_way, make_pair
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.model.values import Plan
from ncdc.verify.buildable import check_buildable


@dataclass(frozen=True)
class Alternative:
    """One way of getting the backward's reads, priced: the predicted forward and backward
    times (None where one does not build, with why in `note`) and the bytes the forward
    saves for the backward."""

    ways: Mapping[str, str]
    saved: tuple[str, ...]
    held_bytes: int
    forward_s: float | None
    backward_s: float | None
    note: str = ""
    chosen: bool = False

    @property
    def total_s(self) -> float | None:
        if self.forward_s is None or self.backward_s is None:
            return None
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class Choice:
    """The chosen pair, its two plans, and every alternative weighed (the chosen one
    marked)."""

    pair: Pair
    forward: Plan
    backward: Plan
    alternatives: tuple[Alternative, ...]


def choose_pair(
    diagram: Diagram, hardware: Hardware, *, wrt: Iterable[str] | None = None,
    save: Sequence[str] = (), recompute: Sequence[str] = (),
) -> Choice:  # fmt: skip
    """The training pair of `diagram` that the model prices fastest on `hardware`, among
    the ways `save` and `recompute` allow; a SpecError where none builds."""
    backward = derive(diagram, wrt)
    ways = _allowed(diagram, backward, save, recompute)
    plans: dict[str, Plan | PlanError] = {}
    priced: list[tuple[Alternative, Pair]] = []
    for chosen in ways:
        pair = make_pair(diagram, backward, chosen)
        fwd = _plan(pair.forward, pair.forward_text, hardware, plans)
        if isinstance(fwd, PlanError) and (diagram.schedule.stream or diagram.schedule.group):
            pair = make_pair(diagram, backward, chosen, schedule=False)  # let the model choose
            fwd = _plan(pair.forward, pair.forward_text, hardware, plans)
        bwd = _plan(pair.backward, pair.backward_text, hardware, plans)
        note = "; ".join(p.message.split("; ")[0] for p in (fwd, bwd) if isinstance(p, PlanError))
        priced.append((Alternative(
            chosen, pair.saved, _held(pair), _time(fwd), _time(bwd), note,
        ), pair))  # fmt: skip
    built = [(a, p) for a, p in priced if a.total_s is not None]
    if not built:
        first = priced[0][0]
        raise SpecError(
            f"no way of saving and recomputing builds both passes: {first.note}",
            where=diagram.source, hint="see `ncdc grad --cost` for each way",
        )  # fmt: skip
    best, pair = min(built, key=lambda ap: (ap[0].total_s, ap[0].held_bytes))
    alternatives = tuple(replace(a, chosen=a is best) for a, _ in priced)
    forward, bwd_plan = plans[pair.forward_text], plans[pair.backward_text]
    assert isinstance(forward, Plan) and isinstance(bwd_plan, Plan)
    return Choice(pair, forward, bwd_plan, alternatives)


def _allowed(
    diagram: Diagram, backward: Backward, save: Sequence[str], recompute: Sequence[str]
) -> list[dict[str, str]]:
    """The ways of `every_way` that save what `save` names and save nothing `recompute`
    names; a UsageError for a name that no way reads, or named both ways."""
    everything = every_way(diagram, backward)
    named = {n for ways in everything for n in ways}
    for option, names in (("--save", save), ("--recompute", recompute)):
        for name in names:
            if name not in named:
                listed = ", ".join(sorted(named)) or "none"
                raise UsageError(
                    f"{option} {name}: the backward reads no intermediate {name}",
                    hint=f"the intermediates it reads: {listed}",
                )
    both = set(save) & set(recompute)
    if both:
        raise UsageError(f"{', '.join(sorted(both))} named by both --save and --recompute")
    allowed = [
        ways for ways in everything
        if all(ways.get(n, SAVE) == SAVE for n in save if n in ways)
        and all(ways.get(n) != SAVE for n in recompute if n in ways)
    ]  # fmt: skip
    if not allowed:
        raise UsageError("no way of getting the backward's reads is left by --save and "
                         "--recompute", hint="name fewer")  # fmt: skip
    return allowed


def _plan(
    diagram: Diagram, text: str, hardware: Hardware, plans: dict[str, Plan | PlanError]
) -> Plan | PlanError:
    """The buildable plan of one diagram of a pair (remembered by its text: several ways
    share a forward), or why it has none."""
    if text not in plans:
        try:
            plans[text] = check_buildable(diagram, hardware)
        except PlanError as error:
            plans[text] = error
    return plans[text]


def _time(plan: Plan | PlanError) -> float | None:
    return plan.predicted_time_s if isinstance(plan, Plan) else None


def _held(pair: Pair) -> int:
    """Bytes the forward saves for the backward (beyond its own outputs)."""
    d = pair.forward
    return sum(d.size(d.tensor(n)) * DTYPES[d.tensor(n).dtype].bytes for n in pair.saved)


def ways_text(ways: Mapping[str, str]) -> str:
    """`P lse, M recompute` (an empty `ways`: `nothing to get`)."""
    return ", ".join(f"{n} {w}" for n, w in ways.items()) or "nothing to get"
