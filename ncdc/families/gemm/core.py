"""The gemm family's reading of a kernel, and its cp.async kernel on mma.sync or CUDA cores.

C = epilogue(scale * A B) for one contraction and the maps after it.

16-bit and 8-bit inputs run on tensor cores (mma.sync, fp32 accumulators), fp32 inputs on
CUDA cores; both stream k through a multi-stage cp.async pipeline (templates/gemm.cu.j2,
templates/include/ncdc_gemm.cuh). Roles come from the structure (`batch`, `m`, `n`, `k`);
layouts from the diagram (an axis listed last is contiguous): A may be k- or m-contiguous,
B k- or n-contiguous. Extra m or n axes and the batch axes are flattened onto the grid's z,
each tensor with its own pitch per axis (0 where it lacks the axis).

A candidate's template parameters are the block tile as the kernel runs it (`bm`, `bn`,
`bk`: powers of two, warp tiles of whole 16 x 16 mma blocks), the warp arrangement
(`warps_m`, `warps_n`), the pipeline depth and, on the fp32 path, the thread tile (`tm`,
`tn`); its shared memory counts the 16-byte row padding.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/matmul.yaml"), load_hardware("h100"),
    ...                     tiles={"m": 64, "n": 64, "k": 32})
    >>> render(plan.kernels[0], plan).launches[0].kernel  # doctest: +ELLIPSIS
    'matmul_gemm_bf16_m64_n64_k32_w..._s..._ak_bn'
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
    ones,
    pow2,
    round_up,
    rounded_options,
)
from ncdc.families.codegen import (
    axis_pitch,
    cpp_type,
    float_literal,
    size_name,
    status_param,
    status_workspace,
)
from ncdc.hardware.arch import MMA_TILE, mma_shape
from ncdc.language.diagram import Diagram, Op, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import MAX_GRID_YZ, Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "g_m": (32, 64, 128, 256),  # block tile along the m axis
    "g_n": (32, 64, 128, 256),  # block tile along the n axis
    "s_k": (16, 32, 64),  # chunk of the contracted axis per pipeline stage
    "s_k_fp8": (32, 64, 128),  # the same for 8-bit inputs (mma k32)
    "warps": (4, 8),  # arranged over the block tile; warp tile >= 16 x 16
    "stages": (2, 3, 4, 5),  # cp.async pipeline depth in shared memory (pipeline_stall)
}
GROUP_M = 8  # tile rows a run of consecutive blocks walks down (grouped order, L2 reuse)
SIMT_K = 8  # the fp32 path's k step
SIMT_MAX_OUTPUTS = 64  # fp32 accumulators per thread before registers run out
GATHER_MAX_OUTPUTS = 64  # the same for 8-bit operands whose fragments are gathered bytewise
INPUT_DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "fp32")
# Weight-only GEMMs: an A type and the narrower B types widened to it in the main loop.
WIDENED = {"bf16": ("int8",), "fp16": ("int8",)}


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
    ends: str = ""  # a grouped GEMM's offsets: where each run of m ends (docs: contract)
    group: str = ""  # and B's axis of one slice per run
    source: str = ""  # A's rows gathered: the tensor they come from (`a` is the gather's result)
    index: str = ""  # and the index picking them
    blocks: str = ""  # a block-scaled contraction: the axis of k's blocks (`block_sum`)


def mma_candidates(
    model: KernelModel,
    family: Family,
    ops: Operands,
    streams: tuple[str, ...],
    fixed: Mapping[str, int],
) -> list[Candidate]:
    """Every launch of the cp.async GEMM (mma.sync, or fp32 FMAs on CUDA cores): block
    tiles, k chunks, warps and pipeline stages, with `fixed` tiles honoured."""
    d, kernel = model.diagram, model.kernel
    p = DTYPES[ops.a.dtype].bytes
    simt = ops.a.dtype == "fp32"
    least_k = SIMT_K if simt else mma_shape(p).k
    sizes = model.sizes
    k_opts = rounded_options(
        ops.k, TILES["s_k_fp8"] if p == 1 else TILES["s_k"], sizes[ops.k], fixed, least_k
    )
    other = tuple(a for a in kernel.woven if a not in (ops.m, ops.n))
    batches = math.prod(d.axes[a] for a in ops.batch)
    vec = (("vec_a", int(_whole_chunks(ops.a, d))), ("vec_b", int(_whole_chunks(ops.b, d))))
    out: dict[tuple, Candidate] = {}
    for g_m, g_n, s_k, warps, stages in itertools.product(
        rounded_options(ops.m, TILES["g_m"], sizes[ops.m], fixed, MMA_TILE),
        rounded_options(ops.n, TILES["g_n"], sizes[ops.n], fixed, MMA_TILE),
        k_opts,
        TILES["warps"],
        TILES["stages"],
    ):
        t = (
            _simt_tiles(g_m, g_n, s_k, warps, stages)
            if simt
            else _mma_tiles(g_m, g_n, s_k, warps, stages, p, ops)
        )
        params = _params(t, simt) + vec
        if params in out:
            continue
        group = {**ones(other, fixed), ops.m: t.bm, ops.n: t.bn}
        stream = {a: (t.bk if a == ops.k else fixed.get(a, 1)) for a in streams}
        warp_group = {**group, ops.m: t.bm // t.warps_m, ops.n: t.bn // t.warps_n}
        warp_stream = {**stream, ops.k: least_k} if ops.k in stream else stream
        grid = (
            ceil_div(d.axes[ops.n], t.bn),
            row_tiles(d, ops, t.bm),
            min(batches, MAX_GRID_YZ),
        )
        threads = 32 * t.warps
        shape = LaunchShape(grid, (threads, 1, 1), _smem_bytes(t, ops, p))
        out[params] = Candidate(
            group, stream, warp_group, warp_stream, params, (shape,), t.stages, 1,
            _registers(t, threads, p, simt), raster_group=GROUP_M,
        )  # fmt: skip
    return list(out.values())


def row_tiles(d: Diagram, ops: Operands, bm: int) -> int:
    """Tile rows of the grid along m: ceil(m / bm), or, for a grouped GEMM, as many as
    its runs can take whatever the offsets (each run, the rows after the last one among
    them, whole tiles of its own: at most (m + (groups + 1) (bm - 1)) / bm)."""
    if not ops.ends:
        return ceil_div(d.axes[ops.m], bm)
    return (d.axes[ops.m] + (d.axes[ops.group] + 1) * (bm - 1)) // bm


def within_block_level(model: KernelModel, hw: Hardware, found: list[Candidate]) -> list[Candidate]:
    """The candidates whose inputs the model holds within the block level. The model counts
    an epilogue operand over the output tile (the saved gate of SwiGLU) as held there whole,
    though the kernel reads it straight into registers: a tile it would overflow is left
    out, so that the plan's residency stays within capacity; all of them when none fit."""
    capacity = hw.level(hw.block_level).capacity_bytes
    fit = [
        c for c in found
        if model.resident(c.group, c.stream, c.stages, True)[1] <= capacity
    ]  # fmt: skip
    return fit or found


