"""The structure of one kernel that H, M and FLOPs are computed from (docs/cost-model.md 3-4).

Pure functions, no I/O and no GPU. For a kernel and the group sizes g_a (woven axes) of one
level, the number of groups is N = prod_a ceil(a / g_a) and the transfer into that level is

    H = sum over inputs T of (values of T one group needs) x N  +  sum of the outputs' sizes

where a group needs T sliced to g_a along a woven axis a only when a reaches the outputs
from T without being contracted or reduced on the way, and all of every other axis of T.
An input not woven over a grouped axis is therefore resent to every group along it: that is
the a w / g_a term of the paper's Fig. 11 and the a b c / g_c term of a matmul. Residency M
is one chunk of each input (g on sliced woven axes, s on streamed axes), a buffer per chain
of in-place operations (accumulators included) and the running max and sum of an online
softmax. Nothing here is written per diagram. See docs/cost-model.md.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.model.graph import build_graph
    >>> from ncdc.hardware.load import load_hardware
    >>> g = build_graph(load_diagram("diagrams/matmul.yaml", {"m": 8, "n": 8, "k": 8}),
    ...                 load_hardware("napkin"))
    >>> model = KernelModel(g.diagram, g.kernels[0])
    >>> int(model.transfer({"m": 4, "n": 8})[0])   # abc (1/g_a + 1/g_c) + ac = 128 + 64 + 64
    256
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.language.ops import record
from ncdc.model.geometry import (
    Band,
    band_fraction,
    grouped_rows,
    mask_band,
    ragged_fraction,
    ragged_lengths,
    rule_fraction,
)
from ncdc.model.graph import Kernel
from ncdc.model.masks import read_mask_rule
from ncdc.units import ceil_div

# CUDA-core operations per weight value a weight-only GEMM widens in its main loop (int8 ->
# 16 bits in registers): the integer-to-float conversion and half a pack of two into bf16x2
# or f16x2, rounded up. Each block widens its own copy of the weight tiles it reads.
WIDEN_OPS_PER_VALUE = 2
IN_PLACE_KINDS = ("map", "binary", "cast", "mask", "softmax", "norm")


class KernelModel:
    """The structure of one kernel that H, M and FLOPs are computed from, precomputed once.

    Group sizes `g` map every woven axis to a size; stream sizes `s` map reduced axes to a
    chunk (absent: whole). Sizes may be NumPy arrays: everything broadcasts, so a search
    can evaluate many candidates at once. A search calls `transfer` and `resident` for every
    candidate, so each input's shape is split once into the axes a group slices and a
    constant for the rest.
    """

    def __init__(self, diagram: Diagram, kernel: Kernel):
        self.diagram = diagram
        self.kernel = kernel
        self.sizes = {a: diagram.axes[a] for a in kernel.axes}
        self.reach = _reach(diagram, kernel)
        # What the kernel reads of its inputs: each input it reads whole, and each gather's
        # rows (a tensor over the gather's result, priced by the sectors each index touches)
        self.gathered = gathered_reads(diagram, kernel)
        only = kernel.gathered_only
        self.inputs = [
            (n, diagram.tensor(n).axes, DTYPES[diagram.tensor(n).dtype].bytes)
            for n in kernel.inputs
            if n not in only
        ] + [(g.out, g.axes, g.bytes) for g in self.gathered]
        self._gathers: list[Gathered | None] = [None] * (len(self.inputs) - len(self.gathered))
        self._gathers += self.gathered
        self._inputs = [(_split_shape(self, n, axes), p, axes) for n, axes, p in self.inputs]
        self.outputs = [
            (n, diagram.size(diagram.tensor(n)), DTYPES[diagram.tensor(n).dtype].bytes)
            for n in kernel.outputs
        ]
        self.output_values = sum(size for _, size, _ in self.outputs)
        self.output_bytes = sum(size * p for _, size, p in self.outputs)
        self.buffers = _buffers(diagram, kernel)
        self._buffers = [
            ([_split_shape(self, n, axes) for n, axes, _ in members], max(p for *_, p in members))
            for members in self.buffers
        ]
        # online softmax: the running max and sum per row, in the softmax's own type
        self.online = [
            (op.out, op.axes, op.over[0], DTYPES[op.dtype].bytes)
            for op in kernel.ops
            if op.kind == "softmax"
        ]
        self._online = [
            (_split_shape(self, name, axes), axis, p) for name, axes, axis, p in self.online
        ]
        names = [n for n in kernel.inputs if n not in only] + list(kernel.outputs)
        self.top_values = sum(diagram.size(diagram.tensor(n)) for n in names)
        self.top_bytes = top_bytes(diagram, kernel)
        for g in self.gathered:  # the rows a gather reads, each once (whole values)
            self.top_values += math.ceil(g.distinct)
        self.flops_by_unit = kernel_flops(diagram, kernel)
        self.widened = _widened(diagram, kernel)
        # A causal or window mask whose key axis the kernel reduces: key tiles that every
        # query of a query tile masks are skipped, along with the work and the loads over
        # that axis. A varlen mask's lengths are data: with the spec's `expected` lengths
        # the tiles they leave are priced (`Ragged`), without them it is priced dense.
        self.mask = mask_band(kernel, self.sizes)
        self.ragged = ragged_lengths(diagram, kernel)
        # a grouped contraction: block tiles along its rows hold one group's rows each
        self.grouped = grouped_rows(diagram, kernel)
        if self.ragged and not self.mask:
            self.mask = Band(self.ragged.query, self.ragged.key, None, None)
        # a mask rule over the band's axes, whose tile classes a kernel may skip tiles by;
        # one that bounds no band (`or(le(J, I), lt(I, 4))`) still drops whole tiles
        rule = read_mask_rule(kernel)
        if rule is not None and rule.query in kernel.woven and rule.key in kernel.reduced:
            self.mask = self.mask or Band(rule.query, rule.key, None, None)
        same = rule is not None and self.mask and (rule.query, rule.key) == self.mask[:2]
        self.rule = rule if same else None
        key = self.mask.key if self.mask else None
        self.keyed_flops = kernel_flops(diagram, kernel, key) if key else {}
        self._keyed = [key is not None and key in axes for _, axes, _ in self.inputs]
        self._tile_transfers: dict[tuple[int, ...], tuple[int, int]] = {}
        self._tile_residents: dict[tuple, _Resident] = {}
        self._tile_work: dict[tuple, tuple[int, float, dict[tuple[str, str], Any]]] = {}

    def per_group(
        self,
        name: str,
        axes: tuple[str, ...],
        g: Mapping[str, Any],
        s: Mapping[str, Any] | None = None,
    ) -> Any:
        """Values of tensor `name` one group holds (s=None: every reduced axis whole)."""
        n: Any = 1
        for a in axes:
            if a in g:
                n = n * (g[a] if a in self.reach[name] else self.sizes[a])
            elif s is not None and a in s:
                n = n * s[a]
            else:
                n = n * self.sizes[a]
        return n

    def groups(self, g: Mapping[str, Any]) -> Any:
        n: Any = 1
        for a in self.kernel.woven:
            n = n * self.tiles_along(a, g[a])
        return n

    def tiles_along(self, axis: str, g: Any) -> Any:
        """Groups of `g` along a woven axis: ceil(size / g), or, along the rows of a
        grouped contraction, the tiles its runs of rows take (`Groups.tiles`)."""
        if self.grouped and axis == self.grouped.rows:
            return self.grouped.tiles(g)
        return ceil_div(self.sizes[axis], g)

    def transfer(
        self, g: Mapping[str, Any], s: Mapping[str, Any] | None = None, clipped: bool = False,
        top: bool = False, classes: bool = False,
    ) -> tuple[Any, Any]:  # fmt: skip
        """(values, bytes) loaded into a level with group sizes g, plus the outputs saved.
        Under a causal mask, the inputs over its key axis are loaded only for the key
        chunks (of s) that some query of the group sees. `clipped`: each group loads its
        tile only up to the tensor's edge, as the kernels' loads from global memory do (a
        tail tile's rows past the edge are zero-filled, not read); otherwise whole tiles, as
        a level below shared memory reads them (the zero-filled tile). A gather's rows cost
        the 32-byte sectors each index touches; out of the `top` level (into the device's
        cache, which holds a row once read), each distinct row once, and nothing for rows
        of a tensor the kernel also reads whole."""
        groups = self.groups(g)
        values: Any = self.output_values
        nbytes: Any = self.output_bytes
        kept = self.mask_fraction(g, s, classes) if self.mask else 1
        banded = self._keyed
        if self.mask and self.mask.query in (s or {}) and self.mask.key not in (s or {}):
            # queries streamed past grouped keys: the query-side inputs load per visited pair
            banded = [self.mask.query in axes for _, axes, _ in self.inputs]
        reads = zip(self._inputs, banded, self._gathers, strict=True)
        for (shape, p, _), keyed, gathered in reads:
            v = self._clipped(shape, g) if clipped else _chunk(shape, g, None) * groups
            if keyed:
                v = v * kept
            if gathered is not None and top:
                v = 0 if gathered.direct else _minimum(v, gathered.distinct)
            values = values + v
            sectors = gathered.sector_share(g, self.sizes) if gathered and not top else 1
            nbytes = nbytes + v * p * sectors
        return values, nbytes

    def _clipped(self, shape: _Shape, g: Mapping[str, Any]) -> Any:
        """Values of one tensor that all groups load, each its tile cut at the tensor's
        edge: the tensor's own woven axes whole, once per group along the others."""
        n: Any = shape.whole_rest
        for a in self.kernel.woven:
            if a in shape.sliced:
                n = n * self.sizes[a]
            elif a in g:
                n = n * self.tiles_along(a, g[a])
        return n

    def tile_transfer(
        self, g: Mapping[str, int], s: Mapping[str, int] | None = None, clipped: bool = False,
        top: bool = False, classes: bool = False,
    ) -> tuple[int, int]:  # fmt: skip
        """`transfer` for one tile of whole numbers, memoised: the candidates of a search
        share their block, warp and wave tiles. H depends on g only along woven axes (and
        on the key chunk under a causal mask)."""
        key = (clipped, top, classes, *map(g.__getitem__, self.kernel.woven))
        if self.mask:
            key += ((s or {}).get(self.mask.key, 0), (s or {}).get(self.mask.query, 0))
        if key not in self._tile_transfers:
            values, nbytes = self.transfer(g, s, clipped, top, classes)
            self._tile_transfers[key] = (int(values), int(nbytes))
        return self._tile_transfers[key]

    def tile_work(
        self, g: Mapping[str, int], s: Mapping[str, int], classes: bool = False
    ) -> tuple[int, float, dict[tuple[str, str], Any]]:
        """(groups, `_padding`, `tile_flops`) for one tile of whole numbers, memoised: a
        search times many launches (warps, stages, splits) of the same tile."""
        key = (tuple(g.items()), tuple(s.items()), classes)
        if key not in self._tile_work:
            self._tile_work[key] = (
                int(self.groups(g)),
                _padding(self, g, s),
                self.tile_flops(g, s, classes),
            )
        return self._tile_work[key]

    def visited_chunks(self, g: Mapping[str, int], s: Mapping[str, int]) -> int:
        """Chunks of the streamed axes one block of g steps through, streaming in chunks of
        s: all of them, or under a mask the band's share (`mask_fraction`), at least one."""
        chunks = math.prod(ceil_div(self.sizes.get(a, n), n) for a, n in s.items())
        if self.mask:
            chunks = max(1, round(chunks * float(self.mask_fraction(g, s))))
        return chunks

    def mask_fraction(
        self, g: Mapping[str, Any], s: Mapping[str, Any] | None, classes: bool = False
    ) -> Any:
        """Share of the dense work over the key axis that groups of g, streaming keys in
        chunks of s, do under a causal or window mask (1 without one): `band_fraction`;
        `classes`: the kernel also skips the tiles a mask rule drops whole (`rule_fraction`,
        `Candidate.rule_tiles`)."""
        if not self.mask:
            return 1
        query, key, lo, hi = self.mask
        queries, keys = self.sizes[query], self.sizes[key]
        s = s or {}
        # the tiles whose pairs the band sorts: queries grouped and keys streamed (a forward
        # pass), or keys grouped and queries streamed (the backward's key tiles)
        g_q = s[query] if query in s else g.get(query, queries)
        s_x = s[key] if key in s else g.get(key, keys)
        ragged = self.ragged

        def fraction(a: int, b: int) -> Any:
            if ragged:
                return ragged_fraction(queries, keys, a, b, lo, hi, ragged.rows, ragged.packed)
            if classes and self.rule is not None:
                return rule_fraction(queries, keys, a, b, lo, hi, self.rule)
            return band_fraction(queries, keys, a, b, lo, hi)

        if hasattr(g_q, "shape") or hasattr(s_x, "shape"):
            import numpy as np  # only a vectorised search passes arrays

            each = np.frompyfunc(lambda a, b: fraction(int(a), int(b)), 2, 1)
            return each(g_q, s_x).astype(np.float64)
        return fraction(int(g_q), int(s_x))

    def tile_flops(
        self, g: Mapping[str, int], s: Mapping[str, int], classes: bool = False
    ) -> dict[tuple[str, str], float]:
        """FLOPs per (unit, kind) that groups of g with chunks s do: under a causal mask,
        the work over the key axis only for the key chunks a group visits (`classes`:
        `mask_fraction`'s); a weight-only
        GEMM's widening of its weights, once per group along the activations' own axes."""
        out = dict(self.flops_by_unit)
        if self.mask:
            kept = self.mask_fraction(g, s, classes)
            out = {unit: n - self.keyed_flops.get(unit, 0) * (1 - kept) for unit, n in out.items()}
        for values, axes in self.widened:
            blocks = math.prod(ceil_div(self.sizes[a], g.get(a, self.sizes[a])) for a in axes)
            key = ("cuda", "fp32")
            out[key] = out.get(key, 0) + values * blocks * WIDEN_OPS_PER_VALUE
        return out

    def resident(
        self, g: Mapping[str, Any], s: Mapping[str, Any], stages: int = 1,
        inputs_only: bool = False, unstaged: tuple[str, ...] = (),
    ) -> tuple[Any, Any]:  # fmt: skip
        """(values, bytes) one group holds at once: input chunks (x stages where streamed),
        then, unless `inputs_only`, buffers and the online-softmax state; the inputs (or
        gathers) a kernel reads straight from memory into registers (`unstaged`) hold none."""
        return _held(self.resident_parts(g, s, unstaged), stages, inputs_only)

    def resident_parts(
        self, g: Mapping[str, Any], s: Mapping[str, Any], unstaged: tuple[str, ...] = ()
    ) -> _Resident:
        """What `resident` adds up, before the pipeline stages multiply the streamed inputs."""
        streamed, whole, state = [0, 0], [0, 0], [0, 0]
        for (name, *_), (shape, p, axes) in zip(self.inputs, self._inputs, strict=True):
            if name in unstaged:
                continue
            v = _chunk(shape, g, s)
            into = streamed if any(a in s for a in axes) else whole
            into[0] = into[0] + v
            into[1] = into[1] + v * p
        for members, p in self._buffers:
            v = 0
            for shape in members:
                v = _maximum(v, _chunk(shape, g, s))
            state[0] = state[0] + v
            state[1] = state[1] + v * p
        for shape, axis, p in self._online:
            if axis in s:
                rows = _chunk(shape, g, s) // s[axis]
                state[0] = state[0] + 2 * rows
                state[1] = state[1] + 2 * rows * p
        return _Resident((streamed[0], streamed[1]), (whole[0], whole[1]), (state[0], state[1]))

    def tile_resident(
        self, g: Mapping[str, int], s: Mapping[str, int], stages: int = 1, inputs_only: bool = False
    ) -> tuple[int, int]:
        """`resident` for one tile of whole numbers, memoised like `tile_transfer`: the
        candidates of a search share their tiles and differ in stages."""
        key = (tuple(map(g.__getitem__, self.kernel.woven)), tuple(s.items()))
        parts = self._tile_residents.get(key)
        if parts is None:
            parts = self._tile_residents[key] = self.resident_parts(g, s)
        return _held(parts, stages, inputs_only)

    def accumulator_values(self, g: Mapping[str, Any], s: Mapping[str, Any]) -> Any:
        """Values of the buffers (results and intermediates) one group holds."""
        return self.resident(g, s)[0] - self.resident(g, s, inputs_only=True)[0]

    @property
    def tensor_dtype(self) -> str:
        """The dtype the kernel's tensor cores run at ("" without tensor work)."""
        return next((d for (unit, d) in self.flops_by_unit if unit == "tensor"), "")

    @property
    def flops(self) -> int:
        return int(sum(self.flops_by_unit.values()))


class _Resident(NamedTuple):
    """(values, bytes) one group holds of: inputs with a streamed axis (one chunk per
    pipeline stage), the other inputs, and the buffers and online-softmax state."""

    streamed: tuple[Any, Any]
    whole: tuple[Any, Any]
    state: tuple[Any, Any]


def _held(parts: _Resident, stages: int, inputs_only: bool) -> tuple[Any, Any]:
    (sv, sb), (wv, wb), (bv, bb) = parts
    if stages > 1:
        sv, sb = sv * stages, sb * stages
    if inputs_only:
        return sv + wv, sb + wb
    return sv + wv + bv, sb + wb + bb


@dataclass(frozen=True)
class _Shape:
    """A tensor as one group sees it: `per_group` split once per kernel."""

    sliced: tuple[str, ...]  # woven axes that reach an output: g of each
    rest: tuple[tuple[str, int], ...]  # axes not woven, with their sizes: s of each, or whole
    whole: int  # product of the woven axes that do not reach an output, taken whole
    whole_rest: int  # whole x the sizes of `rest` (no streaming)


def _split_shape(model: KernelModel, name: str, axes: tuple[str, ...]) -> _Shape:
    """Agrees with `per_group` for group sizes that name every woven axis, as `groups`
    needs them to."""
    woven = model.kernel.woven
    sliced = tuple(a for a in axes if a in woven and a in model.reach.get(name, ()))
    rest = tuple((a, model.sizes[a]) for a in axes if a not in woven)
    whole = math.prod(model.sizes[a] for a in axes if a in woven and a not in sliced)
    return _Shape(sliced, rest, whole, whole * math.prod(size for _, size in rest))


def _chunk(shape: _Shape, g: Mapping[str, Any], s: Mapping[str, Any] | None) -> Any:
    """Values of one tensor a group holds: g along sliced axes, s (or whole) along the rest;
    s=None: every axis not woven whole."""
    n: Any = shape.whole_rest if s is None else shape.whole
    for a in shape.sliced:
        n = n * g[a]
    if s is not None:
        for a, size in shape.rest:
            n = n * s.get(a, size)
    return n


def _minimum(a: Any, b: Any) -> Any:
    if hasattr(a, "shape"):
        import numpy as np  # only a vectorised search passes arrays

        return np.minimum(a, b)
    return a if a <= b else b


def _maximum(a: Any, b: Any) -> Any:
    if hasattr(b, "shape") or hasattr(a, "shape"):
        import numpy as np  # only a vectorised search passes arrays

        return np.maximum(a, b)
    return a if a >= b else b


def top_bytes(diagram: Diagram, kernel: Kernel) -> int:
    """Bytes a kernel reads and writes at the top level at the least: each input once and
    each saved result once, and the rows a gather reads (each once, whole values): what
    the break search bounds a set of breaks by."""
    gathered = gathered_reads(diagram, kernel)
    only = kernel.gathered_only  # sources read through a gather alone: not read whole
    names = [n for n in kernel.inputs if n not in only] + list(kernel.outputs)
    nbytes = sum(
        diagram.size(diagram.tensor(n)) * DTYPES[diagram.tensor(n).dtype].bytes for n in names
    )
    return nbytes + sum(math.ceil(g.distinct) * g.bytes for g in gathered)


def _reach(diagram: Diagram, kernel: Kernel) -> dict[str, set[str]]:
    """For each tensor of the kernel, the axes that reach an output without being reduced."""
    reach: dict[str, set[str]] = {}
    for name in kernel.outputs:
        reach[name] = set(diagram.tensor(name).axes)
    for op in reversed(kernel.ops):
        out = reach.get(op.out, set())
        through = out & set(op.axes) - set(op.reduced)
        if op.kind == "scatter":  # each value it adds is read by the one block it falls to
            through = set(diagram.tensor(str(op.operands[0])).axes)
        for name in op.inputs:
            axes = set(diagram.tensor(name).axes)
            reach[name] = reach.get(name, set()) | (axes & through)
    return reach


SECTOR_BYTES = 32  # what one global load moves at the least (an L2 sector)


@dataclass(frozen=True)
class Gathered:
    """The rows one gather of the kernel reads from its source, a kernel input: a tensor over
    the gather's result (`out`, `axes`), each index reading a run over the source's axes
    after the gathered one (`run`)."""

    out: str
    source: str
    axes: tuple[str, ...]
    bytes: int  # per value, the source's
    run: tuple[str, ...]
    distinct: float  # values of the distinct rows the indices select, expected
    direct: bool  # the kernel also reads the source whole (a label picked from its logits)

    def sector_share(self, g: Mapping[str, Any], sizes: Mapping[str, int]) -> Any:
        """Bytes moved over bytes used of each index's run: its 32-byte sectors, whole."""
        run: Any = 1
        for a in self.run:
            run = run * g.get(a, sizes[a])
        used = run * self.bytes
        return ceil_div(used, SECTOR_BYTES) * SECTOR_BYTES / used


def gathered_reads(diagram: Diagram, kernel: Kernel) -> list[Gathered]:
    """Each gather of the kernel whose source is a kernel input. Random indices into r rows,
    n per slice of the source (n: the index's values along the axes the source lacks),
    select r (1 - (1 - 1/r)^n) distinct rows of each slice, at most one per index. A paged
    gather reads each row of its result once: a block table gives each sequence pages of
    its own (vLLM's allocator; a shared prefix is the exception), so no page is counted as
    read twice from a cache."""
    out = [
        _group_weights(diagram, kernel, op) for op in kernel.ops
        if op.grouped and str(op.operands[1]) in kernel.inputs
    ]  # fmt: skip
    # positions picked in the kernel (argmax, topk) from the very tensor gathered: the
    # selection holds the values it picked (ncdc.families.select), the gather reads nothing
    picked = {op.out: op.operands[0] for op in kernel.ops if op.kind == "select"}
    for op in kernel.ops:
        if op.kind != "gather" or str(op.operands[0]) not in kernel.inputs:
            continue
        if picked.get(str(op.operands[1])) == op.operands[0]:
            continue
        source = str(op.operands[0])
        t, index = diagram.tensor(source), diagram.tensor(str(op.operands[1]))
        axis = op.params["axis"]
        rows = diagram.axes[axis]
        picks = math.prod(diagram.axes[a] for a in index.axes if a not in t.axes)
        distinct = min(
            diagram.size(t) * (1 - (1 - 1 / rows) ** picks),
            float(diagram.size(diagram.tensor(op.out))),
        )
        run = t.axes[t.axes.index(axis) + 1 :]
        if "into" in op.params:  # a block table: each sequence's pages are its own
            distinct = float(diagram.size(diagram.tensor(op.out)))
            run = t.axes[t.axes.index(op.params["within"]) + 1 :]
        whole = source not in kernel.gathered_only
        out.append(Gathered(op.out, source, op.axes, DTYPES[t.dtype].bytes, run, distinct, whole))
    return out


def _group_weights(diagram: Diagram, kernel: Kernel, op: Op) -> Gathered:
    """A grouped contraction's second operand as the kernel reads it: each block tile the
    slice of its rows' group (a tensor without the groups' axis), each used slice once
    from device memory."""
    w = diagram.tensor(str(op.operands[1]))
    group = op.params["group"]
    groups = grouped_rows(diagram, kernel)
    assert groups is not None
    axes = tuple(a for a in w.axes if a != group)
    slice_values = diagram.size(w) // diagram.axes[group]
    run = w.axes[w.axes.index(group) + 1 :]
    return Gathered(w.name, w.name, axes, DTYPES[w.dtype].bytes, run,
                    float(groups.used * slice_values), False)  # fmt: skip


def _buffers(diagram: Diagram, kernel: Kernel) -> list[list[tuple[str, tuple[str, ...], int]]]:
    """Results grouped into buffers: an elementwise op, mask, softmax or norm whose input is
    an intermediate of the same shape with no other consumer works in that input's buffer."""
    buffer_of: dict[str, int] = {}
    buffers: list[list[tuple[str, tuple[str, ...], int]]] = []
    readers = Counter(name for op in kernel.ops for name in op.inputs)
    for op in kernel.ops:
        if op.kind == "scatter":  # added in place in device memory (fp32 atomics): no buffer
            continue
        t = diagram.tensor(op.out)
        entry = (op.out, t.axes, DTYPES[t.dtype].bytes)
        source = next((o for o in op.operands if isinstance(o, str)), None)
        if (
            op.kind in IN_PLACE_KINDS
            and source in buffer_of
            and source not in kernel.outputs
            and readers[source] == 1
            and set(diagram.tensor(source).axes) == set(t.axes)
        ):
            index = buffer_of[source]
            buffers[index].append(entry)
        else:
            buffers.append([entry])
            index = len(buffers) - 1
        buffer_of[op.out] = index
    return buffers


def contract_unit(diagram: Diagram, op: Op) -> tuple[str, str]:
    """(unit, kind) that runs a contraction: tensor cores at the inputs' type (two 8-bit
    inputs at the 8-bit rate; 16-bit activations times int8 weights at the 16-bit rate,
    the weights widened first), or CUDA cores in fp32 when an input is fp32."""
    dtypes = [diagram.tensor(n).dtype for n in op.operands if isinstance(n, str)]
    if "fp32" in dtypes:
        return "cuda", "fp32"
    wide = [d for d in dtypes if DTYPES[d].bytes > 1]
    if wide:
        return "tensor", wide[0]
    return "tensor", dtypes[0]


def _widened(diagram: Diagram, kernel: Kernel) -> list[tuple[int, tuple[str, ...]]]:
    """Per weight-only contraction of the kernel (a 16-bit operand times an 8-bit one): the
    8-bit operand's values, and the axes only the other operand has (a group widens the
    weights once for its tile along them)."""
    out = []
    for op in kernel.ops:
        if op.kind != "contract":
            continue
        a, b = (diagram.tensor(n) for n in op.operands if isinstance(n, str))
        if {DTYPES[a.dtype].bytes, DTYPES[b.dtype].bytes} != {1, 2}:
            continue
        narrow, wide = (a, b) if DTYPES[a.dtype].bytes == 1 else (b, a)
        out.append((diagram.size(narrow), tuple(x for x in wide.axes if x not in narrow.axes)))
    return out


def kernel_flops(
    diagram: Diagram, kernel: Kernel, axis: str | None = None
) -> dict[tuple[str, str], float]:
    """FLOPs per (unit, kind): 2k per output value of a contraction, exponentials on the
    SFU, the rest on CUDA cores at their op record's price (ncdc.language.ops). With
    `axis`, only the operations whose result or reduction runs over that axis."""
    ops = [op for op in kernel.ops if axis is None or axis in op.axes or axis in op.over]
    return ops_flops(diagram, ops)


def ops_flops(diagram: Diagram, ops: Iterable[Op]) -> dict[tuple[str, str], float]:
    """`kernel_flops` of the operations `ops`."""
    out: dict[tuple[str, str], float] = {}

    def add(key: tuple[str, str], n: float) -> None:
        if n:
            out[key] = out.get(key, 0) + n

    for op in ops:
        result = diagram.size(diagram.tensor(op.out))
        if op.kind == "contract":
            k = math.prod(diagram.axes[a] for a in op.over)
            add(contract_unit(diagram, op), 2 * result * k)
            add(("cuda", "fp32"), result * len(op.scale))
            continue
        source = next((o for o in op.operands if isinstance(o, str)), None)
        summed = op.kind in ("reduce", "scatter")  # priced per value of the operand
        count = diagram.size(diagram.tensor(source)) if source and summed else result
        price = record(op.kind, op.fn)
        add(("cuda", "fp32"), count * price.cuda_flops)
        add(("sfu", "exp"), count * price.sfu)
    return out


def _padding(model: KernelModel, g: Mapping[str, int], s: Mapping[str, int]) -> float:
    """Work done over useful work: every woven axis runs in whole groups and every
    streamed axis in whole chunks (a tail is computed padded)."""
    f = 1.0
    for a in model.kernel.woven:
        size = model.sizes[a]
        f *= model.tiles_along(a, g[a]) * g[a] / size
    for a, chunk in s.items():
        size = model.sizes.get(a, chunk)
        f *= ceil_div(size, chunk) * chunk / size
    return f
