"""GEMM kernels: C = epilogue(scale * A B) for one contraction and the maps after it.

16-bit and 8-bit inputs run on tensor cores (mma.sync, fp32 accumulators), fp32 inputs on
CUDA cores; both stream k through a multi-stage cp.async pipeline (templates/gemm.cu.j2,
templates/include/ncdc_gemm.cuh). Roles come from the family (`batch`, `m`, `n`, `k`);
layouts from the diagram (an axis listed last is contiguous): A may be k- or m-contiguous,
B k- or n-contiguous. Extra m or n axes and the batch axes are flattened onto the grid's z,
each tensor with its own pitch per axis (0 where it lacks the axis, as K and V of
grouped-query attention lack the query-head axis).

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.tiling import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"),
    ...                     tiles={"m": 64, "n": 64, "k": 32})
    >>> render_gemm(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'matmul_gemm_bf16_m64_n64_k32_w..._s..._ak_bn'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ncdc.cost import KernelPlan, Plan
from ncdc.errors import PlanError
from ncdc.render import KernelSource, Launch, Param, cpp_type
from ncdc.spec import DTYPE_BYTES, Diagram, Op, Tensor

MMA_K = {1: 32, 2: 16}  # mma.sync k per bytes per input value
SIMT_MAX_OUTPUTS = 64  # fp32 accumulators per thread before registers run out
GATHER_MAX_OUTPUTS = 64  # the same for 8-bit operands whose fragments are gathered bytewise
MAX_GRID_Y = 65535
MAX_GRID_Z = 65535  # more batches than this loop inside the kernel
# Every name the generated code makes up starts with ncdc_, which no diagram name may: the
# problem sizes are ncdc_size_<axis>, an epilogue value is ncdc_v_<name>.
SIZE_PREFIX = "ncdc_size_"


@dataclass(frozen=True)
class GemmTiles:
    """The block tile as the kernel runs it: sizes legal for the instruction shapes."""

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    tm: int = 0  # fp32 path: outputs per thread along m and n
    tn: int = 0

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n


@dataclass(frozen=True)
class Operands:
    """The contraction's tensors and the axes each role stands for."""

    a: Tensor
    b: Tensor
    c: Tensor
    m: str
    n: str
    k: str
    batch: tuple[str, ...]  # flattened onto the grid's z, outermost first
    a_k: bool  # A's contiguous axis is k (else m)
    b_k: bool  # B's contiguous axis is k (else n)


