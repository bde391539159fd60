"""The transfer and roofline model of napkin-model.md, derived from the memory graph.

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

    >>> from ncdc.language.spec import load_diagram
    >>> from ncdc.model.graph import build_graph
    >>> from ncdc.hardware.machine import load_hardware
    >>> g = build_graph(load_diagram("diagrams/matmul.yaml", {"m": 8, "n": 8, "k": 8}),
    ...                 load_hardware("napkin"))
    >>> model = KernelModel(g.diagram, g.kernels[0])
    >>> int(model.transfer({"m": 4, "n": 8})[0])   # abc (1/g_a + 1/g_c) + ac = 128 + 64 + 64
    256
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.language.spec import DTYPE_BYTES, Diagram, Op
from ncdc.model.graph import Kernel, MemoryGraph, Partition
from ncdc.model.issue import ISSUE, LoopMix, estimate_mix, issue_time_s
from ncdc.model.launch import Candidate, Family

if TYPE_CHECKING:
    from fractions import Fraction

FORMAT = "ncdc.cost/1"
# CUDA-core operations per weight value a weight-only GEMM widens in its main loop (int8 ->
# 16 bits in registers): the integer-to-float conversion and half a pack of two into bf16x2
# or f16x2, rounded up. Each block widens its own copy of the weight tiles it reads.
WIDEN_OPS_PER_VALUE = 2
IN_PLACE_KINDS = ("map", "binary", "cast", "mask", "softmax", "norm")

# CUDA-core FLOPs per element of each non-contraction operation (our count: the arithmetic
# a straightforward kernel does; exponentials are counted separately on the SFU).
CUDA_FLOPS_PER_VALUE: dict[str, int] = {
    "exp": 1,
    "log": 1,
    "relu": 1,
    "gelu": 8,
    "gelu_tanh": 6,  # x / (1 + exp(-2 u)), u = c (x + 0.044715 x^3): the cubic, the divide
    "silu": 4,
    "sigmoid": 4,
    "tanh": 2,
    "neg": 1,
    "abs": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "recip": 1,
    "square": 1,
    "add": 1,
    "sub": 1,
    "mul": 1,
    "div": 1,
    "max": 1,
    "min": 1,
    "sum": 1,
    "mean": 1,
    "softmax": 4,  # running max, subtract, running sum, scale
    "log_softmax": 4,  # running max, subtract, running sum, subtract the log
    "logsumexp": 3,  # running max, subtract, running sum
    "layernorm": 8,  # mean, variance (2), subtract, scale, weight, bias, ...
    "rmsnorm": 5,  # square, sum, scale, weight, ...
    "cast": 2,  # scale and convert
    "causal": 1,  # compare and select
    "window": 2,  # two compares and a select
    "varlen": 2,
    "index": 0,  # an index the kernel has: no arithmetic
}
# Exponentials per element on the special-function units.
SFU_PER_VALUE = {
    "exp": 1, "gelu": 1, "gelu_tanh": 1, "silu": 1, "sigmoid": 1, "tanh": 1, "softmax": 1,
    "log_softmax": 1, "logsumexp": 1,
}  # fmt: skip
REGISTER_OVERHEAD = 40  # addresses, loop counters, softmax state: a kernel's fixed registers
MAX_REGISTERS = 255
# Warps resident per SM at which a unit or a memory level reaches its peak (Little's law:
# work in flight = latency x rate). Two warps per SM sub-partition: on sm_80/sm_90 an
# mma.sync warp alternates ldmatrix (~30 cycles of SMEM latency at 128 B/clock/SM, so about
# 3.8 KiB in flight, eight 512-byte ldmatrix.x4) and math, and one warp per sub-partition
# leaves the tensor pipe idle while it waits; an L2 or HBM stream needs latency x bandwidth
# in flight (H100: ~260 cycles x ~38 B/clock/SM ~ 10 KB per SM for L2, ~600 ns x 4.8 TB/s
# / 132 SMs ~ 22 KB for HBM), that is 8 warps with 2-4 KiB of 16-byte loads each. See
# docs/cost-model.md, "Latency hiding".
SATURATION_WARPS = 8
# The latency a GEMM's cp.async ring must cover: a k tile's copies are waited for at one
# barrier, so the slowest of them counts, from HBM under the load of every SM. ~600 ns idle
# (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023), about twice
# that with the memory busy; CUTLASS's sm_80 tensor-op GEMMs run 3-5 stages of 32-64 deep
# k tiles, which covers about this. See docs/cost-model.md, "Pipeline stages".
PIPELINE_LATENCY_S = 1.2e-6


# ------------------------------------------------------------------------------ values


@dataclass(frozen=True)
class LevelCost:
    """Residency at one memory level: the most held at once by one core of it."""

    level: str
    capacity_bytes: int
    resident_values: int
    resident_bytes: int


class Transfer(NamedTuple):
    """Traffic across the boundary below `upper`: loads into `lower` plus saves out of it.
    (A named tuple: a tile search makes one per level for every candidate.)"""

    upper: str
    lower: str
    values: int
    bytes: int
    bandwidth_bytes_per_s: float
    time_s: float

    def plus(self, other: Transfer) -> Transfer:
        """Both kernels' traffic across the same boundary."""
        return Transfer(
            self.upper,
            self.lower,
            self.values + other.values,
            self.bytes + other.bytes,
            self.bandwidth_bytes_per_s,
            self.time_s + other.time_s,
        )


class TileChoice(NamedTuple):
    """One way to run a kernel: group and stream sizes per level below the top, and, on a
    GPU, the family's candidate with its whole launch. (A named tuple: a tile search makes
    one for every candidate.)"""

    partitions: Mapping[str, Partition]  # level -> sizes
    block_tile: Mapping[str, int]  # axis -> size at the block level (the innermost, abstract)
    candidate: Candidate | None = None  # None on an abstract machine

    @property
    def warps(self) -> int:
        return self.candidate.warps if self.candidate else 0

    @property
    def stages(self) -> int:
        return self.candidate.stages if self.candidate else 1

    @property
    def splits(self) -> int:
        return self.candidate.splits if self.candidate else 1


@dataclass(frozen=True)
class KernelPlan:
    """The predicted cost of one kernel with one tile choice."""

    kernel: Kernel
    family: Family
    tiles: Mapping[str, Partition] = field(hash=False)
    block_tile: Mapping[str, int] = field(hash=False)
    warps: int
    stages: int
    grid: int
    blocks_per_sm: int
    registers_per_thread: int
    smem_bytes: int
    flops: int
    levels: tuple[LevelCost, ...]
    transfers: tuple[Transfer, ...]
    compute_time_s: float
    predicted_time_s: float
    predicted_time_no_overlap_s: float
    bound: str
    compute: Mapping[str, float] = field(hash=False, default_factory=dict)  # unit -> seconds
    splits: int = 1
    waves: int = 1
    unit: str = "tensor"  # the compute unit with the most time
    candidate: Candidate | None = None  # the launch that is priced and built (GPU plans)
    instructions: LoopMix | None = None  # the main loop's issue slots the time counts

    @property
    def bound_kind(self) -> str:
        return "memory" if self.bound in [t.upper for t in self.transfers] else "compute"


@dataclass(frozen=True)
class Unfused:
    """What the diagram would move with every intermediate saved to the top level."""

    top_bytes: int
    predicted_time_s: float
    ratio: float  # unfused top-level bytes / fused top-level bytes


@dataclass(frozen=True)
class BreakOption:
    """One place to end kernels: the results saved to the top level besides the outputs
    (none: one fused kernel where the graph allows), and what the model says of it."""

    saved: tuple[str, ...]
    top_bytes: int  # what its kernels read and write at the top level, at the least
    predicted_time_s: float | None  # None where it does not build or was not planned
    least_time_s: float = 0.0  # its top-level bytes at the achieved bandwidth, and launches
    problem: str = ""  # why it does not build, or why it was not planned
    chosen: bool = False


