"""A roofline of the hardware with the diagram's predicted point on it.

Log-log: arithmetic intensity (FLOP per byte moved) across, FLOP/s up. A horizontal ceiling
per compute unit and type the profile has (equal rates share one line), a slope per memory
level (its bandwidth times the intensity), the roof the model uses for this diagram in bold,
the plan's point (FLOPs over predicted time, at FLOPs per top-level byte), the same rate at
each lower boundary's intensity in that level's colour (the hierarchical roofline: a level
whose dot meets its own slope is the one that bounds), the unfused form's point when the
plan has one, and measured points read from a bench JSON.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("napkin"))
    >>> layout_roofline(plan, []).title
    'roofline: matmul on napkin'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path as FilePath

from ncdc.bounded import read_json
from ncdc.draw.model import (
    INK,
    MUTED,
    Dot,
    Item,
    Path,
    Picture,
    Rect,
    Shape,
    Text,
    crosses,
    level_colour,
)
from ncdc.errors import UsageError
from ncdc.model.records import dominant_rate, intensity, ridge
from ncdc.model.values import Plan
from ncdc.units import format_rate

MAX_MEASURED_BYTES = 64 << 20  # a bench report of many thousand runs
PLOT = Rect(90, 84, 620, 400)
GRID = "#e4e4e4"
CEILING = "#555555"
MEASURED = "#c23b6e"
COMPUTE_UNITS = ("tensor", "cuda")  # FLOP rates; the SFU's exp/s is not a FLOP ceiling
MEASURED_KEYS = ("name", "flops", "time_s", "hbm_bytes")
# where along a slope its label may sit, middle first
FRACTIONS = (0.5, 0.35, 0.65, 0.2, 0.8, 0.1, 0.9, 0.05, 0.95)


@dataclass(frozen=True)
class Measured:
    """One measured run: its FLOPs, its time and the bytes it moved to and from HBM."""

    name: str
    flops: float
    time_s: float
    hbm_bytes: float


def read_measured(path: FilePath) -> list[Measured]:
    """Measured points from a JSON list of objects with name, flops, time_s, hbm_bytes.

    Other keys are ignored, so a bench report with more fields can be passed as it is.
    """
    try:
        data = read_json(path, MAX_MEASURED_BYTES, what="a bench JSON", error=UsageError)
    except OSError as e:
        raise UsageError(
            f"cannot read: {e.strerror}", where=str(path), hint="check the path"
        ) from None
    if not isinstance(data, list):
        raise UsageError(
            f"expected a JSON list of runs, found {type(data).__name__}",
            where=str(path),
            hint='write [{"name": ..., "flops": ..., "time_s": ..., "hbm_bytes": ...}]',
        )
    out = []
    for i, entry in enumerate(data):
        where = f"{path}: [{i}]"
        if not isinstance(entry, dict):
            raise UsageError("expected an object", where=where, hint="see docs/draw.md")
        missing = [k for k in MEASURED_KEYS if k not in entry]
        if missing:
            raise UsageError(f"missing {', '.join(missing)}", where=where, hint="see docs/draw.md")
        numbers = []
        for key in MEASURED_KEYS[1:]:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise UsageError(
                    f"{key} must be a positive number, found {value!r}",
                    where=where,
                    hint="see docs/draw.md",
                )
            numbers.append(float(value))
        out.append(Measured(str(entry["name"]), *numbers))
    return out


@dataclass(frozen=True)
class _Axes:
    """log10 ranges mapped onto PLOT."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    def px(self, x: float) -> float:
        return PLOT.x + (math.log10(x) - self.x_lo) / (self.x_hi - self.x_lo) * PLOT.w

    def py(self, y: float) -> float:
        return PLOT.bottom - (math.log10(y) - self.y_lo) / (self.y_hi - self.y_lo) * PLOT.h


def _ceilings(plan: Plan) -> list[tuple[float, str]]:
    """(FLOP/s, label) per distinct compute rate, highest first."""
    hw = plan.graph.hardware
    by_rate: dict[float, list[str]] = {}
    for unit in COMPUTE_UNITS:
        for kind, rate in hw.rates.get(unit, {}).items():
            by_rate.setdefault(rate, []).append(f"{unit} {kind}" if not by_rate.get(rate) else kind)
    return [(r, "/".join(names)) for r, names in sorted(by_rate.items(), reverse=True)]


def _si(v: float) -> str:
    """10 -> '10', 1e12 -> '1T', 0.1 -> '0.1'."""
    if v < 1:
        return f"{v:g}"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.4g}{prefix}"
    return f"{v:.4g}"


