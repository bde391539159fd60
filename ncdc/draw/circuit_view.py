"""What a circuit picture shows, before any geometry: each tensor with its axes (sizes, and
on a plan the per-core tile of each woven and streamed axis) and the level it lives in,
each operation as a box, and the transfers between levels with their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.model.graph import ON_CHIP, Partition, build_graph
from ncdc.model.structure import KernelModel
from ncdc.model.values import KernelPlan, Plan
from ncdc.units import format_bytes, format_rate, format_time


@dataclass(frozen=True)
class TensorView:
    """A tensor as drawn in its column: header, level and one label per wire."""

    name: str
    header: str
    level: str
    labels: tuple[str, ...]  # "q 4096"; a scalar gets one dashed pseudo-wire
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Edge:
    """A tensor entering an operation (or a result leaving one) and what happens on the way."""

    tensor: str
    level: str  # the level at the box end
    marker: str  # "load 64.0 MiB", "save 2.0 GiB", or "" where the level does not change
    labels: tuple[str, ...]  # per-core labels past the marker; () when there is none


@dataclass(frozen=True)
class OpView:
    op: Op
    label: str
    level: str  # where the operation computes
    inputs: tuple[Edge, ...]
    output: Edge


@dataclass(frozen=True)
class CircuitView:
    title: str
    subtitle: str
    tensors: dict[str, TensorView]
    ops: tuple[OpView, ...]
    levels: tuple[tuple[str, str], ...]  # (level, legend text)
    summary: tuple[str, ...]
    prefixes: str = ""  # what `g_` and `s_` mean, when a label uses one


def describe_circuit(diagram: Diagram, hw: Hardware, plan: Plan | None) -> CircuitView:
    """Levels, labels and transfer markers of every tensor and operation of `diagram`,
    from `plan` (or, without one, with whole arrays loaded on chip)."""
    names = [lv.name for lv in hw.levels]
    top, bottom = names[0], names[-1]
    block = hw.block_level or names[-1]
    graph = plan.graph if plan else build_graph(diagram, hw)
    kernel_plans: dict[str, KernelPlan | None] = {}
    models: dict[str, KernelModel] = {}
    for i, kernel in enumerate(graph.kernels):
        model = KernelModel(graph.diagram, kernel)  # one per kernel: its ops share it
        for op in kernel.ops:
            kernel_plans[op.out] = plan.kernels[i] if plan else None
            models[op.out] = model
    compute = bottom if plan else block

    def level_of(name: str) -> str:
        return top if graph.tensors[name].home != ON_CHIP else compute

    def labels(name: str, part: Partition | None, model: KernelModel | None) -> tuple[str, ...]:
        axes = diagram.tensor(name).axes
        if not axes:
            return ("scalar",)
        reach = model.reach.get(name, set()) if model else set()
        return tuple(_axis_label(a, diagram.axes[a], part, a in reach) for a in axes)

    tensors = {}
    for t in diagram.tensors:
        level = level_of(t.name)
        kp = kernel_plans.get(t.name)
        part = kp.tiles.get(block) if kp and level != top else None
        tensors[t.name] = TensorView(
            t.name,
            f"{t.name} · {t.dtype} · {level}",
            level,
            labels(t.name, part, models.get(t.name)),
            t.axes,
        )
    ops = []
    for op in diagram.ops:
        kp = kernel_plans[op.out]
        model = models[op.out]
        part = kp.tiles.get(block) if kp else None
        stage = compute
        if kp is not None and not (kp.smem_bytes > 0 and hw.block_level):
            stage = bottom
        elif kp is not None:
            stage = hw.block_level
        inputs = []
        for name in op.inputs:
            if level_of(name) == top:
                moved = _bytes_in(diagram, name, kp, model, names)
                shown = labels(name, part, model) if plan else ()
                inputs.append(Edge(name, stage, f"load {format_bytes(moved, digits=1)}", shown))
            else:
                inputs.append(Edge(name, compute, "", ()))
        t = diagram.tensor(op.out)
        if level_of(op.out) == top:
            saved = diagram.size(t) * DTYPES[t.dtype].bytes
            shown = labels(op.out, part, model) if plan else ()
            output = Edge(op.out, compute, f"save {format_bytes(saved, digits=1)}", shown)
        else:
            output = Edge(op.out, compute, "", ())
        ops.append(OpView(op, _op_label(op), compute, tuple(inputs), output))
    levels = tuple(
        (lv.name, f"{lv.name} {format_bytes(lv.capacity_bytes, digits=1)}/{lv.per}")
        for lv in hw.levels
    )
    how = "plan" if plan else "bare algorithm"
    every = [s for t in tensors.values() for s in t.labels]
    every += [s for ov in ops for e in (*ov.inputs, ov.output) for s in e.labels]
    return CircuitView(
        f"{diagram.name} on {hw.name} ({how})",
        diagram.doc,
        tensors,
        tuple(ops),
        levels,
        _summary(plan, block),
        prefix_legend(every, block),
    )


def prefix_legend(labels: list[str], block: str) -> str:
    """The legend line for the prefixes `labels` use: `g_` a grouped axis, of which one core
    of the block level holds the part shown; `s_` a streamed one, fed through in parts of
    the size shown. Empty when no label has a prefix (whole arrays).

        >>> prefix_legend(["g_q 64", "s_x 128", "d 128"], "smem")
        'g_q 64: q grouped, 64 of it per smem core; s_x 128: x streamed, 128 at a time'
    """
    parts = []
    for prefix, what in (("g_", "grouped, {n} of it per " + block + " core"),
                         ("s_", "streamed, {n} at a time")):  # fmt: skip
        ours = [s for s in labels if s.startswith(prefix)]
        used = next((s for s in ours if not s.endswith(" 1")), ours[0] if ours else None)
        if used is not None:
            axis, n = used[len(prefix) :].split(" ", 1)
            parts.append(f"{used}: {axis} {what.format(n=n)}")
    return "; ".join(parts)


def _axis_label(axis: str, size: int, part: Partition | None, sliced: bool) -> str:
    """`s_x 128` for a streamed axis, `g_q 64` for a grouped one, `q 4096` when whole."""
    if part is not None:
        s = part.stream.get(axis)
        if s is not None and s < size:
            return f"s_{axis} {s}"
        g = part.group.get(axis)
        if sliced and g is not None and g < size:
            return f"g_{axis} {g}"
    return f"{axis} {size}"


def _bytes_in(
    diagram: Diagram, name: str, kp: KernelPlan | None, model: KernelModel, levels: list[str]
) -> int:
    """Bytes of tensor `name` the kernel loads from the top level: the whole tensor without
    a plan; with one, what every group of the level below the top reads, and of a source
    read only through gathers, the distinct rows they select (as the model counts them)."""
    t = diagram.tensor(name)
    if kp is None:
        return diagram.size(t) * DTYPES[t.dtype].bytes
    if name in model.kernel.gathered_only:
        rows = sum(g.distinct * g.bytes for g in model.gathered if g.source == name)
        return int(min(rows, diagram.size(t) * DTYPES[t.dtype].bytes))
    g = kp.tiles[levels[1]].group
    return int(model.per_group(name, t.axes, g) * model.groups(g)) * DTYPES[t.dtype].bytes


def _op_label(op: Op) -> str:
    over = ",".join(op.over)
    if op.kind == "contract":
        text = f"contract {over}"
        scale = [f"{s:.4g}" if isinstance(s, float) else str(s) for s in op.scale]
        return f"{text} ×{'·'.join(scale)}" if scale else text
    if op.kind in ("reduce", "softmax", "norm"):
        return f"{op.fn} {over}"
    if op.kind == "cast":
        return f"cast {op.params.get('to', op.dtype)}"
    if op.kind == "mask":
        return f"{op.fn} {op.params.get('query')},{op.params.get('key')}"
    numbers = [f"{o:.4g}" for o in op.operands if not isinstance(o, str)]
    return " ".join([op.fn, *numbers])


def _summary(plan: Plan | None, block: str) -> tuple[str, ...]:
    if plan is None:
        return ("whole arrays; draw with a plan for tiles, traffic and time",)
    time = plan.predicted_time_s
    rate = format_rate(plan.flops / time, "FLOP/s") if time else "-"
    first = (
        f"predicted {format_time(time)}, {rate}, {plan.bound}-bound; "
        f"{plan.graph.hardware.levels[0].name} traffic {format_bytes(plan.top_bytes, digits=1)}"
    )
    if plan.unfused is not None:
        unfused = format_bytes(plan.unfused.top_bytes, digits=1)
        first += f" (unfused {unfused}, {plan.unfused.ratio:.3g}x)"
    lines = [first]
    for k in plan.kernels:
        part = k.tiles.get(block)
        tiles = []
        if part is not None:
            tiles = [f"g_{a} {v}" for a, v in part.group.items()]
            tiles += [f"s_{a} {v}" for a, v in part.stream.items()]
        lines.append(f"{k.kernel.name} ({k.family.name}): per {block} core " + " ".join(tiles))
    return tuple(lines)
