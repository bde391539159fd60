"""The model's values: what a kernel and a diagram cost, level by level, as frozen records.

A `KernelPlan` is one kernel priced with one tile choice (its candidate launch on a GPU);
a `Plan` is a diagram's kernels and their totals. `Transfer` is the traffic across one
level boundary and `LevelCost` the residency at one level. Nothing here computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ncdc.model.graph import Kernel, MemoryGraph, Partition
from ncdc.model.issue import LoopMix
from ncdc.model.launch import Candidate, Family


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
    launch_s: float = 0.0  # of predicted_time_s: from each launch to its first block running
    fill_s: float = 0.0  # of predicted_time_s: the pipeline fills no other work hides

    @property
    def bound_kind(self) -> str:
        return "memory" if self.bound in [t.upper for t in self.transfers] else "compute"

    @property
    def kernel_time_s(self) -> float:
        """The kernel's own duration, as a profiler or a CUDA-graph replay times it: the
        predicted call time less its launch latency."""
        return self.predicted_time_s - self.launch_s


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
    # candidates the compiler refuted and what replaced them (ncdc.plan.feedback.settle)
    notes: tuple[str, ...] = ()
    launch_s: float = 0.0  # of predicted_time_s: the kernels' launch latencies
    fill_s: float = 0.0  # of predicted_time_s: the kernels' exposed pipeline fills

    @property
    def kernel_time_s(self) -> float:
        """The kernels' own durations summed (back to back, as a CUDA-graph replay runs
        them): the predicted call time, `predicted_time_s`, less the launch latencies."""
        return self.predicted_time_s - self.launch_s

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
