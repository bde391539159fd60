"""The attention backward family: dQ, dK and dV in one kernel, in FlashAttention-2 order
(Dao 2023, arXiv:2307.08691, Algorithm 2), from the backward diagram `ncdc grad` derives.

What it reads, by structure (the names are the diagram's own):

    S  = contract(Q, K, over=d) * c          the logits, again
    M  = causal(S, ...) | window(S, ...)     any number of band masks (or none)
    Y  = sub(M, L)                           L: the saved row log-sum-exp (fp32, over q)
    P  = exp(Y)                              P recomputed from it
    dP = contract(dO, V, over=e)
    dV = contract(P, dO, over=q)
    G  = sub(dP, D)                          D: sum_e(dO * O), per query (fp32), saved first
    dS = mul(P, G)
    dQ = contract(dS, K, over=x) * c'
    dK = contract(dS, Q, over=q) * c'

`templates/attention_backward.cu.j2`: one block per (batch..., bx keys), one warp per 16 of
them, holding its keys' dK and dV accumulators; the queries stream through a 2-stage
cp.async ring bq at a time (only the tiles that see some of its keys), each step
recomputing S^T and P^T (keys as rows), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D),
dK += dS^T Q, and dQ += dS K added into an fp32 workspace with atomics; a second launch
writes dQ from it (device code in `templates/include/ncdc_attention_backward.cuh`). Or, as
the model's price or the schedule's `deterministic` says (`dq_pass`), the second launch
computes dQ itself in query order: a block per bx queries holding their dQ while the keys
stream bq at a time, S, P and dP computed again, no atomics, the same bits every run.
Grouped-query heads (Q, dO, L and D with an axis beside q that K and V lack, dK and dV
summed over it): a block streams the queries of each head of its group in turn, so the sum
stays in its registers. A score path between S and the masks (soft-capping, ALiBi, a bias,
a mask rule of positions) runs as a functor (`ScoreFunctor`): the transformed logit for P,
and dS from dM = P (dP - D) by the statements of its derived gradient; varlen masks
(padded or packed sequences) bound the tiles and drop the pairs of two sequences.

    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.grad.choose import choose_pair
    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.plan.search import plan_diagram
    >>> h200 = load_hardware("h200")
    >>> pair = choose_pair(load_diagram("diagrams/attention_causal.yaml"), h200).pair
    >>> plan = plan_diagram(pair.backward, h200)
    >>> [k.family.name for k in plan.kernels]
    ['rowwise', 'attention_backward']
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ncdc.errors import PlanError
from ncdc.families.attention import wgmma as attention_wgmma
from ncdc.families.attention.core import HEAD_STEP, INPUT_DTYPES, MMA_ROWS, row_values
from ncdc.families.attention.scores import (
    SCORE_KINDS,
    ScoreInput,
    ScoreValues,
    mask_bands,
    pitch_of,
)
from ncdc.families.base import (
    KernelSource,
    Launch,
    Param,
    Workspace,
    no_arch_problem,
    permille,
)
from ncdc.families.codegen import Statement, cpp_type, needed_ops, op_statements, size_name
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import MAX_GRID_YZ, Candidate, Family, LaunchShape
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware
    from ncdc.model.graph import Kernel
    from ncdc.model.issue import LoopMix
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan, Plan

TILES: dict[str, tuple[int, ...]] = {
    "bx": (64, 128),  # keys per block: one warp per 16
    "bq": (32, 64),  # queries per step of the ring
}
HEAD_MAX = 128  # dK and dV accumulators, d / 2 and e / 2 fp32 a thread, beside the step's
STAGES = 2  # Q, dO, L and D tiles in the cp.async ring
CONVERT_THREADS = 256  # the second launch: dQ from its fp32 workspace, 4 values a thread
# sm_90a: the products on wgmma (ncdc_attention_backward_hopper.cuh), a warpgroup per 64 keys
# and per 64 values of the head, 32 queries a step, heads of 64 or 128 (the wgmma n's it uses)
WGMMA_ROWS, WGMMA_QUERIES, WGMMA_HEADS = 64, 32, (64, 128)
# Shares of the tensor peak, from published backward rates on an H100 SXM (head 128, 4k
# tokens; Shah et al. 2024, arXiv:2407.08608, "Attention backward speed, head dim 128"):
# FlashAttention-2, this family's order on mma.sync, 310 TFLOP/s of the 989 peak, the share
# its mma.sync kernel is priced at where mma.sync does not reach the peak (Hopper);
# FlashAttention-3 on wgmma 542, less the two losses its ablation measures (same paper:
# 661 TFLOP/s forward, 582 without warp specialisation, 570 without the softmax overlapped
# with the products), since the wgmma kernel here has neither: 0.416.
MMA_SYNC_BACKWARD_SHARE = 310 / 989
WGMMA_BACKWARD_SHARE = 542 / 989 * (582 / 661) * (570 / 661)


@dataclass(frozen=True)
class ScoreFunctor:
    """The score path between the scaled logits and the masks, and its gradient, as C
    statements (scores.ScoreValues): `statements` compute `result` from ncdc_s, ncdc_i and
    ncdc_j; `grad` computes `grad_result`, dS, from ncdc_dm and those. Empty: the identity."""

    statements: tuple[Statement, ...] = ()
    result: str = "ncdc_s"
    grad: tuple[Statement, ...] = ()
    grad_result: str = "ncdc_dm"
    inputs: tuple[ScoreInput, ...] = ()
    batch: tuple[str, ...] = ()  # batch axes whose index a statement reads

    @property
    def identity(self) -> bool:
        return not self.statements and not self.grad


@dataclass(frozen=True)
class Backward:
    """What the template needs of one backward kernel, read from the diagram."""

    names: Mapping[str, str]  # role (Q K V dO L D dQ dK dV) -> tensor
    batch: tuple[str, ...]
    q_axis: str
    x_axis: str
    d: int  # head of Q and K (and dQ, dK)
    e: int  # head of V and dO (and dV)
    dtype: str
    scale: float  # the logits' constant scale
    grad_scale: float  # dQ's and dK's
    lo: tuple[str, ...]  # C++: query i sees key j when j >= i + each of these
    hi: tuple[str, ...]  # and j <= i + each of these
    offset: Mapping[str, str]  # tensor -> C++ offset of its (batch...) slice
    stride: Mapping[str, str]  # tensor -> row pitch (along q or x), in elements
    scores: tuple[str, ...] = ()  # S, the masks, P and dS: what a query-major dQ pass redoes
    group: tuple[str, ...] = ()  # grouped-query heads: Q's axis beside q that K lacks (or none)
    group_pitch: Mapping[str, str] = dataclasses.field(default_factory=dict)  # its pitch
    functor: ScoreFunctor = dataclasses.field(default_factory=lambda: ScoreFunctor())
    lengths: str = ""  # a varlen mask's int32 lengths (scores.Scores), or none
    lengths_offset: str = "0"
    sequences: str = ""  # the axis of the packed sequences' count; "" for padded ones

    @property
    def masked(self) -> bool:
        return bool(self.lo or self.hi)


def read_backward(diagram: Diagram, kernel: Kernel) -> Backward | None:
    """The kernel as attention's backward (see the module), or None where it is not that."""
    ops = list(kernel.ops)
    by_out = {op.out: op for op in ops}
    contracts = [op for op in ops if op.kind == "contract"]
    inputs = set(kernel.inputs)
    exps = [op for op in ops if op.fn == "exp" and op.kind == "map"
            and op.operands[0] in by_out and by_out[str(op.operands[0])].fn == "sub"]  # fmt: skip
    if len(contracts) != 5 or len(exps) != 1 or any(op.grouped for op in contracts):
        return None
    p = exps[0]
    y = by_out[str(p.operands[0])]
    if len(y.operands) != 2:
        return None
    m_name, lse = (str(o) for o in y.operands)
    masks: list[Op] = []
    while m_name in by_out and by_out[m_name].kind == "mask":
        masks.insert(0, by_out[m_name])
        m_name = str(by_out[m_name].operands[0])
    # the logits S = Q K^T, then the score path to what the masks read (a functor)
    behind = needed_ops(ops, [m_name], inputs)  # what the masked logits are computed from
    firsts = [c for c in contracts if c in behind and all(str(o) in inputs for o in c.operands)]
    if len(firsts) != 1 or lse not in inputs:
        return None
    s = firsts[0]
    chain = needed_ops(ops, [m_name], [*inputs, s.out])
    operands = [str(o) for o in s.operands]
    if len(s.over) != 1:
        return None
    (d_axis,) = s.over
    lse_axes = diagram.tensor(lse).axes
    keys = [a for a in s.axes if a not in lse_axes]  # the logits' axis the row statistic lacks
    a_axes, b_axes = (set(diagram.tensor(n).axes) for n in operands)
    own = [a for a in lse_axes if (a in a_axes) != (a in b_axes)]  # in Q alone: the queries
    if len(keys) != 1 or not 1 <= len(own) <= 2:
        return None
    (x_axis,) = keys
    q, k = operands if own[0] in a_axes else operands[::-1]
    q_axis = diagram.tensor(q).axes[-2]  # Q's rows; an axis beside them: grouped-query heads
    group = tuple(a for a in own if a != q_axis)
    if q_axis not in own or not set(own) <= set(diagram.tensor(q).axes):
        return None
    # the other contractions, by what they read
    dp = next((c for c in contracts if c is not s and p.out not in c.inputs
               and all(str(o) in inputs for o in c.operands)), None)  # fmt: skip
    if dp is None or len(dp.over) != 1 or set(dp.axes) != set(s.axes):
        return None
    (e_axis,) = dp.over
    do, v = (str(o) for o in dp.operands)
    if q_axis not in diagram.tensor(do).axes:
        do, v = v, do
    dv = next((c for c in contracts if set(map(str, c.operands)) == {p.out, do}), None)
    sums = {str(op.operands[0]): op for op in ops if op.kind == "reduce" and op.fn == "sum"}
    g = next(
        (op for op in ops if op.fn == "sub" and op.operands and op.operands[0] == dp.out), None
    )
    if dv is None or dv.over != (q_axis,) or g is None or len(g.operands) != 2:
        return None
    if _number(dp) != 1.0 or _number(dv) != 1.0:  # O = P V unscaled: dP and dV are too
        return None
    dvec = str(g.operands[1])
    dm = next((op for op in ops if op.fn == "mul" and set(map(str, op.operands)) == {p.out, g.out}),
              None)  # fmt: skip
    if dm is None or dvec not in inputs:
        return None
    dq = next((c for c in contracts if k in map(str, c.operands) and c not in (s, dp)), None)
    ds = None if dq is None else next((str(o) for o in dq.operands if o != k), None)
    dk = next((c for c in contracts if set(map(str, c.operands)) == {ds, q}), None)
    if dq is None or ds is None or dk is None or dq.over != (x_axis,) or dk.over != (q_axis,):
        return None
    # the score path's gradient: from dM = P (dP - D) to the dS both products read
    back = needed_ops(ops, [ds], [*inputs, dm.out, s.out, *(op.out for op in chain)])
    if any(n in (p.out, y.out, dp.out, g.out, m_name, lse, dvec) or n in {m.out for m in masks}
           for op in back for n in op.inputs):  # fmt: skip
        return None  # it reads what only the kernel's P step holds
    finals = [sums.get(c.out) if group else c for c in (dk, dv)]  # a group's heads summed
    if any(f is None or (group and (f.over != group or f.scale)) for f in finals):
        return None
    dk_out, dv_out = (str(f.out) for f in finals if f is not None)
    used = {op.out for op in (s, dp, dv, g, dm, dq, dk, p, y, *masks, *chain, *back, *finals)
            if op is not None}  # fmt: skip
    if any(op.out not in used for op in ops) or set(kernel.outputs) != {dq.out, dk_out, dv_out}:
        return None
    names = {"Q": q, "K": k, "V": v, "dO": do, "L": lse, "D": dvec,
             "dQ": dq.out, "dK": dk_out, "dV": dv_out}  # fmt: skip
    b = _backward(diagram, kernel, names, masks, s, (dq, dk), group, q_axis, x_axis, d_axis,
                  e_axis)  # fmt: skip
    if b is None:
        return None
    functor = _functor(diagram, kernel, b, s, chain, m_name, back, dm.out, ds)
    if functor is None:
        return None
    scores = tuple(op.out for op in (s, *chain, *masks, y, p, dp, g, dm, *back))
    return dataclasses.replace(b, scores=scores, functor=functor)


