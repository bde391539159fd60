"""The layout model of a picture: rectangles, texts, paths and dots as frozen values.

A layout function turns ncdc's data into a `Picture`; the SVG writer only draws what is
here. Because every text carries its own bounding box (the writer uses a monospace font,
so a text's width is its length times a fixed advance) and every line its segments, a test
can check that nothing in a picture overlaps, and that no label lies across a line, without
rendering it.

    >>> a, b = Text(10, 20, "q 4096"), Text(10, 44, "x 4096")
    >>> overlaps(Picture("demo", 100, 60, (a, b)))
    []
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
ADVANCE = 0.6  # width of one monospace character, in ems
ASCENT = 0.8  # height above the baseline, in ems
DESCENT = 0.25
INK = "#222222"
MUTED = "#666666"
PAPER = "#ffffff"

# One colour per memory level: the GPU's and the paper's two-level machine share a scheme
# (global memory blue, on-chip green, registers orange) so pictures compare at a glance.
LEVEL_COLOURS: dict[str, str] = {
    "hbm": "#2f6db5",
    "l0": "#2f6db5",
    "l2": "#8a5cc2",
    "smem": "#2a9d63",
    "l1": "#2a9d63",
    "rf": "#e07020",
}
SPARE_COLOURS = ("#c23b6e", "#1f9db0", "#9a7b12", "#5b6b7a")


def level_colour(name: str, index: int = 0) -> str:
    """The colour of memory level `name` (a spare one, by `index`, for unknown names)."""
    return LEVEL_COLOURS.get(name, SPARE_COLOURS[index % len(SPARE_COLOURS)])


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def intersects(self, other: Rect) -> bool:
        """True when the two share an area (touching edges do not count)."""
        return (
            self.x < other.right - 0.01
            and other.x < self.right - 0.01
            and self.y < other.bottom - 0.01
            and other.y < self.bottom - 0.01
        )

    def contains(self, other: Rect) -> bool:
        return (
            self.x <= other.x + 0.01
            and self.y <= other.y + 0.01
            and other.right <= self.right + 0.01
            and other.bottom <= self.bottom + 0.01
        )


@dataclass(frozen=True)
class Text:
    """One line of text; (x, y) is the anchor point on the baseline."""

    x: float
    y: float
    text: str
    size: float = 11
    anchor: str = "start"  # start | middle | end
    colour: str = INK
    bold: bool = False
    title: str = ""  # a tooltip

    @property
    def width(self) -> float:
        return len(self.text) * self.size * ADVANCE

    def bbox(self) -> Rect:
        left = {"start": self.x, "middle": self.x - self.width / 2, "end": self.x - self.width}
        top = self.y - self.size * ASCENT
        return Rect(left[self.anchor], top, self.width, self.size * (ASCENT + DESCENT))


@dataclass(frozen=True)
class Shape:
    """A filled rectangle: an operation box, a heat-map cell, a legend swatch, a frame."""

    rect: Rect
    fill: str = "none"
    stroke: str = INK
    stroke_width: float = 1.0
    radius: float = 0.0
    hatch: bool = False  # draw a diagonal hatch over the fill (infeasible cells)
    solid: bool = True  # takes part in the overlap check
    title: str = ""
    css: str = ""  # class attribute, for tests and styling


@dataclass(frozen=True)
class Path:
    """A polyline; with `curve`, consecutive points are joined by horizontal S-bends."""

    points: tuple[tuple[float, float], ...]
    colour: str = INK
    width: float = 2.0
    dash: str = ""
    curve: bool = False
    arrow: bool = False
    css: str = ""


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    r: float = 3.0
    colour: str = INK
    stroke: str = "none"


Item = Text | Shape | Path | Dot


@dataclass(frozen=True)
class Picture:
    """What the SVG writer draws, in order (later items on top)."""

    title: str
    width: float
    height: float
    items: tuple[Item, ...]

    def texts(self) -> list[Text]:
        return [i for i in self.items if isinstance(i, Text)]

    def shapes(self) -> list[Shape]:
        return [i for i in self.items if isinstance(i, Shape)]


def overlaps(picture: Picture) -> list[tuple[Item, Item]]:
    """Pairs that collide: two texts sharing any area, a text partly over a shape, or two
    shapes that cross without one holding the other. Paths and dots may cross anything:
    wires pass over boxes on purpose."""
    solids: list[tuple[Rect, Item]] = [(t.bbox(), t) for t in picture.texts()]
    solids += [(s.rect, s) for s in picture.shapes() if s.solid]
    out = []
    for i, (ra, a) in enumerate(solids):
        for rb, b in solids[i + 1 :]:
            if not ra.intersects(rb):
                continue
            both_text = isinstance(a, Text) and isinstance(b, Text)
            if both_text or not (ra.contains(rb) or rb.contains(ra)):
                out.append((a, b))
    return out


def outside(picture: Picture) -> list[Item]:
    """Texts and shapes that reach beyond the picture's edges."""
    page = Rect(0, 0, picture.width, picture.height)
    items: Sequence[Text | Shape] = [*picture.texts(), *picture.shapes()]
    return [i for i in items if not page.contains(i.bbox() if isinstance(i, Text) else i.rect)]


CURVE_PIECES = 12  # straight pieces standing for one S-bend in the crossing check
BACKGROUND = "grid"  # a path's css class that labels may lie over (a roofline's grid)


def segments(path: Path) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """The straight pieces of `path` as the SVG writer draws it: a curved step between two
    heights is the cubic S-bend with both handles at mid-width (ncdc.draw.svg)."""
    out = []
    for (x0, y0), (x1, y1) in zip(path.points, path.points[1:], strict=False):
        if not path.curve or abs(y1 - y0) <= 0.01:
            out.append(((x0, y0), (x1, y1)))
            continue
        mid = (x0 + x1) / 2
        prev = (x0, y0)
        for i in range(1, CURVE_PIECES + 1):
            t = i / CURVE_PIECES
            u = 1 - t
            x = u**3 * x0 + 3 * u * u * t * mid + 3 * u * t * t * mid + t**3 * x1
            y = u**3 * y0 + 3 * u * u * t * y0 + 3 * u * t * t * y1 + t**3 * y1
            out.append((prev, (x, y)))
            prev = (x, y)
    return out


def crosses(a: tuple[float, float], b: tuple[float, float], rect: Rect, pad: float = 0.0) -> bool:
    """Whether the segment a-b passes through `rect` grown by `pad` on every side (a line's
    half width), by clipping the segment to the rectangle (Liang-Barsky)."""
    lo_x, hi_x = rect.x - pad + 0.01, rect.right + pad - 0.01
    lo_y, hi_y = rect.y - pad + 0.01, rect.bottom + pad - 0.01
    dx, dy = b[0] - a[0], b[1] - a[1]
    t0, t1 = 0.0, 1.0
    for p, q in ((-dx, a[0] - lo_x), (dx, hi_x - a[0]), (-dy, a[1] - lo_y), (dy, hi_y - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return True


def crossings(picture: Picture) -> list[tuple[Text, Path]]:
    """Each label with a line drawn through it (the background grid aside), found from the
    label's bounding box and the line's segments, its width included."""
    paths = [i for i in picture.items if isinstance(i, Path) and BACKGROUND not in i.css.split()]
    pieces = [(p, segments(p)) for p in paths]
    out = []
    for t in picture.texts():
        box = t.bbox()
        for p, segs in pieces:
            if any(crosses(a, b, box, p.width / 2) for a, b in segs):
                out.append((t, p))
    return out