def contraction(kernel: Kernel) -> Op:
    """The kernel's one contraction (after a gather of A's rows, when there is one)."""
    return next(op for op in kernel.ops if op.kind == "contract")


def row_gather(diagram: Diagram, kernel: Kernel) -> Op | None:
    """The gather before the contraction that picks A's rows, fused into A's loads: A[r, k]
    = S[I[r], k] with the source S over (rows, k), k contiguous, and the index I over A's
    one m axis, both read from memory; None when the kernel starts with its contraction.
    A PlanError for any other op before it."""
    if kernel.ops[0].kind == "contract":
        return None
    g, mm = kernel.ops[0], kernel.ops[1] if len(kernel.ops) > 1 else None
    problem = ""
    if g.kind != "gather" or "into" in g.params or mm is None or mm.kind != "contract":
        problem = f"{g.out} = {g.fn}(...) runs before the contraction"
    else:
        src, index = (diagram.tensor(str(o)) for o in g.operands)
        if g.out != mm.operands[0] or g.out in kernel.outputs or g.dtype != src.dtype:
            problem = f"{g.out} is not the first operand of {mm.out} alone, in {src.name}'s type"
        elif any(str(o) not in kernel.inputs for o in g.operands):
            problem = f"{g.out} gathers from a result computed in the kernel"
        elif len(src.axes) != 2 or src.axes != (g.params["axis"], *mm.over) or len(index.axes) != 1:
            problem = (
                f"{g.out} gathers {src.name} {list(src.axes)} by {index.name} "
                f"{list(index.axes)}, not rows of k-contiguous {src.name} by one index"
            )
    if problem:
        raise PlanError(
            f"no GEMM reads its operand through {problem}",
            hint="a GEMM fuses one gather of the rows of its first operand; save the rest: "
            "schedule: {materialize: [...]}",
        )
    return g


