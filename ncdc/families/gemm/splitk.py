"""Split-k for a GEMM whose tiles cannot fill the GPU: blocks share one tile's k axis.

A 512 x 512 GEMM in 128 x 128 tiles is 16 blocks on 132 SMs however long k is. These
candidates take the GEMM family's mma.sync ones whose grid is smaller than the SMs and cut
k into `splits` ranges of whole k tiles (grid z, none empty): each block sums its range of
its tile into an fp32 slice of a workspace (`splits x m x n` values), and a second kernel
adds the slices in split order, applies the epilogue (scale, bias, activations, casts) and
stores C: the result does not depend on timing. The model prices the partials' traffic
(each slice written once and read once, fp32: `time_kernel`'s split term) and the second
launch; templates/gemm_splitk.cu.j2 runs the family's own `run_mma` per split.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram("diagrams/matmul.yaml", {"m": 512, "n": 512, "k": 16384})
    >>> c = plan_diagram(d, load_hardware("h200")).kernels[0].candidate
    >>> c.splits > 1, is_splitk(c), len(c.launches)
    (True, True, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ncdc.families.base import KernelSource, Launch, Param, Workspace
from ncdc.families.codegen import axis_pitch, cpp_type, size_name
from ncdc.model.launch import MAX_GRID_X, Candidate, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.families.gemm.core import GemmTiles, Operands
    from ncdc.hardware.machine import Hardware
    from ncdc.language.diagram import Diagram
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

SPLITS = (2, 4, 8, 16, 32)  # asked-for splits; each gets whole k tiles and none is empty
MERGE_THREADS = 256
MIN_TILES_PER_SPLIT = 2  # k tiles per split: fewer and the ring never fills


def is_splitk(c: Candidate) -> bool:
    return bool(dict(c.params).get("splitk"))


def candidates(
    model: KernelModel,
    hw: Hardware,
    fixed: Mapping[str, int],
    ops: Operands,
    base: list[Candidate],
) -> list[Candidate]:
    """Split-k versions of the mma.sync candidates in `base` whose grid has fewer blocks
    than the SMs; none for a batched GEMM (grid z holds the batches) or k split by the
    user (`fixed` cannot say splits), nor for int8 x int8 (its int32 sums are exact; the
    fp32 partials are not), nor for a grouped GEMM (its tile rows are found per run) or
    one gathering A's rows."""
    d = model.diagram
    if ops.batch or ops.ends or ops.index or not hw.is_gpu:
        return []
    if ops.a.dtype == "int8" == ops.b.dtype:
        return []
    k_len = d.axes[ops.k]
    out: dict[tuple, Candidate] = {}
    for c in base:
        params = dict(c.params)
        if params.get("simt", 1) or c.grid >= hw.limits.sms:
            continue
        bk = params["bk"]
        chunks = ceil_div(k_len, bk)
        for asked in SPLITS:
            per = ceil_div(chunks, min(asked, chunks))
            if per < MIN_TILES_PER_SPLIT:
                continue
            k_per_split = per * bk
            splits = ceil_div(k_len, k_per_split)
            if splits < 2:
                continue
            gx, gy, _ = c.main.grid
            key = (c.params, splits)
            if key in out:
                continue
            total = d.axes[ops.m] * d.axes[ops.n]
            merge_grid = min(ceil_div(total, MERGE_THREADS), MAX_GRID_X)
            shapes = (
                LaunchShape((gx, gy, splits), c.main.block, c.main.dynamic_smem),
                LaunchShape((merge_grid, 1, 1), (MERGE_THREADS, 1, 1), 0),
            )
            extra = (("splitk", 1), ("k_per_split", k_per_split))
            out[key] = dataclasses.replace(
                c, params=c.params + extra, launches=shapes, splits=splits
            )
    return list(out.values())


