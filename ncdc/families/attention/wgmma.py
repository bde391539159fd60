"""The Hopper attention variant of the attention family, in FlashAttention-3 order (Shah et
al. 2024): warp specialisation, TMA, mbarrier rings, wgmma and ping-pong between consumer
warpgroups (templates/attention_wgmma.cu.j2, ncdc_attention_hopper.cuh).

One block of 384 threads runs 128 queries of one (batch..., head) slice: warpgroup 0 drops
to 24 registers and one of its threads issues the TMA loads (Q once; each key tile's K and
V into rings of `stages` slots); warpgroups 1 and 2 rise to 240 and each owns 64 queries:
S = Q K^T by wgmma m64nS_Xk16 from 128-byte-swizzled shared memory, the online softmax in
registers, P packed to 16 bits in registers and O += P V by wgmma with A from registers.
fp8 V (with fp8 Q and K and a 16-bit O) takes both products at the fp8 rate: P packed to
V's type and permuted into the 8-bit A fragment, V transposed in shared memory by the
producer warpgroup's other three warps (budgets 40 and 232 registers then).
A diagram's score transforms (soft-capping, ALiBi, an additive bias, a mask rule's compares
and `where`) run as the family's score functor on each logit before the mask and the
softmax. The masks (causal, sliding and two-sided windows, a rule's band, a varlen mask's
lengths, padded or packed) bound the keys each query sees: a block loads only the key tiles
some row of it sees and masks only those some row does not see whole. Named barriers make
the two take turns at the tensor cores, so that one's softmax runs under the other's GEMMs. The
epilogue stages O / l in the V ring, swizzled, and one thread of each consumer stores its
64 rows with TMA (rows beyond q are clipped); a log-sum-exp output takes each row's
(m + log2 l) ln 2 from the thread that holds it.

The candidates join the mma.sync ones on sm_90a profiles and the model picks per shape.
Their price: the model's traffic and padding, the tensor rate at the full wgmma peak
(the candidate's `tensor_share`, less the epilogue's TMA store issue) and the softmax hidden
under the other warpgroup's GEMMs (`pingpong`: ncdc.model.overlap.pingpong_compute). What the
template does not run (heads over 256, or not whole k steps: multiples of 16 values, of 32 for
fp8 Q and K; layouts TMA cannot take: Q,
K, V and O must be [batch..., rows, head], or [batch..., rows, batch..., head] with at most
two axes between rows and head, FlashAttention's [b, s, h, d]; paged caches, Q or K computed
as they load) leaves the kernel with the mma.sync candidates.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.plan.search import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200"))
    >>> plan.kernels[0].candidate.param("wgmma")
    1
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ncdc.families.base import KernelSource, Launch, Param, TensorMapSpec, permille
from ncdc.families.codegen import cpp_type
from ncdc.families.gemm.wgmma import ISSUE_CYCLES, TMA_LATENCY_CYCLES
from ncdc.hardware.arch import WGMMA_FP8_SUM, TiledSoftmax
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.families.attention.core import Attention
    from ncdc.hardware.machine import Hardware
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

ARCH = "sm_90a"  # wgmma, TMA and setmaxnreg
VALUE_DTYPES = ("bf16", "fp16")  # V and O; Q and K these too, or fp8 (S by wgmma k32)
QK_DTYPES = (*VALUE_DTYPES, "fp8_e4m3", "fp8_e5m2")
BQ = 128  # queries per block: two consumer warpgroups of 64
THREADS = 384  # producer + two consumer warpgroups
SPAN = 128  # the swizzle span: 64 values of 16 bits, one TMA box row
LAUNCH_REGISTERS = 168  # 65536 / 384 rounded down to 8: ptxas's budget under launch bounds
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 24, 240  # setmaxnreg (ncdc_attention_hopper.cuh)
# fp8 V: three producer warps transpose its tiles, with the fp8 GEMM's budgets
PRODUCER_REGISTERS_V8, CONSUMER_REGISTERS_V8 = 40, 232
# A consumer thread's registers besides S (s_x / 2 fp32), O (d_v / 2) and P (s_x / 4):
# the row state, descriptors, indices and the epilogue's addresses.
REGISTER_OVERHEAD = 48
MAX_HEAD = 256  # Q's and K's heads (whole k steps of 32 bytes) and V's (multiples of 16)
# axes between a tensor's rows and its head ([b, s, h, d]): TMA maps have at most 5 dimensions
MAX_INNER = 2
TILES: dict[str, tuple[int, ...]] = {"s_x": (64, 128), "stages": (2, 3)}
# A data mask's block table: one class byte a key tile in static shared memory
# (kClassTable, ncdc_attention_hopper.cuh)
CLASS_TABLE = 2048


def offered(hw: Hardware) -> bool:
    return hw.arch == ARCH


def is_wgmma(c: Candidate) -> bool:
    return dict(c.params).get("wgmma", 0) == 1


def padded_heads(at: Attention) -> tuple[int, int]:
    """Q's and K's head and V's as the kernel holds them: whole 128-byte column blocks
    (Config::DP, DVP), TMA filling a block's columns past the head with zeros. S issues the
    head's own k steps; P V's n is the padded head (the work the model prices).

        >>> from types import SimpleNamespace as NS
        >>> padded_heads(NS(d=96, d_v=96, dtype="bf16", value_dtype="bf16"))
        (128, 128)
        >>> padded_heads(NS(d=192, d_v=160, dtype="fp8_e4m3", value_dtype="bf16"))
        (256, 192)
    """
    row_qk, row_v = SPAN // DTYPES[at.dtype].bytes, SPAN // DTYPES[at.value_dtype].bytes
    return ceil_div(at.d, row_qk) * row_qk, ceil_div(at.d_v, row_v) * row_v


def pipeline_share(hw: Hardware, at: Attention, s_x: int, stages: int) -> float:
    """The share of the tensor peak the rings sustain: per key tile a block needs the MMA
    time of its 128 x s_x x d (Q's type) and 128 x s_x x d_v (V's), the producer's issue
    time (one TMA copy per 128 bytes of a K and a V row, two empty waits and two expect_tx
    arrives) and, with `stages` slots in flight, one TMA latency per `stages` tiles; the
    slowest sets the pace (as gemm_wgmma.pipeline_share).

        >>> from ncdc.hardware.load import load_hardware
        >>> from ncdc.plan.search import plan_diagram
        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.families.attention.core import read_attention
        >>> h200 = load_hardware("h200")
        >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), h200)
        >>> at = read_attention(plan.kernels[0].family, plan.kernels[0].kernel, plan.graph.diagram)
        >>> round(pipeline_share(h200, at, 128, 2), 2), round(pipeline_share(h200, at, 64, 2), 2)
        (1.0, 1.0)
    """
    clock = hw.achievable.clock_hz or hw.clock_hz
    mma_s = mma_tile_s(hw, at, s_x)
    dp, dvp = padded_heads(at)
    loads = (dp * DTYPES[at.dtype].bytes + dvp * DTYPES[at.value_dtype].bytes) // SPAN
    issue_s = (loads + 4) * ISSUE_CYCLES / clock
    fill_s = (TMA_LATENCY_CYCLES / clock + issue_s) / stages
    return mma_s / max(mma_s, issue_s, fill_s)


def mma_tile_s(hw: Hardware, at: Attention, s_x: int, padded: bool = True) -> float:
    """Seconds one SM's tensor cores take for a block's two GEMMs of one key tile at peak:
    128 x s_x x d in Q's type and 128 x s_x x d_v in V's, d_v as P V issues it (`padded_heads`)
    or, not `padded`, the head's own."""
    sms = hw.limits.sms
    d_v = padded_heads(at)[1] if padded else at.d_v
    mma_s = 2.0 * BQ * s_x * at.d / (hw.achieved_rate("tensor", at.dtype) / sms)
    return mma_s + 2.0 * BQ * s_x * d_v / (hw.achieved_rate("tensor", at.value_dtype) / sms)


