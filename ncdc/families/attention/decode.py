"""The decode attention family: a short query axis against many keys, split across blocks.

`templates/decode_attention.cu.j2`: the few queries of a decode step padded to one 16-row
mma block, the keys split across blocks (and across the warps of a block), each writing an
unnormalised partial (m, l, O) to an fp32 workspace, then a second kernel that merges them.
The cost model weighs the grid's fill against the merge's traffic through the candidates'
`splits`; every split gets whole s_x chunks and none is empty, so the split count a
candidate carries is the one the kernel launches. Every warp keeps its own online softmax
over its keys, so no merge happens inside a block.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/decode_attention.yaml"), load_hardware("h200"))
    >>> first, merge = FAMILY.render(plan.kernels[0], plan).launches
    >>> first.kernel  # doctest: +ELLIPSIS
    'decode_attention_decode_attention_bf16_q16_x..._d128_w..._s...'
    >>> merge.kernel
    'decode_attention_decode_merge_bf16_d128'
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.families.attention.core import (
    DECODE_MAX_QUERIES,
    MMA_ROWS,
    Attention,
    attention_group,
    attention_registers,
    attention_roles,
    attention_smem,
    batch_count,
    min_blocks,
    mma_rows,
    read_attention,
    require_streamed,
    variant_name,
)
from ncdc.families.attention.mix import plan_masked_share
from ncdc.families.attention.splitk import MERGE_THREADS, merge_smem
from ncdc.families.base import KernelSource, Launch, Param, Workspace, no_arch_problem, no_loop_mix
from ncdc.families.codegen import size_name
from ncdc.language.diagram import Diagram
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "g_q": (16,),  # the whole (short) query axis, padded to one mma row block
    "s_x": (32, 64, 128),
    # key axis split across blocks, merged by a second pass: a few (batch, head) slices
    # still make two 4-warp blocks per SM, what HBM needs in flight (cost-model.md)
    "splits": (1, 2, 4, 8, 16, 32, 64),
    "warps": (4,),
    # K/V tiles in the cp.async ring: stages - 1 in flight while one is read; the model
    # weighs the bytes in flight against the blocks per SM the larger ring leaves
    "stages": (2, 3),
}


class DecodeFamily:
    """Attention whose query axis is at most DECODE_MAX_QUERIES long."""

    name = "decode_attention"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = "attention"

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        roles = attention_roles(diagram, kernel)
        if roles is None or diagram.axes[roles["q"][0]] > DECODE_MAX_QUERIES:
            return None
        return Family(self.name, roles, TILES)

    def candidates(
        self,
        model: KernelModel,
        family: Family,
        hw: Hardware,
        streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:
        require_streamed(model, family, streams)
        d = model.diagram
        at = read_attention(family, model.kernel, d)
        batch = batch_count(at, d.axes)
        (q,), (x,) = family.axes("q"), family.axes("x")
        q_len, x_len = d.axes[q], d.axes[x]
        pack_axis, pack = packed_heads(at, d, q_len)
        out: dict[tuple, Candidate] = {}
        for s_x, asked, warps, stages in itertools.product(
            mma_rows(x, TILES["s_x"], model.sizes[x], fixed),
            TILES["splits"],
            TILES["warps"],
            TILES["stages"],
        ):
            warps = next(w for w in (4, 2, 1) if w <= warps and s_x % (MMA_ROWS * w) == 0)
            chunks = ceil_div(x_len, s_x)
            keys_per_split = ceil_div(chunks, min(asked, chunks)) * s_x
            splits = ceil_div(x_len, keys_per_split)  # none empty
            stages = min(stages, max(2, ceil_div(keys_per_split, s_x)))  # no stage left unused
            params = (("s_x", s_x), ("warps", warps), ("stages", stages), ("pack", pack))
            if (params, keys_per_split) in out:
                continue
            partials = splits * warps
            threads = 32 * warps
            smem = attention_smem(at, MMA_ROWS, at.d, s_x, stages)
            rows = pack * q_len
            shapes = (
                LaunchShape((splits, batch // pack, 1), (threads, 1, 1), smem),
                LaunchShape(
                    (1, batch // pack, 1), (MERGE_THREADS, 1, 1), merge_smem(rows, partials)
                ),
            )
            # a block's rows: 16 // pack queries (padded) of each of its pack query heads,
            # which share every K/V chunk the block reads
            group = attention_group(model, family, MMA_ROWS // pack, fixed)
            if pack_axis:
                group[pack_axis] = pack
            stream = {a: (s_x if a == x else fixed.get(a, 1)) for a in streams}
            out[(params, keys_per_split)] = Candidate(
                group, stream, group, stream, params, shapes, stages, splits,
                attention_registers(model, family, MMA_ROWS, s_x, threads, masked=True),
                split_size=keys_per_split,
                recomputes=at.load_recomputes(d, 1, splits, pack),
                unstaged=at.unstaged(model.diagram, model.kernel),
            )  # fmt: skip
        return list(out.values())

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        diagram = plan.graph.diagram
        c = kp.candidate
        assert c is not None, "a GPU plan carries its candidate"
        at = read_attention(kp.family, kp.kernel, diagram)
        s_x, warps, pack = c.param("s_x"), c.param("warps"), c.param("pack")
        first, merge = c.launches
        batch, partials = first.grid[1], first.grid[0] * warps
        q_len = diagram.axes[at.q_axis]
        pack_axis, _ = packed_heads(at, diagram, q_len)
        name = variant_name(kp.kernel, "decode_attention", at, MMA_ROWS, s_x, warps, c.stages)
        if pack > 1:
            name += f"_h{pack}"
        merge_name = f"{kp.kernel.name}_decode_merge_{at.dtype}_d{at.d_v}"
        part_o, part_ml = f"ncdc_partial_o_{kp.kernel.name}", f"ncdc_partial_ml_{kp.kernel.name}"
        workspace = (
            Workspace(part_o, "fp32", batch * partials * pack * q_len * at.d_v),
            Workspace(part_ml, "fp32", batch * partials * pack * q_len * 2),
        )
        sizes = at.size_params(diagram.axes)
        lse = at.lse_params()
        scale = at.scale_param()
        launches = (
            Launch.of(
                name,
                first,
                (
                    *at.operand_params(),
                    Param(part_o, "workspace", "fp32", writes=True),
                    Param(part_ml, "workspace", "fp32", writes=True),
                    *at.score_params(),
                    *sizes,
                    scale,
                    Param("ncdc_keys_per_split", "int64", value=c.split_size),
                ),
            ),
            Launch.of(
                merge_name,
                merge,
                (
                    Param(part_o, "workspace", "fp32"),
                    Param(part_ml, "workspace", "fp32"),
                    Param(at.o, "tensor", at.dtype, writes=True),
                    *lse,
                    *sizes,
                    Param("ncdc_partials", "int64", value=partials),
                ),
            ),
        )
        context = {
            **at.context(),
            "kernel": name,
            "merge_kernel": merge_name,
            "threads": first.threads,
            "min_blocks": min_blocks(at, True),
            "merge_threads": merge.threads,
            "warps": warps,
            "s_x": s_x,
            "stages": c.stages,
            "pack": pack,
            "blocks": {
                a: f"(unsigned({size_name(a)}) / {pack}u)"
                if a == pack_axis
                else f"unsigned({size_name(a)})"
                for a in at.batch
            },
            "step": {a: pack if a == pack_axis else 1 for a in at.batch},
            "q_head_stride": head_pitch(diagram.tensor(at.q).axes, pack_axis, at.d),
            "o_head_stride": head_pitch(diagram.tensor(at.o).axes, pack_axis, at.d_v),
            "part_o": part_o,
            "part_ml": part_ml,
            "summary": f"decode attention, up to {MMA_ROWS} rows ({pack} query heads of "
            f"{q_len} queries) against keys split across blocks, {s_x} keys per stage "
            f"({s_x // warps} per warp), {c.stages}-stage cp.async; partials in fp32, merged "
            "by a second kernel",
        }
        return KernelSource(
            "decode_attention.cu.j2", context, launches, (*workspace, *at.workspace())
        )

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("q")[-1], TILES["g_q"]), (family.axes("x")[0], TILES["s_x"])]

    arch_problem = staticmethod(no_arch_problem)
    loop_mix = staticmethod(no_loop_mix)
    masked_share = staticmethod(plan_masked_share)


FAMILY = DecodeFamily()


def packed_heads(at: Attention, diagram: Diagram, q_len: int) -> tuple[str, int]:
    """The query-head axis whose heads share each K/V head (a batch axis of Q and O that K
    and V lack, and a paged cache's block table: the r of a GQA group), and how many of
    its heads one block packs into the mma's 16 rows with their q_len queries each: the
    largest divisor of its size that fits.
    ("", 1) when no such axis packs two heads, or when the kernel has more than a causal
    mask: a score functor, a bias, a length mask, the log-sum-exp or a Q computed as it
    loads address one head per block (the rows of the block still map to queries, r % q_len).

        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.hardware.load import load_hardware
        >>> from ncdc.plan.search import plan_diagram
        >>> d = load_diagram("tests/specs/decode_q4_gqa.yaml")  # r = 2 heads, q = 4
        >>> kp = plan_diagram(d, load_hardware("h200")).kernels[0]
        >>> at = read_attention(kp.family, kp.kernel, d)
        >>> packed_heads(at, d, 4), packed_heads(at, d, 8), packed_heads(at, d, 16)
        (('r', 2), ('r', 2), ('', 1))
    """
    sc = at.scores
    if not sc.plain or sc.lo or sc.lengths or sc.sequences or at.lse or at.q_load:
        return ("", 1)
    shared = set(diagram.tensor(at.k).axes) | set(diagram.tensor(at.v).axes)
    if at.paged:  # the caches' pages differ by the table's axes too
        shared |= set(diagram.tensor(at.paged.table).axes)
    rows = set(diagram.tensor(at.q).axes) & set(diagram.tensor(at.o).axes)
    best = ("", 1)
    for a in at.batch:
        if a in rows and a not in shared:
            n = diagram.axes[a]
            fit = max(p for p in range(1, n + 1) if n % p == 0 and p * q_len <= MMA_ROWS)
            if fit > best[1]:
                best = (a, fit)
    return best


def head_pitch(axes: tuple[str, ...], axis: str, head: int) -> str:
    """C++: elements between neighbouring heads along `axis` of a row-major tensor whose
    last axis is its head of `head` values; 0 when there is no such axis."""
    if not axis:
        return "0"
    return " * ".join([*(size_name(a) for a in axes[axes.index(axis) + 1 : -1]), str(head)])
