"""The reduction family: softmax, log-softmax, norms and sum/max/mean/logsumexp over any
axes of their operand (a column softmax of X[m, n] over m, a whole-tensor max to a scalar),
with elementwise ops before and after them fused in. The row-wise family takes the common
case, one axis that is last in memory; this one takes the rest.

The operand is seen as kept x reduced, each flattened in the operand's memory order. A
block of `threads` is `tx` kept indices (consecutive addresses when the operand's last axis
is kept: coalesced across it) by threads / tx slices of the reduced range; a thread takes
`hold` values at a time and keeps them in registers when its share is one such chunk; a
longer share is held in shared memory (`stage`, with fewer kept indices a block) or read
again for the output, whichever the model prices faster. A reduction with few kept indices
splits its range over `splits` blocks, whose fp32 partials a second kernel merges in a
fixed order (deterministic); see templates/include/ncdc_reduce.cuh.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/amax.yaml"), load_hardware("h200"))
    >>> [launch.kernel for launch in FAMILY.render(plan.kernels[0], plan).launches]
    ... # doctest: +ELLIPSIS
    ['amax_reduce_fp32_t..._x1_h..._s...', 'amax_reduce_merge_fp32']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ncdc.errors import PlanError
from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    Workspace,
    no_arch_problem,
    no_loop_mix,
    no_masked_loop,
    pow2,
)
from ncdc.families.codegen import (
    ELEMENTWISE_KINDS,
    Statement,
    cpp_type,
    float_literal,
    needed_ops,
    op_statements,
    size_name,
    split_row_op,
)
from ncdc.families.rowwise import KINDS, MAX_GRID, ROW_KINDS, rows_contiguous
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "threads": (128, 256, 512),  # threads per block: tx kept indices by threads / tx slices
}
COALESCE = 32  # kept indices a block takes across the contiguous axis: one warp's width
# values of its share a thread loads at a time (held in registers): more keeps more bytes
# in flight where each load is narrow (2 bytes of a column), at the cost of registers
HOLDS = (8, 32)
VECTOR_BYTES = 16  # a thread's consecutive kept indices load as one vector of this width
MERGE_THREADS = 256
MAX_SPLITS = 65535  # grid.y
SPLIT_WAVES = 2  # a split reduction launches about this many blocks per SM
SECTOR = 32  # bytes of one DRAM/L2 sector: a staged block reads at least this much a row
PARTIAL = "ncdc_partial"  # the fp32 workspace of split partials: (max or mean, sum, count)


class ReduceFamily:
    """One softmax, norm or reduction over any axes of its operand, maps around it."""

    name = "reduce"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        if any(op.kind in ("contract", "gather", "slice") for op in kernel.ops):
            return None  # a gather or a slice: read from memory by other families, or saved
        rowops = [op for op in kernel.ops if op.kind in ROW_KINDS]
        if not rowops or any(op.kind not in (*ROW_KINDS, *ELEMENTWISE_KINDS) for op in kernel.ops):
            return None
        src = _operand(diagram, rowops[0])
        over = set(rowops[0].over)
        for op in rowops:
            if set(op.over) != over or _operand(diagram, op).axes != src.axes:
                return None
        if len(over) == 1 and src.axes[-1] in over and rows_contiguous(diagram, kernel, *over):
            return None  # the row-wise family's
        if any(not set(diagram.tensor(n).axes) <= set(src.axes) for n in _names(kernel)):
            return None
        kept = tuple(a for a in src.axes if a not in over)
        reduced = tuple(a for a in src.axes if a in over)
        return Family(self.name, {"kept": kept, "reduced": reduced}, TILES)

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
        rowop = _row_op(d, kernel)
        kept, reduced = family.axes("kept"), family.axes("reduced")
        kept_n = math.prod(d.axes[a] for a in kept)
        red_n = math.prod(d.axes[a] for a in reduced)
        src = _operand(d, rowop)
        wide = min(COALESCE, pow2(kept_n)) if src.axes[-1] in kept else 1
        per_element = _per_element_outputs(d, kernel, reduced)
        loaded = sum(DTYPES[d.tensor(n).dtype].bytes for n in _source_inputs(kernel, rowop))
        stage_bytes = DTYPES[_stage_dtype(d, kernel, rowop)].bytes
        # Held in shared memory: as few kept indices as still fill a 32-byte sector of the
        # narrowest per-element tensor a row (the model counts bytes, not sectors).
        narrowest = min(
            DTYPES[d.tensor(n).dtype].bytes
            for n in _names(kernel)
            if n in per_element or n == src.name
        )
        out: list[Candidate] = []
        shapes = set()
        # vectors first: where the model prices both alike (at the copy rate), the one
        # that issues fewer instructions a byte
        widths = sorted({1, _vector_width(d, kernel, kept, rowop)}, reverse=True)
        for threads, each, vec in itertools.product(TILES["threads"], HOLDS, widths):
            if threads > hw.limits.threads_per_block:
                continue
            # no more threads across than the kept indices fill (each takes `vec` of them)
            across = min(wide, pow2(ceil_div(kept_n, vec)))
            staged_tx = sorted(
                {t for t in (across, 16, 8, 4, 2) if t <= across and t * vec * narrowest >= SECTOR}
                | {across}
            )  # fmt: skip
            # a vector thread fills a sector with fewer threads across the columns: its
            # block may be narrower without staging (more blocks for the same columns)
            for tx in staged_tx if per_element or vec > 1 else [across]:
                if threads % tx:
                    continue
                ty = threads // tx
                # a vector thread holds `vec` values a step: as many bytes in flight
                hold = min(max(1, each // vec), pow2(ceil_div(red_n, ty)))
                if (threads, tx, hold, vec) in shapes:
                    continue
                shapes.add((threads, tx, hold, vec))
                # the held values, and each index's running and final statistics
                values = hold * vec * max(len(kernel.inputs), 1) + 6 * (vec - 1)
                registers = estimate_registers(values, 1, 0)
                chunks = ceil_div(red_n, (ty * hold))
                blocks_x = ceil_div(kept_n, tx * vec)
                split_opts = [1]
                if not per_element and blocks_x < hw.limits.sms * SPLIT_WAVES and chunks > 1:
                    want = ceil_div(hw.limits.sms * SPLIT_WAVES, blocks_x)
                    split_opts.append(min(want, chunks, MAX_SPLITS))
                stage_opts = [0]
                if per_element and chunks > 1:
                    stage_opts.append(red_n)  # the columns held in shared memory
                for splits in sorted(set(split_opts)):
                    for stage in stage_opts:
                        if tx != across and not stage and vec == 1:
                            continue  # a narrower block only pays where it is staged
                        shape = _Shape(threads, tx, hold, splits, stage,
                                       stage * tx * vec * stage_bytes, vec)  # fmt: skip
                        if _smem(shape) > hw.limits.smem_per_block_bytes:
                            continue
                        passes = 2 if per_element and chunks > 1 and not stage else 1
                        in_flight = 32 * hold * vec * loaded  # a warp's loads of a chunk
                        out.append(_candidate(model, family, hw, shape, passes, registers,
                                              in_flight))  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return []

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(no_masked_loop)


FAMILY = ReduceFamily()


@dataclass(frozen=True)
class _Shape:
    """A block's arrangement: see the module docstring."""

    threads: int
    tx: int
    hold: int
    splits: int
    stage: int  # reduced values of each kept index held in shared memory (0: read again)
    stage_bytes: int
    vec: int = 1  # consecutive kept indices a thread takes, loaded as one vector