def render(
    kp: KernelPlan, plan: Plan, ops: Operands, epilogue: dict[str, Any], t: GemmTiles
) -> KernelSource:
    """The two kernels of a split-k candidate (its tiles `t`): partial sums per split, then
    the merge."""
    d = plan.graph.diagram
    c = kp.candidate
    assert c is not None and is_splitk(c)
    first, merge = c.launches
    name = _kernel_name(kp, ops, t, c)
    vec_a, vec_b = bool(c.param("vec_a")), bool(c.param("vec_b"))
    merge_name = f"{kp.kernel.name}_gemm_splitk_merge_{ops.c.dtype}"
    ws = f"ncdc_partials_{kp.kernel.name}"
    inputs, main_params, merge_params = _split_params(kp, d, ops, c, ws)

    def listed(params: list[Param]) -> list[dict[str, Any]]:
        return [
            {"name": q.name, "ctype": cpp_type(q.dtype) if q.dtype else "", "writes": q.writes}
            for q in params
        ]

    lda = axis_pitch(ops.a, ops.m if ops.a_k else ops.k)
    ldb = axis_pitch(ops.b, ops.n if ops.b_k else ops.k)
    context: dict[str, Any] = {
        "kernel": name,
        "merge_kernel": merge_name,
        "summary": f"{kp.kernel.ops[0].text} (+{len(kp.kernel.ops) - 1} epilogue ops), k split "
        f"{c.splits} ways ({c.param('k_per_split')} per split), fp32 partials merged in order",
        "names": [q.name for q in (*inputs, Param(ops.c.name, "tensor", ops.c.dtype))],
        "threads": first.threads,
        "merge_threads": merge.threads,
        "splits": c.splits,
        "bm": t.bm,
        "bn": t.bn,
        "bk": t.bk,
        "warps_m": t.warps_m,
        "warps_n": t.warps_n,
        "stages": t.stages,
        "group_m": c.raster_group,
        "a_k": "true" if ops.a_k else "false",
        "b_k": "true" if ops.b_k else "false",
        "vec_a": "true" if vec_a else "false",
        "vec_b": "true" if vec_b else "false",
        "smem_bytes": first.dynamic_smem,
        "a": {"name": ops.a.name, "ctype": cpp_type(ops.a.dtype)},
        "b": {"name": ops.b.name, "ctype": cpp_type(ops.b.dtype)},
        "c": {"name": ops.c.name},
        "workspace": ws,
        "params": listed(main_params),
        "merge_params": listed(merge_params),
        "size_m": size_name(ops.m),
        "size_n": size_name(ops.n),
        "size_k": size_name(ops.k),
        "lda": lda,
        "ldb": ldb,
        # elements between neighbours along k: 1 where k is contiguous, else the pitch
        "a_step": "1" if ops.a_k else " * ".join(lda or ["1"]),
        "b_step": "1" if ops.b_k else " * ".join(ldb or ["1"]),
        "ldc_m": axis_pitch(ops.c, ops.m),
        "ldc_n": axis_pitch(ops.c, ops.n),
        **epilogue,
    }
    launches = (Launch.of(name, first, main_params), Launch.of(merge_name, merge, merge_params))
    total = d.axes[ops.m] * d.axes[ops.n]
    workspace = (Workspace(ws, "fp32", c.splits * total),)
    return KernelSource("gemm_splitk.cu.j2", context, launches, workspace)


def _kernel_name(kp: KernelPlan, ops: Operands, t: GemmTiles, c: Candidate) -> str:
    """A name that carries every parameter of the variant."""
    name = (
        f"{kp.kernel.name}_gemm_splitk_{ops.a.dtype}_m{t.bm}_n{t.bn}_k{t.bk}_w{t.warps}"
        f"_s{t.stages}_a{'k' if ops.a_k else 'm'}_b{'k' if ops.b_k else 'n'}"
    )
    vec_a, vec_b = bool(c.param("vec_a")), bool(c.param("vec_b"))
    if not (vec_a and vec_b):
        name += "_u" + ("" if vec_a else "a") + ("" if vec_b else "b")
    return name


def _split_params(
    kp: KernelPlan, d: Diagram, ops: Operands, c: Candidate, ws: str
) -> tuple[list[Param], list[Param], list[Param]]:
    """The kernel's inputs, and the parameters of its two launches: the partial sums into
    the workspace, and the merge into C."""
    sizes = [Param(size_name(a), "int64", value=d.axes[a]) for a in kp.kernel.axes if a in d.axes]
    inputs = [Param(n, "tensor", d.tensor(n).dtype) for n in kp.kernel.inputs]
    main_params = [
        *inputs,
        Param(ws, "workspace", "fp32", writes=True),
        *sizes,
        Param("ncdc_k_per_split", "int64", value=c.param("k_per_split")),
    ]
    merge_params = [
        *inputs,
        Param(ws, "workspace", "fp32"),
        Param(ops.c.name, "tensor", ops.c.dtype, writes=True),
        *sizes,
        Param("ncdc_splits", "int64", value=c.splits),
    ]
    return inputs, main_params, merge_params