@dataclass(frozen=True)
class Plan:
    """A diagram's plan: one KernelPlan per kernel, and the totals over them."""

    graph: MemoryGraph
    kernels: tuple[KernelPlan, ...]
    flops: int
    transfers: tuple[Transfer, ...]
    compute_time_s: float
    predicted_time_s: float
    predicted_time_no_overlap_s: float
    bound: str
    unfused: Unfused | None = None
    fixed: Mapping[str, int] = field(hash=False, default_factory=dict)  # tiles the user set
    # the kernel breaks the model weighed where the spec wrote none (ncdc.plan.search)
    breaks: tuple[BreakOption, ...] = ()

    @property
    def bound_kind(self) -> str:
        return "memory" if self.bound in [t.upper for t in self.transfers] else "compute"

    @property
    def top_bytes(self) -> int:
        return self.transfers[0].bytes if self.transfers else 0

    @property
    def tiles(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k in self.kernels:
            out.update(k.block_tile)
        return out


# ------------------------------------------------------------------------ the structure


def _ceil_div(a: Any, b: Any) -> Any:
    return -(-a // b)


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
        self.inputs = [
            (n, diagram.tensor(n).axes, DTYPE_BYTES[diagram.tensor(n).dtype]) for n in kernel.inputs
        ]
        self._inputs = [(_split_shape(self, n, axes), p, axes) for n, axes, p in self.inputs]
        self.outputs = [
            (n, diagram.size(diagram.tensor(n)), DTYPE_BYTES[diagram.tensor(n).dtype])
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
            (op.out, op.axes, op.over[0], DTYPE_BYTES[op.dtype])
            for op in kernel.ops
            if op.kind == "softmax"
        ]
        self._online = [
            (_split_shape(self, name, axes), axis, p) for name, axes, axis, p in self.online
        ]
        names = list(kernel.inputs) + list(kernel.outputs)
        self.top_values = sum(diagram.size(diagram.tensor(n)) for n in names)
        self.top_bytes = sum(
            diagram.size(diagram.tensor(n)) * DTYPE_BYTES[diagram.tensor(n).dtype] for n in names
        )
        self.flops_by_unit = _flops(diagram, kernel)
        self.widened = _widened(diagram, kernel)
        # A causal or window mask whose key axis the kernel reduces: key tiles that every
        # query of a query tile masks are skipped, along with the work and the loads over
        # that axis. A varlen mask's lengths are data: with the spec's `expected` lengths
        # the tiles they leave are priced (`Ragged`), without them it is priced dense.
        self.mask = _mask_band(kernel, self.sizes)
        self.ragged = _ragged(diagram, kernel)
        if self.ragged and not self.mask:
            self.mask = Band(self.ragged.query, self.ragged.key, None, None)
        key = self.mask.key if self.mask else None
        self.keyed_flops = _flops(diagram, kernel, key) if key else {}
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
            n = n * -(-self.sizes[a] // g[a])
        return n

    def transfer(
        self, g: Mapping[str, Any], s: Mapping[str, Any] | None = None, clipped: bool = False
    ) -> tuple[Any, Any]:
        """(values, bytes) loaded into a level with group sizes g, plus the outputs saved.
        Under a causal mask, the inputs over its key axis are loaded only for the key
        chunks (of s) that some query of the group sees. `clipped`: each group loads its
        tile only up to the tensor's edge, as the kernels' loads from global memory do (a
        tail tile's rows past the edge are zero-filled, not read); otherwise whole tiles, as
        a level below shared memory reads them (the zero-filled tile)."""
        groups = self.groups(g)
        values: Any = self.output_values
        nbytes: Any = self.output_bytes
        kept = self.mask_fraction(g, s) if self.mask else 1
        for (shape, p, _), keyed in zip(self._inputs, self._keyed, strict=True):
            v = self._clipped(shape, g) if clipped else _chunk(shape, g, None) * groups
            if keyed:
                v = v * kept
            values = values + v
            nbytes = nbytes + v * p
        return values, nbytes

    def _clipped(self, shape: _Shape, g: Mapping[str, Any]) -> Any:
        """Values of one tensor that all groups load, each its tile cut at the tensor's
        edge: the tensor's own woven axes whole, once per group along the others."""
        n: Any = shape.whole_rest
        for a in self.kernel.woven:
            if a in shape.sliced:
                n = n * self.sizes[a]
            elif a in g:
                n = n * -(-self.sizes[a] // g[a])
        return n

    def tile_transfer(
        self, g: Mapping[str, int], s: Mapping[str, int] | None = None, clipped: bool = False
    ) -> tuple[int, int]:
        """`transfer` for one tile of whole numbers, memoised: the candidates of a search
        share their block, warp and wave tiles. H depends on g only along woven axes (and
        on the key chunk under a causal mask)."""
        key = (clipped, *map(g.__getitem__, self.kernel.woven))
        if self.mask:
            key += ((s or {}).get(self.mask.key, 0),)
        if key not in self._tile_transfers:
            values, nbytes = self.transfer(g, s, clipped)
            self._tile_transfers[key] = (int(values), int(nbytes))
        return self._tile_transfers[key]

    def tile_work(
        self, g: Mapping[str, int], s: Mapping[str, int]
    ) -> tuple[int, float, dict[tuple[str, str], Any]]:
        """(groups, `_padding`, `tile_flops`) for one tile of whole numbers, memoised: a
        search times many launches (warps, stages, splits) of the same tile."""
        key = (tuple(g.items()), tuple(s.items()))
        if key not in self._tile_work:
            self._tile_work[key] = (
                int(self.groups(g)),
                _padding(self, g, s),
                self.tile_flops(g, s),
            )
        return self._tile_work[key]

    def mask_fraction(self, g: Mapping[str, Any], s: Mapping[str, Any] | None) -> Any:
        """Share of the dense work over the key axis that groups of g, streaming keys in
        chunks of s, do under a causal or window mask (1 without one): `band_fraction`."""
        if not self.mask:
            return 1
        query, key, lo, hi = self.mask
        queries, keys = self.sizes[query], self.sizes[key]
        g_q = g.get(query, queries)
        s_x = (s or {}).get(key, keys)
        ragged = self.ragged

        def fraction(a: int, b: int) -> Any:
            if ragged:
                return ragged_fraction(queries, keys, a, b, lo, hi, ragged.rows, ragged.packed)
            return band_fraction(queries, keys, a, b, lo, hi)

        if hasattr(g_q, "shape") or hasattr(s_x, "shape"):
            import numpy as np  # only a vectorised search passes arrays

            each = np.frompyfunc(lambda a, b: fraction(int(a), int(b)), 2, 1)
            return each(g_q, s_x).astype(np.float64)
        return fraction(int(g_q), int(s_x))

    def tile_flops(
        self, g: Mapping[str, int], s: Mapping[str, int]
    ) -> dict[tuple[str, str], float]:
        """FLOPs per (unit, kind) that groups of g with chunks s do: under a causal mask,
        the work over the key axis only for the key chunks a group visits; a weight-only
        GEMM's widening of its weights, once per group along the activations' own axes."""
        out = dict(self.flops_by_unit)
        if self.mask:
            kept = self.mask_fraction(g, s)
            out = {unit: n - self.keyed_flops.get(unit, 0) * (1 - kept) for unit, n in out.items()}
        for values, axes in self.widened:
            blocks = math.prod(_ceil_div(self.sizes[a], g.get(a, self.sizes[a])) for a in axes)
            key = ("cuda", "fp32")
            out[key] = out.get(key, 0) + values * blocks * WIDEN_OPS_PER_VALUE
        return out

    def resident(
        self, g: Mapping[str, Any], s: Mapping[str, Any], stages: int = 1, inputs_only: bool = False
    ) -> tuple[Any, Any]:
        """(values, bytes) one group holds at once: input chunks (x stages where streamed),
        then, unless `inputs_only`, buffers and the online-softmax state."""
        return _held(self.resident_parts(g, s), stages, inputs_only)

    def resident_parts(self, g: Mapping[str, Any], s: Mapping[str, Any]) -> _Resident:
        """What `resident` adds up, before the pipeline stages multiply the streamed inputs."""
        streamed, whole, state = [0, 0], [0, 0], [0, 0]
        for shape, p, axes in self._inputs:
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


def _maximum(a: Any, b: Any) -> Any:
    if hasattr(b, "shape") or hasattr(a, "shape"):
        import numpy as np  # only a vectorised search passes arrays

        return np.maximum(a, b)
    return a if a >= b else b


def _reach(diagram: Diagram, kernel: Kernel) -> dict[str, set[str]]:
    """For each tensor of the kernel, the axes that reach an output without being reduced."""
    reach: dict[str, set[str]] = {}
    for name in kernel.outputs:
        reach[name] = set(diagram.tensor(name).axes)
    for op in reversed(kernel.ops):
        out = reach.get(op.out, set())
        through = out & set(op.axes) - set(op.reduced)
        for name in op.inputs:
            axes = set(diagram.tensor(name).axes)
            reach[name] = reach.get(name, set()) | (axes & through)
    return reach


def _buffers(diagram: Diagram, kernel: Kernel) -> list[list[tuple[str, tuple[str, ...], int]]]:
    """Results grouped into buffers: an elementwise op, mask, softmax or norm whose input is
    an intermediate of the same shape with no other consumer works in that input's buffer."""
    buffer_of: dict[str, int] = {}
    buffers: list[list[tuple[str, tuple[str, ...], int]]] = []
    produced = {op.out for op in kernel.ops}
    for op in kernel.ops:
        t = diagram.tensor(op.out)
        entry = (op.out, t.axes, DTYPE_BYTES[t.dtype])
        source = next((o for o in op.operands if isinstance(o, str)), None)
        if (
            op.kind in IN_PLACE_KINDS
            and source in produced
            and source not in kernel.outputs
            and len([c for c in kernel.ops if source in c.inputs]) == 1
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
    wide = [d for d in dtypes if DTYPE_BYTES[d] > 1]
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
        if {DTYPE_BYTES[a.dtype], DTYPE_BYTES[b.dtype]} != {1, 2}:
            continue
        narrow, wide = (a, b) if DTYPE_BYTES[a.dtype] == 1 else (b, a)
        out.append((diagram.size(narrow), tuple(x for x in wide.axes if x not in narrow.axes)))
    return out


def _flops(
    diagram: Diagram, kernel: Kernel, axis: str | None = None
) -> dict[tuple[str, str], float]:
    """FLOPs per (unit, kind): 2k per output value of a contraction, exponentials on the
    SFU, the rest on CUDA cores at CUDA_FLOPS_PER_VALUE. With `axis`, only the operations
    whose result or reduction runs over that axis."""
    out: dict[tuple[str, str], float] = {}

    def add(key: tuple[str, str], n: float) -> None:
        if n:
            out[key] = out.get(key, 0) + n

    for op in kernel.ops:
        if axis is not None and axis not in op.axes and axis not in op.over:
            continue
        result = diagram.size(diagram.tensor(op.out))
        if op.kind == "contract":
            k = math.prod(diagram.axes[a] for a in op.over)
            add(contract_unit(diagram, op), 2 * result * k)
            add(("cuda", "fp32"), result * len(op.scale))
            continue
        source = next((o for o in op.operands if isinstance(o, str)), None)
        count = diagram.size(diagram.tensor(source)) if source and op.kind == "reduce" else result
        fn = op.fn
        add(("cuda", "fp32"), count * CUDA_FLOPS_PER_VALUE.get(fn, 1))
        add(("sfu", "exp"), count * SFU_PER_VALUE.get(fn, 0))
    return out


# ------------------------------------------------------------------------- causal masks


class Band(NamedTuple):
    """Keys j that query i may see under a kernel's causal and window masks: i + lo <= j
    <= i + hi, None for an unbounded side (the masks' intersection, at the model's sizes)."""

    query: str
    key: str
    lo: int | None
    hi: int | None


def _mask_band(kernel: Kernel, sizes: Mapping[str, int]) -> Band | None:
    """The band of the causal and window masks whose key axis the kernel reduces (the
    streamed key axis of attention) and whose query axis it weaves, else None."""
    band = None
    for op in kernel.ops:
        if op.kind != "mask" or op.fn not in ("causal", "window"):
            continue
        query, key = op.params.get("query"), op.params.get("key")
        if query not in kernel.woven or key not in kernel.reduced:
            continue
        shift = sizes[key] - sizes[query] if op.params.get("align", "end") == "end" else 0
        lo = shift - op.params["left"] if op.fn == "window" else None
        hi = shift + op.params["right"] if op.fn == "window" else shift
        if band is not None and (band.query, band.key) == (query, key):
            lo = lo if band.lo is None else band.lo if lo is None else max(lo, band.lo)
            hi = hi if band.hi is None else band.hi if hi is None else min(hi, band.hi)
        band = Band(str(query), str(key), lo, hi)
    return band


class Ragged(NamedTuple):
    """The expected lengths of a kernel's varlen mask (the lengths input's `expected`):
    `rows` holds, per entry of the lengths' batch axes, the lengths of its packed sequences
    (`packed`) or its one padded length; every row covers as many (batch..., head) slices."""

    query: str
    key: str
    packed: bool
    rows: tuple[tuple[int, ...], ...]


def _ragged(diagram: Diagram, kernel: Kernel) -> Ragged | None:
    """The `Ragged` of the kernel's varlen mask when its lengths state expected values."""
    for op in kernel.ops:
        if op.fn != "varlen":
            continue
        t = diagram.tensor(op.params["lengths"])
        if not t.expected:
            return None
        packed = any(a not in op.axes for a in t.axes)
        per = diagram.axes[t.axes[-1]] if packed else 1
        rows = tuple(t.expected[i : i + per] for i in range(0, len(t.expected), per))
        return Ragged(op.params["query"], op.params["key"], packed, rows)
    return None


def dense_varlen_notes(plan: Plan) -> list[str]:
    """One line per varlen mask priced dense because its lengths state no expected values."""
    d = plan.graph.diagram
    out = []
    for kp in plan.kernels:
        for op in kp.kernel.ops:
            if op.fn == "varlen" and not d.tensor(op.params["lengths"]).expected:
                name = op.params["lengths"]
                out.append(
                    f"note: {kp.kernel.name}: the lengths {name} are data, priced dense (every "
                    f"key seen, an upper bound); state them for the model: inputs: {{{name}: "
                    f"{{..., expected: [...]}}}}"
                )
    return out


@functools.lru_cache(maxsize=1024)
def ragged_spans(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    lengths: tuple[int, ...], packed: bool,
) -> tuple[tuple[int, int], ...]:  # fmt: skip
    """The first and last key chunk each query tile visits under the band and a varlen
    mask of `lengths` (`Visible` in ncdc_attention.cuh): packed, query i sees the keys of its
    own sequence (none past the last); padded (one length), the keys below it. (0, -1) for a
    tile that sees no key.

        >>> # causal, packed: sequences [0, 100), none, [100, 101), [101, 201); tile 3's
        >>> # first query (192) is in the last sequence, its last (255) past it
        >>> ragged_spans(256, 256, 64, 64, None, 0, (100, 0, 1, 100), True)
        ((0, 0), (0, 1), (1, 2), (1, 3))
        >>> ragged_spans(256, 256, 64, 64, None, None, (70,), False)  # padded: 70 keys
        ((0, 1), (0, 1), (0, 1), (0, 1))
    """
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + max(n, 0))
    total = starts[-1]
    x_end = keys if packed else min(keys, max(0, lengths[0]))

    def sequence(i: int) -> tuple[int, int]:
        for s in range(len(lengths)):
            if starts[s] <= i < starts[s + 1]:
                return starts[s], starts[s + 1]
        return total, total

    out = []
    for t in range(-(-queries // g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = -keys if lo is None else a + lo
        last = 2 * keys if hi is None else b + hi
        if packed:
            first = max(first, sequence(a)[0])
            last = min(last, sequence(b)[1] - 1)
        first, last = min(max(first, 0), x_end), max(min(last, x_end - 1), -1)
        out.append((0, -1) if last < first else (first // s_x, last // s_x))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def ragged_fraction(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    rows: tuple[tuple[int, ...], ...], packed: bool,
) -> float:  # fmt: skip
    """`band_fraction` under a varlen mask of expected lengths: the keys the tiles of each
    row load (whole chunks, the last one cut at the key axis), over tiles x keys, averaged
    over the rows.

        >>> # (64 + 128 + 128 + 192) / (4 x 256)
        >>> ragged_fraction(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True)
        0.5
    """
    tiles = -(-queries // g_q)
    loaded = 0
    for lengths in rows:
        for c0, c1 in ragged_spans(queries, keys, g_q, s_x, lo, hi, lengths, packed):
            if c1 >= c0:
                loaded += min(keys, (c1 + 1) * s_x) - c0 * s_x
    return loaded / (tiles * keys * len(rows))


@functools.lru_cache(maxsize=256)
def ragged_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    rows: tuple[tuple[int, ...], ...], packed: bool, batches: int, slots: int,
) -> float:  # fmt: skip
    """The busiest block slot's work over the mean slot's under a varlen mask of expected
    lengths (`band_imbalance` over `ragged_spans`): the blocks of each row's slices in
    launch order, query tile fastest (the longest first under a causal or window mask, as
    ncdc launches them), list-scheduled onto `slots`.

        >>> # one head, tiles of 1, 2, 2, 3 chunks launched 3, 2, 2, 1 on 2 slots: 3 + 1, 2 + 2
        >>> ragged_imbalance(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True, 1, 2)
        1.0
        >>> # on 4 slots: the busiest does 3 chunks, the mean 2
        >>> ragged_imbalance(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True, 1, 4)
        1.5
    """
    per_row = max(1, batches // len(rows))
    copies = min(per_row, max(1, 4096 // max(len(rows) * -(-queries // g_q), 1)))
    order = []
    for lengths in rows:
        spans = list(ragged_spans(queries, keys, g_q, s_x, lo, hi, lengths, packed))
        if hi is not None:
            spans.reverse()
        order += [max(0, c1 - c0 + 1) for c0, c1 in spans] * copies
    total = sum(order)
    if not total:
        return 1.0
    return max(1.0, block_makespan(order, slots) * min(slots, len(order)) / total)


def band_tiles(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> tuple[tuple[int, int], ...]:
    """(key chunks, keys loaded) of each query tile under the band i + lo <= j <= i + hi:
    tile t (queries t g_q .. its last, clipped to the axis) loads the chunks of s_x keys from
    the one holding its first query's first key to the one holding its last query's last
    key, as the kernel does (`Visible` in ncdc_attention.cuh); the last chunk stops at the
    key axis's end.

        >>> band_tiles(256, 256, 64, 64, None, 0)     # causal: 1, 2, 3, 4 chunks
        ((1, 64), (2, 128), (3, 192), (4, 256))
        >>> band_tiles(256, 256, 64, 64, -63, 0)      # a window of 64 keys: 1 or 2 chunks
        ((1, 64), (2, 128), (2, 128), (2, 128))
    """
    out = []
    for t in range(-(-queries // g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = 0 if lo is None else min(max(a + lo, 0), keys)
        last = keys - 1 if hi is None else max(min(b + hi, keys - 1), -1)
        if last < first:
            out.append((0, 0))
            continue
        c0, c1 = first // s_x, last // s_x
        out.append((c1 - c0 + 1, min(keys, (c1 + 1) * s_x) - c0 * s_x))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def band_fraction(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> Fraction:
    """Share of the dense (query tile, key) work a kernel does under the band i + lo <= j
    <= i + hi when it skips the key chunks no query of a tile sees (`band_tiles`): the
    keys loaded summed over the tiles, over tiles x keys. A sliding window's share falls
    as the keys grow: its work grows with the window, not with the keys.

        >>> band_fraction(256, 256, 64, 64, -63, 0)
        Fraction(7, 16)
        >>> round(float(band_fraction(32768, 32768, 128, 64, -4095, 0)), 4)  # Mistral's
        0.1208
    """
    from fractions import Fraction  # only masked kernels need it: not on every start-up

    tiles = band_tiles(queries, keys, g_q, s_x, lo, hi)
    return Fraction(sum(n for _, n in tiles), len(tiles) * keys)


def causal_fraction(queries: int, keys: int, g_q: int, s_x: int) -> Fraction:
    """Share of the dense (query tile, key) work a causal kernel does when it skips the key
    chunks that every query of a tile masks.

    Key j is masked for query i when j > i + (keys - queries) (the diagonal aligned at the
    end). Query tile t (g_q queries, the last one clipped to the axis) sees keys up to
    `last` = its last query + keys - queries, so it visits chunks 0 .. last // s_x of s_x
    keys (none if last < 0) and loads min(keys, chunks x s_x) keys. The result is those
    keys summed over the tiles, over tiles x keys (1 when nothing is skipped).

        >>> causal_fraction(256, 256, 64, 64)   # tiles see 64, 128, 192, 256 of 4 x 256
        Fraction(5, 8)
        >>> causal_fraction(1, 4096, 16, 64)    # one decode query sees every key
        Fraction(1, 1)
    """
    return band_fraction(queries, keys, g_q, s_x, None, keys - queries)


# ----------------------------------------------------------------------------- streaming


def streamed_axes(diagram: Diagram, kernel: Kernel) -> tuple[str, ...]:
    """The axes this kernel streams: those `schedule.stream` asks for, else every reduced
    axis where streaming is legal (napkin-model.md section 5). Raises PlanError for an
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


# ------------------------------------------------------------------------------ a plan


def estimate_registers(accumulator_values: int, threads: int, fragments: int) -> int:
    """Registers per thread: fp32 accumulators spread over the threads, the operand
    fragments a thread holds, and REGISTER_OVERHEAD. Uncapped: above 255 a kernel spills."""
    return int(_ceil_div(accumulator_values, threads) + fragments + REGISTER_OVERHEAD)


Occupancy = Callable[[int, int, int, Any], tuple[int, str]]


class KernelTiming(NamedTuple):
    """The times of one kernel with one tile choice: all a search ranks by, without the
    residency per level that a KernelPlan also reports. (A named tuple, made for every
    candidate of a search.)"""

    transfers: tuple[Transfer, ...]
    compute: Mapping[str, float]  # unit -> seconds
    grid: int
    blocks_per_sm: int
    waves: int
    flops: int = 0  # FLOPs the kernel does (under a causal mask, only the key tiles it visits)
    padding: float = 1.0  # work done over useful work: padded tails and chunks
    launch_s: float = 0.0  # from each launch to its first block running, over the launches
    serial_s: float = 0.0  # the compute units' time as the kernel's structure overlaps them

    @property
    def times(self) -> dict[str, float]:
        """Unit or upper level -> seconds: the candidates for the bound."""
        return {**self.compute, **{t.upper: t.time_s for t in self.transfers}}

    @property
    def predicted_time_s(self) -> float:
        """The launch, then the largest of `times` and of the compute units' time as they
        overlap (`overlap_compute`); level and unit names never clash (ncdc.hardware.machine)."""
        slowest = max(self.serial_s, max(self.compute.values(), default=0.0))
        for t in self.transfers:
            slowest = max(slowest, t.time_s)
        return self.launch_s + slowest

    @property
    def top_bytes(self) -> int:
        return self.transfers[0].bytes if self.transfers else 0


def latency_efficiency(warps_per_sm: float) -> float:
    """Fraction of a unit's or a memory level's peak reached with `warps_per_sm` warps
    resident per SM: the work in flight grows with the warps until it covers latency x
    rate (Little's law), at SATURATION_WARPS, and the peak holds beyond.

        >>> latency_efficiency(4), latency_efficiency(8), latency_efficiency(16)
        (0.5, 1.0, 1.0)
    """
    return min(1.0, warps_per_sm / SATURATION_WARPS)


def pipeline_stall(stages: int, blocks: int, tile_s: float, tiles: int) -> float:
    """How much slower than its rates an SM multiplies when a k loop of `tiles` k tiles with
    `stages` pipeline slots waits for its copies: `stages - 1` k tiles are in flight while
    one is multiplied, and `blocks` resident blocks take turns, so a copy has
    (stages - 1) x blocks x `tile_s` (one block's k tile at the SM's rate) to arrive, and
    needs PIPELINE_LATENCY_S (Little's law). The first `stages - 1` tiles are the fill, whose
    latency no depth hides (it is not priced); each later tile waits the shortfall.

        >>> pipeline_stall(2, 1, 0.6e-6, 8), pipeline_stall(3, 1, 0.6e-6, 8)
        (1.875, 1.0)
        >>> pipeline_stall(2, 1, 0.6e-6, 1), pipeline_stall(1, 1, 1.0, 8)
        (1.0, 1.0)
    """
    if stages < 2 or tile_s <= 0 or tiles < stages:
        return 1.0
    per_tile = max(1.0, PIPELINE_LATENCY_S / ((stages - 1) * blocks * tile_s))
    return 1.0 + (per_tile - 1.0) * (tiles - (stages - 1)) / tiles


def overlap_compute(
    compute: Mapping[str, float], softmax_chain: bool, streams: int, fragments_s: float = 0.0
) -> float:
    """The compute units' time as the kernel's structure overlaps them.

    Without an online softmax (GEMM, row-wise, elementwise), the units work for different
    warps at once and the slowest sets the time. In FlashAttention-2 order a warp runs its
    MMAs (tensor) and then its softmax (max, exp, sum, rescale: CUDA cores and SFU, one
    dependent chain) on the same scores: within a warp they serialise, and the warps of one
    block march in step between the barriers of each key chunk. Only the `streams` blocks
    resident per SM run independently; of the shorter phase, (streams - 1) / streams is
    hidden by the others. One stream is fully serial (the paper's sec. 6), many overlap.
    The MMA phase also reads the K and V fragments from shared memory (`fragments_s`, the
    SMEM -> register transfer's time: ldmatrix feeding the MMAs of the same warp), which
    the softmax does not touch: the phase lasts max(MMAs, fragment loads), and what the
    softmax serialises with is that.

        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, True, 1)
        1.5
        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, True, 2)
        1.25
        >>> overlap_compute({"tensor": 1.0, "cuda": 0.25, "sfu": 0.25}, False, 1)
        1.0
    """
    issue = compute.get(ISSUE, 0.0)
    if not softmax_chain or "tensor" not in compute:
        return max(compute.values(), default=0.0)
    mma = max(compute["tensor"], fragments_s)
    softmax = sum(t for unit, t in compute.items() if unit not in ("tensor", ISSUE))
    hidden = (streams - 1) / streams * min(mma, softmax) if streams > 1 else 0.0
    # however many streams overlap, every instruction still takes an issue slot
    return max(mma + softmax - hidden, issue)


# ------------------------------------------------- warp specialisation (model terms)


def pipeline_time(
    tiles: int, stages: int, load_s: float, compute_s: float, issue_s: float = 0.0
) -> float:
    """Seconds for `tiles` tiles through a producer/consumer pipeline of `stages` shared
    buffers: a producer (a TMA or cp.async warp) fills a free buffer with the next tile in
    `load_s`, the consumers compute on a full one in `compute_s`, and each waits for the
    other through the buffers' barriers. One buffer serialises them: tiles x (load +
    compute). With two or more the producer runs ahead and the slower side sets the pace:
    the first load and the last compute are exposed, load + compute + (tiles - 1) x
    max(load, compute). (Deterministic times: more stages only absorb jitter, which this
    does not model.) `issue_s` is one tile's instructions at the SM's issue rate, producer
    and consumers together: however they overlap, the pipeline is no faster than
    tiles x issue_s.

        >>> pipeline_time(4, 1, 1.0, 2.0)    # serial: 4 x 3
        12.0
        >>> pipeline_time(4, 2, 1.0, 2.0)    # 1 + 2 + 3 x 2: the consumers bound
        9.0
        >>> pipeline_time(4, 3, 3.0, 2.0)    # 3 + 2 + 3 x 3: the producer bounds
        14.0
        >>> pipeline_time(4, 2, 1.0, 2.0, issue_s=2.5)   # the issue slots bound
        10.0
    """
    if tiles <= 0:
        return 0.0
    if stages <= 1:
        overlapped = tiles * (load_s + compute_s)
    else:
        overlapped = load_s + compute_s + (tiles - 1) * max(load_s, compute_s)
    return max(overlapped, tiles * issue_s)


def pingpong_time(tiles: int, mma_s: float, other_s: float, issue_s: float = 0.0) -> float:
    """Seconds for `tiles` tiles shared by a ping-pong pair of consumer warpgroups (as
    FlashAttention-3 schedules them): each tile is `mma_s` on the tensor pipe, which the
    pair shares, then `other_s` off it (the softmax, or an epilogue) on the warpgroup's own
    chain; a named barrier hands the tensor pipe from one warpgroup to the other, so one's
    softmax runs under the other's MMAs. In steady state a pair of tiles takes the longer
    of the pipe's 2 x mma and one warpgroup's mma + other: per tile max(mma, (mma +
    other) / 2). The last tile's `other_s` has no partner MMA to hide under. `issue_s` as
    in `pipeline_time`.

        >>> pingpong_time(8, 1.0, 0.5)   # tensor-bound: 8 x 1, then the last softmax
        8.5
        >>> pingpong_time(8, 1.0, 3.0)   # softmax-bound: 8 x (1 + 3) / 2 + 3
        19.0
        >>> pingpong_time(8, 1.0, 0.5, issue_s=1.25)
        10.0
    """
    if tiles <= 0:
        return 0.0
    steady = tiles * max(mma_s, (mma_s + other_s) / 2) + other_s
    return max(steady, tiles * issue_s)


def pingpong_compute(compute: Mapping[str, float], tiles: int) -> float:
    """The compute units' time of a kernel whose two consumer warpgroups ping-pong
    (`pingpong_time`): `tiles` key tiles one after the other on an SM, each the tensor
    time's share on the pipe and the rest of the units' (the softmax's FP32 work) off it,
    the issue slots a ceiling.

    The exponentials (`sfu`, MUFU.EX2) are counted with the MMAs, not hidden under the other
    warpgroup's: FlashAttention-3's measured shares of the H100's peak, 50%, 65% and 76% at
    d = 64, 128 and 256 (its Fig. 5; benchmarks/external/fa3_h100.yaml), are the serial sum
    of the MMAs and the exponentials (1 exp per score against 4d FLOPs: 1/2, 2/3 and 4/5 of
    the peak), as the paper's sec. 6 reads them (a softmax costing 33% of the fp16 MMA time
    gives 75%), not the hidden softmax the schedule aims for.

        >>> pingpong_compute({"tensor": 8.0, "cuda": 2.0}, 8)   # 8 x 1, then the last 0.25
        8.25
        >>> pingpong_compute({"tensor": 8.0, "cuda": 2.0, "sfu": 2.0}, 8)   # 8 x 1.25 + 0.25
        10.25
    """
    tiles = max(1, tiles)
    mma = compute.get("tensor", 0.0) + compute.get("sfu", 0.0)
    other = sum(t for unit, t in compute.items() if unit not in ("tensor", "sfu", ISSUE))
    return pingpong_time(tiles, mma / tiles, other / tiles, compute.get(ISSUE, 0.0) / tiles)


def warpgroups_per_sm(capacity: float, per_block: float, per_warpgroup: float) -> float:
    """Warpgroups one SM holds by one resource (the paper's sec. 5.6): what is left of the
    SM's `capacity` after a thread block's shared part, over each warpgroup's own part,
    (M_max - M_TB) / M_WG. A kernel runs the smallest of these over its resources, rounded
    down.

        >>> warpgroups_per_sm(228, 48, 48)      # H100 shared memory, KB: 3.75
        3.75
        >>> round(warpgroups_per_sm(256, 0, 74.75), 2)   # registers, KB: 3.42
        3.42
    """
    return (capacity - per_block) / per_warpgroup


@dataclass(frozen=True)
class WarpgroupBudget:
    """What one thread block keeps for itself and what each of its warpgroups (4 warps,
    128 threads) adds, in shared memory and in registers (bytes): the paper's M_TB and
    M_WG per resource (sec. 5.6)."""

    smem_block: float
    smem_warpgroup: float
    regs_block: float = 0.0
    regs_warpgroup: float = 0.0


WARPGROUP_THREADS = 128


def warpgroups_fit(hw: Hardware, budget: WarpgroupBudget) -> tuple[int, dict[str, float]]:
    """Warpgroups one SM of `hw` runs under `budget`: per resource (shared memory per SM,
    the register file, threads) `warpgroups_per_sm`, and the whole number the tightest
    allows; with the per-resource counts.

        >>> from ncdc.hardware.machine import load_hardware
        >>> h100 = load_hardware("h100")   # 228 KiB of shared memory per SM
        >>> n, per = warpgroups_fit(h100, WarpgroupBudget(48 * 1024, 48 * 1024))
        >>> n, round(per["smem"], 2)
        (3, 3.75)
    """
    lim = hw.limits
    per = {
        "smem": warpgroups_per_sm(lim.smem_per_sm_bytes, budget.smem_block, budget.smem_warpgroup),
        "threads": lim.threads_per_sm / WARPGROUP_THREADS,
    }
    if budget.regs_warpgroup:
        per["registers"] = warpgroups_per_sm(
            lim.regs_per_sm * 4, budget.regs_block, budget.regs_warpgroup
        )
    return max(0, math.floor(min(per.values()))), per


def block_makespan(works: list[int], slots: int) -> int:
    """Work units the busiest of `slots` block slots does when blocks of `works`, taken in
    launch order, each go to the slot that frees first (the block scheduler's greedy list
    scheduling). Equal blocks give ceil(len / slots) x work; unequal ones (the query tiles
    of a causal kernel) a tail longer than the mean.

        >>> block_makespan([4, 3, 2, 1], 2)   # slots do 4 + 1 and 3 + 2
        5
        >>> block_makespan([1, 2, 3, 4], 2)   # 1 + 3 and 2 + 4: the longest block last
        6
    """
    import heapq

    free = [0] * max(1, min(slots, len(works)))
    for w in works:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def causal_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, batches: int, slots: int, longest_first: bool
) -> float:
    """The busiest block slot's causal work over the mean slot's: query tile t visits its
    own number of key chunks (`causal_fraction`), the blocks of each (batch, head) launched
    query tile fastest (ncdc launches the longest first). 1 when the tiles balance.

        >>> round(causal_imbalance(4096, 4096, 128, 64, 1, 108, True), 3)   # 32 tiles, 1 head
        1.939
        >>> round(causal_imbalance(4096, 4096, 128, 64, 32, 108, True), 3)  # 32 heads, A100
        1.112
    """
    return band_imbalance(queries, keys, g_q, s_x, None, keys - queries, batches, slots,
                          longest_first)  # fmt: skip


@functools.lru_cache(maxsize=256)
def band_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    batches: int, slots: int, longest_first: bool, split_chunks: int = 0,
) -> float:  # fmt: skip
    """`causal_imbalance` under the band i + lo <= j <= i + hi (`band_tiles`). With
    `split_chunks`, the keys are split across blocks in ranges of that many chunks (grid z,
    outermost): block (tile, split) visits the chunks of its tile in its range.

        >>> # 4 tiles x 8 splits of 8 chunks; tile 0's last split has 5 of them (to key 3903)
        >>> round(band_imbalance(256, 4096, 64, 64, None, 3840, 1, 132, True, 8), 3)
        1.024
        >>> # 8 tiles x 4 splits of 2: the busiest block does 2 chunks, the mean 36 / 32
        >>> round(band_imbalance(512, 512, 64, 64, None, 0, 1, 132, True, 2), 3)
        1.778
    """
    spans = band_spans(queries, keys, g_q, s_x, lo, hi)
    if longest_first:
        spans.reverse()
    chunks = max(1, -(-keys // s_x))
    per = split_chunks or chunks
    splits = -(-chunks // per)
    works = [
        [max(0, min(c1, (z + 1) * per - 1) - max(c0, z * per) + 1) for c0, c1 in spans]
        for z in range(splits)
    ]
    total = sum(map(sum, works))
    if not total:
        return 1.0
    # past a few thousand blocks the tail is a small share: simulate one slice of the batch
    copies = min(batches, max(1, 4096 // max(len(spans) * splits, 1)))
    order = [w for split in works for w in split * copies]
    busiest = block_makespan(order, slots)
    return max(1.0, busiest * min(slots, len(order)) / (total * copies))


def band_spans(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> list[tuple[int, int]]:
    """The first and last key chunk each query tile visits (`band_tiles`); (0, -1) for one
    that sees no key.

        >>> band_spans(256, 256, 64, 64, -63, 0)
        [(0, 0), (0, 1), (1, 2), (2, 3)]
    """
    out = []
    for t in range(-(-queries // g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = 0 if lo is None else min(max(a + lo, 0), keys)
        last = keys - 1 if hi is None else max(min(b + hi, keys - 1), -1)
        out.append((0, -1) if last < first else (first // s_x, last // s_x))
    return out


def time_kernel(
    model: KernelModel,
    hw: Hardware,
    choice: TileChoice,
    occupancy: Occupancy = blocks_per_sm,
    mix: LoopMix | None = None,
) -> KernelTiming:
    """Transfers, compute time per unit and launch of `model`'s kernel run with `choice` on
    `hw` (napkin-model.md 3 and 7). `occupancy` is `blocks_per_sm` or a memo of it.

    On a GPU the launch is the candidate's: its grid, threads, shared memory and register
    budget. A resource of one SM (compute units, SMEM) runs at the pace of the busiest SM:
    it holds ceil(grid / SMs) blocks, each doing its share of the groups (more than one
    where the grid strides over them), at the rate its resident warps reach
    (`latency_efficiency`); a resource the device shares (L2, HBM) at the rate the warps
    resident on the whole device reach."""
    levels = hw.levels
    c = choice.candidate
    inner = choice.partitions[hw.block_level if c else levels[-1].name]
    groups, tile_padding, flops = model.tile_work(inner.group, inner.stream)
    grid, per_sm, waves, sm_slow, device_slow, padding = groups, 1, 1, 1.0, 1.0, 1.0
    streams, balance = 1, 1.0
    if c is not None:
        per_sm, _ = occupancy(c.threads, min(c.registers, MAX_REGISTERS), c.smem_bytes, hw.limits)
        per_sm = max(per_sm, 1)
        sms = hw.limits.sms
        grid = c.grid
        work = groups * c.splits  # one group's share of one split: what a block does
        waves = _ceil_div(grid, sms * per_sm)
        blocks = _ceil_div(grid, sms)
        busiest = min(work, blocks * _ceil_div(work, grid))
        resident = min(per_sm, blocks) * c.warps
        balance = busiest * sms / work
        streams = max(1, min(per_sm, blocks))
        if model.mask:
            balance *= _causal_balance(model, inner, grid, sms * streams, c)
        sm_slow = balance / latency_efficiency(resident)
        # Little's law for the device's levels: the loads in flight per SM. A streamed
        # attention ring keeps stages - 1 chunks in flight for each block (one is read)
        ahead = max(1, c.stages - 1) if model.online else 1
        device_slow = 1 / latency_efficiency(min(grid, sms * per_sm) * c.warps * ahead / sms)
        padding = tile_padding
    transfers = []
    for upper, lower in zip(levels, levels[1:], strict=False):
        part = choice.partitions[lower.name]
        # loads from device memory stop at a tensor's edge; those from shared memory read
        # the zero-filled tail tile whole
        clipped = c is not None and upper.per == "device"
        group = part.group
        if c is not None and c.cluster and lower.name == hw.block_level:
            # a cluster's blocks multicast what they share: the traffic of their joint tile
            group = {**group, **{a: group[a] * n for a, n in c.cluster}}
        values, nbytes = model.tile_transfer(group, part.stream, clipped)
        if c is not None and c.rereads:
            # inputs the kernel reads again from global memory (a long row's second pass)
            again = _reread(model, c.rereads)
            values += again[0]
            nbytes += again[1]
        if choice.splits > 1 and lower.name != levels[-1].name:
            # partial outputs, fp32, and the running max and sum of each row, saved then read
            merge_values = 2 * choice.splits * model.output_values
            values += merge_values
            nbytes += merge_values * 4
        bandwidth = hw.achieved_bandwidth(upper.name)
        slow = device_slow if upper.per == "device" else sm_slow
        transfers.append(
            Transfer(
                upper.name,
                lower.name,
                int(values),
                int(nbytes),
                bandwidth,
                float(nbytes) / bandwidth * slow,
            )
        )
    compute: dict[str, float] = {}
    for (unit, kind), n in flops.items():
        compute[unit] = compute.get(unit, 0.0) + float(n) / _rate(hw, unit, kind, c)
    stall = 1.0
    if c is not None and c.stages > 1 and not model.online:
        # a GEMM's cp.async ring (attention's double buffer is priced by its warps)
        chunks = math.prod(_ceil_div(model.sizes.get(a, n), n) for a, n in inner.stream.items())
        # every group's k tiles are done once, split or not; a split's loop runs its share
        tile_s = max(compute.values(), default=0.0) * hw.limits.sms / (groups * chunks)
        stall = pipeline_stall(c.stages, streams, tile_s, int(_ceil_div(chunks, c.splits)))
    compute = {unit: t * sm_slow * padding * stall for unit, t in compute.items()}
    if mix is not None and c is not None:
        # the main loops' instructions at the SMs' issue rate: a ceiling no overlap of warps
        # passes (the busiest SM's share, with the padded tails it computes)
        tensor = sum(float(n) for (unit, _), n in flops.items() if unit == "tensor")
        compute[ISSUE] = issue_time_s(mix, tensor, hw) * padding * balance
    total = int(sum(flops.values()))
    # the MMA phase of an FA2-order warp loads its K/V fragments from shared memory
    fragments = transfers[-1].time_s if c is not None and levels[-2].per == "sm" else 0.0
    serial = overlap_compute(compute, bool(model.online) and c is not None, streams, fragments)
    if c is not None and dict(c.params).get("pingpong"):
        # two consumer warpgroups take turns at the tensor pipe: one's softmax runs under
        # the other's MMAs, for every key tile of the blocks the busiest SM runs
        chunks = math.prod(_ceil_div(model.sizes.get(a, n), n) for a, n in inner.stream.items())
        serial = pingpong_compute(compute, chunks * _ceil_div(grid, hw.limits.sms))
    return KernelTiming(
        tuple(transfers), compute, int(grid), per_sm, int(waves), total, padding,
        hw.launch_s * len(c.launches) if c is not None else 0.0, serial,
    )  # fmt: skip


def _causal_balance(
    model: KernelModel, inner: Partition, grid: int, slots: int, c: Candidate
) -> float:
    """`causal_imbalance` for a causal kernel's block tile; the blocks over the other woven
    axes (batch, heads) are grid / (query tiles x splits). A candidate that splits the keys
    (param `keys_per_split`) gives each split its own range of chunks."""
    assert model.mask is not None
    query, key, lo, hi = model.mask
    queries, keys = model.sizes[query], model.sizes[key]
    g_q = inner.group.get(query, queries)
    s_x = inner.stream.get(key, keys)
    tiles = -(-queries // g_q)
    split_chunks = dict(c.params).get("keys_per_split", 0) // s_x if c.splits > 1 else 0
    batches = max(1, grid // (tiles * c.splits))
    if model.ragged:  # never split (attention_splitk)
        r = model.ragged
        return ragged_imbalance(queries, keys, g_q, s_x, lo, hi, r.rows, r.packed, batches, slots)
    return band_imbalance(queries, keys, g_q, s_x, lo, hi, batches, slots, True, split_chunks)


def _reread(model: KernelModel, rereads: tuple[tuple[str, int], ...]) -> tuple[int, int]:
    """(values, bytes) of the extra whole reads of inputs that a candidate declares."""
    d = model.diagram
    values = sum(d.size(d.tensor(name)) * times for name, times in rereads)
    nbytes = sum(
        d.size(d.tensor(name)) * times * DTYPE_BYTES[d.tensor(name).dtype]
        for name, times in rereads
    )
    return values, nbytes


def evaluate_kernel(
    model: KernelModel,
    family: Family,
    hw: Hardware,
    choice: TileChoice,
    mix: LoopMix | None = None,
) -> KernelPlan:
    """The cost of `model`'s kernel run with `choice` on `hw` (napkin-model.md 3-7); the
    main loop's issue slots are `mix` (from the SASS), else the family's estimate."""
    if mix is None:
        mix = kernel_mix(model, family, hw, choice)
    timing = time_kernel(model, hw, choice, mix=mix)
    c = choice.candidate
    level_costs = [_top_level(model, hw)]
    for level in hw.levels[1:]:
        part = choice.partitions[level.name]
        if c and level.name == hw.block_level:
            values, nbytes = model.resident(part.group, part.stream, c.stages, True)
        elif c and level.name == hw.register_level:
            values = c.threads * min(c.registers, MAX_REGISTERS)
            nbytes = values * 4
        else:
            values, nbytes = model.resident(part.group, part.stream)
        level_costs.append(LevelCost(level.name, level.capacity_bytes, int(values), int(nbytes)))
    compute = timing.compute
    # the compute units' time as the kernel's structure overlaps them (overlap_compute)
    compute_time = max(timing.serial_s, max(compute.values(), default=0.0))
    unit = max(compute, key=lambda u: compute[u]) if compute else "tensor"
    if compute and timing.serial_s > compute[unit]:
        unit = "tensor"
    candidates = timing.times
    bound = max(candidates, key=lambda k: candidates[k]) if candidates else unit
    if candidates and timing.serial_s > candidates[bound]:
        bound = "tensor"  # the MMAs and the softmax they serialise with (overlap_compute)
    return KernelPlan(
        kernel=model.kernel,
        family=family,
        tiles=dict(choice.partitions),
        block_tile=dict(choice.block_tile),
        warps=choice.warps,
        stages=choice.stages,
        grid=timing.grid,
        blocks_per_sm=timing.blocks_per_sm,
        registers_per_thread=min(c.registers, MAX_REGISTERS) if c else 0,
        smem_bytes=c.smem_bytes if c else 0,
        flops=timing.flops,
        levels=tuple(level_costs),
        transfers=timing.transfers,
        compute_time_s=compute_time,
        predicted_time_s=timing.predicted_time_s,
        predicted_time_no_overlap_s=timing.launch_s + sum(candidates.values()),
        bound=bound,
        compute=compute,
        splits=choice.splits,
        waves=timing.waves,
        unit=unit,
        candidate=c,
        instructions=mix if c is not None else None,
    )


def kernel_mix(
    model: KernelModel, family: Family, hw: Hardware, choice: TileChoice
) -> LoopMix | None:
    """The family's estimate of the main loop's issue slots for `choice`'s candidate
    (ncdc.model.issue.estimate_mix), None on an abstract machine or without one."""
    c = choice.candidate
    if c is None:
        return None
    dtype = next((d for (unit, d) in model.flops_by_unit if unit == "tensor"), "")
    return estimate_mix(family, c, model.sizes, dtype, hw, model)


def _top_level(model: KernelModel, hw: Hardware) -> LevelCost:
    top = hw.levels[0]
    return LevelCost(top.name, top.capacity_bytes, model.top_values, model.top_bytes)


def _padding(model: KernelModel, g: Mapping[str, int], s: Mapping[str, int]) -> float:
    """Work done over useful work: every woven axis runs in whole groups and every
    streamed axis in whole chunks (a tail is computed padded)."""
    f = 1.0
    for a in model.kernel.woven:
        size = model.sizes[a]
        f *= -(-size // g[a]) * g[a] / size
    for a, chunk in s.items():
        size = model.sizes.get(a, chunk)
        f *= -(-size // chunk) * chunk / size
    return f


def _rate(hw: Hardware, unit: str, kind: str, c: Candidate | None = None) -> float:
    """The rate of `unit` for `kind`; a tensor type the GPU lacks (fp8 on an A100) runs at
    its 16-bit rate, as the inputs are widened. A candidate whose family prices its own
    tensor instruction (param `tensor_permille`: wgmma on Hopper) runs at that share of
    the peak instead of the mma.sync share; one with param `cuda_cores` at the fp32 CUDA-core
    rate."""
    rates = hw.rates.get(unit, {})
    if unit == "tensor" and c is not None and dict(c.params).get("cuda_cores"):
        # a family that runs its contraction as fp32 FMAs on CUDA cores (GEMV)
        return hw.achieved_rate("cuda", "fp32")
    own = dict(c.params).get("tensor_permille", 0) if c is not None else 0
    if unit == "tensor" and own and kind in rates:
        return hw.achieved_rate(unit, kind) * own / 1000
    if unit == "tensor":
        # ncdc's kernels issue mma.sync, which reaches only part of Hopper's peak.
        if kind.startswith("fp8") and hw.mma_sync_share < 1 and "fp16" in rates:
            # Hopper has no fp8 mma.sync: ptxas emits two fp16 HMMAs (and FADDs) for each
            # m16n8k32, so fp8 runs at the fp16 mma.sync rate, not a share of the fp8 peak.
            kind = "fp16"
        kind = next((k for k in (kind, "bf16", "fp16") if k in rates), "")
        if not kind:
            return hw.achieved_rate("cuda", "fp32")
        return hw.achieved_rate(unit, kind) * hw.mma_sync_share
    if kind in rates:
        return hw.achieved_rate(unit, kind)
    return hw.achieved_rate(unit, next(iter(rates)))


def summarize(
    graph: MemoryGraph, kernels: tuple[KernelPlan, ...], unfused: Unfused | None = None
) -> Plan:
    """Totals over kernels: transfers per boundary summed, times summed kernel by kernel."""
    transfers: list[Transfer] = list(kernels[0].transfers)
    for k in kernels[1:]:
        transfers = [a.plus(b) for a, b in zip(transfers, k.transfers, strict=True)]
    predicted = sum(k.predicted_time_s for k in kernels)
    # the bound of the whole: the resource with the most time summed over kernels
    totals: dict[str, float] = {}
    for k in kernels:
        for unit, t in k.compute.items():
            totals[unit] = totals.get(unit, 0.0) + t
        if k.unit in k.compute:  # what the softmax serialised with the MMAs adds
            totals[k.unit] += max(0.0, k.compute_time_s - k.compute[k.unit])
        for tr in k.transfers:
            totals[tr.upper] = totals.get(tr.upper, 0.0) + tr.time_s
    bound = max(totals, key=lambda r: totals[r])
    return Plan(
        graph=graph,
        kernels=kernels,
        flops=sum(k.flops for k in kernels),
        transfers=tuple(transfers),
        compute_time_s=sum(k.compute_time_s for k in kernels),
        predicted_time_s=predicted,
        predicted_time_no_overlap_s=sum(k.predicted_time_no_overlap_s for k in kernels),
        bound=bound,
        unfused=unfused,
    )


# ---------------------------------------------------------------------------------- JSON


def dominant_rate(plan: Plan) -> float:
    """FLOP/s of the unit doing most of the plan's FLOPs (the ridge point's numerator)."""
    hw = plan.graph.hardware
    best: tuple[float, float] = (0.0, hw.rate("cuda", "fp32"))
    for k in plan.kernels:
        model_flops = _kernel_flops(plan.graph.diagram, k.kernel)
        for (unit, kind), n in model_flops.items():
            if unit != "sfu" and n > best[0]:
                best = (n, _rate(hw, unit, kind, k.candidate))
    return best[1]


def _kernel_flops(diagram: Diagram, kernel: Kernel) -> dict[tuple[str, str], float]:
    return _flops(diagram, kernel)


def intensity(plan: Plan) -> float:
    """FLOPs per byte moved at the top level."""
    return plan.flops / plan.top_bytes if plan.top_bytes else math.inf


def ridge(plan: Plan) -> float:
    """FLOPs per top-level byte above which compute, not the top level, bounds."""
    hw = plan.graph.hardware
    return dominant_rate(plan) / hw.achieved_bandwidth(hw.levels[0].name)


def _cost_fields(x: Plan | KernelPlan, tiles: Mapping[str, int]) -> dict[str, Any]:
    return {
        "flops": x.flops,
        "tiles": dict(tiles),
        "levels": [
            {
                "name": lv.level,
                "capacity_bytes": lv.capacity_bytes,
                "resident_values": lv.resident_values,
                "resident_bytes": lv.resident_bytes,
            }
            for lv in (x.levels if isinstance(x, KernelPlan) else _plan_levels(x))
        ],
        "transfers": [
            {
                "upper": t.upper,
                "lower": t.lower,
                "values": t.values,
                "bytes": t.bytes,
                "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
                "time_s": t.time_s,
            }
            for t in x.transfers
        ],
        "compute_time_s": x.compute_time_s,
        "predicted_time_s": x.predicted_time_s,
        "predicted_time_no_overlap_s": x.predicted_time_no_overlap_s,
        "bound": x.bound,
        "bound_kind": x.bound_kind,
    }


def _plan_levels(plan: Plan) -> list[LevelCost]:
    """Per level, the largest residency of any kernel."""
    out = []
    for i, lv in enumerate(plan.kernels[0].levels):
        worst = max((k.levels[i] for k in plan.kernels), key=lambda c: c.resident_bytes)
        out.append(
            LevelCost(lv.level, lv.capacity_bytes, worst.resident_values, worst.resident_bytes)
        )
    return out


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as versioned, JSON-ready data (`ncdc cost --format json`); every field is
    described in docs/cost-model.md."""
    d = plan.graph.diagram
    out: dict[str, Any] = {
        "format": FORMAT,
        "spec": d.name,
        "source": d.source,
        "hardware": plan.graph.hardware.name,
        "axes": dict(d.axes),
        **_cost_fields(plan, plan.tiles),
        "intensity_flop_per_byte": intensity(plan),
        "ridge_flop_per_byte": ridge(plan),
    }
    if plan.bound != plan.graph.hardware.levels[0].name:
        out["achieved_tflops"] = plan.flops / plan.predicted_time_s / 1e12
    else:
        out["achieved_tbps"] = plan.top_bytes / plan.predicted_time_s / 1e12
    out["kernels"] = [
        {
            "name": k.kernel.name,
            "family": k.family.name,
            "roles": {r: list(a) for r, a in k.family.roles.items()},
            **_cost_fields(k, k.block_tile),
            "partitions": {
                lv: {"group": dict(p.group), "stream": dict(p.stream)} for lv, p in k.tiles.items()
            },
            "warps": k.warps,
            "stages": k.stages,
            "splits": k.splits,
            "grid": k.grid,
            "waves": k.waves,
            "blocks_per_sm": k.blocks_per_sm,
            "registers_per_thread": k.registers_per_thread,
            "smem_bytes": k.smem_bytes,
            "launches": [
                {"grid": list(s.grid), "block": list(s.block), "dynamic_smem_bytes": s.dynamic_smem}
                for s in (k.candidate.launches if k.candidate else ())
            ],
            "instructions": k.instructions.to_dict() if k.instructions else None,
        }
        for k in plan.kernels
    ]
    if plan.breaks:
        out["breaks"] = [
            {
                "saved": list(b.saved),
                "hbm_bytes": b.top_bytes,
                "predicted_time_s": b.predicted_time_s,
                "least_time_s": b.least_time_s,
                "problem": b.problem,
                "chosen": b.chosen,
            }
            for b in plan.breaks
        ]
    if plan.unfused is not None:
        out["unfused"] = {
            "hbm_bytes": plan.unfused.top_bytes,
            "predicted_time_s": plan.unfused.predicted_time_s,
            "ratio": plan.unfused.ratio,
        }
    return out