def block_sum(d: Diagram, mm: Op, op: Op) -> tuple[str, ...]:
    """The axis a block-scaled contraction sums its blocks over, as a 1-tuple: `op` is
    `sum(P, over=kb)` right after `P = contract(A, B, over=kk, scale=...)` in fp32, with kb an
    axis of both A and B (the blocks of the contracted length, each with its own scales, as
    DeepSeek-V3's fp8 GEMMs). The kernel runs the two as one contraction over (kb, kk) and
    adds each block's partial sum, times the block's scales, into an fp32 total; () for
    anything else.

    >>> from ncdc.language.load import load_diagram
    >>> d = load_diagram("diagrams/fp8_block_scaled_matmul.yaml")
    >>> block_sum(d, d.ops[0], d.ops[1])
    ('kb',)
    """
    if op.kind != "reduce" or op.fn != "sum" or op.operands != (mm.out,) or len(op.over) != 1:
        return ()
    kb = op.over[0]
    a, b = (d.tensor(str(o)).axes for o in mm.operands)
    if kb not in a or kb not in b or mm.dtype != "fp32" or mm.params.get("offsets"):
        return ()  # a P rounded below fp32 is summed as the reference rounds it: saved
    return (kb,)


def reaches(ops: tuple[Op, ...], name: str) -> bool:
    """Whether the last of `ops` depends on the result `name` (the epilogue is one chain)."""
    found = {name}
    for op in ops:
        if found & set(op.inputs):
            found.add(op.out)
    return ops[-1].out in found


def _params(t: GemmTiles, simt: bool) -> tuple[tuple[str, int], ...]:
    return (
        ("simt", int(simt)), ("bm", t.bm), ("bn", t.bn), ("bk", t.bk),
        ("warps_m", t.warps_m), ("warps_n", t.warps_n), ("stages", t.stages),
        ("tm", t.tm), ("tn", t.tn),
    )  # fmt: skip


def _whole_chunks(t: Tensor, d: Diagram) -> bool:
    """Whether every row of `t` starts on a 16-byte boundary at the planned sizes (every
    pitch is a multiple of its contiguous axis's size): the kernel then copies it with
    16-byte cp.async, a variant fixed at compile time."""
    return d.axes[t.axes[-1]] * DTYPES[t.dtype].bytes % 16 == 0


def tiles_of(c: Candidate) -> GemmTiles:
    return GemmTiles(
        c.param("bm"), c.param("bn"), c.param("bk"), c.param("warps_m"), c.param("warps_n"),
        c.param("stages"), c.param("tm"), c.param("tn"),
    )  # fmt: skip


