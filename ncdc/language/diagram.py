"""The diagram as the rest of ncdc reads it: frozen values for its tensors, operations and
schedule, with shapes already inferred and checked (see docs/diagram-language.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT_VERSION = 1


MAX_AXIS_SIZE = 2**31 - 1


@dataclass(frozen=True)
class Tensor:
    """A named array over named axes with one element type."""

    name: str
    axes: tuple[str, ...]
    dtype: str
    # values the cost model assumes for an int32 input (a varlen mask's lengths), row-major;
    # the kernels read the real ones
    expected: tuple[int, ...] = ()


@dataclass(frozen=True)
class Op:
    """One operation: `out = fn(operands, keywords)`, with its inferred output axes."""

    out: str
    fn: str
    kind: str
    operands: tuple[str | float, ...]  # tensor names, or numbers for binary maps
    over: tuple[str, ...]  # axes contracted, reduced or normalised over
    axes: tuple[str, ...]  # axes of the result, in order
    dtype: str  # dtype of the result
    scale: tuple[str | float, ...] = ()  # factors multiplied into the result
    params: Mapping[str, Any] = field(default_factory=dict)  # eps, weight, bias, to, query, key...
    line: int = 0
    text: str = ""

    # Cached: the graph, the break search and the cost model ask for it again for every
    # kernel and every set of breaks they weigh.
    @functools.cached_property
    def inputs(self) -> tuple[str, ...]:
        """Every tensor this operation reads: operands, weights, biases, scale tensors."""
        names = [o for o in self.operands if isinstance(o, str)]
        names += [s for s in self.scale if isinstance(s, str)]
        names += [
            self.params[k] for k in ("weight", "bias", "lengths", "offsets") if k in self.params
        ]
        return tuple(dict.fromkeys(names))

    @property
    def read_apart(self) -> tuple[str, ...]:
        """The operands this operation reads at positions of its own, not at each element
        of its result: a gather's source at its indices, a slice's at its offsets, and a
        paged gather's block table at the page of each row, and a grouped contraction's
        weights and offsets at the group of each row."""
        if self.kind == "slice" or self.kind == "gather" and "into" not in self.params:
            return (str(self.operands[0]),)
        if self.grouped:
            return (str(self.operands[1]), self.params["offsets"])
        return tuple(map(str, self.operands)) if self.kind == "gather" else ()

    @property
    def grouped(self) -> bool:
        """A grouped contraction: rows of the first operand in runs the offsets end, run
        `e` multiplied by slice `e` of the second (a mixture of experts' grouped GEMM)."""
        return self.kind == "contract" and "offsets" in self.params

    @property
    def reduced(self) -> tuple[str, ...]:
        """Axes this operation takes in and does not give back."""
        return self.over if self.kind in ("contract", "reduce") else ()


@dataclass(frozen=True)
class Schedule:
    """How the user asks the diagram to be run; everything here is optional."""

    group: tuple[str, ...] = ()  # axes to partition into groups (one per core)
    stream: tuple[str, ...] = ()  # axes to feed in chunks through an accumulator
    tiles: Mapping[str, int] = field(default_factory=dict)  # fixed group/stream sizes
    materialize: tuple[str, ...] = ()  # intermediates saved to the top level (kernel breaks)
    # The spec wrote `materialize` (even an empty list): its kernel breaks are obeyed, not
    # chosen by the model (ncdc.plan.search.choose_breaks).
    breaks_given: bool = False
    # Sums in one order, the same bits every run: no kernel adds into its outputs with atomics
    # (attention's backward then writes dQ by a second, query-major pass).
    deterministic: bool = False


@dataclass(frozen=True)
class Diagram:
    """A validated diagram: ops are in an order where every operand is defined first."""

    name: str
    doc: str
    axes: Mapping[str, int]
    inputs: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]
    schedule: Schedule
    source: str = "<string>"

    def tensor(self, name: str) -> Tensor:
        """The input or intermediate called `name`."""
        return self._by_name[name]  # KeyError for an unknown name

    # Cached: the graph and the cost model ask for tensors by name once per operation, and
    # rebuilding the tuple each time made a diagram of n operations cost n^2.
    @functools.cached_property
    def tensors(self) -> tuple[Tensor, ...]:
        return self.inputs + tuple(Tensor(op.out, op.axes, op.dtype) for op in self.ops)

    @functools.cached_property
    def _by_name(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.tensors}

    @functools.cached_property
    def _producers(self) -> dict[str, Op]:
        return {op.out: op for op in self.ops}

    @functools.cached_property
    def _consumers(self) -> dict[str, tuple[Op, ...]]:
        found: dict[str, list[Op]] = {}
        for op in self.ops:
            for name in dict.fromkeys(op.inputs):
                found.setdefault(name, []).append(op)
        return {name: tuple(ops) for name, ops in found.items()}

    def size(self, tensor: Tensor) -> int:
        """Number of values in `tensor` at this diagram's axis sizes."""
        n = 1
        for a in tensor.axes:
            n *= self.axes[a]
        return n

    def producer(self, name: str) -> Op | None:
        return self._producers.get(name)

    def consumers(self, name: str) -> tuple[Op, ...]:
        return self._consumers.get(name, ())
