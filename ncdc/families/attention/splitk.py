"""Split-key forward attention for grids too small for the GPU: blocks share one query tile's keys.

Cross-attention of 77 queries over 16 heads, or a short prefill chunk against a long cache,
makes fewer (batch..., head, query tile) blocks than the SMs, however long the key axis is.
These candidates take the attention family's and cut the keys into `splits` ranges of
whole s_x chunks (grid z, none empty): each block runs the family's own loop over its range
(`attention_forward` with SPLIT) and writes its rows' unnormalised O and running (m, l) in
fp32 to a workspace, and a second kernel (`merge_partials`, the decode family's merge)
combines the splits in split order, normalises, and writes O and the log-sum-exp when the
diagram saves it: the result does not depend on timing. A split that a query sees no key
of weighs nothing. The model prices the partials (each written once and read once, fp32:
`time_kernel`'s split term), Q read again by every split (`rereads`), the grid's waves
and the second launch.

Under a causal or window mask each (query tile, split) block visits the chunks of its tile
that fall in its range, and the model prices the busiest block slot (`band_imbalance` with
`split_chunks`); a length mask's work is data, so a varlen kernel is not split.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> d = load_diagram("diagrams/cross_attention.yaml", {"b": 1, "q": 77, "x": 4096})
    >>> c = plan_diagram(d, load_hardware("h200")).kernels[0].candidate
    >>> is_split(c), c.splits > 1, len(c.launches)
    (True, True, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.families.base import KernelSource, Launch, Param, Workspace
from ncdc.model.launch import MAX_GRID_YZ, Candidate, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.families.attention.core import Attention
    from ncdc.hardware.machine import Hardware
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

SPLITS = (2, 4, 8, 16, 32)  # asked-for splits; each gets whole key chunks and none is empty
MERGE_THREADS = 128  # 4 warps, a row each at a time
MERGE_ROWS = 32  # query rows per merge block


def is_split(c: Candidate | None) -> bool:
    return c is not None and bool(dict(c.params).get("split_keys"))


def merge_smem(rows: int, splits: int) -> int:
    """Bytes of the merge's (m, l) pairs in shared memory: float2 [rows][splits | 1]
    (ncdc_attention.cuh's merge_pitch); decode's merge of its partials too."""
    return rows * (splits | 1) * 8


def candidates(
    model: KernelModel, hw: Hardware, at: Attention, base: list[Candidate]
) -> list[Candidate]:
    """Split-key versions of the candidates in `base` whose grid has fewer blocks than the
    SMs; none on a machine that is not a GPU, nor under a length mask."""
    sc = at.scores
    if not hw.is_gpu or sc.lengths:
        return []
    axes_diagram = model.diagram
    axes = axes_diagram.axes
    q_len, x_len = axes[at.q_axis], axes[at.x_axis]
    out: dict[tuple, Candidate] = {}
    for c in base:
        if c.grid >= hw.limits.sms:
            continue
        s_x = c.param("s_x")
        chunks = ceil_div(x_len, s_x)
        for asked in SPLITS:
            keys_per_split = ceil_div(chunks, min(asked, chunks)) * s_x
            splits = ceil_div(x_len, keys_per_split)  # none empty
            if splits < 2 or splits > MAX_GRID_YZ or (c.params, splits) in out:
                continue
            gx, gy, _ = c.main.grid
            rows = min(MERGE_ROWS, q_len)
            shapes = (
                LaunchShape((gx, gy, splits), c.main.block, c.main.dynamic_smem),
                LaunchShape(
                    (ceil_div(q_len, MERGE_ROWS), gy, 1),
                    (MERGE_THREADS, 1, 1),
                    merge_smem(rows, splits),
                ),
            )
            out[(c.params, splits)] = dataclasses.replace(
                c,
                params=c.params + (("split_keys", 1),),
                launches=shapes,
                splits=splits,
                rereads=((at.q, splits - 1),),  # every split loads the query tile
                # Q's fragments from SMEM at each chunk: as many reads as chunks, the
                # splits' first reads among them (counted by `rereads`)
                fragment_rereads=tuple(
                    (n, max(0, extra + 1 - splits)) for n, extra in c.fragment_rereads
                ),
                recomputes=at.load_recomputes(
                    axes_diagram, ceil_div(q_len, c.param("g_q")), splits
                ),
                split_size=keys_per_split,
            )
    return list(out.values())


def render(
    kp: KernelPlan, plan: Plan, at: Attention, name: str, context: Mapping[str, object]
) -> KernelSource:
    """The two kernels of a split candidate: partials per key range, then the merge.
    `name` and `context` are the unsplit variant's (attention.cu.j2's)."""
    diagram = plan.graph.diagram
    c = kp.candidate
    assert c is not None and is_split(c)
    first, merge = c.launches
    g_q, s_x, warp_q = c.param("g_q"), c.param("s_x"), c.param("warp_q")
    kernel = f"{name}_split"
    merge_kernel = f"{kp.kernel.name}_attention_merge_{at.dtype}_d{at.d_v}" + (
        "_lse" if at.lse else ""
    )
    part_o = f"ncdc_partial_o_{kp.kernel.name}"
    part_ml = f"ncdc_partial_ml_{kp.kernel.name}"
    batch = first.grid[1]
    q_len = diagram.axes[at.q_axis]
    workspace = (
        Workspace(part_o, "fp32", batch * c.splits * q_len * at.d_v),
        Workspace(part_ml, "fp32", batch * c.splits * q_len * 2),
    )
    sizes = at.size_params(diagram.axes)
    launches = (
        Launch.of(
            kernel,
            first,
            (
                *at.operand_params(),
                Param(part_o, "workspace", "fp32", writes=True),
                Param(part_ml, "workspace", "fp32", writes=True),
                *at.score_params(),
                *sizes,
                at.scale_param(),
                Param("ncdc_keys_per_split", "int64", value=c.split_size),
            ),
        ),
        Launch.of(
            merge_kernel,
            merge,
            (
                Param(part_o, "workspace", "fp32"),
                Param(part_ml, "workspace", "fp32"),
                Param(at.o, "tensor", at.dtype, writes=True),
                *at.lse_params(),
                *sizes,
                Param("ncdc_splits", "int64", value=c.splits),
            ),
        ),
    )
    split_context = {
        **context,
        "kernel": kernel,
        "merge_kernel": merge_kernel,
        "merge_threads": merge.threads,
        "merge_rows": MERGE_ROWS,
        "part_o": part_o,
        "part_ml": part_ml,
        "summary": f"fused attention, {g_q} queries per block, keys split {c.splits} ways "
        f"({c.split_size} per split) and streamed {s_x} at a time through a "
        f"{c.stages}-stage cp.async ring, {c.warps} warps of {warp_q} queries; fp32 "
        "partials merged in split order by a second kernel",
    }
    return KernelSource(
        "attention_splitk.cu.j2", split_context, launches, (*workspace, *at.workspace())
    )
