"""What a kernel family proposes and the cost model prices: one candidate, its whole launch.

A `Candidate` is decided once, by its family, and then only read: the tile search prices
exactly its grid, threads, shared memory, stages, splits and register budget, and the
renderer formats exactly its template parameters and launches. Nothing downstream derives
a launch again, as in Triton, where one `Config` is both what the perf model scores and
what launches.

    >>> c = Candidate(
    ...     group={"m": 128, "n": 128}, stream={"k": 32},
    ...     warp_group={"m": 64, "n": 32}, warp_stream={"k": 16},
    ...     params=(("bm", 128), ("bn", 128), ("bk", 32)),
    ...     launches=(LaunchShape((32, 32, 1), (256, 1, 1), 40960),),
    ...     stages=2, registers=128)
    >>> c.threads, c.warps, c.grid, c.smem_bytes, c.param("bk")
    (256, 8, 1024, 40960, 32)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_GRID_X = 2**31 - 1  # CUDA's grid limits (every architecture ncdc targets)
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class Family:
    """A kernel's family as the model sees it: its name and the role of each axis
    (role -> axes, in the kernel's order), and the candidate tile lists it searches."""

    name: str  # a key of ncdc.families.FAMILIES
    roles: Mapping[str, tuple[str, ...]] = field(hash=False)
    tiles: Mapping[str, tuple[int, ...]] = field(hash=False, default_factory=dict)

    def axes(self, role: str) -> tuple[str, ...]:
        return self.roles.get(role, ())


@dataclass(frozen=True)
class LaunchShape:
    """One kernel launch: grid and block dimensions and dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int = 0

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    def problem(self) -> str:
        """Why CUDA would refuse this launch, or "" when it is legal."""
        x, y, z = self.grid
        if x > MAX_GRID_X or y > MAX_GRID_YZ or z > MAX_GRID_YZ:
            return f"grid {x} x {y} x {z} exceeds CUDA's {MAX_GRID_X} x {MAX_GRID_YZ} x 65535"
        return ""


@dataclass(frozen=True)
class Candidate:
    """One way to run a kernel, decided by its family: the tile per level and the launch.

    `group` and `stream` are the sizes one thread block works on (the block level's
    partition), `warp_group` and `warp_stream` those of one warp (the register level's).
    `params` are the template's compile-time parameters, `launches` every launch in the
    order they run (the first does the kernel's work; a second may merge split partials).
    `registers` is the per-thread budget the family estimates, replaced by ptxas's count
    once the kernel is compiled (ncdc.backends.compile). `rereads` names inputs the kernel reads
    from global memory more than once, with how many extra whole reads (a row too long to
    hold is read once for its statistics and again for its output); the model counts them,
    and of them `l2_rereads`, the reads the L2 serves (a slice's tiles that the blocks
    running together share), at every boundary but the device memory's.
    `cluster` names, per axis, the blocks of a thread-block cluster stacked along it: they
    load the operands that axis does not index once for all of them (TMA multicast), so the
    model counts the L2 -> shared-memory traffic of their joint tile.

    The rest are what the model needs to know of the kernel's structure, stated by its
    family (the model reads no template parameter): `tensor_share`, the share of the tensor
    peak its MMA instruction sustains (0: the profile's mma.sync share; wgmma kernels state
    their own); `cuda_cores`, its contraction runs as fp32 FMAs on CUDA cores (GEMV);
    `pingpong`, two consumer warpgroups take turns at the tensor pipe, one's softmax under
    the other's MMAs (FlashAttention-3 order); `split_size`, the length of the streamed axis
    each split covers (split-key kernels); `raster_group`, tile rows a run of consecutive
    blocks walks before the next column (a GEMM's grouped order, for L2 reuse; 0: row order);
    `accumulates`, outputs the blocks add into with fp32 atomics, with how many adds each
    value takes on average (attention's fused backward: dQ, once per key tile; a
    scatter-add: the values it adds over the values of its result), written from that
    fp32 workspace by the kernel's last launch; `recomputes`, operations (by their result)
    a later launch computes again, with the share of their work it does (attention's
    backward with dQ in a second pass, query-major: S and dP again, over the band's pairs);
    `unstaged`, the inputs (or gathers, by result) the kernel reads from memory straight
    into registers, which hold no shared memory (attention's Q and K computed as they
    load read their inputs so); `in_flight`, the bytes of global loads one warp issues
    before it uses the first (0: enough to hide memory latency with the warps resident, as
    the tile families' 16-byte copies have), which with the resident warps bound the rate
    the device's memory can reach (Little's law: `overlap.in_flight_efficiency`);
    `rule_tiles`, inside a mask's band the kernel skips the key tiles a mask rule drops for
    every query of the block (FlashAttention-3 order: `KernelModel.mask_fraction`);
    `fragment_rereads`, inputs the warps read again from shared memory into registers, with
    how many extra whole reads (FlashAttention-2 order with Q's fragments too large for the
    registers reads the Q tile at every key chunk), counted at the register boundary only.
    """

    group: Mapping[str, int] = field(hash=False)
    stream: Mapping[str, int] = field(hash=False)
    warp_group: Mapping[str, int] = field(hash=False)
    warp_stream: Mapping[str, int] = field(hash=False)
    params: tuple[tuple[str, int], ...]
    launches: tuple[LaunchShape, ...]
    stages: int = 1
    splits: int = 1  # blocks sharing one group's streamed axis, merged after
    registers: int = 0
    rereads: tuple[tuple[str, int], ...] = ()
    l2_rereads: tuple[tuple[str, int], ...] = ()
    cluster: tuple[tuple[str, int], ...] = ()
    tensor_share: float = 0.0
    cuda_cores: bool = False
    pingpong: bool = False
    split_size: int = 0
    raster_group: int = 0
    accumulates: tuple[tuple[str, float], ...] = ()
    recomputes: tuple[tuple[str, float], ...] = ()
    unstaged: tuple[str, ...] = ()
    in_flight: int = 0
    rule_tiles: bool = False
    fragment_rereads: tuple[tuple[str, int], ...] = ()

    @property
    def main(self) -> LaunchShape:
        return self.launches[0]

    @property
    def threads(self) -> int:
        return self.main.threads

    @property
    def warps(self) -> int:
        return max(self.main.threads // 32, 1)

    @property
    def grid(self) -> int:
        return self.main.blocks

    @property
    def smem_bytes(self) -> int:
        return self.main.dynamic_smem

    def param(self, name: str) -> int:
        """A template parameter; KeyError names the ones this candidate has."""
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(f"{name} (the candidate has {', '.join(k for k, _ in self.params)})")

    def with_registers(self, registers: int) -> Candidate:
        """The same candidate with the compiler's register count."""
        return dataclasses.replace(self, registers=registers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; `candidate_from_dict` reads it back (tuning entries store this)."""
        return {
            "group": dict(self.group),
            "stream": dict(self.stream),
            "warp_group": dict(self.warp_group),
            "warp_stream": dict(self.warp_stream),
            "params": dict(self.params),
            "launches": [
                {"grid": list(s.grid), "block": list(s.block), "dynamic_smem": s.dynamic_smem}
                for s in self.launches
            ],
            "stages": self.stages,
            "splits": self.splits,
            "registers": self.registers,
            "rereads": dict(self.rereads),
            "l2_rereads": dict(self.l2_rereads),
            "cluster": dict(self.cluster),
            "tensor_share": self.tensor_share,
            "cuda_cores": self.cuda_cores,
            "pingpong": self.pingpong,
            "split_size": self.split_size,
            "raster_group": self.raster_group,
            "accumulates": dict(self.accumulates),
            "recomputes": dict(self.recomputes),
            "unstaged": list(self.unstaged),
            "in_flight": self.in_flight,
            "rule_tiles": self.rule_tiles,
            "fragment_rereads": dict(self.fragment_rereads),
        }


def candidate_from_dict(data: Mapping[str, Any]) -> Candidate:
    """The inverse of `Candidate.to_dict`; KeyError, TypeError or ValueError when malformed."""

    def sizes(key: str) -> dict[str, int]:
        return {str(a): int(v) for a, v in data[key].items()}

    def dims(values: Any) -> tuple[int, int, int]:
        x, y, z = (int(v) for v in values)
        return x, y, z

    launches = tuple(
        LaunchShape(dims(s["grid"]), dims(s["block"]), int(s["dynamic_smem"]))
        for s in data["launches"]
    )
    if not launches:
        raise ValueError("a candidate needs a launch")
    return Candidate(
        sizes("group"), sizes("stream"), sizes("warp_group"), sizes("warp_stream"),
        tuple((str(k), int(v)) for k, v in data["params"].items()), launches,
        int(data["stages"]), int(data["splits"]), int(data["registers"]),
        tuple((str(k), int(v)) for k, v in data.get("rereads", {}).items()),
        tuple((str(k), int(v)) for k, v in data.get("l2_rereads", {}).items()),
        tuple((str(k), int(v)) for k, v in data.get("cluster", {}).items()),
        float(data.get("tensor_share", 0.0)), bool(data.get("cuda_cores", False)),
        bool(data.get("pingpong", False)), int(data.get("split_size", 0)),
        int(data.get("raster_group", 0)),
        tuple((str(k), float(v)) for k, v in data.get("accumulates", {}).items()),
        tuple((str(k), float(v)) for k, v in data.get("recomputes", {}).items()),
        tuple(str(n) for n in data.get("unstaged", [])),
        int(data.get("in_flight", 0)), bool(data.get("rule_tiles", False)),
        tuple((str(k), int(v)) for k, v in data.get("fragment_rereads", {}).items()),
    )  # fmt: skip