def _linear_in(back: list[Op], dm: str, ds: str) -> bool:
    """dS is linear in dM through the ops `back` (products with values that do not depend on
    it, sums of terms that all do, selects against 0): the kernels find the factor at each
    pair with P, as grad(s, 1), and so keep only P times it (what `ncdc grad` derives always
    is)."""
    depends = {dm}
    for op in back:
        mine = [o in depends for o in op.operands]
        if not any(mine):
            continue
        linear = {
            "mul": sum(mine) == 1,
            "div": mine == [True, False],
            "add": all(mine),
            "sub": all(mine),
            "neg": True,
            "where": not mine[0]
            and all(m or o == 0 for m, o in zip(mine[1:], op.operands[1:], strict=True)),
        }.get(op.fn, op.kind == "cast")
        if not linear:
            return False
        depends.add(op.out)
    return ds in depends


def _functor(
    diagram: Diagram, kernel: Kernel, b: Backward, s: Op, chain: list[Op], logits: str,
    back: list[Op], dm: str, ds: str,
) -> ScoreFunctor | None:  # fmt: skip
    """The score path as C statements: the transformed logit of query ncdc_i and key ncdc_j
    from the scaled one (ncdc_s), and dS from dM (ncdc_dm) and those; None where a step is
    not elementwise over the (batch..., query, key) of one slice."""
    allowed = {*b.batch, *b.group, b.q_axis, b.x_axis}  # no value differs along the group
    for op in (*chain, *back):
        if op.kind not in SCORE_KINDS or op.kind == "mask" or not set(op.axes) <= allowed:
            return None
    if not chain and not back:
        return ScoreFunctor()
    if not _linear_in(back, dm, ds):
        return None
    reader = ScoreValues(kernel, diagram, s, b.batch, b.q_axis, b.x_axis, [*chain, *back], "",
                         given={dm: "ncdc_dm"})  # fmt: skip
    try:
        forward = [st for op in chain for st in op_statements(op, reader.value, reader.index,
                                                              f"ncdc_e_{op.out}")]  # fmt: skip
        grad = [st for op in back for st in op_statements(op, reader.value, reader.index,
                                                          f"ncdc_e_{op.out}")]  # fmt: skip
        result, grad_result = reader.value(logits), reader.value(ds)
    except PlanError:
        return None
    if any(a not in b.batch for a in reader.needs_batch):
        return None  # a position along the group: the heads of one block differ
    return ScoreFunctor(
        tuple(forward), result, tuple(grad), grad_result, tuple(reader.inputs.values()),
        tuple(a for a in b.batch if a in reader.needs_batch),
    )  # fmt: skip