def _mma_tiles(
    g_m: int, g_n: int, s_k: int, warps: int, stages: int, p: int, ops: Operands
) -> GemmTiles:
    """The tile rounded up to what mma.sync needs: powers of two (a tile row is whole 16-byte
    chunks per thread row), warp tiles of whole 16 x 16 blocks, k of whole mma steps; the
    warp arrangement that pads least, then the squarest warp tile."""
    bm, bn = pow2(max(g_m, MMA_TILE)), pow2(max(g_n, MMA_TILE))
    mma_k = mma_shape(p).k
    bk = pow2(max(s_k, mma_k))
    if p == 1 and (ops.a.dtype == "int8" or not (ops.a_k and ops.b_k)):
        # 8-bit fragments gathered byte by byte (no ldmatrix .trans for 8-bit data) need
        # more registers: at most 64 accumulators per thread, or ptxas spills. So do int8's
        # (128 int32 accumulators a thread spilled 20-24 B on sm_80 and sm_90a).
        while bm * bn > GATHER_MAX_OUTPUTS * 32 * warps:
            bm, bn = (bm // 2, bn) if bm > bn else (bm, bn // 2)
    best: tuple[tuple[int, float], GemmTiles] | None = None
    for wm in (1, 2, 4, 8):
        if warps % wm:
            continue
        wn = warps // wm
        tm, tn = round_up(bm, MMA_TILE * wm), round_up(bn, MMA_TILE * wn)
        score = (tm * tn, abs(math.log2((tm / wm) / (tn / wn))))
        if best is None or score < best[0]:
            best = (score, GemmTiles(tm, tn, bk, wm, wn, stages))
    assert best is not None
    return best[1]


def _simt_tiles(g_m: int, g_n: int, s_k: int, warps: int, stages: int) -> GemmTiles:
    """The fp32 path's tile: every thread computes a tm x tn patch of at most
    SIMT_MAX_OUTPUTS accumulators; the k tile a power of two of at least 8."""
    bm, bn = pow2(max(g_m, MMA_TILE)), pow2(max(g_n, MMA_TILE))
    bk = pow2(max(s_k, SIMT_K))
    threads = 32 * warps
    while bm * bn > SIMT_MAX_OUTPUTS * threads:
        bm, bn = (bm // 2, bn) if bm > bn else (bm, bn // 2)
    while bm * bn < threads:
        bn *= 2
    per = bm * bn // threads
    tn = 1 << ((per.bit_length() - 1 + 1) // 2)
    tm = per // tn
    return GemmTiles(bm, bn, bk, 1, warps, stages, tm, tn)


def _smem_bytes(t: GemmTiles, ops: Operands, p: int) -> int:
    """Dynamic shared memory: STAGES copies of the A and B tiles, rows padded by 16 bytes
    (the same formula as MmaTile / SimtTile::SMEM_BYTES; the template checks it). B keeps
    its own type (int8 weights under 16-bit activations)."""
    pb = DTYPES[ops.b.dtype].bytes
    a_rows, a_cols = (t.bm, t.bk) if ops.a_k else (t.bk, t.bm)
    b_rows, b_cols = (t.bn, t.bk) if ops.b_k else (t.bk, t.bn)
    return t.stages * (a_rows * (a_cols + 16 // p) * p + b_rows * (b_cols + 16 // pb) * pb)


def _registers(t: GemmTiles, threads: int, p: int, simt: bool) -> int:
    """Registers per thread: the fp32 accumulators, the operand fragments of one k step
    (16 x k per 16 rows or columns of the warp tile, 4 bytes a register) and addressing."""
    from ncdc.model.cost import estimate_registers

    k = SIMT_K if simt else mma_shape(p).k
    warp_m, warp_n = t.bm // t.warps_m, t.bn // t.warps_n
    fragments = ceil_div((warp_m + warp_n) * k * p, (4 * 32))
    return estimate_registers(t.bm * t.bn, threads, fragments)


def render(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The GEMM kernel of `kp.candidate`: template context and its launch."""
    d = plan.graph.diagram
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    mm = contraction(kp.kernel)
    ops = read_operands(kp.family, kp.kernel, d)
    tiles = tiles_of(c)
    simt = bool(c.param("simt"))
    types = ops.a.dtype if ops.a.dtype == ops.b.dtype else f"{ops.a.dtype}_{ops.b.dtype}"
    name = (
        f"{kp.kernel.name}_gemm_{types}_m{tiles.bm}_n{tiles.bn}_k{tiles.bk}"
        f"_w{tiles.warps}_s{tiles.stages}_a{'k' if ops.a_k else 'm'}_b{'k' if ops.b_k else 'n'}"
    )
    vec_a, vec_b = bool(c.param("vec_a")), bool(c.param("vec_b"))
    if not (vec_a and vec_b):  # the variant loading element by element names its operands
        name += "_u" + ("" if vec_a else "a") + ("" if vec_b else "b")
    if ops.index:
        name += "_g"  # A's rows through an index
    epilogue = epilogue_context(kp.kernel, d, ops)
    axes = [a for a in kp.kernel.axes if a in d.axes]
    params = [Param(t, "tensor", d.tensor(t).dtype) for t in kp.kernel.inputs]
    params.append(Param(ops.c.name, "tensor", ops.c.dtype, writes=True))
    params += [status_param()] if ops.ends or ops.index else []
    params += [Param(size_name(a), "int64", value=d.axes[a]) for a in axes]
    a = d.tensor(ops.source) if ops.source else ops.a  # the rows A is read from
    tensors = [a, ops.b, ops.c] + [d.tensor(n) for n in (ops.index,) if n]
    tensors += [d.tensor(t["name"]) for t in epilogue["operands"]]
    context: dict[str, Any] = {
        "kernel": name,
        "summary": f"{mm.text} (+{len(kp.kernel.ops) - kp.kernel.ops.index(mm) - 1} epilogue ops"
        + (f", {ops.source}'s rows through {ops.index})" if ops.index else ")"),
        "path": "simt" if simt else "mma",
        "threads": c.threads,
        "bm": tiles.bm,
        "bn": tiles.bn,
        "bk": tiles.bk,
        "warps_m": tiles.warps_m,
        "warps_n": tiles.warps_n,
        "stages": tiles.stages,
        "group_m": c.raster_group,
        "tm": tiles.tm,
        "tn": tiles.tn,
        "a_k": "true" if ops.a_k else "false",
        "b_k": "true" if ops.b_k else "false",
        "vec_a": "true" if vec_a else "false",
        "vec_b": "true" if vec_b else "false",
        "smem_bytes": c.smem_bytes,
        "a": {"name": a.name, "ctype": cpp_type(ops.a.dtype)},
        "b": {"name": ops.b.name, "ctype": cpp_type(ops.b.dtype)},
        "c": {"name": ops.c.name, "ctype": cpp_type(ops.c.dtype)},
        "params": [
            {"name": q.name, "ctype": cpp_type(q.dtype) if q.dtype else "", "writes": q.writes}
            for q in params
        ],
        "size_m": size_name(ops.m),
        "size_n": size_name(ops.n),
        "size_k": size_name(ops.k),
        "lda": axis_pitch(ops.a, ops.m if ops.a_k else ops.k),
        "ldb": axis_pitch(ops.b, ops.n if ops.b_k else ops.k),
        "ldc_m": axis_pitch(ops.c, ops.m),
        "ldc_n": axis_pitch(ops.c, ops.n),
        "batches": " * ".join(size_name(a) for a in ops.batch) or "1",
        "z_loop": c.main.grid[2] < math.prod(d.axes[a] for a in ops.batch),
        "offsets": list(dict.fromkeys(t.name for t in tensors)),
        "batch": [
            {
                "size": size_name(ax),
                "strides": [
                    {"tensor": t.name, "pitch": axis_pitch(t, ax)}
                    for t in {t.name: t for t in tensors}.values()
                    if ax in t.axes
                ],
            }
            for ax in reversed(ops.batch)  # innermost first: z = ((b0 * n1) + b1) * n2 + b2
        ],
        "runs": runs_context(ops, tensors),
        "row_gather": {"index": ops.index, "rows": size_name(a.axes[0])} if ops.index else None,
        **epilogue,
    }
    launch = Launch.of(name, c.main, params)
    status = (status_workspace(),) if ops.ends or ops.index else ()
    return KernelSource("gemm.cu.j2", context, (launch,), status)


def runs_context(ops: Operands, tensors: list[Tensor]) -> dict[str, Any] | None:
    """A grouped GEMM's runs as the template reads them: the offsets, the number of runs,
    B's pitch between slices and each tensor's pitch along the rows; None otherwise."""
    if not ops.ends:
        return None
    return {
        "ends": ops.ends,
        "group": ops.group,
        "groups": size_name(ops.group),
        "group_pitch": axis_pitch(ops.b, ops.group),
        "strides": [
            {"tensor": t.name, "pitch": axis_pitch(t, ops.m)}
            for t in {t.name: t for t in tensors}.values()
            if ops.m in t.axes
        ],
    }


def read_operands(family: Family, kernel: Kernel, d: Diagram) -> Operands:
    """The contraction's tensors and roles; PlanError for what the template cannot run."""
    mm = contraction(kernel)
    gather = row_gather(d, kernel)
    roles = family.roles
    if len(roles["k"]) != 1:
        raise PlanError(
            f"contraction over several axes {list(roles['k'])} in {kernel.name}",
            hint="contract over one axis",
        )
    a_name, b_name = (o for o in mm.operands if isinstance(o, str))
    a, b = d.tensor(a_name), d.tensor(b_name)
    if a.dtype in WIDENED and b.dtype in WIDENED[a.dtype]:
        pass  # weight-only int8: B widened to A's type in the main loop
    elif b.dtype in WIDENED and a.dtype in WIDENED[b.dtype]:
        raise PlanError(
            f"no GEMM kernel for {a.name} ({a.dtype}) times {b.name} ({b.dtype})",
            hint=f"list the int8 weights second: contract({b.name}, {a.name}, ...)",
        )
    elif a.dtype != b.dtype or a.dtype not in INPUT_DTYPES:
        raise PlanError(
            f"no GEMM kernel for {a.name} ({a.dtype}) times {b.name} ({b.dtype})",
            hint="both operands bf16, fp16, fp8_e4m3, fp8_e5m2, int8 or fp32, or bf16 or "
            "fp16 times int8 weights (cast one first)",
        )
    outs = kernel.outputs
    if len(outs) != 1 or outs[0] != kernel.ops[-1].out:
        raise PlanError(
            f"kernel {kernel.name} saves {list(outs)}; a GEMM saves only its last result",
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
    ends, group = mm.params.get("offsets", ""), mm.params.get("group", "")
    if (ends or gather) and batch:
        what = "grouped GEMM" if ends else "GEMM gathering its rows"
        raise PlanError(f"a {what} with batch axes {list(batch)} in {kernel.name}",
                        hint="fold the batch into the rows")  # fmt: skip
    source, index = (str(o) for o in gather.operands) if gather else ("", "")
    blocks = roles.get("blocks", ())
    if blocks and gather:
        raise PlanError(f"a block-scaled GEMM gathering its rows in {kernel.name}",
                        hint="gather the rows in a kernel of their own")  # fmt: skip
    return Operands(a, b, c, m, n, k, batch, a.axes[-1] == k, b.axes[-1] == k, ends, group,
                    source, index, blocks[0] if blocks else "")  # fmt: skip


def _value(name: str) -> str:
    """The C++ local holding the epilogue value `name` (a diagram tensor's name)."""
    return f"ncdc_v_{name}"


def epilogue_context(kernel: Kernel, d: Diagram, ops: Operands) -> dict[str, Any]:
    """The contraction's scale and the ops after it, as data the template unrolls."""
    mm = contraction(kernel)
    # Scalars multiply into one factor; a per-row or per-column scale is read per output.
    scalars = [f for f in mm.scale if not isinstance(f, str) or not d.tensor(f).axes]
    scale = [
        {"kind": "tensor", "name": f}
        if isinstance(f, str)
        else {"kind": "number", "name": float_literal(f)}
        for f in scalars
    ]
    operands: dict[str, dict[str, Any]] = {}
    chain = {mm.out}
    steps: list[dict[str, Any]] = []
    shifts: list[dict[str, str]] = []

    same: dict[str, str] = {}  # results that are another's value

    def arg(x: str | float) -> dict[str, str]:
        if not isinstance(x, str):
            return {"kind": "number", "name": float_literal(x)}
        if x in same:
            return {"kind": "value", "name": same[x]}
        if x in chain:
            return {"kind": "value", "name": _value(x)}
        t = d.tensor(x)
        operands[x] = {
            "name": x,
            "ctype": cpp_type(t.dtype),
            "pitch_m": axis_pitch(t, ops.m),
            "pitch_n": axis_pitch(t, ops.n),
        }
        return {"kind": "tensor", "name": x}

    vectors = [str(f) for f in mm.scale if isinstance(f, str) and d.tensor(f).axes]
    # a block-scaled contraction's scales over the blocks multiply each block's partial sum
    # in the main loop (`block_scales`); its sum over the blocks is that loop's total
    blocked = [f for f in vectors if ops.blocks in d.tensor(f).axes] if ops.blocks else []
    vectors = [f for f in vectors if f not in blocked]
    first = f"ncdc_scaled_{mm.out}" if vectors else _value(mm.out)
    src = {"kind": "value", "name": first}
    for i, name in enumerate(vectors):
        out = _value(mm.out) if i == len(vectors) - 1 else f"ncdc_scaled{i}_{mm.out}"
        steps.append({"out": out, "fn": "mul", "cast": "", "args": [src, arg(name)]})
        src = {"kind": "value", "name": out}
    for op in kernel.ops[kernel.ops.index(mm) + 1 :]:
        if ops.blocks and op.operands == (mm.out,) and op.over == (ops.blocks,):
            same[op.out] = _value(mm.out)  # the main loop's total over the blocks
        elif op.kind == "cast":
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
        elif op.kind == "mask" and op.fn == "causal":
            steps.append(_causal_step(op, arg(op.operands[0]), ops, shifts))
        else:
            raise PlanError(f"no GEMM epilogue for {op.fn} ({op.out})")
        chain.add(op.out)
    exact = ops.c.dtype == "int32" and ops.a.dtype == "int8" and not mm.scale and not steps
    return {
        "scale": scale,
        "scaled": bool(scale),
        "first": first,
        "exact": "true" if exact else "false",
        "steps": steps,
        "operands": list(operands.values()),
        "shifts": shifts,
        "result": same.get(kernel.ops[-1].out, _value(kernel.ops[-1].out)),
        "block_scales": block_scales(d, ops, blocked),
    }


def block_scales(d: Diagram, ops: Operands, names: list[str]) -> dict[str, Any]:
    """A block-scaled contraction's scales, grouped by what they vary with: over rows (and
    the block), over columns (and the block), over both; each with its pitches. A tensor
    named twice multiplies twice (`tensors`: each once)."""
    groups: dict[str, list[dict[str, Any]]] = {"rows": [], "cols": [], "both": [], "tensors": []}
    for name in names:
        t = d.tensor(name)
        group = "both" if ops.m in t.axes and ops.n in t.axes else (
            "cols" if ops.n in t.axes else "rows")  # fmt: skip
        groups[group].append({
            "name": name,
            "ctype": cpp_type(t.dtype),
            "pitch_m": axis_pitch(t, ops.m),
            "pitch_n": axis_pitch(t, ops.n),
            "pitch_b": axis_pitch(t, ops.blocks),
        })  # fmt: skip
        if all(other["name"] != name for other in groups["tensors"]):
            groups["tensors"].append(groups[group][-1])
    return groups


def _causal_step(
    op: Op, src: dict[str, str], ops: Operands, shifts: list[dict[str, str]]
) -> dict[str, Any]:
    """A causal mask on C (a backward pass recomputing masked scores): its query and key
    axes are C's m and n (either way round), the diagonal's shift a member the kernel sets
    from the sizes."""
    roles = {ops.m: "ncdc_row", ops.n: "ncdc_col"}
    q, k = op.params["query"], op.params["key"]
    if ops.ends:  # the epilogue sees rows within a run
        raise PlanError(
            f"no grouped GEMM epilogue for causal ({op.out})",
            hint="mask in a kernel of its own: schedule: {materialize: [...]}",
        )
    if q not in roles or k not in roles:
        raise PlanError(f"no GEMM epilogue for causal ({op.out}) over a batch axis",
                        hint="mask along the rows and columns of the contraction")  # fmt: skip
    shift = f"ncdc_shift_{op.out}"
    value = f"{size_name(k)} - {size_name(q)}" if op.params["align"] != "start" else "0"
    shifts.append({"name": shift, "value": value})
    args = [src, {"kind": "value", "name": roles[q]}, {"kind": "value", "name": roles[k]},
            {"kind": "value", "name": shift}]  # fmt: skip
    return {"out": _value(op.out), "fn": "causal", "cast": "", "args": args}