def _smem(shape: _Shape) -> int:
    """Dynamic shared memory: the partial and merged statistics, then the staged columns."""
    return 4 * (3 * shape.threads + 3 * shape.tx) * shape.vec + shape.stage_bytes


def _vector_width(d: Diagram, kernel: Kernel, kept: tuple[str, ...], rowop: Op) -> int:
    """Consecutive kept indices a thread may take as one vector (VECTOR_BYTES of the widest
    tensor read or written per element), or 1: the operand's last axis must be kept and be
    the last axis of every such tensor that has it (one without it, a weight over the
    reduced axes, is one value for the whole vector), its size a multiple of the width, and
    nothing read per kept index (no input over the kept axes alone, no index of an axis), so
    that the thread's indices differ in that axis alone, by one element a tensor. At other
    sizes the kernel takes one index a thread (ncdc_reduce.cuh, `run`)."""
    inner = _operand(d, rowop).axes[-1]
    reduced = set(_operand(d, rowop).axes) - set(kept)
    if inner not in kept or any(op.kind == "index" for op in kernel.ops):
        return 1
    if any(not set(d.tensor(n).axes) & reduced for n in kernel.inputs):
        return 1  # an input over the kept axes alone
    elementwise = [  # read or written per element, varying along the axis
        n for n in (*kernel.inputs, *kernel.outputs)
        if set(d.tensor(n).axes) & reduced and inner in d.tensor(n).axes
    ]  # fmt: skip
    if any(d.tensor(n).axes[-1] != inner for n in elementwise):
        return 1
    if any(set(d.tensor(n).axes) & reduced and inner not in d.tensor(n).axes
           for n in kernel.outputs):  # fmt: skip
        return 1  # an output written per element but not along the vector's axis
    vec = VECTOR_BYTES // max(DTYPES[d.tensor(n).dtype].bytes for n in elementwise)
    return vec if vec > 1 and d.axes[inner] % vec == 0 else 1