def _backward(
    diagram: Diagram, kernel: Kernel, names: Mapping[str, str], masks: list[Op], s: Op,
    grads: tuple[Op, Op], group: tuple[str, ...], q_axis: str, x_axis: str, d_axis: str,
    e_axis: str,
) -> Backward | None:  # fmt: skip
    """The Backward of matched roles, or None where the kernel cannot run them (types,
    layouts, heads, scales, masks)."""
    t = {role: diagram.tensor(n) for role, n in names.items()}
    dtype = t["Q"].dtype
    if dtype not in INPUT_DTYPES or any(t[r].dtype != dtype for r in ("K", "V", "dO")):
        return None
    if t["L"].dtype != "fp32" or t["D"].dtype != "fp32":
        return None
    if any(DTYPES[t[r].dtype].bytes != 2 for r in ("dQ", "dK", "dV")):
        return None
    batch = tuple(a for a in t["K"].axes if a not in (x_axis, d_axis))
    heads = {"Q": (*group, q_axis, d_axis), "K": (x_axis, d_axis), "V": (x_axis, e_axis),
             "dO": (*group, q_axis, e_axis), "dQ": (*group, q_axis, d_axis),
             "dK": (x_axis, d_axis), "dV": (x_axis, e_axis), "L": (*group, q_axis),
             "D": (*group, q_axis)}  # fmt: skip
    for role, rows in heads.items():
        if t[role].axes != (*batch, *rows):  # one slice each, rows of whole heads
            return None
    d, e = diagram.axes[d_axis], diagram.axes[e_axis]
    if any(h % HEAD_STEP or not 2 * HEAD_STEP <= h <= HEAD_MAX for h in (d, e)):
        return None
    scale, grad_scale = _number(s), _number(grads[0])
    if scale is None or grad_scale is None or _number(grads[1]) != grad_scale:
        return None
    if any(op.fn not in ("causal", "window", "varlen") for op in masks):
        return None
    try:
        bands = mask_bands(diagram, kernel, masks, batch, q_axis, x_axis, "")
    except PlanError:
        return None
    fixed = {d_axis: str(d), e_axis: str(e)}
    offset, stride, group_pitch = {}, {}, {}
    for role, n in names.items():
        axes = t[role].axes
        pitch = {a: pitch_of(axes, a, fixed) for a in axes}
        offset[n] = " + ".join(f"ncdc_i_{a} * {pitch[a]}" for a in batch) or "0"
        stride[n] = pitch[axes[-2]] if role not in ("L", "D") else "1"
        if group and group[0] in axes:
            group_pitch[n] = pitch[group[0]]
    if bands.lengths and group and any(a in diagram.tensor(bands.lengths).axes for a in group):
        return None  # lengths per head of a group: the heads of one block differ
    return Backward(names, batch, q_axis, x_axis, d, e, dtype, scale, grad_scale, bands.lo,
                    bands.hi, offset, stride, group=group, group_pitch=group_pitch,
                    lengths=bands.lengths, lengths_offset=bands.lengths_offset,
                    sequences=bands.sequences)  # fmt: skip


