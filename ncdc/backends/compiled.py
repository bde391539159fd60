"""What `ncdc run DIR/<name>.cu` trusts of the `.json` beside it, checked before anything is
allocated or launched: an edited file must not make a run hang (a grid of 2^61 blocks) or
exhaust memory, so its sizes, grids, blocks, shared memory and workspace are held to the
limits of a launch, and each kernel to no more blocks than the diagram has values (every
kernel ncdc renders gives each block at least one).

    >>> checked_sizes({"m": 64}, "k.json")
    {'m': 64}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ncdc.errors import UsageError
from ncdc.language.diagram import MAX_AXIS_SIZE, Diagram
from ncdc.model.launch import MAX_GRID_X, MAX_GRID_YZ
from ncdc.render import Launch, Workspace

# CUDA's limits on a block on every architecture ncdc targets (CUDA C++ Programming Guide,
# "Features and Technical Specifications"): 1024 threads, 1024 in x and y, 64 in z; and the
# largest opt-in dynamic shared memory of any of them (sm_90, 227 KiB).
MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_DYNAMIC_SMEM = 227 << 10

_HINT = "compile the spec again with ncdc compile"


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _within(value: Any, top: int) -> bool:
    return _whole(value, 1, top)


def checked_sizes(axes: Any, where: str) -> dict[str, int]:
    """The `.json`'s axis sizes, each a whole number from 1 to MAX_AXIS_SIZE."""
    if not isinstance(axes, dict) or not all(
        isinstance(a, str) and _whole(n, 1, MAX_AXIS_SIZE) for a, n in axes.items()
    ):
        raise UsageError(
            f"expected axis sizes from 1 to {MAX_AXIS_SIZE}, found {str(axes)[:60]}",
            where=f"{where}: axes", hint=_HINT,
        )  # fmt: skip
    return dict(axes)


def check_launches(
    diagram: Diagram, launches: Sequence[Launch], workspace: Sequence[Workspace], where: str
) -> None:
    """Refuse (exit 2) a launch outside CUDA's limits or larger than the diagram, and a
    workspace that no split of the diagram needs."""
    values = max(diagram.size(t) for t in diagram.tensors)
    for launch in launches:
        problem = _launch_problem(launch, values)
        if problem:
            raise UsageError(f"kernel {launch.kernel}: {problem}", where=where, hint=_HINT)
    for w in workspace:
        if not _whole(w.values, 0, values * MAX_GRID_YZ):
            raise UsageError(
                f"workspace {w.name} of {w.values} values is more than any split of this "
                "diagram needs", where=where, hint=_HINT,
            )  # fmt: skip


def _launch_problem(launch: Launch, values: int) -> str:
    grid, block = launch.grid, launch.block
    grid_top = (MAX_GRID_X, MAX_GRID_YZ, MAX_GRID_YZ)
    if len(grid) != 3 or not all(map(_within, grid, grid_top)):
        return f"grid {list(grid)} is outside CUDA's limits ({list(grid_top)})"
    if len(block) != 3 or not all(map(_within, block, MAX_BLOCK)):
        return f"block {list(block)} is outside CUDA's limits ({list(MAX_BLOCK)})"
    if math.prod(block) > MAX_BLOCK_THREADS:
        return f"block of {math.prod(block)} threads; CUDA allows {MAX_BLOCK_THREADS}"
    if not _whole(launch.dynamic_smem, 0, MAX_DYNAMIC_SMEM):
        return f"{launch.dynamic_smem} B of dynamic shared memory (at most {MAX_DYNAMIC_SMEM})"
    if math.prod(grid) > values:
        return f"grid of {math.prod(grid)} blocks for a diagram of {values} values"
    return ""
