"""The hierarchical memory graph: a diagram placed on a machine's memory levels.

Tensors get a home level (inputs, outputs and materialised intermediates live at the top
level, HBM on a GPU; fused intermediates never leave the chip), operations are grouped
into kernels (a kernel ends wherever the schedule saves a result to the top level; an
output that later ops read stays in its kernel, which writes it and goes on), and each
kernel knows which axes it can partition into groups (the axes of its outputs) and which
it consumes inside (the axes it can stream). The cost model fills in the group and stream
sizes per level.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> g = build_graph(load_diagram("diagrams/attention.yaml"), load_hardware("h200"))
    >>> [(k.name, k.woven, k.reduced) for k in g.kernels]
    [('attention', ('b', 'h', 'q', 'd'), ('x',))]
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.units import format_bytes

ON_CHIP = "on-chip"  # home of a fused intermediate: it lives below the top level


@dataclass(frozen=True)
class TensorNode:
    """A tensor with its role in the diagram and the level it lives in."""

    tensor: Tensor
    role: str  # input | output | intermediate
    home: str  # a level name, or ON_CHIP for fused intermediates
    values: int  # number of values at the diagram's sizes

    @property
    def bytes(self) -> int:
        return self.values * DTYPES[self.tensor.dtype].bytes


@dataclass(frozen=True)
class Kernel:
    """Operations that run as one kernel, between loads from and saves to the top level."""

    name: str
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]  # read from the top level
    outputs: tuple[str, ...]  # saved to the top level
    woven: tuple[str, ...]  # axes of the outputs (a scatter-add's: its operand's): grouped
    reduced: tuple[str, ...]  # axes consumed inside the kernel: each can be streamed
    rows: tuple[str, ...]  # woven axes an op normalises over (softmax, norms): kept whole
    # the axes of every tensor its ops read, by name (inputs and results of its own ops)
    read_axes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def axes(self) -> tuple[str, ...]:
        return self.woven + self.reduced

    def axes_of(self, name: str) -> tuple[str, ...] | None:
        """The axes of tensor `name`, which one of the kernel's ops reads; None otherwise."""
        return dict(self.read_axes).get(name)

    @property
    def indirect_only(self) -> frozenset[str]:
        """The inputs read only at positions of an op's own (a gather's source at its
        indices, a slice's at its offsets, a paged gather's block table), never at each
        element's: not loaded per element. The ones a gather alone reads as its source are
        `gathered_only`."""
        return self._read_only_by(lambda op: op.read_apart)

    @property
    def gathered_only(self) -> frozenset[str]:
        """The inputs read only as a gather's source, at the rows its indices select (never
        loaded whole), and a grouped contraction's weights (each row reads its group's);
        an input a gather picks from and another op reads whole (a label's logit beside
        the row's log-sum-exp) is not one."""
        return self._read_only_by(
            lambda op: op.read_apart[:1] if op.kind == "gather" or op.grouped else ()
        )

    def _read_only_by(self, apart: Callable[[Op], tuple[str, ...]]) -> frozenset[str]:
        """The inputs every op that reads them reads as one of its `apart(op)`."""
        sources = {n for op in self.ops for n in apart(op)}
        whole = {n for op in self.ops for n in op.inputs if n not in apart(op)}
        return frozenset(n for n in sources if n in self.inputs and n not in whole)


@dataclass(frozen=True)
class Partition:
    """Group and stream sizes at one level: the per-core view of every axis."""

    group: Mapping[str, int] = field(default_factory=dict)
    stream: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryGraph:
    """A diagram on a machine: tensors on levels, operations in kernels."""

    diagram: Diagram
    hardware: Hardware
    tensors: Mapping[str, TensorNode]
    kernels: tuple[Kernel, ...]
    partitions: Mapping[str, Partition] = field(default_factory=dict)  # level -> sizes

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.hardware.levels)

    @property
    def top(self) -> str:
        return self.hardware.levels[0].name


