"""Pictures to files: the SVG writer, and PNG through the first converter that works here.

The SVG is built with xml.etree, so every label is escaped, and a label's control
characters are shown as escapes (ncdc.errors.inert): XML 1.0 admits none. The root carries
`data-ncdc="draw/1"`, and a PNG gets a `Software: ncdc` text chunk: that is how ncdc
knows a file it may overwrite, and it refuses any other.

    >>> from ncdc.draw.model import Picture, Text
    >>> svg = picture_to_svg(Picture("t", 60, 20, (Text(2, 14, "a < b"),)))
    >>> "a &lt; b" in svg
    True
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import struct
import subprocess
import tempfile
import xml.etree.ElementTree as ET
import zlib
from functools import cache
from pathlib import Path

from ncdc.draw.model import FONT, PAPER, Dot, Item, Picture, Shape, Text
from ncdc.draw.model import Path as Wire
from ncdc.errors import UsageError, inert
from ncdc.files import read_prefix, write_atomic

MARK = "draw/1"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_MARK = b"Software\x00ncdc"
CONVERTERS = ("rsvg-convert", "cairosvg", "convert")  # probed in this order
CONVERT_TIMEOUT_S = 60
PROBE_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2">'
    b'<rect width="2" height="2" fill="#fff"/></svg>'
)


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def picture_to_svg(picture: Picture) -> str:
    """The picture as a standalone SVG document."""
    root = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": _num(picture.width),
            "height": _num(picture.height),
            "viewBox": f"0 0 {_num(picture.width)} {_num(picture.height)}",
            "font-family": FONT,
            "data-ncdc": MARK,
        },
    )
    ET.SubElement(root, "title").text = inert(picture.title)
    defs = ET.SubElement(root, "defs")
    hatch = ET.SubElement(
        defs,
        "pattern",
        {"id": "hatch", "width": "6", "height": "6", "patternUnits": "userSpaceOnUse",
         "patternTransform": "rotate(45)"},
    )  # fmt: skip
    ET.SubElement(hatch, "line", {"x1": "0", "y1": "0", "x2": "0", "y2": "6",
                                  "stroke": "#999999", "stroke-width": "1.5"})  # fmt: skip
    arrow = ET.SubElement(
        defs,
        "marker",
        {"id": "arrow", "viewBox": "0 0 10 10", "refX": "9", "refY": "5", "markerWidth": "7",
         "markerHeight": "7", "orient": "auto-start-reverse"},
    )  # fmt: skip
    ET.SubElement(arrow, "path", {"d": "M 0 0 L 10 5 L 0 10 z", "fill": "context-stroke"})
    ET.SubElement(root, "rect", {"width": "100%", "height": "100%", "fill": PAPER})
    for item in picture.items:
        _draw(root, item)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def _draw(parent: ET.Element, item: Item) -> None:
    if isinstance(item, Text):
        attrs = {"x": _num(item.x), "y": _num(item.y), "font-size": _num(item.size),
                 "fill": item.colour}  # fmt: skip
        if item.anchor != "start":
            attrs["text-anchor"] = item.anchor
        if item.bold:
            attrs["font-weight"] = "bold"
        el = ET.SubElement(parent, "text", attrs)
        el.text = inert(item.text)
        if item.title:
            ET.SubElement(el, "title").text = inert(item.title)
    elif isinstance(item, Shape):
        r = item.rect
        attrs = {"x": _num(r.x), "y": _num(r.y), "width": _num(r.w), "height": _num(r.h),
                 "fill": item.fill, "stroke": item.stroke,
                 "stroke-width": _num(item.stroke_width)}  # fmt: skip
        if item.radius:
            attrs["rx"] = _num(item.radius)
        if item.css:
            attrs["class"] = item.css
        el = ET.SubElement(parent, "rect", attrs)
        if item.title:
            ET.SubElement(el, "title").text = inert(item.title)
        if item.hatch:
            ET.SubElement(parent, "rect", {**attrs, "fill": "url(#hatch)", "stroke": "none"})
    elif isinstance(item, Wire):
        attrs = {"d": _path_data(item), "fill": "none", "stroke": item.colour,
                 "stroke-width": _num(item.width), "stroke-linecap": "round"}  # fmt: skip
        if item.dash:
            attrs["stroke-dasharray"] = item.dash
        if item.arrow:
            attrs["marker-end"] = "url(#arrow)"
        if item.css:
            attrs["class"] = item.css
        ET.SubElement(parent, "path", attrs)
    elif isinstance(item, Dot):
        ET.SubElement(
            parent,
            "circle",
            {"cx": _num(item.x), "cy": _num(item.y), "r": _num(item.r), "fill": item.colour,
             "stroke": item.stroke},
        )  # fmt: skip


def _path_data(p: Wire) -> str:
    (x0, y0), *rest = p.points
    parts = [f"M {_num(x0)} {_num(y0)}"]
    for x1, y1 in rest:
        if p.curve and abs(y1 - y0) > 0.01:
            mid = (x0 + x1) / 2
            parts.append(f"C {_num(mid)} {_num(y0)} {_num(mid)} {_num(y1)} {_num(x1)} {_num(y1)}")
        else:
            parts.append(f"L {_num(x1)} {_num(y1)}")
        x0, y0 = x1, y1
    return " ".join(parts)


# ----------------------------------------------------------------------------- files


def write_picture(picture: Picture, path: Path) -> None:
    """Write `picture` to `path` as SVG, or as PNG when the name ends in .png; atomically,
    and never over a file that ncdc did not write."""
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(
            f"cannot draw to '{path.name}': expected a .svg or .png file name",
            where="-o",
            hint="write FILE.svg, or FILE.png with a converter installed",
        )
    _refuse_foreign(path)
    svg = picture_to_svg(picture).encode()
    data = svg if suffix == ".svg" else mark_png(svg_to_png(svg))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def _refuse_foreign(path: Path) -> None:
    if not path.exists():
        return
    head = read_prefix(path, 4096) or b""  # a FIFO or a device is not ncdc's either
    ours = (head.startswith(PNG_SIGNATURE) and PNG_MARK in head) or (
        f'data-ncdc="{MARK}"'.encode() in head
    )
    if not ours:
        raise UsageError(
            "exists and was not drawn by ncdc; refusing to overwrite it",
            where=str(path),
            hint="remove it or choose another -o",
        )


@cache
def find_converter() -> str | None:
    """The first SVG-to-PNG converter, in the order of CONVERTERS, that turns a tiny SVG
    into a PNG; None when none does. Being on PATH is not enough (a `convert` can be a
    stand-in that converts nothing), so each is tried once per process."""
    for name in CONVERTERS:
        if _is_installed(name) and _converts(name):
            return name
    return None


def _is_installed(name: str) -> bool:
    if name == "cairosvg":
        return importlib.util.find_spec("cairosvg") is not None
    return shutil.which(name) is not None


def _converts(name: str) -> bool:
    try:
        return _convert(name, PROBE_SVG).startswith(PNG_SIGNATURE)
    except (UsageError, OSError, ImportError):
        return False


def svg_to_png(svg: bytes) -> bytes:
    """Convert with rsvg-convert, cairosvg or ImageMagick, the first that works here."""
    converter = find_converter()
    if converter is None:
        raise UsageError(
            "no SVG to PNG converter found (tried rsvg-convert, cairosvg, ImageMagick convert)",
            where="-o",
            hint="install librsvg2-bin, or write .svg",
        )
    return _convert(converter, svg)


def _convert(converter: str, svg: bytes) -> bytes:
    if converter == "cairosvg":
        cairosvg = importlib.import_module("cairosvg")
        return bytes(cairosvg.svg2png(bytestring=svg))
    with tempfile.TemporaryDirectory(prefix="ncdc-draw-") as tmp:
        src, dst = Path(tmp) / "in.svg", Path(tmp) / "out.png"
        src.write_bytes(svg)
        if converter == "rsvg-convert":
            command = [converter, "-f", "png", "-o", str(dst), str(src)]
        else:
            command = [converter, "-density", "96", str(src), f"png:{dst}"]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=CONVERT_TIMEOUT_S
            )
            failed, errors = done.returncode != 0 or not dst.exists(), done.stderr
        except subprocess.TimeoutExpired:
            failed, errors = True, f"no PNG after {CONVERT_TIMEOUT_S} s"
        if failed:
            why = (errors.strip().splitlines() or ["no output"])[-1]
            raise UsageError(
                f"{converter} could not convert the picture: {why}",
                where="-o",
                hint="write .svg instead",
            )
        return dst.read_bytes()


def mark_png(png: bytes) -> bytes:
    """`png` with a `Software: ncdc` text chunk right after its header chunk."""
    if not png.startswith(PNG_SIGNATURE):
        return png
    (length,) = struct.unpack(">I", png[8:12])
    end = 8 + 12 + length  # signature, then IHDR: length, type, data, crc
    chunk = b"tEXt" + PNG_MARK
    text = struct.pack(">I", len(PNG_MARK)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return png[:end] + text + png[end:]
