"""Kernel families: which template a kernel of the memory graph is, read from its structure.

A family names the roles its axes play (the `m`, `n`, `k` of a GEMM, the query and key
axes of attention) and declares, as data, the tile parameters its template accepts. The
cost model searches those candidates and the code generator renders the one it picks, so
the lists below are the single place to change what either may choose.

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.graph import build_graph
    >>> g = build_graph(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"))
    >>> f = classify_kernel(g.diagram, g.kernels[0])
    >>> f.name, f.roles["m"], f.roles["n"], f.roles["k"]
    ('gemm', ('m',), ('n',), ('k',))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ncdc.errors import PlanError
from ncdc.graph import Kernel
from ncdc.spec import Diagram, Op

ELEMENTWISE_KINDS = ("map", "binary", "cast", "mask")
DECODE_MAX_QUERIES = 16  # a query axis this short is a decode step: split the keys instead

# Candidate tiles per family, as data. Sizes are clamped to the axis they tile; the search
# keeps those that fit the hardware. The mma.sync shape is m16n8k16 (k32 for fp8).
GEMM_TILES: dict[str, tuple[int, ...]] = {
    "g_m": (32, 64, 128, 256),  # block tile along the m axis
    "g_n": (32, 64, 128, 256),  # block tile along the n axis
    "s_k": (16, 32, 64),  # chunk of the contracted axis per pipeline stage
    "s_k_fp8": (32, 64, 128),  # the same for 8-bit inputs (mma k32)
    "warps": (4, 8),  # arranged over the block tile; warp tile >= 16 x 16
    "stages": (2, 3, 4),  # cp.async pipeline depth in shared memory
}
ATTENTION_TILES: dict[str, tuple[int, ...]] = {
    "g_q": (64, 128),  # queries per block; one warp per 16 queries
    "s_x": (32, 64, 128),  # keys per streamed chunk
    "stages": (2,),  # K/V chunks double-buffered
}
DECODE_TILES: dict[str, tuple[int, ...]] = {
    "g_q": (16,),  # the whole (short) query axis, padded to one mma row block
    "s_x": (32, 64, 128),
    # key axis split across blocks, merged by a second pass: a few (batch, head) slices
    # still make two 4-warp blocks per SM, what HBM needs in flight (cost-model.md)
    "splits": (1, 2, 4, 8, 16, 32, 64),
    "warps": (4,),
    "stages": (2,),
}
ROWWISE_TILES: dict[str, tuple[int, ...]] = {
    "rows": (1, 2, 4, 8),  # rows per block; each row whole, read as 16-byte vectors
    "vectors_per_thread": (8,),  # 16-byte vectors a thread holds of one row
}
ELEMENTWISE_TILES: dict[str, tuple[int, ...]] = {
    "threads": (128, 256),
    "vectors_per_thread": (1, 2, 4),  # 16-byte vectors per thread
}
MMA_K = {1: 32, 2: 16, 4: 8}  # mma k per bytes per input value (fp8, 16-bit, tf32)
VECTOR_BYTES = 16


@dataclass(frozen=True)
class Family:
    """A kernel family and the role of each axis: role -> axes (in the kernel's order)."""

    name: str  # gemm | attention | decode_attention | rowwise | elementwise
    roles: Mapping[str, tuple[str, ...]] = field(hash=False)
    tiles: Mapping[str, tuple[int, ...]] = field(hash=False, default_factory=dict)

    def axes(self, role: str) -> tuple[str, ...]:
        return self.roles.get(role, ())


def classify_kernel(diagram: Diagram, kernel: Kernel) -> Family:
    """The family of `kernel`, decided from its operations' structure (not from names).

    Raises PlanError when no family fits; the hint says how to split the kernel.
    """
    ops = kernel.ops
    contracts = [op for op in ops if op.kind == "contract"]
    for attempt in (_gemm, _attention, _rowwise, _elementwise):
        family = attempt(diagram, kernel, contracts)
        if family is not None:
            return family
    listing = ", ".join(f"{op.fn} ({op.out})" for op in ops)
    raise PlanError(
        f"no kernel family for ops {listing} in kernel {kernel.name}",
        hint="materialize an intermediate in schedule.materialize to split the kernel",
    )


def _tensor_operands(op: Op) -> tuple[str, ...]:
    return tuple(o for o in op.operands if isinstance(o, str))


def _gemm(diagram: Diagram, kernel: Kernel, contracts: list[Op]) -> Family | None:
    """One contraction of two tensors, then elementwise ops on its result (an epilogue)."""
    if len(contracts) != 1 or kernel.ops[0] is not contracts[0]:
        return None
    mm = contracts[0]
    operands = _tensor_operands(mm)
    if len(operands) != 2:
        return None
    chain = {mm.out}
    for op in kernel.ops[1:]:
        if op.kind not in ("map", "binary", "cast") or not chain & set(op.inputs):
            return None
        # An epilogue keeps the tile of the result: other operands broadcast into it.
        for name in op.inputs:
            if name not in chain and not set(diagram.tensor(name).axes) <= set(mm.axes):
                return None
        chain.add(op.out)
    a, b = (diagram.tensor(n).axes for n in operands)
    out = mm.axes
    roles = {
        "batch": tuple(x for x in out if x in a and x in b),
        "m": tuple(x for x in out if x in a and x not in b),
        "n": tuple(x for x in out if x in b and x not in a),
        "k": mm.over,
    }
    if not roles["m"] or not roles["n"] or not roles["k"]:
        return None
    return Family("gemm", roles, GEMM_TILES)


def _attention(diagram: Diagram, kernel: Kernel, contracts: list[Op]) -> Family | None:
    """contract(Q, K) [-> mask / maps] -> softmax over x -> contract(P, V) over x."""
    if len(contracts) != 2:
        return None
    first, second = contracts
    soft = [op for op in kernel.ops if op.kind == "softmax"]
    if len(soft) != 1 or len(soft[0].over) != 1:
        return None
    (x,) = soft[0].over
    if second.over != (x,) or soft[0].out not in second.inputs or x in first.over:
        return None
    for op in kernel.ops:
        if op not in (first, second, soft[0]) and op.kind not in ELEMENTWISE_KINDS:
            return None
    q_name, k_name = _tensor_operands(first)
    v_name = next(n for n in _tensor_operands(second) if n != soft[0].out)
    q_axes, k_axes = diagram.tensor(q_name).axes, diagram.tensor(k_name).axes
    v_axes = diagram.tensor(v_name).axes
    # Axes of Q alone (heads of grouped-query attention, queries): the last is the query
    # axis, the rest are batch axes that K and V are not woven over.
    query = tuple(a for a in first.axes if a in q_axes and a not in k_axes)[-1:]
    head = tuple(a for a in second.axes if a in v_axes and a not in q_axes + k_axes) or tuple(
        a for a in first.over if a in v_axes
    )
    if len(query) != 1:
        return None
    batch = tuple(a for a in kernel.woven if a not in query + head)
    roles = {"batch": batch, "q": query, "x": (x,), "d": first.over, "d_v": head}
    if diagram.axes[query[0]] <= DECODE_MAX_QUERIES:
        return Family("decode_attention", roles, DECODE_TILES)
    return Family("attention", roles, ATTENTION_TILES)


def _rowwise(diagram: Diagram, kernel: Kernel, contracts: list[Op]) -> Family | None:
    """One softmax, norm or reduction over the last axis of its input, with maps around it."""
    if contracts:
        return None
    rowops = [op for op in kernel.ops if op.kind in ("softmax", "norm", "reduce")]
    if not rowops:
        return None
    row = rowops[0].over
    for op in rowops:
        src = diagram.tensor(_tensor_operands(op)[0])
        if op.over != row or len(row) != 1 or src.axes[-1] != row[0]:
            return None
    for op in kernel.ops:
        if op not in rowops and op.kind not in ELEMENTWISE_KINDS:
            return None
    rows = tuple(a for a in kernel.woven if a not in row)
    return Family("rowwise", {"rows": rows, "row": row}, ROWWISE_TILES)


def _elementwise(diagram: Diagram, kernel: Kernel, contracts: list[Op]) -> Family | None:
    if any(op.kind not in ELEMENTWISE_KINDS for op in kernel.ops):
        return None
    return Family("elementwise", {"all": kernel.woven}, ELEMENTWISE_TILES)
