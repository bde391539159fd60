"""`ncdc draw`: pictures of a diagram as SVG written directly (PNG through a converter).

Three pictures: the neural circuit diagram (levels in colour, transfers marked, per-core
sizes from the plan), a roofline with the diagram's predicted point, and a heat map of the
predicted time over the two main tile sizes. Each is a layout function that returns a
`Picture` of frozen boxes, wires and labels; `write_picture` writes it. See docs/draw.md.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> pic = draw(load_diagram("diagrams/matmul.yaml"), load_hardware("h200"), "plain")
    >>> pic.title
    'matmul on h200 (bare algorithm)'
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ncdc.draw.circuit import layout_circuit
from ncdc.draw.model import Picture, overlaps
from ncdc.draw.svg import picture_to_svg, write_picture
from ncdc.errors import UsageError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.plan.search import plan_diagram

MODES = ("plan", "plain", "roofline", "tiles")

__all__ = [
    "MODES",
    "Picture",
    "draw",
    "draw_to_file",
    "overlaps",
    "picture_to_svg",
    "pick_mode",
]


def pick_mode(plain: bool = False, roofline: bool = False, tiles: bool = False) -> str:
    """The picture the command-line flags ask for; `plan` when none is given."""
    chosen = [m for m, on in (("plain", plain), ("roofline", roofline), ("tiles", tiles)) if on]
    if len(chosen) > 1:
        raise UsageError(
            f"choose one picture, not {' and '.join('--' + m for m in chosen)}",
            hint="ncdc draw SPEC [--plain | --roofline | --tiles] -o FILE.svg",
        )
    return chosen[0] if chosen else "plan"


def draw(
    diagram: Diagram,
    hw: Hardware,
    mode: str = "plan",
    tiles: Mapping[str, int] | None = None,
    measured: Path | None = None,
) -> Picture:
    """The picture of `diagram` on `hw` in `mode` (plan, plain, roofline or tiles)."""
    if mode == "plain":
        return layout_circuit(diagram, hw)
    if mode == "plan":
        return layout_circuit(diagram, hw, plan_diagram(diagram, hw, tiles, compare_unfused=True))
    if mode == "roofline":
        from ncdc.draw.roofline import layout_roofline, read_measured

        points = read_measured(measured) if measured else []
        return layout_roofline(plan_diagram(diagram, hw, tiles, compare_unfused=True), points)
    if mode == "tiles":
        from ncdc.draw.heatmap import layout_tiles

        return layout_tiles(diagram, hw, tiles)
    raise UsageError(
        f"unknown picture '{mode}'; expected one of {', '.join(MODES)}",
        hint="ncdc draw SPEC [--plain | --roofline | --tiles]",
    )


def draw_to_file(
    diagram: Diagram,
    hw: Hardware,
    out: Path,
    mode: str = "plan",
    tiles: Mapping[str, int] | None = None,
    measured: Path | None = None,
) -> Picture:
    """Draw and write to `out` (.svg, or .png with a converter installed)."""
    picture = draw(diagram, hw, mode, tiles, measured)
    write_picture(picture, out)
    return picture