def build_graph(diagram: Diagram, hardware: Hardware) -> MemoryGraph:
    """Place `diagram` on `hardware`: home levels for tensors, kernels for operations."""
    top = hardware.levels[0].name
    saved = set(diagram.outputs) | set(diagram.schedule.materialize)
    tensors = {}
    inputs = {i.name for i in diagram.inputs}
    for t in diagram.tensors:
        if t.name in inputs:
            role = "input"
        elif t.name in diagram.outputs:
            role = "output"
        else:
            role = "intermediate"
        home = top if role == "input" or t.name in saved else ON_CHIP
        tensors[t.name] = TensorNode(t, role, home, diagram.size(t))
    # A kernel ends only where the schedule saves a result: an output that later ops read
    # stays in its kernel, which writes it and goes on (several outputs from one kernel).
    groups = _split_kernels(diagram, set(diagram.schedule.materialize))
    kernels = tuple(_kernel(diagram, ops, saved, i, len(groups)) for i, ops in enumerate(groups))
    return MemoryGraph(diagram, hardware, tensors, kernels)


def positional_results(diagram: Diagram) -> set[str]:
    """Results computed from positions and numbers alone (a mask rule's terms, RoPE's sign
    over the head), which any kernel computes for less than reading them back."""
    inputs = {t.name for t in diagram.inputs}
    data: set[str] = set()  # results that depend on some input
    for op in diagram.ops:
        if any(n in inputs or n in data for n in op.inputs):
            data.add(op.out)
    return {op.out for op in diagram.ops if op.out not in data}


def _split_kernels(diagram: Diagram, breaks: set[str]) -> list[list[Op]]:
    """Connected groups of operations joined by results that are not kernel breaks. A
    positional result that is neither saved nor a break joins nothing: each group that
    reads it computes it (RoPE's sign over the head, read as Q and as K are rotated, leaves
    K's rotation free to be a kernel of its own)."""
    shared = positional_results(diagram) - breaks - set(diagram.outputs)
    kernel_of: dict[str, int] = {}
    groups: list[list[Op]] = []
    for op in diagram.ops:  # topological order, so producers come first
        if op.out in shared:
            continue
        joined = {kernel_of[n] for n in op.inputs if n in kernel_of and n not in breaks}
        if not joined:
            groups.append([op])
            index = len(groups) - 1
        else:
            index = min(joined)
            for other in sorted(joined - {index}, reverse=True):
                groups[index] += groups[other]
                groups[other] = []
                for name, k in kernel_of.items():
                    if k == other:
                        kernel_of[name] = index
            groups[index].append(op)
        kernel_of[op.out] = index
    by_out = {op.out: op for op in diagram.ops}
    # every positional result is read (the language refuses one that is not), so each
    # lands in a group that reads it
    placed = [_with_positional(g, shared, by_out) for g in groups if g]
    return _in_dependency_order(placed)


def _with_positional(group: list[Op], shared: set[str], by_out: dict[str, Op]) -> list[Op]:
    """`group` with the `shared` positional ops it reads, placed (in the diagram's order)
    before their first reader."""
    order = {name: i for i, name in enumerate(by_out)}  # the diagram's order
    out: list[Op] = []
    have: set[str] = set()
    for op in group:
        need: set[str] = set()
        todo = [n for n in op.inputs if n in shared and n not in have]
        while todo:
            n = todo.pop()
            if n not in need and n not in have:
                need.add(n)
                todo += [m for m in by_out[n].inputs if m in shared]
        out += [by_out[n] for n in sorted(need, key=order.__getitem__)]
        have |= need
        out.append(op)
    return out


