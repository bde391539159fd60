"""The GEMV family: a vector or a few rows times a matrix, streamed at memory bandwidth.

C[r, n] = epilogue(scale * sum_k X[r, k] W[k, n]) where X has at most MAX_ROWS rows along
one axis (none for a vector: a batch-1 decode layer's x[k] W[k, n] or W[n, k] x[k]).
Below the 16-row mma tile a GEMM pads most of its tensor-core work away, and the kernel is
memory-bound anyway (each value of W is used at most MAX_ROWS times): this family's kernel
(templates/gemv.cu.j2, templates/include/ncdc_gemv.cuh) reads W once in 16-byte loads,
several in flight per thread, accumulates in fp32 on CUDA cores and reduces over k within
a warp (W k-contiguous) or through shared memory in a fixed order (W n-contiguous).

Where the rows and the columns are both axes (a skinny GEMM), the GEMM family's candidates
compete with this family's in the same search, so the model picks the cheaper kernel.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/gemv.yaml"), load_hardware("h200"))
    >>> kp = plan.kernels[0]
    >>> kp.family.name, kp.candidate.param("gemv"), kp.bound
    ('gemv', 1, 'hbm')
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ncdc.errors import PlanError
from ncdc.families.base import VECTOR_BYTES, KernelSource, Launch, Param, no_masked_loop, ones
from ncdc.families.codegen import axis_pitch, cpp_type, size_name
from ncdc.families.gemm import core as gemm_core
from ncdc.families.gemm import family as gemm
from ncdc.families.gemm.core import epilogue_context
from ncdc.language.diagram import Diagram, Tensor
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import MAX_GRID_X, Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.issue import LoopMix
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

MAX_ROWS = 8  # rows of X the kernel keeps accumulators for (below the 16-row mma tile)
TILES: dict[str, tuple[int, ...]] = {
    "warps": (4, 8),  # W k-contiguous: one warp per column of C
    "column_threads": (4, 8, 16, 32),  # W n-contiguous: threads across the columns
    "threads": (128, 256),  # W n-contiguous: the rest split k
    "unroll": (2, 4),  # 16-byte loads of W per thread in flight
}
INPUT_DTYPES = ("bf16", "fp16", "fp32")


class GemvFamily:
    """One contraction of a matrix with a vector or at most MAX_ROWS rows, then
    elementwise ops on its result (the GEMM family's epilogues)."""

    name = "gemv"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        found = gemm_roles(diagram, kernel)
        if found is None:
            return None
        roles, (a_free, b_free) = found
        if roles["batch"] or len(roles["k"]) != 1:
            return None
        mm = kernel.ops[0]
        dtypes = {diagram.tensor(n).dtype for n in mm.operands if isinstance(n, str)}
        if len(dtypes) != 1 or not dtypes <= set(INPUT_DTYPES):
            return None  # 8-bit inputs, or mixed ones: the GEMM family's (or its error)
        sizes = [math.prod(diagram.axes[x] for x in free) for free in (a_free, b_free)]
        # the matrix: the operand with the longer free axis; the other has few rows or none
        wide, narrow = (b_free, a_free) if sizes[1] >= sizes[0] else (a_free, b_free)
        if len(wide) != 1 or len(narrow) > 1 or min(sizes) > MAX_ROWS:
            return None
        return Family(self.name, {**roles, "cols": wide, "rows": narrow}, TILES)

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
        g = read_gemv(family, kernel, d)
        epilogue_context(kernel, d, g.as_gemm())  # refuses what the epilogue cannot run
        p = DTYPES[g.w.dtype].bytes
        n_len = d.axes[g.n]
        rows = d.axes[g.m] if g.m else 1
        inner = d.axes[g.w.axes[-1]]
        vec = VECTOR_BYTES // p if inner % (VECTOR_BYTES // p) == 0 else 1
        other = tuple(a for a in kernel.woven if a not in (g.m, g.n))
        out: list[Candidate] = []
        # x's V values per step in one load too: its rows k-contiguous (and, as W's, aligned)
        x_vec = int(vec > 1 and g.x.axes[-1] == g.k)
        if g.w_k:
            for warps, unroll in itertools.product(TILES["warps"], TILES["unroll"]):
                grid = ceil_div(n_len, warps)
                chunk = 32 * vec * unroll
                params = _params(1, rows, vec, unroll, warps, 0, 0) + (("x_vec", x_vec),)
                out.append(
                    self._candidate(model, g, other, fixed, streams, params, warps, chunk,
                                    LaunchShape((grid, 1, 1), (32 * warps, 1, 1), 0),
                                    estimate_registers(rows, 1, unroll * vec * p // 4))
                )  # fmt: skip
        else:
            for ct, threads, unroll in itertools.product(
                TILES["column_threads"], TILES["threads"], TILES["unroll"]
            ):
                ks = threads // ct
                cols = ct * vec
                grid = ceil_div(n_len, cols)
                smem = ks * rows * cols * 4
                params = _params(0, rows, vec, unroll, threads // 32, ct, ks)
                out.append(
                    self._candidate(model, g, other, fixed, streams, params, cols,
                                    ks * unroll, LaunchShape((grid, 1, 1), (threads, 1, 1), smem),
                                    estimate_registers(rows * vec, 1, unroll * vec * p // 4))
                )  # fmt: skip
        out = [c for c in out if c.grid <= MAX_GRID_X]
        legal = sorted({c.group[g.n] for c in out})
        # a fixed tile: only the kernels whose block tile or k step is that size
        out = [
            c for c in out
            if all({**c.stream, **c.group}.get(a, v) == v for a, v in fixed.items())
        ]  # fmt: skip
        # a skinny GEMM: the GEMM family's kernels compete (padded to a 16-row mma tile)
        g_family = gemm.FAMILY.classify(d, kernel)
        if g_family is not None and g.m and g.w.dtype in gemm_core.INPUT_DTYPES:
            out += gemm.FAMILY.candidates(model, g_family, hw, streams, fixed)
        if not out:
            tiles = ", ".join(f"{a}={v}" for a, v in fixed.items())
            raise PlanError(
                f"no GEMV kernel runs the tile {tiles} in {kernel.name}",
                hint=f"drop the tile for {g.n}, or fix one of {legal}",
            )
        return out

    @staticmethod
    def _candidate(
        model: KernelModel, g: Gemv, other: tuple[str, ...], fixed: Mapping[str, int],
        streams: tuple[str, ...], params: tuple[tuple[str, int], ...], cols: int, chunk: int,
        shape: LaunchShape, registers: int,
    ) -> Candidate:  # fmt: skip
        rows = model.sizes[g.m] if g.m else 1
        group = {**ones(other, fixed), g.n: cols}
        warp_group = {**ones(other, fixed), g.n: 1 if g.w_k else cols}
        if g.m:
            group[g.m] = warp_group[g.m] = rows
        # the k loop covers the axis once however long a step is: a step past its end is
        # not work (the model's padding counts whole chunks)
        chunk = min(chunk, model.sizes[g.k])
        stream = {a: (chunk if a == g.k else fixed.get(a, 1)) for a in streams}
        return Candidate(
            group, stream, warp_group, stream, params, (shape,), 1, 1, registers, cuda_cores=True
        )

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        c = kp.candidate
        assert c is not None, "a GPU plan carries its candidate"
        if not dict(c.params).get("gemv"):
            return gemm.FAMILY.render(_as_gemm_plan(kp), plan)
        return _render(kp, plan)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("cols")[0], TILES["column_threads"])]

    def loop_mix(
        self, model: KernelModel, family: Family, c: Candidate, hw: Hardware
    ) -> LoopMix | None:
        if not dict(c.params).get("gemv"):  # a GEMM's candidate: its mma.sync loop
            return gemm.FAMILY.loop_mix(model, family, c, hw)
        return None  # fp32 FMAs on CUDA cores, bound by the weights' traffic

    masked_share = staticmethod(no_masked_loop)

    def arch_problem(self, diagram: Diagram, kp: KernelPlan, sm: int) -> str:
        c = kp.candidate
        if c is not None and not dict(c.params).get("gemv"):
            return gemm.FAMILY.arch_problem(diagram, _as_gemm_plan(kp), sm)
        return ""


FAMILY = GemvFamily()


class Gemv:
    """The contraction's tensors: W the matrix, X the vector or rows, C the result."""

    def __init__(self, w: Tensor, x: Tensor, c: Tensor, m: str, n: str, k: str):
        self.w, self.x, self.c, self.m, self.n, self.k = w, x, c, m, n, k
        self.w_k = w.axes[-1] == k  # W's contiguous axis is k (else n)

    def as_gemm(self) -> gemm_core.Operands:
        """The same contraction as the GEMM family's epilogue reads it (m: the rows)."""
        return gemm_core.Operands(
            self.x, self.w, self.c, self.m, self.n, self.k, (), True, self.w_k
        )


def gemm_roles(
    diagram: Diagram, kernel: Kernel
) -> tuple[dict[str, tuple[str, ...]], tuple[tuple[str, ...], tuple[str, ...]]] | None:
    """The GEMM family's roles of a contraction with an epilogue (m or n may be empty), and
    each operand's free axes (in the output, not in the other operand); None otherwise."""
    contracts = [op for op in kernel.ops if op.kind == "contract"]
    if len(contracts) != 1 or kernel.ops[0] is not contracts[0]:
        return None
    mm = contracts[0]
    operands = tuple(o for o in mm.operands if isinstance(o, str))
    if len(operands) != 2 or mm.grouped:  # a grouped contraction: the gemm family
        return None
    chain = {mm.out}
    for op in kernel.ops[1:]:
        if op.kind not in ("map", "binary", "cast") or not chain & set(op.inputs):
            return None
        for name in op.inputs:
            if name not in chain and not set(diagram.tensor(name).axes) <= set(mm.axes):
                return None
        chain.add(op.out)
    a, b = (diagram.tensor(n).axes for n in operands)
    out = mm.axes
    a_free = tuple(x for x in out if x in a and x not in b)
    b_free = tuple(x for x in out if x in b and x not in a)
    roles = {
        "batch": tuple(x for x in out if x in a and x in b),
        "m": a_free,
        "n": b_free,
        "k": mm.over,
    }
    if not roles["k"] or not (a_free or b_free):
        return None
    return roles, (a_free, b_free)


def read_gemv(family: Family, kernel: Kernel, d: Diagram) -> Gemv:
    """The contraction's tensors and roles; PlanError for what the kernel cannot run."""
    mm = kernel.ops[0]
    a_name, b_name = (o for o in mm.operands if isinstance(o, str))
    a, b = d.tensor(a_name), d.tensor(b_name)
    if a.dtype != b.dtype or a.dtype not in INPUT_DTYPES:
        raise PlanError(
            f"no GEMV kernel for {a.name} ({a.dtype}) times {b.name} ({b.dtype})",
            hint="both operands bf16, fp16 or fp32 (cast one first)",
        )
    outs = kernel.outputs
    if len(outs) != 1 or outs[0] != kernel.ops[-1].out:
        raise PlanError(
            f"kernel {kernel.name} saves {list(outs)}; a GEMV saves only its last result",
            hint="materialize fewer intermediates",
        )
    (n,), rows, (k,) = family.axes("cols"), family.axes("rows"), family.axes("k")
    m = rows[0] if rows else ""
    w, x = (a, b) if n in a.axes else (b, a)
    c = d.tensor(outs[0])
    if w.axes[-1] not in (n, k):
        raise PlanError(
            f"{w.name}'s contiguous axis '{w.axes[-1]}' is not one of {[n, k]}",
            hint=f"list {w.name}'s axes with '{k}' or '{n}' last",
        )
    return Gemv(w, x, c, m, n, k)


def _params(
    w_k: int, rows: int, vec: int, unroll: int, warps: int, ct: int, ks: int
) -> tuple[tuple[str, int], ...]:
    return (
        ("gemv", 1), ("w_k", w_k), ("rows", rows), ("vec", vec), ("warps", warps),
        ("unroll", unroll), ("ct", ct), ("ks", ks),
    )  # fmt: skip


def _as_gemm_plan(kp: KernelPlan) -> KernelPlan:
    """`kp` as the GEMM family plans it (its roles), for a GEMM candidate that won."""
    import dataclasses

    roles = {r: kp.family.axes(r) for r in ("batch", "m", "n", "k")}
    return dataclasses.replace(kp, family=Family(gemm.FAMILY.name, roles, gemm.TILES))


def _render(kp: KernelPlan, plan: Plan) -> KernelSource:
    d = plan.graph.diagram
    c = kp.candidate
    assert c is not None
    mm = kp.kernel.ops[0]
    g = read_gemv(kp.family, kp.kernel, d)
    epilogue = epilogue_context(kp.kernel, d, g.as_gemm())
    prm = dict(c.params)
    w_k = bool(prm["w_k"])
    layout = "kc" if w_k else "nc"
    name = (
        f"{kp.kernel.name}_gemv_{g.w.dtype}_r{prm['rows']}_{layout}_v{prm['vec']}"
        f"_u{prm['unroll']}_w{prm['warps']}"
        + ("" if w_k else f"_c{prm['ct']}")
        + ("_xv" if prm.get("x_vec") else "")
    )
    axes = [a for a in kp.kernel.axes if a in d.axes]
    params = [Param(t, "tensor", d.tensor(t).dtype) for t in kp.kernel.inputs]
    params.append(Param(g.c.name, "tensor", g.c.dtype, writes=True))
    params += [Param(size_name(a), "int64", value=d.axes[a]) for a in axes]
    pitch = axis_pitch
    context: dict[str, Any] = {
        "kernel": name,
        "summary": f"{mm.text} (+{len(kp.kernel.ops) - 1} epilogue ops), W streamed in "
        f"{prm['vec']}-element loads, {prm['unroll']} in flight per thread, fp32 sums",
        "layout": layout,
        "threads": c.threads,
        "rows": prm["rows"],
        "vec": prm["vec"],
        "unroll": prm["unroll"],
        "warps": prm["warps"],
        "ct": prm["ct"],
        "ks": prm["ks"],
        "x_vec": "true" if prm.get("x_vec") else "false",
        "smem_bytes": c.smem_bytes,
        "w": {"name": g.w.name},
        "x": {"name": g.x.name},
        "c": {"name": g.c.name},
        "params": [
            {"name": q.name, "ctype": cpp_type(q.dtype) if q.dtype else "", "writes": q.writes}
            for q in params
        ],
        "size_n": size_name(g.n),
        "size_k": size_name(g.k),
        "w_n": pitch(g.w, g.n),
        "w_k": pitch(g.w, g.k),
        "x_m": pitch(g.x, g.m) if g.m else None,
        "x_k": pitch(g.x, g.k),
        "c_m": pitch(g.c, g.m) if g.m else None,
        "c_n": pitch(g.c, g.n),
        **epilogue,
    }
    return KernelSource("gemv.cu.j2", context, (Launch.of(name, c.main, params),))