class _Labels:
    """Places labels beside anchors where they cover no label, point or line placed before
    (lines by their exact segments, ncdc.draw.model.crosses); a label with no free place
    beside any of its anchors goes to the key under the plot instead, so none is drawn over
    anything."""

    OFFSETS = (
        (9, -6, "start"),
        (9, 15, "start"),
        (-9, -6, "end"),
        (-9, 15, "end"),
        (0, -12, "middle"),
        (0, 22, "middle"),
        (9, 28, "start"),
        (9, -20, "start"),
        (-9, 28, "end"),
        (-9, -20, "end"),
        (0, -26, "middle"),
        (0, 36, "middle"),
        (-9, 41, "end"),
        (-9, -34, "end"),
    )
    GAP = 1.5  # clearance kept between a label and a line, beyond the line's half width

    def __init__(self) -> None:
        self.taken: list[Rect] = []
        self.lines: list[tuple[tuple[float, float], tuple[float, float], float]] = []
        self.key: list[tuple[str, str, str]] = []  # (text, colour, "line" | "dot")

    def block(self, rect: Rect) -> None:
        self.taken.append(rect)

    def block_line(self, a: tuple[float, float], b: tuple[float, float], width: float) -> None:
        """Keep labels off the segment a-b, drawn `width` wide."""
        self.lines.append((a, b, width / 2 + self.GAP))

    def free(self, box: Rect) -> bool:
        return (
            PLOT.contains(box)
            and not any(box.intersects(r) for r in self.taken)
            and not any(crosses(a, b, box, pad) for a, b, pad in self.lines)
        )

    def place(
        self,
        anchors: list[tuple[float, float]],
        text: str,
        colour: str = INK,
        beside_slope: bool = False,
        marker: str = "dot",
    ) -> Text | None:
        """The first anchor and offset where the text is free; beside a slope, above-left
        or below-right of the anchor first, where the rising line is not. None when there
        is no such place: the label joins the key (`marker` says how the key marks it)."""
        offsets = self.OFFSETS[2:3] + self.OFFSETS[1:2] if beside_slope else self.OFFSETS
        tries = [(x, y, o) for x, y in anchors for o in offsets]
        tries += [(x, y, o) for x, y in anchors for o in self.OFFSETS]
        for x, y, (dx, dy, anchor) in tries:
            t = Text(x + dx, y + dy, text, 11, anchor, colour)
            if self.free(t.bbox()):
                self.taken.append(t.bbox())
                return t
        self.key.append((text, colour, marker))
        return None


def layout_roofline(plan: Plan, measured: Sequence[Measured]) -> Picture:
    """The roofline picture of `plan` with `measured` points."""
    hw = plan.graph.hardware
    name = plan.graph.diagram.name
    top = hw.levels[0]
    points = _plot_points(plan, measured)
    ceilings = _ceilings(plan)
    peak = ceilings[0][0]
    axes = _axes_for(plan, points, ceilings)
    labels = _Labels()
    items: list[Item] = [
        Text(24, 26, f"roofline: {name} on {hw.name}", 15, bold=True),
        Text(24, 46, hw.title, 11, colour=MUTED),
    ]
    items += _grid(axes)
    items.append(Shape(PLOT, "none", INK, 1.2, solid=True, css="frame"))
    x_lo, x_hi = 10**axes.x_lo, 10**axes.x_hi
    y_lo = 10**axes.y_lo
    slopes = []
    for i, level in enumerate(hw.levels):
        bw = level.bandwidth_bytes_per_s
        a = max(x_lo, y_lo / bw)
        b = min(x_hi, peak / bw)
        if a >= b:
            continue
        ends = ((axes.px(a), axes.py(bw * a)), (axes.px(b), axes.py(bw * b)))
        colour = level_colour(level.name, i)
        items.append(Path(ends, colour, 1.6, css=f"slope {level.name}"))
        labels.block_line(*ends, 1.6)
        slopes.append((ends, f"{level.name} {format_rate(bw, 'B/s')}", colour))
    roof = roof_figures(plan)
    right_labels = [(rate, f"{text} {format_rate(rate, 'FLOP/s')}", CEILING, False)
                    for rate, text in ceilings]  # fmt: skip
    for rate, _, _, _ in right_labels:
        a = max(x_lo, rate / top.bandwidth_bytes_per_s)
        y = axes.py(rate)
        items.append(Path(((axes.px(a), y), (PLOT.right, y)), CEILING, 1.2, "5 3", css="ceiling"))
        labels.block_line((axes.px(a), y), (PLOT.right, y), 1.2)
    right_labels.append((roof.rate, f"model roof {format_rate(roof.rate, 'FLOP/s')}", INK, True))
    items += _right_labels(right_labels, axes)
    start = max(x_lo, y_lo / roof.bandwidth)
    roof_pts = (
        (axes.px(start), axes.py(roof.bandwidth * start)),
        (axes.px(roof.ridge), axes.py(roof.rate)),
        (PLOT.right, axes.py(roof.rate)),
    )
    items.append(Path(roof_pts, INK, 2.6, css="roof"))
    labels.block_line(roof_pts[0], roof_pts[1], 2.6)
    labels.block_line(roof_pts[1], roof_pts[2], 2.6)
    # points first: a slope's label can slide along its line, a point's cannot move far
    items += _points(points, axes, labels)
    for (p0, p1), text, colour in slopes:
        along = [(p0[0] + (p1[0] - p0[0]) * f, p0[1] + (p1[1] - p0[1]) * f) for f in FRACTIONS]
        placed = labels.place(along, text, colour, beside_slope=True, marker="line")
        items += [placed] if placed else []
    captions = _captions(top.name, roof, plan.flops / plan.predicted_time_s)
    items += captions
    key_top = max(t.y for t in captions) + 20
    key = _key(labels.key, key_top)
    items += key
    height = (max(t.y for t in key if isinstance(t, Text)) if key else key_top - 20) + 20
    width = max(PLOT.right + 30, *(t.bbox().right + 24 for t in items if isinstance(t, Text)))
    return Picture(f"roofline: {name} on {hw.name}", width, height, tuple(items))


