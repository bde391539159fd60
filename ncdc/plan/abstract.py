"""The search on an abstract machine (the paper's two-level napkin machine, or `--abstract`):
every power of two of every woven and streamed axis, vectorised with NumPy, or a finer
geometric ladder of sizes for a continuous optimum.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.hardware.machine import Hardware
from ncdc.model.graph import Partition
from ncdc.model.structure import KernelModel
from ncdc.model.values import TileChoice

if TYPE_CHECKING:
    import numpy as np

STEP_EXACT = 32  # a continuous search tries every size up to this


STEPS_PER_OCTAVE = 16  # and then this many a doubling


def _powers(size: int) -> list[int]:
    out = [1 << i for i in range(size.bit_length()) if 1 << i < size]
    return out + [size]


def _steps(size: int) -> list[int]:
    """Sizes a continuous search tries along an axis of `size`: every whole number up to
    STEP_EXACT, then a geometric ladder of STEPS_PER_OCTAVE a doubling (each within 2^(1/16)
    = 4.4% of the next), and the size itself.

        >>> _steps(40)[:5], _steps(40)[-3:]
        ([1, 2, 3, 4, 5], [36, 38, 40])
    """
    out = set(range(1, min(size, STEP_EXACT) + 1)) | {size}
    i = 0
    while (v := round(STEP_EXACT * 2 ** (i / STEPS_PER_OCTAVE))) < size:
        out.add(v)
        i += 1
    return sorted(out)


def abstract_choices(
    model: KernelModel,
    hw: Hardware,
    streams: tuple[str, ...],
    fixed: Mapping[str, int],
    top_k: int,
    continuous: bool = False,
) -> list[TileChoice]:
    """Every power of two per woven and streamed axis (`continuous`: every `_steps` size),
    at every level below the top, evaluated at once; the `top_k` that fit, by time then
    bytes then size."""
    import numpy as np  # only this search is vectorised

    kernel = model.kernel
    group_only = model.diagram.schedule.group
    axes = list(kernel.woven) + list(streams)
    options = []
    for a in axes:
        size = model.sizes[a]
        whole = a in kernel.rows or (group_only and a in kernel.woven and a not in group_only)
        ladder = _steps(size) if continuous else _powers(size)
        options.append([fixed[a]] if a in fixed else [size] if whole else ladder)
    # One axis of the grid per tiled axis, broadcast against each other: the model's
    # arithmetic then runs on whole grids of candidates at once.
    grids = np.meshgrid(*[np.array(o, dtype=np.int64) for o in options], indexing="ij", sparse=True)
    shape = tuple(len(o) for o in options)
    sizes = dict(zip(axes, grids, strict=True))
    g = {a: sizes[a] for a in kernel.woven}
    s = {a: sizes[a] for a in streams}
    volume = np.ones(shape)
    for grid in grids:
        volume = volume * grid
    volume = volume.ravel()
    per_level = []
    slowest = max((n / hw.rate(u, k) for (u, k), n in model.flops_by_unit.items()), default=0)
    compute_s = np.full(volume.shape, slowest)
    if model.mask:  # a causal mask skips key chunks: work over the keys depends on the tile
        compute_s = np.broadcast_to(_abstract_compute(model, hw, g, s), shape).ravel()
    for upper, lower in zip(hw.levels, hw.levels[1:], strict=False):
        _, nbytes = model.transfer(g, s)
        _, resident = model.resident(g, s)
        nbytes = np.broadcast_to(nbytes, shape).ravel().astype(np.float64)
        resident = np.broadcast_to(resident, shape).ravel()
        fits = np.flatnonzero(resident <= lower.capacity_bytes)
        if not len(fits):
            raise PlanError(
                _abstract_overflow(axes, options, fixed, resident, lower, hw),
                hint=f"raise {lower.name}.capacity or use smaller tiles",
            )
        # only candidates that fit are sorted; lexsort is stable, so ties keep grid order
        time_s = np.maximum(nbytes[fits] / upper.bandwidth_bytes_per_s, compute_s[fits])
        order = np.lexsort((-volume[fits], nbytes[fits], time_s))  # last key sorts first
        best = [int(i) for i in fits[order[:top_k]]]
        per_level.append((lower.name, best))
    choices = []
    for i in range(max(len(b) for _, b in per_level)):
        parts = {}
        block: dict[str, int] = {}
        for name, best in per_level:
            index = np.unravel_index(best[min(i, len(best) - 1)], shape)
            flat = {a: o[x] for a, o, x in zip(axes, options, index, strict=True)}
            parts[name] = Partition(
                {a: flat[a] for a in kernel.woven}, {a: flat[a] for a in streams}
            )
            block = block or flat
        choices.append(TileChoice(parts, block))
    return choices


def _abstract_compute(
    model: KernelModel, hw: Hardware, g: Mapping[str, np.ndarray], s: Mapping[str, np.ndarray]
) -> np.ndarray:
    """The slowest unit's time per candidate when the work depends on the tile."""
    import numpy as np

    kept = model.mask_fraction(g, s)
    times = [
        (n - model.keyed_flops.get(unit, 0) * (1 - kept)) / hw.rate(*unit)
        for unit, n in model.flops_by_unit.items()
    ]
    return np.maximum.reduce(np.broadcast_arrays(*times)) if times else np.zeros(1)


def _abstract_overflow(
    axes: list[str],
    options: list[list[int]],
    fixed: Mapping[str, int],
    resident: np.ndarray,
    level: object,
    hw: Hardware,
) -> str:
    need = int(resident.min())
    cap = level.capacity_bytes  # type: ignore[attr-defined]
    name = level.name  # type: ignore[attr-defined]
    what = " ".join(f"{a}={fixed[a]}" for a in axes if a in fixed)
    head = f"tile {what} needs" if what else "the smallest tile needs"
    return (
        f"{head} {need:,} B at {name}; the {hw.name} {name} holds {cap:,} B "
        f"(over by {need - cap:,} B)"
    )
