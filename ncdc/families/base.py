"""The protocol every kernel family follows, and what a family hands the renderer.

A family is one module under `ncdc/families/` with one template and one device header. It
classifies a kernel of the memory graph from its structure, lists the candidates its
template can run (each with its whole launch, `ncdc.model.launch.Candidate`), renders the one the
model picked by formatting it, and names its GPU baseline, the axes its tile map draws and
the architectures it needs. `ncdc/families/__init__.py` holds the one registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ncdc.hardware.arch import TensorCoreSum, TiledSoftmax
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.language.diagram import Diagram
    from ncdc.model.graph import Kernel
    from ncdc.model.issue import LoopMix
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

SCALAR_KINDS = ("int32", "int64", "float32")
VECTOR_BYTES = 16  # one global load or store instruction's widest access


@dataclass(frozen=True)
class TensorMapSpec:
    """The arguments of cuTensorMapEncodeTiled for one buffer (tile mode, no interleave, no
    L2 promotion, zero out-of-bounds fill), innermost dimension first."""

    tensor: str  # the buffer it maps: the name of a "tensor" Param of the same launch
    dtype: str  # ncdc dtype
    dims: tuple[int, ...]  # elements per dimension
    strides: tuple[int, ...]  # bytes between consecutive indices of dimensions 1..rank-1
    box: tuple[int, ...]  # the box one copy moves, elements per dimension
    swizzle: int  # bytes of the shared-memory swizzle span: 0 (none), 32, 64 or 128
    # Per dimension, the diagram axes whose sizes multiply to it (dims and strides follow
    # the sizes; the box and swizzle are the tiles'): what a launcher at other sizes would
    # encode again. Empty where unknown.
    axes: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Param:
    """One kernel parameter, in order: a buffer (by pointer), a scalar (by value), or a
    tensor map (`kind` "tensormap", 128 bytes by value, encoded per launch from `tensor_map`)."""

    name: str  # the C++ parameter name: a validated spec identifier or a fixed name
    kind: str  # "tensor" (a diagram tensor), "workspace", "tensormap", or a SCALAR_KINDS entry
    dtype: str = ""  # ncdc dtype of a buffer
    value: int | float | None = None  # the value passed for a scalar
    writes: bool = False  # the kernel writes this buffer
    tensor_map: TensorMapSpec | None = None


@dataclass(frozen=True)
class Workspace:
    """Scratch memory a kernel needs besides the diagram's tensors (split-k partials, an
    index status word); `zeroed`: filled with zeros before the launches (else unset)."""

    name: str
    dtype: str
    values: int
    zeroed: bool = False


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its extern "C" name, shape, dynamic shared memory, parameters.

    `entry_registers` is, for a kernel whose warpgroups re-budget their registers with
    setmaxnreg, the per-thread count its budgets assume the kernel starts with: the block's
    pool is that count times its threads, and a budget the pool cannot cover waits forever
    (PTX ISA, setmaxnreg). ptxas must give exactly that count (ncdc.backends.compile checks
    it) and the CPU emulator enforces the pool with it; 0 for a kernel without setmaxnreg.
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    params: tuple[Param, ...]
    # thread-block cluster dimensions, fixed in the kernel at compile time
    # (__cluster_dims__): a plain launch forms the clusters; the grid is a multiple of them
    cluster: tuple[int, int, int] = (1, 1, 1)
    entry_registers: int = 0

    @staticmethod
    def of(
        kernel: str, shape: LaunchShape, params: Sequence[Param],
        cluster: tuple[int, int, int] = (1, 1, 1), entry_registers: int = 0,
    ) -> Launch:  # fmt: skip
        """The launch of a candidate's `shape`, named and with its parameters."""
        return Launch(
            kernel, shape.grid, shape.block, shape.dynamic_smem, tuple(params), cluster,
            entry_registers,
        )  # fmt: skip

    @property
    def shape(self) -> LaunchShape:
        return LaunchShape(self.grid, self.block, self.dynamic_smem)


@dataclass(frozen=True)
class KernelSource:
    """What a family's `render` returns for one kernel of the graph."""

    template: str  # file name under templates/, e.g. "gemm.cu.j2"
    context: Mapping[str, Any]  # the values the template substitutes
    launches: tuple[Launch, ...]  # in the order they run
    workspace: tuple[Workspace, ...] = ()
    # the contractions (by result) the kernel sums on tensor cores that do not keep an fp32
    # sum (Hopper's fp8 wgmma), and how they sum: what the reference must do to compare
    sums: tuple[tuple[str, TensorCoreSum], ...] = ()
    # the softmaxes (by result) the kernel rounds, tile by tile, for the product after them
    # (an fp8 P): what the reference must do to compare
    softmaxes: tuple[tuple[str, TiledSoftmax], ...] = ()