@dataclass(frozen=True)
class RoofFigures:
    """The roof the model prices a plan under, as `ncdc cost` prints it: the rate of the
    unit doing most of its FLOPs, the bandwidth the top level sustains and their ratio, the
    ridge (ncdc.model.records.ridge)."""

    rate: float  # FLOP/s
    bandwidth: float  # B/s out of the top level
    ridge: float  # FLOP per top-level byte


def roof_figures(plan: Plan) -> RoofFigures:
    hw = plan.graph.hardware
    top = hw.levels[0].name
    return RoofFigures(dominant_rate(plan), hw.achieved_bandwidth(top), ridge(plan))


def _right_labels(labels: list[tuple[float, str, str, bool]], axes: _Axes) -> list[Item]:
    """The ceilings' and the model roof's labels right of the plot, highest rate first,
    stacked where rates look equal."""
    items: list[Item] = []
    last = -math.inf
    for rate, text, colour, bold in sorted(labels, key=lambda r: -r[0]):
        y = max(axes.py(rate) + 4, last + 13)
        last = y
        items.append(Text(PLOT.right + 8, y, text, 10, colour=colour, bold=bold))
    return items


def _key(entries: list[tuple[str, str, str]], y: float) -> list[Item]:
    """Labels that found no free place in the plot, one a line under it, each after a
    short stroke (a slope's) or a dot (a point's) of its colour."""
    items: list[Item] = []
    for i, (text, colour, marker) in enumerate(entries):
        row = y + i * 16
        if marker == "line":
            items.append(Path(((24, row - 4), (40, row - 4)), colour, 2, css="key"))
        else:
            items.append(Dot(32, row - 4, 4, colour, "#ffffff"))
        items.append(Text(48, row, text, 10, colour=colour))
    return items


def _plot_points(plan: Plan, measured: Sequence[Measured]) -> list[tuple[float, float, str, str]]:
    """(intensity, FLOP/s, label, colour) of the plan, its unfused form, each measurement
    and each level's dot."""
    name = plan.graph.diagram.name
    points = [(intensity(plan), plan.flops / plan.predicted_time_s, f"{name} (model)", INK)]
    if plan.unfused is not None:
        u = plan.unfused
        points.append(
            (plan.flops / u.top_bytes, plan.flops / u.predicted_time_s, "unfused (model)", MUTED)
        )
    points += [
        (m.flops / m.hbm_bytes, m.flops / m.time_s, f"{m.name} (measured)", MEASURED)
        for m in measured
    ]
    # a diagram that computes nothing (a permute) has no place on a log-log roofline
    return [p for p in points + _level_points(plan) if p[0] > 0 and p[1] > 0]


def _axes_for(
    plan: Plan, points: list[tuple[float, float, str, str]], ceilings: list[tuple[float, str]]
) -> _Axes:
    """Decades that hold every point, ceiling and knee: every level's slope reaches the peak
    inside the plot, so each one shows."""
    hw = plan.graph.hardware
    peak = ceilings[0][0]
    ridge = peak / hw.levels[0].bandwidth_bytes_per_s
    knees = [peak / lv.bandwidth_bytes_per_s for lv in hw.levels]
    xs = [p[0] for p in points if math.isfinite(p[0])] + [ridge, *knees]
    ys = [p[1] for p in points] + [c[0] for c in ceilings]
    return _Axes(
        math.floor(math.log10(min(xs) / 3)),
        max(math.ceil(math.log10(max(xs) * 4)), math.floor(math.log10(min(xs) / 3)) + 3),
        min(math.floor(math.log10(min(ys) / 3)), math.ceil(math.log10(peak * 1.5)) - 3),
        math.ceil(math.log10(peak * 1.5)),
    )


