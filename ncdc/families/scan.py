"""The scan family: a running sum, max or min along one axis (`cumsum`, `cummax`, `cummin`),
with the elementwise ops that compute its operand and those that read its result fused in.

Two mappings, by where the scanned axis lies in the result:

- **rows** (the axis is the innermost): a warp walks one row. Each step a lane takes
  `values` consecutive elements and runs them on; the lanes' totals are scanned across the
  warp with `__shfl_up_sync` (five steps) and the warp's total carries into the next step.
- **columns** (another axis is innermost): a thread walks one column down the axis; the
  threads of a warp take neighbouring columns, so every step's loads coalesce. A step
  loads `values` elements together before running them on.

A long axis with few rows or columns to spread over is cut into `chunks` (the grid's y):
a first launch sums (or maxes) each chunk into an fp32 workspace, and the second starts
each chunk from the combined totals of the chunks before it, computing the operand again
(reduce, then scan: the inputs are read twice and nothing is written twice). The model
sees the second read (`Candidate.rereads`) and the recomputed ops.

    >>> from ncdc.language.load import load_diagram_text
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: running
    ... axes: {b: 8, n: 4096}
    ... inputs: {X: {axes: [b, n], dtype: bf16}}
    ... ops: ["Y = cumsum(X, over=n)"]
    ... outputs: [Y]
    ... ''')
    >>> plan = plan_diagram(d, load_hardware("h200"))
    >>> [launch.kernel for launch in FAMILY.render(plan.kernels[0], plan).launches]
    ... # doctest: +ELLIPSIS
    ['running_scan_rows_bf16_t..._v..._c...', ...]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    Workspace,
    block_share,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    Statement,
    address_along,
    computed_indirect,
    cpp_type,
    element_value,
    indirect_sources,
    needed_ops,
    op_statements,
    param_context,
    read_as_stored,
    row_start,
    size_name,
    status_param,
    status_workspace,
    struct_pointers,
    value_reads,
)
from ncdc.language.diagram import Diagram, Op
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "threads": (128, 256),
    # elements a lane (rows) or a thread (columns) takes per step; the most first: the
    # model sees the same traffic, and more per step is fewer shuffles and loop steps per
    # element (rows: a step's five-shuffle warp scan serves 32 x values elements)
    "values": (8, 4, 1),
    "chunks": (1, 4, 16, 64),  # pieces of the scanned axis, run side by side
}
MAX_GRID = 65535 * 16  # enough blocks to fill any GPU; the loop strides over the rest
# elements a chunk holds at least, by rows (a warp's step of 8 values per lane) and by
# columns (a thread's walk): fewer and the totals pass costs more than it spreads
MIN_CHUNK = {"rows": 256, "columns": 32}
# the running combine of each scan and the value it starts from
COMBINE = {
    "cumsum": ("op_add", "0.0f"),
    "cummax": ("op_max", "(-ncdc::infinity())"),
    "cummin": ("op_min", "ncdc::infinity()"),
}


def scan_op(kernel: Kernel, diagram: Diagram) -> Op | None:
    """The kernel's one scan, when every other op is elementwise and every output runs over
    the scan's axes (one value per element of the scan); else None."""
    scans = [op for op in kernel.ops if op.kind == "scan"]
    if len(scans) != 1 or any(
        op.kind not in ELEMENTWISE_KINDS for op in kernel.ops if op is not scans[0]
    ):
        return None
    op = scans[0]
    if any(set(diagram.tensor(n).axes) != set(op.axes) for n in kernel.outputs):
        return None
    return None if computed_indirect(kernel) else op


def _mapping(op: Op) -> str:
    return "rows" if op.axes[-1] == op.over[0] else "columns"