def store_share(
    hw: Hardware, at: Attention, s_x: int, keys: int, share: float, visited: float = 1.0
) -> float:
    """The share of a block's time left to its key loop after the epilogue's serial TMA
    store: a consumer's d_v / 64 box stores, their commit and wait and two named barriers
    (the bytes are the model's as before), against its key tiles (the `visited` share of
    them on average under a mask: KernelModel.mask_fraction) at `share` of the peak.

        >>> from ncdc.hardware.load import load_hardware
        >>> from ncdc.plan.search import plan_diagram
        >>> from ncdc.language.load import load_diagram
        >>> from ncdc.families.attention.core import read_attention
        >>> h200 = load_hardware("h200")
        >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), h200)
        >>> at = read_attention(plan.kernels[0].family, plan.kernels[0].kernel, plan.graph.diagram)
        >>> round(store_share(h200, at, 128, 4096, 1.0), 4)  # 384 cycles over 32 tiles' MMAs
        0.9946
    """
    clock = hw.achievable.clock_hz or hw.clock_hz
    tiles = ceil_div(keys, s_x) * visited
    loop_s = max(tiles, 1) * mma_tile_s(hw, at, s_x) / share
    store_s = (padded_heads(at)[1] * DTYPES[at.out_dtype].bytes // SPAN + 4) * ISSUE_CYCLES / clock
    return loop_s / (loop_s + store_s)


def consumer_registers(s_x: int, d_v: int, key_inputs: int = 0, p_bytes: int = 2) -> int:
    """A consumer thread's registers: S and O in fp32, P packed (`p_bytes` a value), the
    overhead, and for each tensor the score path reads along the keys (a document id, a
    bias over keys) four at each of the thread's s_x / 4 keys, loaded together: the 64-bit
    address, the value and its fp32 copy (ptxas spilled the 128-key tile of the document
    mask 52 bytes and of tests/specs/attn_bias_bhqx 48, their 64-key tiles none)."""
    return s_x // 2 + d_v // 2 + s_x * p_bytes // 8 + REGISTER_OVERHEAD + key_inputs * s_x


def smem_bytes(at: Attention, s_x: int, stages: int) -> int:
    """Q, then `stages` K and V tiles (and for fp8 V its transposed tiles), and 1024 bytes
    to align them (the swizzle)."""
    qk, v = DTYPES[at.dtype].bytes, DTYPES[at.value_dtype].bytes
    dp, dvp = padded_heads(at)
    vt = s_x * dvp * v if at.o_dtype else 0
    return 1024 + BQ * dp * qk + stages * (s_x * (dp * qk + dvp * v) + vt)


def _runs(at: Attention, diagram: Diagram) -> bool:
    """Whether the template runs this attention: 16-bit (or fp8 Q and K, V too or not), Q
    and K heads of whole k steps (16 values, 32 of fp8) and d_v a multiple of 16, up to 256
    (`padded_heads`; fp8 V: whole 128-byte rows, its registers then allowing d_v 128 alone:
    `candidates`), any score path and masks (the score
    functor and attn::Visible), a log-sum-exp output or none, a positive scale, K and V
    not paged nor Q and K computed as they load (the tensor maps copy boxes of contiguous
    rows), and Q, K, V and O in [outer..., rows, inner..., head] order (`_layout`: batch
    axes around the rows, at most two between them and the head; O with every batch axis,
    as Q)."""
    if at.dtype not in QK_DTYPES or at.out_dtype not in VALUE_DTYPES or at.paged or at.loads:
        return False
    if at.d * DTYPES[at.dtype].bytes % 32 or at.d_v % 16 or max(at.d, at.d_v) > MAX_HEAD:
        return False
    if DTYPES[at.value_dtype].is_fp8 and at.d_v % SPAN:  # fp8 V: d_v of 128 or 256
        return False
    if at.scale <= 0:
        return False
    for name, row in _rows(at).items():
        layout = _layout(diagram, name, row)
        if layout is None or not set(layout[0] + layout[1]) <= set(at.batch):
            return False
    return all(
        set(diagram.tensor(t).axes) - {row, diagram.tensor(t).axes[-1]} == set(at.batch)
        for t, row in ((at.q, at.q_axis), (at.o, at.q_axis))
    )


def _rows(at: Attention) -> dict[str, str]:
    """Each tensor's rows axis: the queries' for Q and O, the keys' for K and V."""
    return {at.q: at.q_axis, at.k: at.x_axis, at.v: at.x_axis, at.o: at.q_axis}


Layout = tuple[tuple[str, ...], tuple[str, ...]]  # a tensor's outer and inner axes


def _layout(diagram: Diagram, name: str, row: str) -> Layout | None:
    """The axes of tensor `name` before its rows (outer) and between its rows and its head
    (inner, at most MAX_INNER), where it is [outer..., rows, inner..., head] with batch axes
    around the rows; None for another layout.

        >>> from ncdc.language.load import load_diagram
        >>> d = load_diagram("diagrams/rope_attention.yaml")   # Q [b, s, g, r, d]
        >>> _layout(d, "Q", "s"), _layout(d, "K", "x"), _layout(d, "K", "s")
        ((('b',), ('g', 'r')), (('b',), ('g',)), None)
    """
    axes = diagram.tensor(name).axes
    if len(axes) < 2 or row not in axes[:-1]:
        return None
    at = axes.index(row)
    outer, inner = axes[:at], axes[at + 1 : -1]
    return None if len(inner) > MAX_INNER else (outer, inner)


def candidates(
    model: KernelModel, family: Family, hw: Hardware, streams: tuple[str, ...],
    fixed: Mapping[str, int], at: Attention, batch: int, group: Mapping[str, int],
) -> list[Candidate]:  # fmt: skip
    """The FlashAttention-3 launches for this kernel on `hw`; none where the variant cannot
    run it or the user fixed a query or key tile it does not have. `batch` is the number of
    (batch..., head) slices, `group` a block's tile (the attention family's, for 128
    queries)."""
    from ncdc.model.overlap import WarpgroupBudget, warpgroups_fit

    if not offered(hw) or not _runs(at, model.diagram):
        return []
    (q,), (x,) = family.axes("q"), family.axes("x")
    if fixed.get(q, BQ) != BQ:
        return []
    out: list[Candidate] = []
    # the widest key tile whose S, O and P fit a consumer's registers (FlashAttention-3's
    # choice: 128 for d_v <= 128): each tile's turn, barriers and descriptors are paid per
    # key, so a 64-key tile issues more per FLOP (2.9 slots per HMMA.16816 against 2.0 at
    # d = 128, SASS on sm_90a); a fixed key tile of 64 or 128 as given
    key_inputs = sum(t.x_pitch != "0" for t in at.scores.inputs)
    most = CONSUMER_REGISTERS_V8 if at.o_dtype else CONSUMER_REGISTERS
    p_bytes = DTYPES[at.value_dtype].bytes
    d_v = padded_heads(at)[1]
    fits = [s for s in TILES["s_x"] if consumer_registers(s, d_v, key_inputs, p_bytes) <= most]
    if at.o_dtype:  # fp8 V: its transposed tile is one 128-byte row of keys
        fits = [s for s in fits if s == 128]
    # the widest that fits (a narrower one where two stages of the widest exceed the shared
    # memory: heads of 192 and 160 in 16 bits), or the one given
    widths = [fixed[x]] if x in fixed else fits[::-1]
    for s_x in widths:
        if s_x not in fits or (out and x not in fixed):
            continue
        for stages in TILES["stages"]:
            smem = smem_bytes(at, s_x, stages)
            table = CLASS_TABLE if at.scores.tile_data else 0
            # the block's three warpgroups on one SM: its shared memory (the rings, and a
            # data mask's block table), and setmaxnreg's 24 + 2 x 240 registers a thread
            # (bytes, shared out evenly over the three)
            budgets = (PRODUCER_REGISTERS_V8, CONSUMER_REGISTERS_V8) if at.o_dtype else (
                PRODUCER_REGISTERS, CONSUMER_REGISTERS)  # fmt: skip
            regs = 128 * 4 * (budgets[0] + 2 * budgets[1]) / 3
            if warpgroups_fit(hw, WarpgroupBudget(0, (smem + table) / 3, 0, regs))[0] < 3:
                continue
            stream = {a: (s_x if a == x else fixed.get(a, 1)) for a in streams}
            shape = LaunchShape((ceil_div(model.sizes[q], BQ), batch, 1), (THREADS, 1, 1), smem)
            # a padded V's columns: tensor work the diagram's FLOPs do not count
            share = pipeline_share(hw, at, s_x, stages)
            share *= mma_tile_s(hw, at, s_x, padded=False) / mma_tile_s(hw, at, s_x)
            rule_tiles = bool(at.scores.tile_rule)
            visited = float(model.mask_fraction(group, stream, rule_tiles))
            share *= store_share(hw, at, s_x, model.sizes[x], share, visited)
            params = (("wgmma", 1), ("g_q", BQ), ("s_x", s_x))
            out.append(
                Candidate(
                    group,
                    stream,
                    {**group, q: BQ // 2},
                    stream,
                    params,
                    (shape,),
                    stages,
                    1,
                    LAUNCH_REGISTERS,
                    tensor_share=permille(share),
                    pingpong=True,
                    rule_tiles=rule_tiles,
                )  # fmt: skip
            )
    return out


def arch_problem(kernel_name: str, sm: int) -> str:
    if sm != 90:
        return f"{kernel_name} was planned with wgmma and TMA, which only sm_90a has"
    return ""


def _strided(diagram: Diagram, at: Attention) -> bool:
    """Whether some tensor's rows are strided by inner axes: then every map is 5-D."""
    layouts = (_layout(diagram, n, row) for n, row in _rows(at).items())
    return any(layout is not None and layout[1] for layout in layouts)


def _slice(diagram: Diagram, name: str, row: str, strided: bool) -> str:
    """C++ of the tensor's ncdc::fa3::Slice: the row-major index over its outer axes and, in
    a 5-D map, the indices of its inner axes, innermost first."""
    outer, inner = _layout(diagram, name, row) or ((), ())
    index = ""
    for a in outer:
        index = f"ncdc_i_{a}" if not index else f"({index}) * ncdc_size_{a} + ncdc_i_{a}"
    coords = [f"int({index or '0'})"]
    if strided:
        coords += [f"int(ncdc_i_{a})" for a in reversed(inner)] + ["0"] * (MAX_INNER - len(inner))
    return "{" + ", ".join(coords) + "}"


def _tensor_map(diagram: Diagram, name: str, row: str, rows: int, strided: bool) -> TensorMapSpec:
    """The map of [outer..., rows, inner..., head]: (head, rows, outer slices) with a box of
    64 x `rows`, or, `strided`, (head, inner innermost first and padded to MAX_INNER with
    ones, rows, outer slices) with a box of one inner index."""
    t = diagram.tensor(name)
    outer, inner = _layout(diagram, name, row) or ((), ())
    esize = DTYPES[t.dtype].bytes
    head = diagram.axes[t.axes[-1]]
    dims: list[int] = [head]
    strides: list[int] = []
    axes: list[tuple[str, ...]] = [(t.axes[-1],)]
    pitch = head * esize  # bytes between neighbours along the next axis out
    if strided:
        for a in reversed(inner):
            dims.append(diagram.axes[a])
            strides.append(pitch)
            axes.append((a,))
            pitch *= diagram.axes[a]
        for _ in range(MAX_INNER - len(inner)):  # a dimension of one: any valid stride
            dims.append(1)
            strides.append(pitch)
            axes.append(())
    dims.append(diagram.axes[row])
    strides.append(pitch)
    axes.append((row,))
    pitch *= diagram.axes[row]
    dims.append(math.prod(diagram.axes[a] for a in outer))
    strides.append(pitch)
    axes.append(tuple(outer))
    box = (SPAN // esize, *([1] * MAX_INNER if strided else []), rows, 1)
    return TensorMapSpec(
        tensor=name, dtype=t.dtype, dims=tuple(dims), strides=tuple(strides), box=box,
        swizzle=SPAN, axes=tuple(axes),
    )  # fmt: skip


def _score_context(at: Attention, kernel: str) -> dict[str, object]:
    """What attention_scores.j2 reads to write the score functor, its object and its
    tensors' parameters, and the log-sum-exp output's offset and pitch (the attention
    family's context, less the masks this variant keeps in its own terms)."""
    keys = (
        "statements",
        "score_result",
        "tile_rule",
        "tile_rule_data",
        "tile_data",
        "kept_statements",
        "kept_result",
        "log2_statements",
        "log2_result",
        "kept_log2_statements",
        "kept_log2_result",
        "kept_identity",
        "score_inputs",
        "score_batch",
        "band_lo",
        "band_hi",
        "upper",
        "below",
        "lengths",
        "lengths_offset",
        "sequences",
        "lse",
        "offset",
        "stride",
    )
    from ncdc.families.attention.core import split_context

    full = at.context()
    return {"kernel": kernel, **{k: full[k] for k in keys}, "split": split_context(at.scores)}


def _masks(at: Attention) -> str:
    """The summary's words for the keys a query sees."""
    sc = at.scores
    words = ["causal"] if at.causal else []
    words += ["a sliding window"] if sc.window else []
    words += ["a mask rule's band"] if (sc.lo or sc.hi) and not (at.causal or sc.window) else []
    words += ["packed sequences"] if sc.sequences else ["lengths"] if sc.lengths else []
    return "".join(f", {w}" for w in words)


def render(kp: KernelPlan, plan: Plan, at: Attention) -> KernelSource:
    """The FlashAttention-3 kernel of `kp.candidate`: template context, maps and launch."""
    d = plan.graph.diagram
    c = kp.candidate
    assert c is not None, "a GPU plan carries its candidate"
    s_x, stages = c.param("s_x"), c.stages
    name = (
        f"{kp.kernel.name}_attention_wgmma_{at.dtype}"
        + (f"_{at.v_dtype}" if at.v_dtype else "")
        + f"_q{BQ}_x{s_x}_d{at.d}"
        + (f"_dv{at.d_v}" if at.d_v != at.d else "")
        + f"_s{stages}"
        + ("_causal" if at.causal else "")
        + ("_window" if at.scores.window else "")
        + ("_packed" if at.scores.sequences else "_varlen" if at.scores.lengths else "")
        + ("" if at.scores.plain else "_scores")
        + ("_lse" if at.lse else "")
        + "_sm90a"
    )
    maps = {t: f"ncdc_tma_{t}" for t in (at.q, at.k, at.v, at.o)}
    strided = _strided(d, at)
    params = (
        Param(at.q, "tensor", at.dtype),
        Param(at.k, "tensor", at.dtype),
        Param(at.v, "tensor", at.value_dtype),
        Param(at.o, "tensor", at.out_dtype, writes=True),
        *at.score_params(),
        *at.lse_params(),
        *at.size_params(d.axes),
        at.scale_param(),
        *(
            Param(maps[t], "tensormap", dtype, tensor_map=_tensor_map(d, t, row, rows, strided))
            for t, row, rows, dtype in (
                (at.q, at.q_axis, BQ, at.dtype),
                (at.k, at.x_axis, s_x, at.dtype),
                (at.v, at.x_axis, s_x, at.value_dtype),
                (at.o, at.q_axis, BQ // 2, at.out_dtype),
            )
        ),
    )
    context = {
        "kernel": name,
        "summary": f"fused attention in FlashAttention-3 order: {BQ} queries per block, "
        f"keys {s_x} at a time through {stages}-stage TMA rings, two ping-pong consumer "
        "warpgroups (wgmma), O stored by TMA" + _masks(at),
        "T": cpp_type(at.dtype),
        "TV": cpp_type(at.value_dtype),
        "TO": cpp_type(at.out_dtype),
        "q": at.q, "k": at.k, "v": at.v, "o": at.o,
        "batch": at.batch, "sizes": at.sizes, "q_axis": at.q_axis, "x_axis": at.x_axis,
        "d": at.d, "d_v": at.d_v, "s_x": s_x, "stages": stages, "threads": c.threads,
        "causal": at.causal or at.scores.bounded,
        "z_q": _slice(d, at.q, at.q_axis, strided), "z_k": _slice(d, at.k, at.x_axis, strided),
        "z_v": _slice(d, at.v, at.x_axis, strided), "z_o": _slice(d, at.o, at.q_axis, strided),
        "strided": strided,
        "map_q": maps[at.q], "map_k": maps[at.k], "map_v": maps[at.v], "map_o": maps[at.o],
        "smem_bytes": c.smem_bytes,
        **_score_context(at, name),
    }  # fmt: skip
    scores, product = (op for op in kp.kernel.ops if op.kind == "contract")  # S, then O
    soft = next(op for op in kp.kernel.ops if op.kind == "softmax")
    return KernelSource(
        "attention_wgmma.cu.j2",
        context,
        (Launch.of(name, c.main, params, entry_registers=LAUNCH_REGISTERS),),
        # S as QGMMA sums it, and with fp8 V the P V product too
        sums=tuple(
            (op.out, WGMMA_FP8_SUM)
            for op, fp8 in ((scores, DTYPES[at.dtype].is_fp8), (product, bool(at.o_dtype)))
            if fp8
        ),  # fmt: skip
        # fp8 P: each key tile's exps against the running max, rounded to V's type
        softmaxes=((soft.out, TiledSoftmax(s_x, at.value_dtype)),) if at.o_dtype else (),
    )