def _number(op: Op) -> float | None:
    """A contraction's scale when it is numbers only (1 without any), else None."""
    value = 1.0
    for f in op.scale:
        if isinstance(f, str):
            return None
        value *= float(f)
    return value


def _registers(d: int, e: int, bq: int, warps: int, atomic: bool) -> int:
    """dK and dV (d / 2 and e / 2 fp32 a thread), S^T, P^T and dP^T of a step (bq / 2 each),
    the dQ tile a warp adds (16 queries by its share of d; with atomics), fragments and
    addresses. The query-major dQ pass holds less: dQ (d / 2) and a step's S and dP."""
    from ncdc.model.cost import estimate_registers

    share = d // max(1, warps // (bq // MMA_ROWS)) if atomic else 0
    accumulators = 16 * (d + e) + 16 * bq * 2 + 16 * share  # per warp, fp32
    return estimate_registers(accumulators * warps, 32 * warps, 24)


def _smem(b: Backward, bx: int, bq: int, atomic: bool) -> int:
    """K and V tiles, the ring of Q and dO tiles, dS^T (with atomics), the ring's L and D
    (fp32), and a varlen mask's spans. The query-major dQ pass's is smaller: its Q and dO
    tiles and a ring of K and V (and the spans)."""
    values = bx * (row_values(b.d) + row_values(b.e)) + STAGES * bq * (
        row_values(b.d) + row_values(b.e)
    )
    values += bx * row_values(bq) if atomic else 0
    return values * DTYPES[b.dtype].bytes + STAGES * 2 * bq * 4 + _span_bytes(b, bx)


