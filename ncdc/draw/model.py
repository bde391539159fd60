"""The layout model of a picture: rectangles, texts, paths and dots as frozen values.

A layout function turns ncdc's data into a `Picture`; the SVG writer only draws what is
here. Because every text carries its own bounding box (the writer uses a monospace font,
so a text's width is its length times a fixed advance), a test can check that nothing in a
picture overlaps without rendering it.

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