def _in_dependency_order(groups: list[list[Op]]) -> list[list[Op]]:
    """The kernels ordered so each runs after those whose saved results it reads; otherwise
    in the order of their first operations. A merged group can read a result saved by a
    group begun after it (silu(G) * U with U saved: the G group reads U)."""
    made = {op.out: i for i, g in enumerate(groups) for op in g}
    needs = [
        {made[n] for op in g for n in op.inputs if n in made and made[n] != i}
        for i, g in enumerate(groups)
    ]
    waiting = [len(n) for n in needs]  # kernels each one still waits for
    unblocks: list[list[int]] = [[] for _ in groups]
    for i, needed in enumerate(needs):
        for j in needed:
            unblocks[j].append(i)
    # Kahn's order, taking the first ready kernel each time: linear in the kernels.
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in unblocks[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(groups):
        placed = set(order)
        stuck = [groups[i][-1].out for i in range(len(groups)) if i not in placed]
        raise PlanError(
            f"the kernels saving {', '.join(stuck)} each read a result the other saves",
            hint=f"save more intermediates: schedule: {{materialize: [{', '.join(stuck)}]}}",
        )
    return [groups[i] for i in order]


def _kernel(diagram: Diagram, ops: list[Op], saved: set[str], index: int, count: int) -> Kernel:
    produced = {op.out for op in ops}
    inputs = tuple(dict.fromkeys(n for op in ops for n in op.inputs if n not in produced))
    outputs = tuple(op.out for op in ops if op.out in saved)
    # One kernel takes the diagram's name; several are told apart by what they save.
    name = diagram.name if count == 1 else f"{diagram.name}_{index}_{outputs[0]}"
    # The axes a kernel's blocks split: its outputs', but a scatter-add's blocks split the
    # values it adds (its operand), each adding into the whole result (ncdc.families.scatter)
    spans = [
        str(op.operands[0]) if op.kind == "scatter" else op.out
        for op in ops if op.out in saved
    ]  # fmt: skip
    woven = tuple(dict.fromkeys(a for name in spans for a in diagram.tensor(name).axes))
    used = dict.fromkeys(a for op in ops for n in op.inputs for a in diagram.tensor(n).axes)
    reduced = tuple(a for a in used if a not in woven)
    rows = tuple(dict.fromkeys(a for op in ops if op.kind in ("softmax", "norm") for a in op.over))
    rows = tuple(a for a in rows if a in woven)
    read = tuple(dict.fromkeys(n for op in ops for n in op.inputs))
    read_axes = tuple((n, diagram.tensor(n).axes) for n in read)
    return Kernel(name, tuple(ops), inputs, outputs, woven, reduced, rows, read_axes)


def oversized(graph: MemoryGraph) -> tuple[str, ...]:
    """What the top level cannot hold: one line per tensor kept there that is larger than the
    level (a GPU's HBM), else one for them all together when their sum is; empty when they
    fit. No kernel can run such a diagram, whatever its tiles."""
    top = graph.hardware.levels[0]
    held = [t for t in graph.tensors.values() if t.home == top.name]
    room = f"the {format_bytes(top.capacity_bytes)} of {top.name} on {graph.hardware.name}"
    lines = []
    for t in held:
        if t.bytes > top.capacity_bytes:
            shape = " x ".join(str(graph.diagram.axes[a]) for a in t.tensor.axes)
            lines.append(
                f"{t.tensor.name} ({t.tensor.dtype} [{', '.join(t.tensor.axes)}] = {shape}) is "
                f"{format_bytes(t.bytes)}, more than {room}"
            )
    total = sum(t.bytes for t in held)
    if not lines and total > top.capacity_bytes:
        names = ", ".join(t.tensor.name for t in held)
        lines.append(f"{names} together are {format_bytes(total)}, more than {room}")
    return tuple(lines)


def graph_to_dict(graph: MemoryGraph) -> dict[str, Any]:
    """The graph as JSON-ready data (what `ncdc show --format json` prints)."""
    d = graph.diagram
    return {
        "format": "ncdc.graph/1",
        "diagram": d.name,
        "doc": d.doc,
        "hardware": graph.hardware.name,
        "axes": dict(d.axes),
        "levels": [
            {
                "name": lv.name,
                "capacity_bytes": lv.capacity_bytes,
                "bandwidth_bytes_per_s": lv.bandwidth_bytes_per_s,
                "per": lv.per,
            }
            for lv in graph.hardware.levels
        ],  # fmt: skip
        "tensors": [
            {
                "name": n.tensor.name,
                "axes": list(n.tensor.axes),
                "dtype": n.tensor.dtype,
                "role": n.role,
                "home": n.home,
                "values": n.values,
                "bytes": n.bytes,
            }
            for n in graph.tensors.values()
        ],  # fmt: skip
        "kernels": [
            {
                "name": k.name,
                "inputs": list(k.inputs),
                "outputs": list(k.outputs),
                "woven": list(k.woven),
                "reduced": list(k.reduced),
                "rows": list(k.rows),
                "ops": [_op_to_dict(op) for op in k.ops],
            }
            for k in graph.kernels
        ],
        "partitions": {
            level: {"group": dict(p.group), "stream": dict(p.stream)}
            for level, p in graph.partitions.items()
        },
    }


def _op_to_dict(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {
        "out": op.out,
        "fn": op.fn,
        "kind": op.kind,
        "inputs": list(op.inputs),
        "axes": list(op.axes),
        "over": list(op.over),
        "reduced": list(op.reduced),
        "dtype": op.dtype,
        "text": op.text,
    }
    if op.scale:
        out["scale"] = list(op.scale)
    if op.params:
        out["params"] = dict(op.params)
    return out
