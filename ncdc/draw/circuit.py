"""A diagram as a neural circuit diagram: tensors are bundles of wires, operations are boxes.

The picture reads left to right. Operations sit in columns by depth (an operation is one
column right of the deepest operation it reads from); a tensor sits in the column of the
operation that makes it, an input in the column just before its first reader. Inside a
box, a woven axis passes over the box from its input wires to its output wire, the two
wires of a contracted axis join at a dot, and an axis that a reduction, softmax or norm
takes in ends at a dot (and, for softmax and norms, starts again on the right).

Colour is the memory level a wire lives in. With a plan, inputs and outputs live at the
top level (HBM), are loaded into the level the kernel stages them in (SMEM, or registers
for row-wise kernels) and results are saved from registers; a marker on the wire says
"load" or "save" and the bytes the plan moves, and the wires past it carry the per-core
sizes (`g_q 64` for a grouped axis, `s_x 128` for a streamed one). Without a plan
(`plain`), whole arrays are loaded into the on-chip level, as in the paper's first
diagrams.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> pic = layout_circuit(load_diagram("diagrams/softmax.yaml"), load_hardware("napkin"))
    >>> pic.texts()[0].text
    'softmax on napkin (bare algorithm)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ncdc.draw.circuit_view import CircuitView, Edge, OpView, TensorView, describe_circuit
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
    segments,
)
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.values import Plan

PITCH = 24  # between the wires of one bundle


HEAD = 36  # above a bundle's first wire: its header row


GAP = 12  # between bundles stacked in one column


TAIL = 8  # below a bundle's last wire


BOX_PAD = 16  # between a box edge and its outermost port


BOX_LABEL = 18  # above a box: its label


CURVE = 28  # horizontal room for a wire to bend into a port
LABEL_ROOM = 4  # between a wire's label and its bend (the label's width is an estimate)


LABEL = 11  # font size of wire labels


HEADER = 12  # font size of tensor headers and box labels


MARGIN = 24


CHAR = 0.6  # monospace advance, in ems


def _width(text: str, size: float) -> float:
    return len(text) * size * CHAR


@dataclass(frozen=True)
class _Bundle:
    name: str
    column: int
    y0: float  # first wire
    count: int  # wires (a scalar has one)

    def ys(self) -> list[float]:
        return [self.y0 + i * PITCH for i in range(self.count)]

    @property
    def bottom(self) -> float:
        return self.y0 + (self.count - 1) * PITCH + TAIL


@dataclass(frozen=True)
class _Box:
    index: int  # into CircuitView.ops
    column: int
    top: float
    bottom: float
    ports_in: tuple[tuple[float, ...], ...]  # per input edge, one y per wire
    ports_out: tuple[float, ...]


def _stack_offsets(counts: list[int]) -> list[float]:
    """First-wire offsets of bundles stacked top to bottom, the first at 0."""
    out, y = [], 0.0
    for n in counts:
        out.append(y)
        y += (n - 1) * PITCH + TAIL + GAP + HEAD
    return out


def _depths(view: CircuitView) -> tuple[dict[int, int], dict[str, int]]:
    """Column of every operation (1, 2, ...) and of every tensor (0, 1, ...)."""
    made = {ov.op.out: i for i, ov in enumerate(view.ops)}
    op_col: dict[int, int] = {}
    for i, ov in enumerate(view.ops):  # topological order
        op_col[i] = 1 + max(
            (op_col[made[e.tensor]] for e in ov.inputs if e.tensor in made), default=0
        )
    first_read: dict[str, int] = {}  # a tensor's earliest reader's column
    for i, ov in enumerate(view.ops):
        for name in _reads(ov):
            first_read[name] = min(first_read.get(name, op_col[i]), op_col[i])
    tensor_col = {}
    for name in view.tensors:
        if name in made:
            tensor_col[name] = op_col[made[name]]
        else:
            tensor_col[name] = first_read.get(name, 1) - 1
    return op_col, tensor_col


def _reads(ov: OpView) -> list[str]:
    return [e.tensor for e in ov.inputs]


def _reader_order(view: CircuitView) -> dict[str, tuple[int, int]]:
    """For each tensor read, (its first reader, its place among that reader's inputs)."""
    order: dict[str, tuple[int, int]] = {}
    for i, ov in enumerate(view.ops):
        for j, name in enumerate(_reads(ov)):
            order.setdefault(name, (i, j))
    return order


def _place(view: CircuitView, top: float) -> tuple[dict[str, _Bundle], list[_Box]]:
    """Vertical positions: bundles stacked per column, boxes beside what they read."""
    op_col, tensor_col = _depths(view)
    made = {ov.op.out: i for i, ov in enumerate(view.ops)}
    readers = _reader_order(view)
    count = {n: max(len(t.axes), 1) for n, t in view.tensors.items()}
    bundles: dict[str, _Bundle] = {}
    boxes: list[_Box] = []
    desired: dict[str, float] = {}
    names_in = _by_column(tensor_col)
    ops_in = _by_column(op_col)
    for column in range(max(tensor_col.values()) + 1):
        names = names_in.get(column, [])
        names.sort(key=lambda n: _order_key(view, n, made, readers))
        passing = _passing(view, bundles, op_col, column)
        floor = top
        for n in names:
            y0 = _clear_of(max(desired.get(n, floor), floor), count[n], passing)
            bundles[n] = _Bundle(n, column, y0, count[n])
            floor = bundles[n].bottom + GAP + HEAD
        ops = ops_in.get(column + 1, [])
        # an op with no inputs (index) sorts first
        ops.sort(key=lambda i: min((bundles[e.tensor].y0 for e in view.ops[i].inputs), default=top))
        floor = top
        passing = _passing(view, bundles, op_col, column + 0.5)
        for i in ops:
            box = _box(view, i, column + 1, bundles, floor, count, passing)
            boxes.append(box)
            floor = box.bottom + GAP + BOX_LABEL + BOX_PAD
            desired[view.ops[i].op.out] = box.ports_out[0]
    return bundles, boxes


def _passing(
    view: CircuitView, bundles: dict[str, _Bundle], op_col: dict[int, int], column: float
) -> list[float]:
    """Heights of the wires that run straight through tensor `column` (or, at a half, the
    box column right of it): those of a bundle placed left of it read by a box right of it
    (a wire keeps its height until the gap before its reader)."""
    ys: set[float] = set()
    for i, ov in enumerate(view.ops):
        if op_col[i] <= column:
            continue
        for e in ov.inputs:
            b = bundles.get(e.tensor)
            if b is not None and b.column < column:
                ys.update(b.ys())
    return sorted(ys)


def _clear_of(y0: float, count: int, passing: list[float]) -> float:
    """The first height from `y0` down where a bundle of `count` wires, its header and its
    labels included, has no passing wire through it: a bundle never sits on another's
    wire, nor a wire across its labels."""
    moved = True
    while moved:
        moved = False
        for y in passing:
            if y0 - HEAD - 2 <= y <= y0 + (count - 1) * PITCH + TAIL:
                y0, moved = y + HEAD + 4, True
    return y0


def _by_column(column_of: dict[Any, int]) -> dict[int, list[Any]]:
    """The keys of `column_of` listed per column, in their order (one pass, not one per
    column: a long chain has as many columns as operations)."""
    out: dict[int, list[Any]] = {}
    for key, column in column_of.items():
        out.setdefault(column, []).append(key)
    return out


def _order_key(
    view: CircuitView, name: str, made: dict[str, int], readers: dict[str, tuple[int, int]]
) -> tuple[int, int]:
    """Tensors of a column in the order their readers take them, so wires run straight."""
    return readers.get(name, (len(view.ops) + made.get(name, 0), 0))


def _box(
    view: CircuitView,
    index: int,
    column: int,
    bundles: dict[str, _Bundle],
    floor: float,
    count: dict[str, int],
    passing: list[float],
) -> _Box:
    ov = view.ops[index]
    counts = [count[e.tensor] for e in ov.inputs]
    offsets = _stack_offsets(counts)
    p0 = max(bundles[ov.inputs[0].tensor].y0, floor) if ov.inputs else floor
    for y in passing:  # ascending: the box's label clear of every wire passing over the box
        if p0 - BOX_PAD - BOX_LABEL - 2 <= y <= p0 - BOX_PAD:
            p0 = y + BOX_PAD + BOX_LABEL + 2
    ports_in = tuple(
        tuple(p0 + off + j * PITCH for j in range(n))
        for off, n in zip(offsets, counts, strict=True)
    )
    last_in = ports_in[-1][-1] if ports_in else p0
    n_out = count[ov.op.out]
    span_out = (n_out - 1) * PITCH
    first_out = p0 + max((last_in - p0 - span_out) / 2, 0)
    if len(ov.inputs) <= 1 or n_out == counts[0]:
        first_out = p0  # a row-wise operation keeps its wires straight
    ports_out = tuple(first_out + j * PITCH for j in range(n_out))
    bottom = max(last_in, ports_out[-1]) + BOX_PAD
    return _Box(index, column, p0 - BOX_PAD, bottom, ports_in, ports_out)


@dataclass(frozen=True)
class _Columns:
    """Horizontal positions: each tensor column and each box column, as (left, right)."""

    tensor: dict[int, tuple[float, float]]
    box: dict[int, tuple[float, float]]
    mark_in: dict[int, float]  # box column -> x of the load markers before it
    mark_out: dict[int, float]  # box column -> x of the save markers after it


def _columns(view: CircuitView, bundles: dict[str, _Bundle], boxes: list[_Box]) -> _Columns:
    last = max(b.column for b in bundles.values())
    tensor_w = {c: 60.0 for c in range(last + 1)}
    for b in bundles.values():
        t = view.tensors[b.name]
        w = max([_width(t.header, HEADER), *(_width(s, LABEL) for s in t.labels)]) + 12
        tensor_w[b.column] = max(tensor_w[b.column], w)
    box_w = {c: 80.0 for c in range(1, last + 1)}
    for box in boxes:
        box_w[box.column] = max(box_w[box.column], _width(view.ops[box.index].label, HEADER) + 16)
    tensor: dict[int, tuple[float, float]] = {}
    box_x: dict[int, tuple[float, float]] = {}
    mark_in: dict[int, float] = {}
    mark_out: dict[int, float] = {}
    x = float(MARGIN)
    boxes_in = _by_column({b.index: b.column for b in boxes})
    for c in range(last + 1):
        if c > 0:
            edges = [e for i in boxes_in.get(c, []) for e in view.ops[i].inputs]
            wm, lb = _gap_content(edges)
            mark_in[c] = x + 12 + wm / 2
            gap = 12 + wm + 12 if wm else 0
            # the labels end LABEL_ROOM short of the bend, where a wire may turn steeply
            gap = max(gap, 12 + wm / 2 + 8 + lb + LABEL_ROOM + CURVE if wm else 2 * CURVE)
            box_x[c] = (x + gap, x + gap + box_w[c])
            x = box_x[c][1]
            outs = [view.ops[i].output for i in boxes_in.get(c, [])]
            wm, lb = _gap_content(outs)
            offset = max(CURVE + lb + 14, 8 + wm / 2) if wm else 0
            mark_out[c] = x + offset
            x += offset + wm / 2 + 12 if wm else CURVE + 12
        tensor[c] = (x, x + tensor_w[c])
        x += tensor_w[c]
    return _Columns(tensor, box_x, mark_in, mark_out)


def _gap_content(edges: list[Edge]) -> tuple[float, float]:
    """Widest marker text and widest per-core label among `edges`."""
    wm = max((_width(e.marker, LABEL) for e in edges if e.marker), default=0.0)
    lb = max((_width(s, LABEL) for e in edges for s in e.labels), default=0.0)
    return wm, lb


def layout_circuit(diagram: Diagram, hw: Hardware, plan: Plan | None = None) -> Picture:
    """The neural circuit diagram of `diagram` on `hw`, with `plan`'s levels and tiles."""
    view = describe_circuit(diagram, hw, plan)
    colour = {name: level_colour(name, i) for i, name in enumerate(lv.name for lv in hw.levels)}
    top = 64 + HEAD
    bundles, boxes = _place(view, top)
    cols = _columns(view, bundles, boxes)
    items: list[Item] = [
        Text(MARGIN, 26, view.title, 15, bold=True),
        Text(MARGIN, 46, view.subtitle, LABEL, colour=MUTED),
    ]
    made = {view.ops[b.index].op.out: b for b in boxes}
    wires: list[Item] = []
    marks: list[Item] = []
    for b in bundles.values():
        items += _draw_tensor(view.tensors[b.name], b, cols, colour, b.name not in made)
    marked: set[tuple[str, int]] = set()
    for box in boxes:
        ov = view.ops[box.index]
        x0, x1 = cols.box[box.column]
        for edge, ports in zip(ov.inputs, box.ports_in, strict=True):
            src = bundles[edge.tensor]
            start = cols.tensor[src.column][1]
            mx = cols.mark_in[box.column] if edge.marker else None
            first = (edge.tensor, box.column) not in marked
            wires += _edge_in(view, edge, src, ports, start, x0, mx, colour, first, marks)
            marked.add((edge.tensor, box.column))
        dst = bundles[ov.op.out]
        end = cols.tensor[dst.column][0]
        mx = cols.mark_out[box.column] if ov.output.marker else None
        wires += _edge_out(view, ov.output, dst, box.ports_out, x1, end, mx, colour, marks)
    items += wires
    for box in boxes:
        items += _draw_box(view, box, cols.box[box.column], colour)
    items += _clear_markers(marks, items)
    bottom = max([b.bottom for b in bundles.values()] + [b.bottom for b in boxes])
    right = max(r for _, r in cols.tensor.values()) + MARGIN
    legend, height, width = _legend(view, colour, bottom + 36, right)
    items += legend
    width = max(width, *(t.bbox().right + MARGIN for t in items if isinstance(t, Text)))
    return Picture(view.title, width, height, tuple(items))


def _draw_tensor(
    t: TensorView, b: _Bundle, cols: _Columns, colour: dict[str, str], source: bool
) -> list[Item]:
    x0, x1 = cols.tensor[b.column]
    c = colour[t.level]
    items: list[Item] = [Text(x0, b.y0 - 21, t.header, HEADER, colour=c, bold=True)]
    dash = "4 3" if not t.axes else ""
    for y, label in zip(b.ys(), t.labels, strict=True):
        items.append(Path(((x0, y), (x1, y)), c, 2.5, dash, css=f"wire level-{t.level}"))
        items.append(Text(x0 + 4, y - 5, label, LABEL, colour=INK))
        if source:
            items.append(Dot(x0, y, 3.5, c))
    return items


def _edge_in(
    view: CircuitView,
    edge: Edge,
    src: _Bundle,
    ports: tuple[float, ...],
    start: float,
    box_left: float,
    mark_x: float | None,
    colour: dict[str, str],
    first: bool,
    marks: list[Item],
) -> list[Item]:
    t = view.tensors[edge.tensor]
    dash = "4 3" if not t.axes else ""
    out: list[Item] = []
    bend = box_left - CURVE
    for j, (y, py) in enumerate(zip(src.ys(), ports, strict=True)):
        if mark_x is None:
            pts = ((start, y), (bend, y), (box_left, py))
            out.append(Path(pts, colour[edge.level], 2.5, dash, curve=True))
            continue
        out.append(Path(((start, y), (mark_x, y)), colour[t.level], 2.5, dash))
        pts = ((mark_x, y), (bend, y), (box_left, py))
        out.append(Path(pts, colour[edge.level], 2.5, dash, curve=True))
        if edge.labels and first:
            marks.append(Text(mark_x + 8, y - 5, edge.labels[j], LABEL, colour=INK))
    if mark_x is not None and first:
        marks += _marker(mark_x, src.ys(), edge.marker)
    return out


def _edge_out(
    view: CircuitView,
    edge: Edge,
    dst: _Bundle,
    ports: tuple[float, ...],
    box_right: float,
    end: float,
    mark_x: float | None,
    colour: dict[str, str],
    marks: list[Item],
) -> list[Item]:
    t = view.tensors[edge.tensor]
    out: list[Item] = []
    bend = box_right + CURVE
    for j, (py, y) in enumerate(zip(ports, dst.ys(), strict=True)):
        stop = mark_x if mark_x is not None else end
        out.append(
            Path(((box_right, py), (bend, y), (stop, y)), colour[edge.level], 2.5, curve=True)
        )
        if mark_x is not None:
            out.append(Path(((mark_x, y), (end, y)), colour[t.level], 2.5))
            if edge.labels:
                marks.append(Text(bend + 4, y - 5, edge.labels[j], LABEL, colour=INK))
    if mark_x is not None:
        marks += _marker(mark_x, dst.ys(), edge.marker)
    return out


def _marker(x: float, ys: list[float], text: str) -> list[Item]:
    """A transfer: a bar across the bundle where its colour changes, and the bytes moved."""
    rect = Rect(x - 3, ys[0] - 8, 6, ys[-1] - ys[0] + 16)
    return [
        Shape(rect, "#ffffff", INK, 1.2, radius=2, css="transfer", title=text),
        Text(x, ys[0] - 21, text, LABEL, anchor="middle", colour=INK),
    ]


def _clear_markers(marks: list[Item], drawn: list[Item]) -> list[Item]:
    """The markers with each byte count moved, where a wire runs through it, to the first
    free place around its bar: above it centred, above it ending at the bar, then below
    it the same two ways, then starting at the bar (a wire that bends down to a lower box
    leaves the bar's left side free)."""
    lines = [(p, segments(p)) for p in drawn if isinstance(p, Path)]
    out: list[Item] = []
    bar: Rect | None = None
    for item in marks:
        if isinstance(item, Shape):
            bar = item.rect
        if isinstance(item, Text) and item.anchor == "middle" and bar is not None:
            item = _free_spot(item, bar, lines, [i for i in drawn + out if i is not item])
        out.append(item)
    return out


def _free_spot(text: Text, bar: Rect, lines: list[tuple[Path, list]], others: list[Item]) -> Text:
    x = bar.x + bar.w / 2
    above, below = text.y, bar.bottom + LABEL + 2
    tries = [(x, above, "middle"), (x + 4, above, "end"), (x, below, "middle"),
             (x + 4, below, "end"), (x - 4, above, "start"), (x - 4, below, "start")]  # fmt: skip
    solids = [i.bbox() for i in others if isinstance(i, Text)]
    solids += [i.rect for i in others if isinstance(i, Shape) and i.solid and i.rect != bar]
    for tx, ty, anchor in tries:
        t = Text(tx, ty, text.text, text.size, anchor, text.colour)
        box = t.bbox()
        crossed = any(crosses(a, b, box, p.width / 2) for p, segs in lines for a, b in segs)
        if not crossed and not any(box.intersects(r) for r in solids):
            return t
    return text


def _draw_box(
    view: CircuitView, box: _Box, x: tuple[float, float], colour: dict[str, str]
) -> list[Item]:
    """The box, then its wires drawn over it: woven axes pass over, contracted axes join,
    reduced axes end at a dot, new axes start at one."""
    ov = view.ops[box.index]
    op = ov.op
    x0, x1 = x
    c = colour[ov.level]
    rect = Rect(x0, box.top, x1 - x0, box.bottom - box.top)
    items: list[Item] = [
        Shape(rect, "#f4f4f1", INK, 1.5, radius=6, css="op", title=op.text),
        Text((x0 + x1) / 2, box.top - 6, ov.label, HEADER, anchor="middle", bold=True),
    ]
    out_axes = view.tensors[op.out].axes
    out_port = dict(zip(out_axes, box.ports_out, strict=False))
    fed: set[str] = set()
    joins: dict[str, list[float]] = {}
    for edge, ports in zip(ov.inputs, box.ports_in, strict=True):
        axes = view.tensors[edge.tensor].axes
        if not axes:
            items.append(Path(((x0, ports[0]), (x0 + 10, ports[0])), c, 2.5, "4 3"))
            items.append(Dot(x0 + 10, ports[0], 3.5, c))
            continue
        for a, py in zip(axes, ports, strict=True):
            if op.kind == "contract" and a in op.over:
                joins.setdefault(a, []).append(py)
            elif a in out_port and a not in op.over:
                pts = ((x0, py), (x1, out_port[a]))
                items.append(Path(pts, c, 2.5, curve=True, css="woven"))
                fed.add(a)
            else:
                items.append(Path(((x0, py), (x0 + 12, py)), c, 2.5))
                items.append(Dot(x0 + 12, py, 3.5, c))
    for ys in joins.values():
        jx, jy = x0 + (x1 - x0) * 0.4, sum(ys) / len(ys)
        for py in ys:
            items.append(Path(((x0, py), (jx, jy)), c, 2.5, curve=True, css="join"))
        items.append(Dot(jx, jy, 4, c))
    for a, py in out_port.items():
        if a not in fed:
            items.append(Dot(x1 - 12, py, 3.5, c))
            items.append(Path(((x1 - 12, py), (x1, py)), c, 2.5))
    if not out_axes:
        items.append(Dot(x1 - 12, box.ports_out[0], 3.5, c))
    return items


def _legend(
    view: CircuitView, colour: dict[str, str], y: float, right: float
) -> tuple[list[Item], float, float]:
    """Swatches of the levels (a wire's colour is the level it lives in), what the axis
    labels' prefixes mean, then the plan's summary; returns items, height, width."""
    items: list[Item] = [Text(MARGIN, y, "memory levels:", LABEL, colour=MUTED)]
    x = MARGIN + _width("memory levels: ", LABEL)
    for name, text in view.levels:
        items.append(Path(((x, y - 4), (x + 22, y - 4)), colour[name], 5, css=f"swatch {name}"))
        items.append(Text(x + 28, y, text, LABEL, colour=INK))
        x += 28 + _width(text, LABEL) + 18
    note = "▮ load/save: bytes moved across the top level"
    items.append(Text(x, y, note, LABEL, colour=MUTED))
    width = max(right, x + _width(note, LABEL) + MARGIN)
    if view.prefixes:
        y += 18
        items.append(Text(MARGIN, y, view.prefixes, LABEL, colour=MUTED))
    for line in view.summary:
        y += 18
        items.append(Text(MARGIN, y, line, LABEL, colour=INK))
    return items, y + MARGIN, width