def _span_bytes(b: Backward, rows: int) -> int:
    """A varlen mask's [start, end) of each row of a block's tile (int32 each)."""
    return 8 * rows if b.lengths else 0


def _wgmma_smem(b: Backward, bx: int, atomic: bool) -> int:
    """The wgmma kernel's: 1024 bytes to align its tiles, the K and V tiles, the ring of Q
    and dO tiles, dS^T (with atomics), the ring's L and D and a varlen mask's spans."""
    bq = WGMMA_QUERIES
    values = bx * (b.d + b.e) + STAGES * bq * (b.d + b.e) + (bx * bq if atomic else 0)
    return 1024 + values * DTYPES[b.dtype].bytes + STAGES * 2 * bq * 4 + _span_bytes(b, bx)


def _wgmma_dq_pass_smem(b: Backward, bx: int) -> int:
    """The wgmma query-major dQ pass: 1024 bytes to align, Q and dO tiles of bx queries, a
    2-stage ring of 64 keys of K and V, and a varlen mask's spans."""
    values = (bx + STAGES * WGMMA_ROWS) * (b.d + b.e)
    return 1024 + values * DTYPES[b.dtype].bytes + _span_bytes(b, bx)


def _wgmma_registers(d: int, e: int) -> int:
    """dK and dV (d / 2 and e / 2 fp32 a thread), S^T and dP^T (16 each), P^T and dS^T packed
    (8 each), descriptors and indices; dQ^T's 16 reuse S^T's."""
    return min(255, (d + e) // 2 + 2 * 16 + 2 * 8 + 48)


def _dq_pass_smem(b: Backward, bx: int, bq: int) -> int:
    """The query-major dQ pass: Q and dO tiles of bx queries, a 2-stage ring of bq keys of K
    and V (its blocks have the main kernel's warps, the tile roles swapped), and a varlen
    mask's spans."""
    values = (bx + STAGES * bq) * (row_values(b.d) + row_values(b.e))
    return values * DTYPES[b.dtype].bytes + _span_bytes(b, bx)


def _dq_pass_facts(
    model: KernelModel, b: Backward, hw: Hardware, q: str, x: str, bx: int, bq: int
) -> dict[str, Any]:  # fmt: skip
    """What the query-major dQ pass adds to the model's count: it reads Q, dO, L and D once
    more and K and V once per block of bx queries of each head (under a band, the share of
    key tiles the band leaves them), and computes S, P and dP again over those pairs. A
    slice's query blocks run together (the grid's x), so where the K and V of the slices in
    flight fit in half the L2, the L2 serves all but the first of those reads."""
    visited = float(model.mask_fraction({q: bx}, {x: bq}))
    per_slice = ceil_div(model.sizes[q], bx) * math.prod(model.sizes[a] for a in b.group)
    kv_reads = max(1, round(per_slice * visited))
    n = b.names
    rereads = ((n["Q"], 1), (n["dO"], 1), (n["L"], 1), (n["D"], 1), (n["K"], kv_reads),
               (n["V"], kv_reads))  # fmt: skip
    slices = math.prod(model.sizes[a] for a in b.batch)
    live = min(slices, ceil_div(hw.limits.sms, per_slice) + 1)
    kv_bytes = model.sizes[x] * (b.d + b.e) * DTYPES[b.dtype].bytes
    cache = hw.level(hw.cache_level).capacity_bytes if hw.cache_level else 0
    served = kv_reads - 1 if live * kv_bytes <= cache // 2 else 0
    l2 = ((n["K"], served), (n["V"], served)) if served else ()
    return {"rereads": rereads, "l2_rereads": l2,
            "recomputes": tuple((op, visited) for op in b.scores)}  # fmt: skip


class AttentionBackwardFamily:
    """Attention's fused backward (see the module)."""

    name = "attention_backward"
    tiles: Mapping[str, tuple[int, ...]] = TILES
    baseline = ""

    def classify(self, diagram: Diagram, kernel: Kernel) -> Family | None:
        b = read_backward(diagram, kernel)
        if b is None:
            return None
        d_axis = next(a for a in diagram.tensor(b.names["Q"]).axes[-1:])
        e_axis = next(a for a in diagram.tensor(b.names["V"]).axes[-1:])
        roles = {"batch": b.batch, "group": b.group, "q": (b.q_axis,), "x": (b.x_axis,),
                 "d": (d_axis,), "d_v": (e_axis,)}  # fmt: skip
        return Family(self.name, roles, TILES)

    def candidates(
        self, model: KernelModel, family: Family, hw: Hardware, streams: tuple[str, ...],
        fixed: Mapping[str, int],
    ) -> list[Candidate]:  # fmt: skip
        b = read_backward(model.diagram, model.kernel)
        assert b is not None, "classified as the backward"
        sizes = model.sizes
        slices = math.prod(sizes[a] for a in b.batch)
        heads = slices * math.prod(sizes[a] for a in b.group)  # Q's slices: a group's heads too
        if heads > MAX_GRID_YZ:
            raise PlanError(
                f"attention backward over {heads} (batch, head) slices: more than the grid's "
                f"{MAX_GRID_YZ} rows", hint="run it in parts with --set on a batch axis",
            )  # fmt: skip
        (q,), (x,) = family.axes("q"), family.axes("x")
        # dQ by atomics (model's choice) or by a query-major second pass (also the only way
        # that sums in one order: the schedule's deterministic)
        ways = (1,) if model.diagram.schedule.deterministic else (0, 1)
        out = self._wgmma_candidates(model, b, hw, family, fixed, ways)
        hopper = hw.mma_sync_share < 1  # mma.sync short of the peak: FlashAttention-2's share
        for bx, bq, dq_pass in itertools.product(
            [fixed[x]] if x in fixed else TILES["bx"],
            [fixed[q]] if q in fixed else TILES["bq"],
            ways,
        ):
            warps = bx // MMA_ROWS
            blocks_q = bq // MMA_ROWS
            if bx % MMA_ROWS or bq % MMA_ROWS or warps % blocks_q:
                continue
            share = b.d // (warps // blocks_q)
            if share % HEAD_STEP or (bq > 32 and max(b.d, b.e) > 64):
                continue
            group = {a: 1 for a in model.kernel.woven}
            group.update({x: bx, q: sizes[q], **{a: sizes[a] for a in b.group}})
            group.update({a: sizes[a] for a in (*family.axes("d"), *family.axes("d_v"))})
            stream = {q: bq}
            atomic = not dq_pass
            main = LaunchShape(
                (ceil_div(sizes[x], bx), slices, 1), (32 * warps, 1, 1), _smem(b, bx, bq, atomic)
            )
            if atomic:
                values = sizes[q] * b.d
                second = LaunchShape(
                    (ceil_div(values, 4 * CONVERT_THREADS), heads, 1), (CONVERT_THREADS, 1, 1), 0
                )
                facts: dict[str, Any] = {"accumulates": ((b.names["dQ"], ceil_div(sizes[x], bx)),)}
            else:
                second = LaunchShape(
                    (ceil_div(sizes[q], bx), heads, 1), (32 * warps, 1, 1),
                    _dq_pass_smem(b, bx, bq),
                )  # fmt: skip
                facts = _dq_pass_facts(model, b, hw, q, x, bx, bq)
            out.append(
                Candidate(
                    group, stream, {**group, x: MMA_ROWS}, stream,
                    (("bx", bx), ("bq", bq), ("dq_pass", dq_pass)), (main, second), STAGES, 1,
                    _registers(b.d, b.e, bq, warps, atomic),
                    tensor_share=permille(MMA_SYNC_BACKWARD_SHARE) if hopper else 0.0, **facts,
                )
            )  # fmt: skip
        return out

    def _wgmma_candidates(
        self, model: KernelModel, b: Backward, hw: Hardware, family: Family,
        fixed: Mapping[str, int], ways: tuple[int, ...],
    ) -> list[Candidate]:  # fmt: skip
        """On sm_90a, with 16-bit heads of 64 or 128: a warpgroup per 64 keys (one for head
        64, two for 128, so each takes 64 of dQ's columns), 32 queries a step."""
        if not attention_wgmma.offered(hw) or b.d not in WGMMA_HEADS or b.e not in WGMMA_HEADS:
            return []
        (q,), (x,) = family.axes("q"), family.axes("x")
        bx, bq = b.d, WGMMA_QUERIES
        if fixed.get(x, bx) != bx or fixed.get(q, bq) != bq:
            return []
        sizes = model.sizes
        slices = math.prod(sizes[a] for a in b.batch)
        heads = slices * math.prod(sizes[a] for a in b.group)
        out = []
        for dq_pass in ways:
            group = {a: 1 for a in model.kernel.woven}
            group.update({x: bx, q: sizes[q], **{a: sizes[a] for a in b.group}})
            group.update({a: sizes[a] for a in (*family.axes("d"), *family.axes("d_v"))})
            atomic = not dq_pass
            threads = 2 * WGMMA_ROWS * (bx // WGMMA_ROWS)
            main = LaunchShape((ceil_div(sizes[x], bx), slices, 1), (threads, 1, 1),
                               _wgmma_smem(b, bx, atomic))  # fmt: skip
            if atomic:
                second = LaunchShape(
                    (ceil_div(sizes[q] * b.d, 4 * CONVERT_THREADS), heads, 1),
                    (CONVERT_THREADS, 1, 1), 0,
                )  # fmt: skip
                facts: dict[str, Any] = {"accumulates": ((b.names["dQ"], ceil_div(sizes[x], bx)),)}
            else:  # the query-major pass: bx queries a block, 64 keys a step
                second = LaunchShape((ceil_div(sizes[q], bx), heads, 1), (threads, 1, 1),
                                     _wgmma_dq_pass_smem(b, bx))  # fmt: skip
                facts = _dq_pass_facts(model, b, hw, q, x, bx, WGMMA_ROWS)
            out.append(
                Candidate(
                    group, {q: bq}, {**group, x: WGMMA_ROWS}, {q: bq},
                    (("bx", bx), ("bq", bq), ("dq_pass", dq_pass), ("wgmma", 1)), (main, second),
                    STAGES, 1, _wgmma_registers(b.d, b.e),
                    tensor_share=permille(WGMMA_BACKWARD_SHARE), **facts,
                )
            )  # fmt: skip
        return out

    def render(self, kp: KernelPlan, plan: Plan) -> KernelSource:
        diagram = plan.graph.diagram
        b = read_backward(diagram, kp.kernel)
        c = kp.candidate
        assert b is not None and c is not None, "a GPU plan of the backward"
        bx, bq, dq_pass = c.param("bx"), c.param("bq"), bool(c.param("dq_pass"))
        wgmma = bool(dict(c.params).get("wgmma", 0))
        name = (
            f"{kp.kernel.name}_attention_backward_{b.dtype}_x{bx}_q{bq}_d{b.d}"
            + (f"_dv{b.e}" if b.e != b.d else "")
            + ("_masked" if b.masked else "")
            + ("" if b.functor.identity else "_scored")
            + (("_packed" if b.sequences else "_varlen") if b.lengths else "")
            + ("_grouped" if b.group else "")
            + ("_dqpass" if dq_pass else "")
            + ("_wgmma" if wgmma else "")
        )
        n = b.names
        workspace = f"ncdc_{n['dQ']}_acc"
        heads = math.prod(diagram.axes[a] for a in (*b.batch, *b.group))
        size_axes = [*b.batch, *b.group, b.q_axis, b.x_axis, *filter(None, [b.sequences])]
        sizes = [Param(size_name(a), "int64", value=diagram.axes[a]) for a in size_axes]
        reads = tuple(Param(n[r], "tensor", diagram.tensor(n[r]).dtype)
                      for r in ("Q", "K", "V", "dO", "L", "D"))  # fmt: skip
        reads += tuple(Param(t.name, "tensor", t.dtype) for t in b.functor.inputs)
        reads += (Param(b.lengths, "tensor", "int32"),) if b.lengths else ()
        scales = (
            Param("ncdc_scale_log2", "float32", value=b.scale * math.log2(math.e)),
            Param("ncdc_grad_scale", "float32", value=b.grad_scale),
        )
        dq = Param(n["dQ"], "tensor", diagram.tensor(n["dQ"]).dtype, writes=True)
        main_params = (
            *reads,
            Param(n["dK"], "tensor", diagram.tensor(n["dK"]).dtype, writes=True),
            Param(n["dV"], "tensor", diagram.tensor(n["dV"]).dtype, writes=True),
            *(() if dq_pass else (Param(workspace, "workspace", "fp32", writes=True),)),
            *sizes,
            *scales,
        )  # fmt: skip
        if dq_pass:  # dQ by the query-major kernel, from the same inputs
            second_params: tuple[Param, ...] = (*reads, dq, *sizes, *scales)
        else:  # dQ from its fp32 workspace
            second_params = (Param(workspace, "workspace", "fp32"), dq, *sizes, scales[1])
        how = ("dQ by a second kernel in query order (no atomics)" if dq_pass
               else "dQ added in fp32 and written by a second kernel")  # fmt: skip
        context = {
            "kernel": name,
            "summary": f"attention backward, {bx} keys a block ("
            + (f"{bx // WGMMA_ROWS} warpgroups, wgmma" if wgmma else f"{bx // MMA_ROWS} warps")
            + f"), queries streamed {bq} at a time, {how}",
            "dq_pass": dq_pass,
            "wgmma": wgmma,
            "masked": "true" if b.masked else "false",
            "T": cpp_type(b.dtype),
            "dq_type": cpp_type(diagram.tensor(n["dQ"]).dtype),
            "names": dict(n),
            "batch": b.batch, "group": b.group, "group_pitch": dict(b.group_pitch),
            "q_axis": b.q_axis, "x_axis": b.x_axis,
            "sizes": size_axes,
            "d": b.d, "e": b.e, "bx": bx, "bq": bq, "threads": c.threads,
            "band_lo": b.lo, "band_hi": b.hi,
            "statements": b.functor.statements, "score_result": b.functor.result,
            "grad_statements": b.functor.grad, "grad_result": b.functor.grad_result,
            "score_inputs": [{"name": t.name, "ctype": cpp_type(t.dtype), "offset": t.offset,
                              "q_pitch": t.q_pitch, "x_pitch": t.x_pitch}
                             for t in b.functor.inputs],
            "score_batch": b.functor.batch,
            "lengths": b.lengths, "lengths_offset": b.lengths_offset, "sequences": b.sequences,
            "varlen": "true" if b.lengths else "false",
            "offset": dict(b.offset), "stride": dict(b.stride),
            "workspace": workspace, "convert_threads": CONVERT_THREADS,
        }  # fmt: skip
        launches = (
            Launch.of(name, c.launches[0], main_params),
            Launch.of(f"{name}_dq", c.launches[1], second_params),
        )
        values = heads * diagram.axes[b.q_axis] * b.d
        spaces = () if dq_pass else (Workspace(workspace, "fp32", values, zeroed=True),)
        return KernelSource("attention_backward.cu.j2", context, launches, spaces)

    def tile_axes(self, family: Family) -> list[tuple[str, tuple[int, ...]]]:
        return [(family.axes("x")[0], TILES["bx"]), (family.axes("q")[0], TILES["bq"])]

    def loop_mix(
        self, model: KernelModel, family: Family, c: Candidate, hw: Hardware
    ) -> LoopMix | None:
        return None  # priced by its rates and traffic; no issue-slot estimate yet

    def masked_share(self, kp: KernelPlan, axes: Mapping[str, int]) -> float:
        return 0.0

    def arch_problem(self, diagram: Diagram, kp: KernelPlan, sm: int) -> str:
        if kp.candidate is not None and dict(kp.candidate.params).get("wgmma"):
            return attention_wgmma.arch_problem(kp.kernel.name, sm)
        return no_arch_problem(diagram, kp, sm)


FAMILY = AttentionBackwardFamily()