def _captions(top: str, roof: RoofFigures, achieved: float) -> list[Text]:
    """The x axis's title, the y axis's unit and the notes on the points and lines: the
    plan's rate and the model's roof with the figures `ncdc cost` prints, and the
    datasheet's."""
    note = (
        f"bold: the model's roof, {format_rate(roof.rate, 'FLOP/s')} and "
        f"{format_rate(roof.bandwidth, 'B/s')} from {top} (ridge {roof.ridge:.1f} flop/B)"
    )
    return [
        Text(
            PLOT.x + PLOT.w / 2,
            PLOT.bottom + 40,
            f"arithmetic intensity (FLOP per byte moved: per {top} byte for the plan, "
            "per byte a level sends down for its dot)",
            11,
            "middle",
        ),
        Text(PLOT.x - 8, PLOT.y - 10, "FLOP/s", 11, "end"),
        Text(24, PLOT.bottom + 64, note, 10, colour=MUTED),
        Text(
            24,
            PLOT.bottom + 80,
            (
                f"black dot: the plan, {format_rate(achieved, 'FLOP/s')}; thin and dashed "
                "lines: the datasheet's peaks"
                if achieved > 0
                else "no dot: the plan computes nothing (it moves data alone), off the log "
                "axes; thin and dashed lines: the datasheet's peaks"
            ),
            10,
            colour=MUTED,
        ),
    ]


def _level_points(plan: Plan) -> list[tuple[float, float, str, str]]:
    """The plan's rate at the intensity of each boundary below the top: FLOPs over the bytes
    the level above sends down (and takes back). Its distance below that level's slope is
    how far that level is from bounding the plan."""
    hw = plan.graph.hardware
    names = [lv.name for lv in hw.levels]
    rate = plan.flops / plan.predicted_time_s
    return [
        (plan.flops / t.bytes, rate, f"at {t.upper}", level_colour(t.upper, names.index(t.upper)))
        for t in plan.transfers[1:]
        if t.bytes > 0 and plan.flops > 0
    ]


def _grid(axes: _Axes) -> list[Item]:
    items: list[Item] = []
    for e in range(int(axes.x_lo), int(axes.x_hi) + 1):
        x = axes.px(10.0**e)
        items.append(Path(((x, PLOT.y), (x, PLOT.bottom)), GRID, 1, css="grid"))
        items.append(Text(x, PLOT.bottom + 18, _si(10.0**e), 10, "middle", MUTED))
    for e in range(int(axes.y_lo), int(axes.y_hi) + 1):
        y = axes.py(10.0**e)
        items.append(Path(((PLOT.x, y), (PLOT.right, y)), GRID, 1, css="grid"))
        items.append(Text(PLOT.x - 8, y + 4, _si(10.0**e), 10, "end", MUTED))
    return items


def _points(
    points: list[tuple[float, float, str, str]], axes: _Axes, labels: _Labels
) -> list[Item]:
    items: list[Item] = []
    shown = [
        (axes.px(x), axes.py(y), text, colour) for x, y, text, colour in points if math.isfinite(x)
    ]
    if len(shown) > 1 and shown[1][2] == "unfused (model)":
        (fx, fy, _, _), (ux, uy, _, _) = shown[0], shown[1]
        if math.hypot(ux - fx, uy - fy) < 24:  # fusion moves the point less than a label
            del shown[1]
    if len(shown) > 1 and shown[1][2] == "unfused (model)":
        (fx, fy, _, _), (ux, uy, _, _) = shown[0], shown[1]
        items.append(Path(((ux, uy), (fx, fy)), MUTED, 1.2, "3 3", arrow=True, css="fusion"))
        labels.block_line((ux, uy), (fx, fy), 1.2)
    # a dot on top of an earlier one (a level that moves what the one above does) says nothing new
    kept: list[tuple[float, float, str, str]] = []
    for point in shown:
        if not any(abs(point[0] - k[0]) < 6 and abs(point[1] - k[1]) < 6 for k in kept):
            kept.append(point)
    shown = kept
    for x, y, _, _ in shown:
        labels.block(Rect(x - 5, y - 5, 10, 10))
    for x, y, text, colour in shown:
        items.append(Dot(x, y, 5, colour, "#ffffff"))
        placed = labels.place([(x, y)], text, colour)
        items += [placed] if placed else []
    return items