def render_gemm(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The GEMM kernel of `kp`: template context and one launch (see the module docstring)."""
    d = plan.graph.diagram
    mm = kp.kernel.ops[0]
    ops = _operands(kp, d, mm)
    p = DTYPE_BYTES[ops.a.dtype]
    path = "simt" if ops.a.dtype == "fp32" else "mma"
    tiles = _tiles(kp, ops, p, path)
    name = (
        f"{kp.kernel.name}_gemm_{ops.a.dtype}_m{tiles.bm}_n{tiles.bn}_k{tiles.bk}"
        f"_w{tiles.warps}_s{tiles.stages}_a{'k' if ops.a_k else 'm'}_b{'k' if ops.b_k else 'n'}"
    )
    epilogue = _epilogue(kp, d, mm, ops)
    axes = [a for a in kp.kernel.axes if a in d.axes]
    params = [Param(t, "tensor", d.tensor(t).dtype) for t in kp.kernel.inputs]
    params.append(Param(ops.c.name, "tensor", ops.c.dtype, writes=True))
    params += [Param(SIZE_PREFIX + a, "int64", value=d.axes[a]) for a in axes]
    batches = math.prod(d.axes[a] for a in ops.batch)
    grid = (-(-d.axes[ops.n] // tiles.bn), -(-d.axes[ops.m] // tiles.bm), min(batches, MAX_GRID_Z))
    if grid[1] > MAX_GRID_Y:
        raise PlanError(
            f"{grid[1]} block rows along '{ops.m}' exceed the grid limit {MAX_GRID_Y}",
            hint=f"a larger tile for '{ops.m}' (--tile {ops.m}=SIZE)",
        )
    smem = _smem_bytes(tiles, ops, p, path)
    tensors = [ops.a, ops.b, ops.c] + [d.tensor(t["name"]) for t in epilogue["operands"]]
    context: dict[str, Any] = {
        "kernel": name,
        "summary": f"{mm.text} (+{len(kp.kernel.ops) - 1} epilogue ops)",
        "path": path,
        "threads": 32 * tiles.warps,
        "bm": tiles.bm,
        "bn": tiles.bn,
        "bk": tiles.bk,
        "warps_m": tiles.warps_m,
        "warps_n": tiles.warps_n,
        "stages": tiles.stages,
        "tm": tiles.tm,
        "tn": tiles.tn,
        "a_k": "true" if ops.a_k else "false",
        "b_k": "true" if ops.b_k else "false",
        "smem_bytes": smem,
        "a": {"name": ops.a.name, "ctype": cpp_type(ops.a.dtype)},
        "b": {"name": ops.b.name, "ctype": cpp_type(ops.b.dtype)},
        "c": {"name": ops.c.name, "ctype": cpp_type(ops.c.dtype)},
        "params": [
            {"name": q.name, "ctype": cpp_type(q.dtype) if q.dtype else "", "writes": q.writes}
            for q in params
        ],
        "size_m": SIZE_PREFIX + ops.m,
        "size_n": SIZE_PREFIX + ops.n,
        "size_k": SIZE_PREFIX + ops.k,
        "lda": _pitch(ops.a, ops.m if ops.a_k else ops.k),
        "ldb": _pitch(ops.b, ops.n if ops.b_k else ops.k),
        "ldc_m": _pitch(ops.c, ops.m),
        "ldc_n": _pitch(ops.c, ops.n),
        "batches": " * ".join(SIZE_PREFIX + a for a in ops.batch) or "1",
        "offsets": list(dict.fromkeys(t.name for t in tensors)),
        "batch": [
            {
                "size": SIZE_PREFIX + ax,
                "strides": [
                    {"tensor": t.name, "pitch": _pitch(t, ax)}
                    for t in {t.name: t for t in tensors}.values()
                    if ax in t.axes
                ],
            }
            for ax in reversed(ops.batch)  # innermost first: z = ((b0 * n1) + b1) * n2 + b2
        ],
        **epilogue,
    }
    launch = Launch(name, grid, (32 * tiles.warps, 1, 1), smem, tuple(params))
    return KernelSource("gemm.cu.j2", context, (launch,))


def _operands(kp: KernelPlan, d: Diagram, mm: Op) -> Operands:
    roles = kp.family.roles
    if len(roles["k"]) != 1:
        raise PlanError(
            f"contraction over several axes {list(roles['k'])} in {kp.kernel.name}",
            hint="contract over one axis",
        )
    a_name, b_name = (o for o in mm.operands if isinstance(o, str))
    a, b = d.tensor(a_name), d.tensor(b_name)
    if a.dtype != b.dtype or a.dtype not in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp32"):
        raise PlanError(
            f"no GEMM kernel for {a.name} ({a.dtype}) times {b.name} ({b.dtype})",
            hint="both operands bf16, fp16, fp8_e4m3, fp8_e5m2 or fp32 (cast one first)",
        )
    outs = kp.kernel.outputs
    if len(outs) != 1 or outs[0] != kp.kernel.ops[-1].out:
        raise PlanError(
            f"kernel {kp.kernel.name} saves {list(outs)}; a GEMM saves only its last result",
            hint="materialize fewer intermediates",
        )
    c = d.tensor(outs[0])
    m, n, k = roles["m"][-1], roles["n"][-1], roles["k"][0]
    batch = tuple(roles["batch"]) + tuple(roles["m"][:-1]) + tuple(roles["n"][:-1])
    for t, inner in ((a, (m, k)), (b, (n, k)), (c, (m, n))):
        if t.axes[-1] not in inner:
            raise PlanError(
                f"{t.name}'s contiguous axis '{t.axes[-1]}' is not one of {list(inner)}",
                hint=f"list {t.name}'s axes with '{inner[0]}' or '{inner[1]}' last",
            )
    return Operands(a, b, c, m, n, k, batch, a.axes[-1] == k, b.axes[-1] == k)


def _pitch(t: Tensor, axis: str) -> list[str] | None:
    """Elements between neighbours along `axis` in `t`, as size parameters to multiply;
    None when `t` lacks the axis (it is broadcast along it)."""
    if axis not in t.axes:
        return None
    return [SIZE_PREFIX + a for a in t.axes[t.axes.index(axis) + 1 :]]


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def _tiles(kp: KernelPlan, ops: Operands, p: int, path: str) -> GemmTiles:
    """The plan's tile, rounded up to what the instructions need: powers of two, warp tiles
    of whole 16 x 16 mma blocks, k tiles of whole mma steps (or 8 on the fp32 path)."""
    bt = kp.block_tile
    # Powers of two, so that a tile row is a whole number of 16-byte chunks per thread row.
    bm, bn = _pow2(max(bt.get(ops.m, 64), 16)), _pow2(max(bt.get(ops.n, 64), 16))
    stages = min(max(kp.stages, 2), 4)
    warps = kp.warps
    if path == "simt":
        bk = _pow2(max(bt.get(ops.k, 16), 8))
        threads = 32 * warps
        while bm * bn > SIMT_MAX_OUTPUTS * threads:
            bm, bn = (bm // 2, bn) if bm > bn else (bm, bn // 2)
        while bm * bn < threads:
            bn *= 2
        per = bm * bn // threads
        tn = 1 << ((per.bit_length() - 1 + 1) // 2)
        tm = per // tn
        return GemmTiles(bm, bn, bk, 1, warps, stages, tm, tn)
    mma_k = MMA_K[p]
    bk = _pow2(max(bt.get(ops.k, mma_k), mma_k))
    if p == 1 and not (ops.a_k and ops.b_k):
        # 8-bit fragments gathered byte by byte (no ldmatrix .trans for 8-bit data) need
        # more registers: at most 64 accumulators per thread, or ptxas spills.
        while bm * bn > GATHER_MAX_OUTPUTS * 32 * warps:
            bm, bn = (bm // 2, bn) if bm > bn else (bm, bn // 2)
    best: tuple[tuple[int, float], GemmTiles] | None = None
    for wm in (1, 2, 4, 8):
        if warps % wm:
            continue
        wn = warps // wm
        tm, tn = _round_up(bm, 16 * wm), _round_up(bn, 16 * wn)
        score = (tm * tn, abs(math.log2((tm / wm) / (tn / wn))))
        if best is None or score < best[0]:
            best = (score, GemmTiles(tm, tn, bk, wm, wn, stages))
    assert best is not None
    return best[1]


def _smem_bytes(t: GemmTiles, ops: Operands, p: int, path: str) -> int:
    """Dynamic shared memory: STAGES copies of the A and B tiles, rows padded by 16 bytes
    (the same formula as MmaTile / SimtTile::SMEM_BYTES; the template checks it)."""
    pad = 16 // p
    a_rows, a_cols = (t.bm, t.bk) if ops.a_k else (t.bk, t.bm)
    b_rows, b_cols = (t.bn, t.bk) if ops.b_k else (t.bk, t.bn)
    return t.stages * (a_rows * (a_cols + pad) + b_rows * (b_cols + pad)) * p


def _literal(x: float) -> str:
    return f"{float(x)!r}f"


def _value(name: str) -> str:
    """The C++ local holding the epilogue value `name` (a diagram tensor's name)."""
    return f"ncdc_v_{name}"


def _epilogue(kp: KernelPlan, d: Diagram, mm: Op, ops: Operands) -> dict[str, Any]:
    """The contraction's scale and the ops after it, as data the template unrolls."""
    scale = [
        {"kind": "tensor", "name": f}
        if isinstance(f, str)
        else {"kind": "number", "name": _literal(f)}
        for f in mm.scale
    ]
    operands: dict[str, dict[str, Any]] = {}
    chain = {mm.out}
    steps: list[dict[str, Any]] = []

    def arg(x: str | float) -> dict[str, str]:
        if not isinstance(x, str):
            return {"kind": "number", "name": _literal(x)}
        if x in chain:
            return {"kind": "value", "name": _value(x)}
        t = d.tensor(x)
        operands[x] = {
            "name": x,
            "ctype": cpp_type(t.dtype),
            "pitch_m": _pitch(t, ops.m),
            "pitch_n": _pitch(t, ops.n),
        }
        return {"kind": "tensor", "name": x}

    for op in kp.kernel.ops[1:]:
        if op.kind == "cast":
            src = arg(op.operands[0])
            for i, f in enumerate(op.scale):
                out = f"ncdc_scaled{i}_{op.out}"
                steps.append({"out": out, "fn": "mul", "cast": "", "args": [src, arg(f)]})
                src = {"kind": "value", "name": out}
            cast = cpp_type(op.params["to"])
            steps.append({"out": _value(op.out), "fn": "cast", "cast": cast, "args": [src]})
        elif op.kind in ("map", "binary"):
            args = [arg(x) for x in op.operands]
            steps.append({"out": _value(op.out), "fn": op.fn, "cast": "", "args": args})
        else:
            raise PlanError(f"no GEMM epilogue for {op.fn} ({op.out})")
        chain.add(op.out)
    return {
        "scale": scale,
        "scaled": bool(scale),
        "product": _value(mm.out),
        "steps": steps,
        "operands": list(operands.values()),
        "result": _value(kp.kernel.ops[-1].out),
    }
