"""Streaming legality (docs/cost-model.md section 5): which reduced axes a kernel may feed in
chunks through an accumulator, and why not where it may not.

An axis streams when every operation over it has an accumulator: a sum, a max, a mean, a
contraction, or softmax followed only by a contraction over the same axis (online softmax).
A normalisation needs its whole axis; a softmax saved with its axis still in it does too.
"""

from __future__ import annotations

from ncdc.errors import PlanError
from ncdc.language.diagram import Diagram, Op
from ncdc.model.graph import Kernel


def streamed_axes(diagram: Diagram, kernel: Kernel) -> tuple[str, ...]:
    """The axes this kernel streams: those `schedule.stream` asks for, else every reduced
    axis where streaming is legal (docs/cost-model.md section 5). Raises PlanError for an
    illegal request, naming the operation and why."""
    asked = diagram.schedule.stream
    for axis in diagram.schedule.group:
        if axis in kernel.reduced:
            op = next(o for o in kernel.ops if axis in o.over)
            raise PlanError(
                f"cannot group {axis}: {op.fn} {op.out} reduces over {axis}, so every group "
                f"would need all of it",
                hint="group only axes of the outputs; stream a reduced axis instead",
            )
    chosen = []
    for axis in asked:
        if axis in kernel.woven:
            raise PlanError(_woven_reason(diagram, kernel, axis), hint=_STREAM_HINT)
        if axis in kernel.reduced:
            reason = stream_problem(diagram, kernel, axis)
            if reason:
                raise PlanError(f"cannot stream {axis}: {reason}", hint=_STREAM_HINT)
            chosen.append(axis)
    if asked:
        return tuple(chosen)
    return tuple(a for a in kernel.reduced if stream_problem(diagram, kernel, a) is None)


_STREAM_HINT = "stream an axis that a sum, max, mean or contraction removes"


def _woven_reason(diagram: Diagram, kernel: Kernel, axis: str) -> str:
    for op in kernel.ops:
        if op.kind == "softmax" and axis in op.over and op.out in kernel.outputs:
            return (
                f"cannot stream {axis}: softmax {op.out} over {axis} is saved with {axis} "
                f"still in it (only softmax followed by a contraction over {axis} streams)"
            )
        if op.kind == "norm" and axis in op.over:
            return (
                f"cannot stream {axis}: {op.fn} {op.out} over {axis} needs the whole of "
                f"{axis} before its first output (a normalisation does not stream)"
            )
    out = next(n for n in kernel.outputs if axis in diagram.tensor(n).axes)
    return (
        f"cannot stream {axis}: it is an axis of the output {out} "
        "(only an axis the kernel reduces can be streamed)"
    )


def stream_problem(diagram: Diagram, kernel: Kernel, axis: str) -> str | None:
    """Why `axis` (reduced in `kernel`) cannot be streamed, or None when it can."""
    if _indexed_only(diagram, kernel, axis):
        return f"{axis} is read at positions an index gives (a gather's rows), not walked"
    consumers = {op.out: [c for c in kernel.ops if op.out in c.inputs] for op in kernel.ops}
    for op in kernel.ops:
        if op.kind == "norm" and axis in op.over:
            return f"{op.fn} {op.out} over {axis} needs the whole of {axis} (not streamable)"
        if (
            op.kind == "softmax"
            and axis in op.over
            and not _ends_in_contraction(op.out, axis, consumers)
        ):
            return (
                f"softmax {op.out} over {axis} is not followed only by a contraction "
                f"over {axis} (only softmax followed by a contraction over {axis} streams)"
            )
    return None


def _indexed_only(diagram: Diagram, kernel: Kernel, axis: str) -> bool:
    """Whether every read of a tensor with `axis` reads it at positions of its own that
    `axis` does not reach the result by (a gather's source along its indexed axis, a paged
    cache's rows and its block table's pages): no loop walks the axis to stream it."""
    reads = [(op, n) for op in kernel.ops for n in op.inputs if axis in diagram.tensor(n).axes]
    return bool(reads) and all(n in op.read_apart and axis not in op.axes for op, n in reads)


def _ends_in_contraction(name: str, axis: str, consumers: dict[str, list[Op]]) -> bool:
    users = consumers.get(name, [])
    if not users:
        return False
    for c in users:
        if c.kind == "contract" and axis in c.over:
            continue
        if c.kind in ("map", "binary", "cast", "mask") and _ends_in_contraction(
            c.out, axis, consumers
        ):
            continue
        return False
    return True