class KernelFamily(Protocol):
    """One kernel family. `name` is its registry key; `tiles` the candidate lists its
    search draws from (data, so that a tile map can show them); `baseline` the kind of
    library kernel `ncdc bench` times beside it: "gemm", "attention", "rowwise" or ""."""

    name: str
    tiles: Mapping[str, tuple[int, ...]]
    baseline: str

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        """The family with each axis's role when `kernel` is one of this family's, else None."""

    def candidates(
        self,
        model: KernelModel,
        family: Family,
        hw: Hardware,
        streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:
        """Every launch the template can run for this kernel, with tiles `fixed` where the
        user fixed them. The search keeps those that fit `hw` and ranks them by the model.
        Raises PlanError for what the template cannot build at all."""

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        """The template context and launches of `kp.candidate`: formatting only."""

    def loop_mix(
        self, model: KernelModel, family: Family, c: Candidate, hw: Hardware
    ) -> LoopMix | None:
        """What `c`'s template issues per warp and main-loop iteration, by instruction class,
        from its structure (the model's issue-slot term); None for a loop it does not model."""

    def masked_share(self, kp: KernelPlan, axes: Mapping[str, int]) -> float:
        """The share of the main loop's iterations that run its masked copy (a second loop
        in the SASS, ncdc.backends.sass.main_loops), at the diagram's `axes`; 0 for none."""

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        """(axis, candidate sizes) of the one or two tiles that matter most, for tile maps."""

    def arch_problem(self, diagram: Diagram, kp: KernelPlan, sm: int) -> str:
        """Why compute capability `sm` (80, 89, 90...) cannot run `kp`, or ""."""


# ------------------------------------------------------------------- search helpers


def round_up(x: int, to: int) -> int:
    return ceil_div(x, to) * to


def pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(x - 1, 0).bit_length()


def options(axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int]) -> list[int]:
    """Candidate sizes for `axis`: the fixed one, else each default clamped to the axis."""
    if axis in fixed:
        return [fixed[axis]]
    return sorted({min(c, size) for c in defaults})


def rounded_options(
    axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int], least: int
) -> list[int]:
    """Candidate tiles for an axis the kernel tiles in powers of two of at least `least`
    (an mma tile): each default clamped to the axis rounded up so, so that a small or odd
    axis still gets the smallest legal tile; its padding is counted by the cost model."""
    if axis in fixed:
        return [fixed[axis]]
    return sorted({min(c, max(least, pow2(size))) for c in defaults})


def ones(axes: tuple[str, ...], fixed: Mapping[str, int]) -> dict[str, int]:
    """Group size 1 along each axis (one slice per block), or the size the user fixed."""
    return {a: fixed.get(a, 1) for a in axes}


def block_share(axes: tuple[str, ...], sizes: Mapping[str, int], units: int) -> dict[str, int]:
    """A block's share of `axes` when it takes `units` consecutive positions of them
    together (rows of a row-wise walk, columns side by side), filled from the innermost
    axis out.

        >>> block_share(("b", "s", "h"), {"b": 2, "s": 7, "h": 3}, 8)
        {'h': 3, 's': 2, 'b': 1}
    """
    group = {}
    for a in reversed(axes):
        group[a] = min(sizes[a], units)
        units = units // group[a] if group[a] == sizes[a] else 1
    return group


def permille(share: float) -> float:
    """A share of a peak as a candidate states it: whole thousandths, at least one.

    >>> permille(0.83456), permille(0.0)
    (0.835, 0.001)
    """
    return max(1, round(1000 * share)) / 1000


def no_arch_problem(diagram: Diagram, kp: KernelPlan, sm: int) -> str:
    """`arch_problem` of a family that runs on every architecture ncdc targets."""
    return ""


def no_loop_mix(model: KernelModel, family: Family, c: Candidate, hw: Hardware) -> LoopMix | None:
    """`loop_mix` of a family whose loop has no tensor work (row-wise, elementwise): its
    instructions hide under its memory traffic, which the model prices."""
    return None


def no_masked_loop(kp: KernelPlan, axes: Mapping[str, int]) -> float:
    """`masked_share` of a family whose kernels have one main loop."""
    return 0.0