class ScanFamily:
    """A running sum, max or min along an axis, with elementwise ops around it."""

    name = "scan"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        op = scan_op(kernel, diagram)
        if op is None:
            return None
        return Family(self.name, {"all": op.axes, "scanned": op.over}, TILES)

    def candidates(
        self,
        model: KernelModel,
        family: Family,
        hw: Hardware,
        streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:
        from ncdc.model.cost import estimate_registers

        d, kernel = model.diagram, model.kernel
        op = scan_op(kernel, d)
        assert op is not None, "classified as a scan"
        axis = op.over[0]
        length = d.axes[axis]
        others = tuple(a for a in op.axes if a != axis)
        units = math.prod(d.axes[a] for a in others)  # rows, or columns
        rows = _mapping(op) == "rows"
        loaded = [n for n in kernel.inputs if n not in kernel.indirect_only]
        out = []
        for threads in TILES["threads"]:
            for values in TILES["values"]:
                step = 32 * values if rows else values
                if values > 1 and step > length:  # lanes or loop steps that hold nothing
                    continue
                per_block = threads // 32 if rows else threads
                blocks = ceil_div(units, per_block)
                for chunks in TILES["chunks"]:
                    least = max(MIN_CHUNK["rows" if rows else "columns"], step)
                    if chunks > 1 and (length < chunks * least
                                       or blocks * chunks > MAX_GRID):  # fmt: skip
                        continue
                    chunk = min(length, ceil_div(ceil_div(length, chunks), step) * step)
                    # what a block holds at once: its rows or columns, one step along
                    group = block_share(others, d.axes, per_block)
                    group[axis] = min(chunk, step)
                    grid = (min(MAX_GRID, blocks) if chunks == 1 else blocks, chunks, 1)
                    scan = LaunchShape(grid, (threads, 1, 1), 0)
                    shapes = (scan,) if chunks == 1 else (scan, scan)
                    registers = estimate_registers(values * (len(loaded) + 3), 1, 0)
                    again = tuple((n, 1) for n in loaded) if chunks > 1 else ()
                    redo = tuple((o.out, 1.0) for o in kernel.ops if o is not op) if again else ()
                    out.append(Candidate(
                        group, {}, group, {},
                        (("threads", threads), ("values", values), ("chunks", chunks)),
                        shapes, 1, 1, registers, rereads=again, recomputes=redo,
                    ))  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = ScanFamily()


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The launches of `kp.candidate`: with chunks, each chunk's total, then the scan."""
    d, kernel, c = plan.graph.diagram, kp.kernel, kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    op = scan_op(kernel, d)
    assert op is not None, "classified as a scan"
    axis, source = op.over[0], str(op.operands[0])
    others = [a for a in op.axes if a != axis]
    index = {a: f"ncdc_i_{a}" for a in op.axes}

    value, pointers = element_value(kernel), struct_pointers(kernel)
    chain = [o for o in kernel.ops if o is not op]
    inputs = set(kernel.inputs)

    def statements(ops: list[Op]) -> list[Statement]:
        out: list[Statement] = []
        for o in ops:
            out += op_statements(o, value, index.__getitem__, value(o.out), pointers, d)
        return out

    def loads(ops: list[Op], extra: tuple[str, ...] = ()) -> list[dict[str, str]]:
        """The inputs `ops` read by value (and `extra`), with each element's address."""
        read = dict.fromkeys([*value_reads(ops, inputs), *(n for n in extra if n in inputs)])
        return [{"name": n, "at": address_along(d.tensor(n), axis, index[axis])} for n in read]

    before = needed_ops(chain, [source], inputs)
    after = needed_ops(chain, kernel.outputs, inputs | {op.out})
    # the running value, rounded as stored where it is saved narrower and read again
    rounded = f"op_cast<{cpp_type(op.dtype)}>" if read_as_stored(op, d) else "op_id"
    scanned = Statement(value(op.out), rounded, ("ncdc_y",))
    before_loads, after_loads = loads(before, (source,)), loads(after)
    threads, values, chunks = c.param("threads"), c.param("values"), c.param("chunks")
    mapping = _mapping(op)
    dtype = op.dtype.replace("_", "")
    name = f"{kernel.name}_scan_{mapping}_{dtype}_t{threads}_v{values}_c{chunks}"
    sources = indirect_sources(kernel.ops)
    sized = dict.fromkeys([*op.axes, *(a for n in [*kernel.inputs, *sources]
                                        for a in d.tensor(n).axes)])  # fmt: skip
    sizes = [Param(size_name(a), "int64", value=d.axes[a]) for a in sized]
    reads = [Param(n, "tensor", d.tensor(n).dtype) for n in kernel.inputs]
    writes = [Param(n, "tensor", d.tensor(n).dtype, writes=True) for n in kernel.outputs]
    totals = f"ncdc_{op.out}_totals"
    units = math.prod(d.axes[a] for a in others)
    combine, identity = COMBINE[op.fn]
    held = (Param(totals, "workspace", "fp32"),) if chunks > 1 else ()
    scan_params = (*reads, *writes, *held, status_param(), *sizes)
    sum_params = (*reads, Param(totals, "workspace", "fp32", writes=True), status_param(),
                  *sizes)  # fmt: skip
    context = {
        "kernel": name,
        "doc": "; ".join(o.text for o in kernel.ops),
        "mapping": mapping,
        "threads": threads,
        "values": values,
        "chunks": chunks,
        "reverse": bool(op.params.get("reverse", False)),
        "combine": combine,
        "identity": identity,
        "length": size_name(axis),
        "position": index[axis],
        "units": " * ".join(size_name(a) for a in others) or "1",
        "unit_axes": [{"size": size_name(a), "index": index[a]} for a in reversed(others)],
        "before_loads": before_loads,
        "before": statements(before),
        "operand": value(source),
        "after_loads": after_loads,
        "after": [scanned, *statements(after)],
        "stores": [
            {"name": n, "at": address_along(d.tensor(n), axis, index[axis]), "value": value(n)}
            for n in kernel.outputs
        ],
        # where each tensor read or written by value starts in the unit
        "starts": [
            {
                "name": n,
                "ctype": cpp_type(d.tensor(n).dtype),
                "writes": n in kernel.outputs,
                "offset": row_start(d.tensor(n), axis, index.__getitem__),
            }
            for n in dict.fromkeys(
                [*(t["name"] for t in [*before_loads, *after_loads]), *kernel.outputs]
            )
        ],  # fmt: skip
        "totals": totals,
        "params": param_context(scan_params),
        "sum_params": param_context(sum_params) if chunks > 1 else [],
    }
    first = c.launches[0]
    if chunks == 1:
        launches: tuple[Launch, ...] = (Launch.of(name, first, scan_params),)
        spaces: tuple[Workspace, ...] = (status_workspace(),)
    else:
        launches = (
            Launch.of(f"{name}_totals", first, sum_params),
            Launch.of(name, c.launches[1], scan_params),
        )
        spaces = (Workspace(totals, "fp32", units * chunks), status_workspace())
    return KernelSource("scan.cu.j2", context, launches, spaces)