def _stage_dtype(d: Diagram, kernel: Kernel, rowop: Op) -> str:
    """What staged values are held as: the operand's own type where it is an input (exact),
    else fp32."""
    src = _operand(d, rowop)
    return src.dtype if src.name in kernel.inputs else "fp32"


def _candidate(
    model: KernelModel,
    family: Family,
    hw: Hardware,
    shape: _Shape,
    passes: int,
    registers: int,
    in_flight: int,
) -> Candidate:
    """One launch: its block's share of each axis as the model counts it (tx kept indices
    from the innermost kept axis out; a kept reduced axis whole, a removed one a pass at a
    time)."""
    d, kernel = model.diagram, model.kernel
    threads, tx, splits = shape.threads, shape.tx, shape.splits
    kept, reduced = family.axes("kept"), family.axes("reduced")
    kept_n = math.prod(d.axes[a] for a in kept)
    group: dict[str, int] = {}
    left = tx * shape.vec
    for a in reversed(kept):
        take = min(d.axes[a], left)
        group[a] = take
        left = max(1, ceil_div(left, take))
    stream: dict[str, int] = {}
    # A reduced axis that the outputs keep (softmax, norms) is the block's whole where the
    # block holds it (registers or shared memory), else one pass (threads / tx slices of
    # hold values) at a time, as is one the outputs remove (streamed through the block).
    held = shape.stage > 0 or passes == 1
    left = threads // tx * shape.hold
    for a in reversed(reduced):
        if a in kernel.woven and held:
            group[a] = d.axes[a]
            continue
        take = min(d.axes[a], left)
        (group if a in kernel.woven else stream)[a] = take
        left = max(1, ceil_div(left, take))
    group = {a: group.get(a, 1) for a in kernel.woven}
    smem = _smem(shape)
    grid = min(MAX_GRID, ceil_div(kept_n, tx * shape.vec))
    shapes = [LaunchShape((grid, splits, 1), (threads, 1, 1), smem)]
    if splits > 1:
        shapes.append(LaunchShape((ceil_div(kept_n, MERGE_THREADS), 1, 1), (MERGE_THREADS, 1, 1)))
    rowop = _row_op(d, kernel)
    rereads = tuple((n, 1) for n in _source_inputs(kernel, rowop)) if passes == 2 else ()
    budget = min(registers, hw.limits.regs_per_sm // threads // 8 * 8)
    params = (
        ("threads", threads),
        ("tx", tx),
        ("hold", shape.hold),
        ("splits", splits),
        ("stage", shape.stage),
        ("passes", passes),
        ("vec", shape.vec),
    )
    return Candidate(
        group, stream, group, stream, params, tuple(shapes), 1, splits, budget, rereads,
        in_flight=in_flight,
    )  # fmt: skip


def _operand(d: Diagram, op: Op) -> Tensor:
    return d.tensor(next(o for o in op.operands if isinstance(o, str)))


def _names(kernel: Kernel) -> tuple[str, ...]:
    return (*kernel.inputs, *(op.out for op in kernel.ops))


def _per_element_outputs(d: Diagram, kernel: Kernel, reduced: tuple[str, ...]) -> list[str]:
    return [n for n in kernel.outputs if set(d.tensor(n).axes) & set(reduced)]


def _row_op(d: Diagram, kernel: Kernel) -> Op:
    """The kernel's one reduction, softmax or norm; PlanError for what the template
    cannot run."""
    rowops = [op for op in kernel.ops if op.kind in ROW_KINDS]
    if len(rowops) != 1:
        raise PlanError(
            f"kernel {kernel.name} has {len(rowops)} row operations; the reduction kernel runs one",
            hint=f"save {rowops[0].out} from its own kernel: "
            f"schedule: {{materialize: [{rowops[0].out}]}}",
        )
    return rowops[0]


def _source_inputs(kernel: Kernel, rowop: Op) -> list[str]:
    """The inputs the op's operand is computed from (what an output pass reads again)."""
    src = rowop.operands[0]
    assert isinstance(src, str)
    ops = needed_ops([op for op in kernel.ops if op is not rowop], [src], kernel.inputs)
    used = {src} | {n for op in ops for n in op.inputs}
    return [n for n in kernel.inputs if n in used]


def _strides(d: Diagram, axes: tuple[str, ...]) -> dict[str, str]:
    """Each axis's stride in a row-major tensor over `axes`, as a C++ product."""
    return {a: " * ".join(size_name(b) for b in axes[i + 1 :]) for i, a in enumerate(axes)}


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The reduction kernel of `kp.candidate` (and its merge): context and launches."""
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    r = _Reduction(kp, plan.graph.diagram)
    parts = split_row_op(
        r.kernel, r.rowop, r.elem_ops, r.per_element, r.after, r.value, r.statements, "ncdc_y"
    )
    d, kernel, rowop = r.d, r.kernel, r.rowop
    src = rowop.operands[0]
    assert isinstance(src, str)
    source_stmts = r.statements(parts.source_ops)
    source_loads = r.loads(source_stmts, r.value(src))
    finish_loads = r.loads(parts.finish_stmts, *(r.value(t) for t in parts.outputs_elem))
    stores = [
        {"name": t, "value": r.value(t), "expr": r.reduced_offset(t)} for t in parts.outputs_elem
    ]
    source_text = [t["expr"] for t in source_loads] + [a for s in source_stmts for a in s.args]
    finish_text = [t["expr"] for t in (*finish_loads, *stores)] + [
        a for s in parts.finish_stmts for a in s.args
    ]
    touched = list(dict.fromkeys((*kernel.inputs, *kernel.outputs)))
    threads, tx, hold, splits = (c.param(p) for p in ("threads", "tx", "hold", "splits"))
    name, merge_name = _names_of(kernel, d, c)
    params, workspace = _params(r, touched, splits)
    eps = rowop.params.get("eps", 1e-5) if rowop.kind == "norm" else 0.0
    context: dict[str, Any] = {
        "kernel": name,
        "merge_kernel": merge_name,
        "merge_threads": MERGE_THREADS,
        "doc": "; ".join(op.text for op in kernel.ops),
        "params": [
            {
                "name": p.name,
                "tensor": p.kind in ("tensor", "workspace"),
                "writes": p.writes,
                "ctype": cpp_type(p.dtype) if p.kind in ("tensor", "workspace") else "long long",
            }
            for p in params
        ],
        "kind": KINDS[rowop.fn],
        "eps": float_literal(eps),
        "threads": threads,
        "tx": tx,
        "hold": hold,
        "splits": splits,
        "stage_rows": c.param("stage"),
        "vec": _vec(c),
        "inner_size": size_name(r.kept[-1]) if r.kept else "1LL",
        "stage_ctype": cpp_type(_stage_dtype(d, kernel, rowop)),
        "per_element": bool(parts.outputs_elem),
        "per_row": bool(parts.outputs_row),
        "kept_axes": [{"index": r.index[a], "size": size_name(a)} for a in reversed(r.kept)],
        "kept_count": " * ".join(size_name(a) for a in r.kept) or "1LL",
        "reduced_count": " * ".join(size_name(a) for a in r.reduced),
        "partial_arg": f"ncdc_io.ncdc_t.{PARTIAL}" if splits > 1 else "nullptr",
        "offsets": [{"name": t, "expr": r.kept_offset(t)} for t in touched],
        "row_inputs": [t for t in kernel.inputs if t not in r.per_element],
        "row_statements": r.statements(parts.row_pre),
        "source_indices": r.needs_indices(source_text),
        "source_loads": source_loads,
        "source_statements": source_stmts,
        "source_value": r.value(src),
        "finish_indices": r.needs_indices(finish_text),
        "finish_hoisted": r.statements(parts.hoisted),
        "finish_loads": finish_loads,
        "finish_statements": parts.finish_stmts,
        "stores": stores,
        "finish_row_statements": r.statements(parts.finish_row_ops),
        "row_stores": [{"name": t, "value": r.value(t)} for t in parts.outputs_row],
    }
    launches = [Launch.of(name, c.main, params)]
    if splits > 1:
        launches.append(Launch.of(merge_name, c.launches[1], params))
    return KernelSource("reduce.cu.j2", context, tuple(launches), workspace)


def _vec(c: Candidate) -> int:
    """The candidate's kept indices a thread (1 for one recorded before vectors)."""
    return int(dict(c.params).get("vec", 1))


def _names_of(kernel: Kernel, d: Diagram, c: Candidate) -> tuple[str, str]:
    """The kernel's name (every parameter of the variant) and its merge kernel's ("" for
    none)."""
    threads, tx, hold, splits = (c.param(p) for p in ("threads", "tx", "hold", "splits"))
    out_dtype = d.tensor(kernel.outputs[0]).dtype.replace("_", "")
    streamed = "_p2" if c.param("passes") == 2 else ""
    staged = "_smem" if c.param("stage") else ""
    vec = f"_v{_vec(c)}" if _vec(c) > 1 else ""
    name = (f"{kernel.name}_reduce_{out_dtype}_t{threads}_x{tx}_h{hold}_s{splits}{vec}{streamed}"
            f"{staged}")  # fmt: skip
    return name, f"{kernel.name}_reduce_merge_{out_dtype}" if splits > 1 else ""


def _params(
    r: _Reduction, touched: list[str], splits: int
) -> tuple[list[Param], tuple[Workspace, ...]]:
    """The kernel's parameters (its tensors, the partials' workspace, the sizes) and the
    workspace a split reduction merges through."""
    d, kernel = r.d, r.kernel
    params = [Param(t, "tensor", d.tensor(t).dtype, writes=t in kernel.outputs) for t in touched]
    workspace: tuple[Workspace, ...] = ()
    if splits > 1:
        kept_n = math.prod(d.axes[a] for a in r.kept)
        params.append(Param(PARTIAL, "workspace", "fp32", writes=True))
        workspace = (Workspace(PARTIAL, "fp32", 3 * splits * kept_n),)
    params += [Param(size_name(a), "int64", value=d.axes[a]) for a in (*r.kept, *r.reduced)]
    return params, workspace


class _Reduction:
    """One reduction kernel as its template sees it: which tensors are per element and
    which per kept row, the C names of their values and indices, and their offsets."""

    def __init__(self, kp: KernelPlan, d: Diagram):
        self.d, self.kernel = d, kp.kernel
        self.kept, self.reduced = kp.family.axes("kept"), kp.family.axes("reduced")
        self.rowop = _row_op(d, self.kernel)
        self.per_element = {
            n for n in _names(self.kernel) if set(d.tensor(n).axes) & set(self.reduced)
        }
        self.after = {self.rowop.out}
        for op in self.kernel.ops:
            if set(op.inputs) & self.after:
                self.after.add(op.out)
        self.elem_ops = [op for op in self.kernel.ops if op is not self.rowop]
        self.index = {a: f"ncdc_i_{a}" for a in (*self.kept, *self.reduced)}

    def value(self, name: str) -> str:
        if name == self.rowop.out:
            return "ncdc_stat" if self.rowop.kind == "reduce" else f"ncdc_e_{name}"
        if name in self.per_element:
            return f"ncdc_a_{name}" if name in self.kernel.inputs else f"ncdc_e_{name}"
        return f"ncdc_r_{name}"

    def statements(self, ops: list[Op]) -> list[Statement]:
        out: list[Statement] = []
        for op in ops:
            out += op_statements(op, self.value, lambda a: self.index[a], self.value(op.out))
        return out

    def reduced_offset(self, name: str) -> str:
        """The offset of tensor `name` at reduced index ncdc_j, past its kept offset: one
        multiply where its reduced axes lie together in the operand's order."""
        t_axes = self.d.tensor(name).axes
        strides = _strides(self.d, t_axes)
        mine = tuple(a for a in t_axes if a in self.reduced)
        if not mine:
            return "0"
        start = t_axes.index(mine[0])
        together = (
            mine == tuple(a for a in self.reduced if a in mine)
            and t_axes[start : start + len(mine)] == mine
        )
        if together and mine == self.reduced:
            stride = strides[mine[-1]]
            return f"ncdc_j * {stride}" if stride else "ncdc_j"
        terms = [f"{self.index[a]} * {strides[a]}" if strides[a] else self.index[a] for a in mine]
        return " + ".join(terms)

    def kept_offset(self, name: str) -> str:
        t_axes = self.d.tensor(name).axes
        strides = _strides(self.d, t_axes)
        terms = [
            f"{self.index[a]} * {strides[a]}" if strides[a] else self.index[a]
            for a in t_axes
            if a in self.kept
        ]
        return " + ".join(terms) or "0"

    def loads(self, stmts: list[Statement], *extra: str) -> list[dict[str, Any]]:
        used = " ".join([*(" ".join(s.args) for s in stmts), *extra]).split()
        used_set = {w.strip("(),") for w in used}
        inner = self.kept[-1] if self.kept else ""
        return [
            {"name": n, "expr": self.reduced_offset(n), "along": inner in self.d.tensor(n).axes}
            for n in self.kernel.inputs
            if n in self.per_element and self.value(n) in used_set
        ]

    def needs_indices(self, exprs: list[str]) -> list[dict[str, str]]:
        text = " ".join(exprs)
        if not any(f"{self.index[a]}" in text for a in self.reduced):
            return []
        # outermost axis last: it needs no division
        return [{"index": self.index[a], "size": size_name(a)} for a in reversed(self.reduced)]
