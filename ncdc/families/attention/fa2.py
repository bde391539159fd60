"""The FlashAttention-2-order kernel of the attention family: mma.sync, keys streamed
through shared memory.

`templates/attention.cu.j2`: one block per (batch..., g_q queries), one warp per 16 or 32
queries (warp_q), K and V streamed in chunks of s_x keys through a 2- or 3-stage cp.async
ring, online softmax in registers with the scale folded into the exponent, the tiles that
need no mask in a loop of their own (device code in `templates/include/ncdc_attention.cuh`).
Problem sizes are runtime parameters; tiles and head sizes are compile-time.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> from ncdc.families.attention.core import read_attention
    >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("a100"))
    >>> kp = plan.kernels[0]
    >>> at = read_attention(kp.family, kp.kernel, plan.graph.diagram)
    >>> render(kp, plan, at).launches[0].kernel
    'attention_attention_bf16_q64_x32_d128_w4_s2'
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.families.attention import splitk
from ncdc.families.attention.core import (
    CAUSAL_WIDE_HEAD,
    MMA_ROWS,
    TILES,
    WIDE_WARP_HEAD,
    WIDE_WARP_KEYS,
    WIDE_WARPS,
    Attention,
    attention_group,
    attention_registers,
    attention_smem,
    is_masked,
    min_blocks,
    mma_rows,
    q_in_registers,
    variant_name,
)
from ncdc.families.base import KernelSource, Launch, Param
from ncdc.hardware.arch import MMA_TILE
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan


def candidates(
    model: KernelModel,
    family: Family,
    at: Attention,
    streams: tuple[str, ...],
    fixed: Mapping[str, int],
    batch: int,
) -> list[Candidate]:
    """Every launch of the mma.sync kernel: query tiles, key chunks, warps of 16 or 32
    queries and ring stages, as the registers and the masks allow."""
    axes = model.diagram.axes
    (q,), (x,) = family.axes("q"), family.axes("x")
    out: list[Candidate] = []
    sc = at.scores
    masked = is_masked(at)
    keys = TILES["s_x"]
    if max(at.d, at.d_v) > CAUSAL_WIDE_HEAD:
        # O takes d_v / 2 registers a thread: with 64 keys, d = 256 spilled 36 B (sm_90a)
        keys = (MMA_TILE,) if masked else (MMA_TILE, 2 * MMA_TILE)
    plain_rows = sc.plain and not (sc.lo or sc.sequences)
    for g_q, s_x, warp_q, stages in itertools.product(
        mma_rows(q, TILES["g_q"], model.sizes[q], fixed),
        mma_rows(x, keys, model.sizes[x], fixed),
        TILES["warp_q"],
        TILES["stages"],
    ):
        # 32 rows a warp where O fits and Q's fragments stay in registers (read from
        # SMEM at each step, Q would cost back the ldmatrix the shared K/V saves), in
        # blocks of 4 warps: in 2-warp blocks ptxas capped itself at 128 registers and
        # spilled (causal d = 32, sm_89); with chunks of at most WIDE_WARP_KEYS (80 keys
        # of d = 64 spilled 24 B, sm_90a); and only where the masks bound keys from above
        # at most, with no score functor (a lower bound and the functor's row indices
        # cost registers per block)
        wide = warp_q > MMA_ROWS
        if wide and (
            g_q < WIDE_WARPS * warp_q
            or s_x > WIDE_WARP_KEYS
            or not plain_rows
            or at.d_v > WIDE_WARP_HEAD
            or not q_in_registers(at.d, warp_q)
        ):
            continue
        warps = g_q // warp_q
        threads = 32 * warps
        smem = attention_smem(at, g_q, max(at.d, at.d_v), s_x, stages)  # Q, then O
        group = attention_group(model, family, g_q, fixed)
        stream = {a: (s_x if a == x else fixed.get(a, 1)) for a in streams}
        shape = LaunchShape((ceil_div(axes[q], g_q), batch, 1), (threads, 1, 1), smem)
        rereads: tuple[tuple[str, int], ...] = ()
        if not q_in_registers(at.d, warp_q):
            # Q's fragments from its SMEM tile at every key chunk the block visits
            chunks = model.visited_chunks(group, stream)
            rereads = ((at.q, chunks - 1),) if chunks > 1 else ()
        out.append(
            Candidate(
                group, stream, {**group, q: warp_q}, stream,
                (("g_q", g_q), ("s_x", s_x), ("warp_q", warp_q)), (shape,), stages, 1,
                attention_registers(model, family, g_q, s_x, threads, warp_q, masked),
                recomputes=at.load_recomputes(model.diagram, ceil_div(axes[q], g_q)),
                unstaged=at.unstaged(model.diagram, model.kernel),
                fragment_rereads=rereads,
            )
        )  # fmt: skip
    return out


def render(kp: KernelPlan, plan: Plan, at: Attention) -> KernelSource:
    """The template context and launch of the mma.sync kernel (and of its split-key form,
    ncdc.families.attention.splitk)."""
    diagram = plan.graph.diagram
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    g_q, s_x, warp_q, warps = c.param("g_q"), c.param("s_x"), c.param("warp_q"), c.warps
    name = variant_name(kp.kernel, "attention", at, g_q, s_x, warps, c.stages, warp_q)
    params = (
        *at.operand_params(),
        Param(at.o, "tensor", at.dtype, writes=True),
        *at.score_params(),
        *at.lse_params(),
        *at.size_params(diagram.axes),
        at.scale_param(),
    )
    context = {
        **at.context(warp_q),
        "kernel": name,
        "threads": c.threads,
        "min_blocks": min_blocks(at, is_masked(at)),
        "g_q": g_q,
        "s_x": s_x,
        "row_blocks": warp_q // MMA_ROWS,
        "stages": c.stages,
        "summary": f"fused attention, {g_q} queries per block, keys streamed {s_x} at a "
        f"time through a {c.stages}-stage cp.async ring, {warps} warps of {warp_q} queries"
        + (", causal" if at.causal else ""),
    }
    if splitk.is_split(c):
        return splitk.render(kp, plan, at, name, context)
    launch = Launch.of(name, c.main, params)
    return KernelSource("attention.cu.j2", context, (launch,), at.workspace())
