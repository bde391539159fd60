"""Predicted time over the two main tile sizes of a diagram, as a heat map.

The main sizes are those of the kernel with the most predicted time: the block's m and n
for a GEMM (g_m x g_n), the query group and the key chunk for attention (g_q x s_x), the
rows per block for a row-wise kernel. Every cell is the whole diagram planned by
`plan_diagram` with those two sizes fixed (the rest searched as usual); a tile the model
refuses is hatched, with the limit it breaks. The model's choice is outlined.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> grid = evaluate_tiles(load_diagram("diagrams/softmax.yaml"), load_hardware("h200"))
    >>> grid.rows.label, grid.cols.values
    ('g_m', (1,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ncdc.draw.model import INK, MUTED, Item, Picture, Rect, Shape, Text
from ncdc.errors import PlanError
from ncdc.families import FAMILIES, get_family
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.values import KernelPlan
from ncdc.plan.search import plan_diagram

CELL_W, CELL_H = 76, 34
LEFT, TOP = 120, 96
# Fast to slow: time over the best cell's, on a log scale up to SLOWEST.
RAMP = ("#1a9850", "#91cf60", "#d9ef8b", "#fee08b", "#fc8d59", "#d73027")
SLOWEST = 8.0
INFEASIBLE = "#eeeeee"
ABSTRACT_SIZES = (16, 32, 64, 128, 256, 512, 1024)
ROW_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class TileAxis:
    axis: str
    label: str  # g_m, s_x
    values: tuple[int, ...]


@dataclass(frozen=True)
class Cell:
    row: int
    col: int
    time_s: float | None  # None: infeasible
    reason: str  # why not, in one line; "" when feasible


@dataclass(frozen=True)
class TileGrid:
    diagram: str
    hardware: str
    kernel: str
    rows: TileAxis
    cols: TileAxis
    cells: tuple[Cell, ...]
    chosen: tuple[int, int]  # (row, col) of the model's tile


def _candidates(axis: str, size: int, defaults: tuple[int, ...], widen: bool) -> tuple[int, ...]:
    values = set(defaults)
    if widen:  # one step past the family's list on each side, to show where it stops fitting
        values |= {max(min(defaults) // 2, 1), max(defaults) * 2}
    return tuple(sorted({min(v, size) for v in values}))


def main_axes(diagram: Diagram, hw: Hardware, kp: KernelPlan) -> tuple[TileAxis, TileAxis]:
    """The two tile sizes that matter most for kernel `kp`, with the sizes to try."""
    family, kernel = kp.family, kp.kernel
    gpu = hw.is_gpu
    block = hw.block_level if gpu else hw.level_names()[-1]
    part = kp.tiles[block]
    pairs = get_family(family.name).tile_axes(family) if family.name in FAMILIES else []
    if not pairs:
        axes = [a for a in kernel.woven if diagram.axes[a] > 1] + list(part.stream)
        pairs = [(a, ()) for a in axes[:2]]
    out = []
    for axis, defaults in pairs:
        size = diagram.axes[axis]
        rowwise = "row" in family.roles  # rows of a row-wise kernel: a few per block
        if not gpu or not defaults:
            defaults = ROW_SIZES if rowwise else ABSTRACT_SIZES
        prefix = "s" if axis in part.stream else "g"
        out.append(TileAxis(axis, f"{prefix}_{axis}", _candidates(axis, size, defaults, gpu)))
    if len(out) == 1:
        out.append(TileAxis("", "", (1,)))
    return out[0], out[1]


def evaluate_tiles(
    diagram: Diagram, hw: Hardware, tiles: Mapping[str, int] | None = None
) -> TileGrid:
    """Predicted time of `diagram` at every pair of main tile sizes (rows x columns)."""
    tiles = dict(tiles or {})
    plan = plan_diagram(diagram, hw, tiles)
    kp = max(plan.kernels, key=lambda k: k.predicted_time_s)
    rows, cols = main_axes(diagram, hw, kp)
    chosen_values = [kp.block_tile.get(a.axis, a.values[0]) for a in (rows, cols)]
    rows, cols = (
        TileAxis(a.axis, a.label, tuple(sorted({*a.values, v})) if a.axis else a.values)
        for a, v in zip((rows, cols), chosen_values, strict=True)
    )
    cells = []
    for i, r in enumerate(rows.values):
        for j, c in enumerate(cols.values):
            fixed = {**tiles, rows.axis: r, **({cols.axis: c} if cols.axis else {})}
            try:
                time = plan_diagram(diagram, hw, fixed).predicted_time_s
                cells.append(Cell(i, j, time, ""))
            except PlanError as e:
                cells.append(Cell(i, j, None, e.message))
    chosen = (
        rows.values.index(chosen_values[0]),
        cols.values.index(chosen_values[1]) if cols.axis else 0,
    )
    return TileGrid(diagram.name, hw.name, kp.kernel.name, rows, cols, tuple(cells), chosen)


def short_reason(message: str) -> str:
    """A cell-sized name for the limit a tile breaks."""
    for key, short in (("shared memory", "smem"), ("registers", "regs"), ("threads", "threads")):
        if key in message:
            return short
    words = message.split(" at ")
    if len(words) > 1:
        return words[1].split(";")[0].split()[0]
    return "no fit"


def _format_time(t: float) -> str:
    return f"{t * 1e6:.0f} µs" if t < 1e-3 else f"{t * 1e3:.3g} ms"


def _ramp(fraction: float) -> str:
    f = min(max(fraction, 0.0), 1.0) * (len(RAMP) - 1)
    i = min(int(f), len(RAMP) - 2)
    a, b = RAMP[i], RAMP[i + 1]
    mix = [
        round(int(a[k : k + 2], 16) * (1 - (f - i)) + int(b[k : k + 2], 16) * (f - i))
        for k in (1, 3, 5)
    ]
    return "#" + "".join(f"{v:02x}" for v in mix)


def layout_tiles(diagram: Diagram, hw: Hardware, tiles: Mapping[str, int] | None = None) -> Picture:
    """The heat map of predicted time over the main tile sizes of `diagram` on `hw`."""
    grid = evaluate_tiles(diagram, hw, tiles)
    best = min((c.time_s for c in grid.cells if c.time_s is not None), default=1.0)
    title = f"tiles: {grid.diagram} on {grid.hardware}"
    items: list[Item] = [
        Text(24, 26, title, 15, bold=True),
        Text(
            24, 46, f"predicted time of the whole diagram; kernel {grid.kernel}", 11, colour=MUTED
        ),
    ]
    if grid.cols.axis:
        items.append(Text(LEFT, TOP - 30, grid.cols.label, 12, bold=True))
    items.append(Text(LEFT - 10, TOP - 10, grid.rows.label, 12, "end", bold=True))
    for j, v in enumerate(grid.cols.values):
        if grid.cols.axis:
            items.append(Text(LEFT + (j + 0.5) * CELL_W, TOP - 10, str(v), 11, "middle"))
    for i, v in enumerate(grid.rows.values):
        items.append(Text(LEFT - 10, TOP + (i + 0.5) * CELL_H + 4, str(v), 11, "end"))
    reasons: dict[str, str] = {}
    for cell in grid.cells:
        rect = Rect(LEFT + cell.col * CELL_W, TOP + cell.row * CELL_H, CELL_W, CELL_H)
        centre = (rect.x + rect.w / 2, rect.y + rect.h / 2 + 4)
        if cell.time_s is None:
            short = short_reason(cell.reason)
            reasons.setdefault(short, cell.reason)
            items.append(
                Shape(
                    rect, INFEASIBLE, "#ffffff", 1, hatch=True, title=cell.reason, css="infeasible"
                )
            )
            items.append(Text(*centre, short, 10, "middle", MUTED, title=cell.reason))
        else:
            ratio = cell.time_s / best
            fill = _ramp(math.log(ratio) / math.log(SLOWEST))
            tip = f"{grid.rows.label}={grid.rows.values[cell.row]}: {_format_time(cell.time_s)}"
            items.append(Shape(rect, fill, "#ffffff", 1, title=tip, css="cell"))
            items.append(Text(*centre, _format_time(cell.time_s), 10, "middle", INK))
    i, j = grid.chosen
    mark = Rect(LEFT + j * CELL_W + 1.5, TOP + i * CELL_H + 1.5, CELL_W - 3, CELL_H - 3)
    items.append(Shape(mark, "none", INK, 3, solid=False, css="chosen"))
    y = TOP + len(grid.rows.values) * CELL_H + 30
    items += _legend(y, reasons)
    width = max(
        LEFT + len(grid.cols.values) * CELL_W + 24,
        *(t.bbox().right + 24 for t in items if isinstance(t, Text)),
    )
    height = max(t.bbox().bottom for t in items if isinstance(t, Text)) + 20
    return Picture(title, width, height, tuple(items))


def _legend(y: float, reasons: dict[str, str]) -> list[Item]:
    items: list[Item] = [Text(24, y, "time over the best:", 11, colour=MUTED)]
    x = 24 + 20 * 11 * 0.6
    for k, label in enumerate(("1x", "2x", "4x", f"≥{SLOWEST:g}x")):
        items.append(Shape(Rect(x, y - 11, 22, 14), _ramp(k / 3), "none", 0))
        items.append(Text(x + 28, y, label, 11))
        x += 28 + len(label) * 6.6 + 14
    items.append(Shape(Rect(x, y - 11, 22, 14), "none", INK, 3, css="legend-chosen"))
    items.append(Text(x + 28, y, "chosen by the model", 11))
    for short, message in sorted(reasons.items()):
        y += 18
        items.append(Shape(Rect(24, y - 11, 22, 14), INFEASIBLE, "#999999", 1, hatch=True))
        items.append(Text(52, y, f"{short}: {message}", 10, colour=MUTED))
    return items
