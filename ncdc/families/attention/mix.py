"""The attention kernels' main loops as the model counts them: issue slots per key chunk of
one warp, by instruction class, from each template's structure (ncdc.model.issue.LoopMix):
the FlashAttention-2-order mma.sync loop with its score path and masks, and the
FlashAttention-3-order wgmma loop. Each count is fitted to, and tested against, the SASS
ptxas emits (tests/model/test_issue.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ncdc.families.attention.scores import (
    LOG2E,
    LOGIT_FORMS,
    fold_scales,
    linear,
    logit_maps,
    pair_identity,
    split_logit,
)
from ncdc.families.codegen import Statement
from ncdc.hardware.arch import WGMMA_ROWS_PER_WARP, wgmma_k
from ncdc.language.dtypes import DTYPES
from ncdc.model.geometry import mask_band, tile_kinds
from ncdc.model.issue import ESTIMATE, LoopMix, add_slots
from ncdc.model.masks import mask_select, read_mask_rule, rule_band
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.language.diagram import Op
    from ncdc.model.graph import Kernel
    from ncdc.model.launch import Candidate, Family
    from ncdc.model.structure import KernelModel
    from ncdc.model.values import KernelPlan

# Per-warp instructions of the FA2-order softmax step of ncdc's attention template
# (templates/include/ncdc_attention.cuh), per score a thread holds: the running max, exp2's
# argument (the scale folded into one FFMA) and the exponential's sum, and the packing of
# P to 16 bits every two scores; per output value, the rescale by exp(m_old - m_new), and
# per row the max and sum updates. Per key chunk: the ring's wait and barrier, the loop
# branches, three LDS of the ring's indices, the row reductions' shuffles. The integer work
# (cp.async pointers stepped by rows, the ring stage, the tail's key bound) is about
# constant: 126 and 164 in the d = 128 kernels of 32 and 64 keys (sm_90a, sm_80), the
# constant is their mean. Counted in the SASS of compiled kernels (tests/model/test_issue.py):
# the totals within 5%.
SOFTMAX_FP32_PER_SCORE = 3
SOFTMAX_FP32_FIXED = 16
SOFTMAX_FIXED = {"shuffle": 4, "barrier": 2, "control": 4, "smem": 3}
ATTENTION_INTEGER = 145
# Per key tile of one consumer warp of the FlashAttention-3 kernel (attention_wgmma.cu.j2,
# ncdc_attention_hopper.cuh), counted in its SASS on sm_90a (bf16; d, d_v, s_x = 128, 128,
# 128 and 64; 192, 128, 128 and 64): one HGMMA per 16 of the head (S) and per 16 keys (P V);
# per score a thread holds (s_x / 2) the max, exp2's FFMA and the sum, one MUFU.EX2 and
# half an F2FP pack; per output value (d_v / 2) the rescale; per wgmma the uniform work of
# its descriptors, each advanced from the tile's base descriptor by one add (desc_advance):
# for S, that add, Q's descriptor moved into place and both high words moved again (4), for
# P V the add and one high word (2); a fixed part and a part that grows as the tile shrinks,
# fitted by least squares to seven kernels (d = 64, 128, 192 at s_x = 128 and 64, and fp8
# V's 4 P V wgmmas less its permute's integer work): the integer count within 0.3% at s_x =
# 128 and 10% at 64; the turn's named barriers, the rings' waits and arrives, the
# warpgroup fence and waits. The producer warp (one thread: d / 64 + d_v / 64 TMA copies
# and four mbarrier operations a tile) is left out, as for the GEMM.
FA3_FP32_PER_SCORE = 3
FA3_FP32_FIXED = 14
FA3_FIXED = {"shuffle": 4, "barrier": 10, "control": 5}
FA3_INTEGER_PER_QK_WGMMA = 4
FA3_INTEGER_PER_PV_WGMMA = 2
FA3_INTEGER_FIXED = 37
FA3_INTEGER_PER_TILE_HALVING = 7.4  # times 128 / s_x
# The score path of a fused attention kernel (a score functor: statements between S and
# the masks; ncdc_attention.cuh score_step), per score a thread holds, counted in the SASS
# of softcap_attention and alibi_attention (sm_80, sm_90a): the functor sees the
# natural-log logit and returns a base-2 one (two FMULs), each arithmetic statement is one
# fp32 instruction, an index is an integer and its conversion, and tanhf (libdevice:
# 1 - 2 / (2^(2|x| log2 e) + 1) for |x| >= 0.6, an odd polynomial below, both evaluated
# and one selected) is 11 fp32, 2 MUFU (EX2, RCP) and 2.5 integer (sign and select).
FUNCTOR_FP32_PER_SCORE = 2
SCORE_OP_SLOTS: dict[str, dict[str, float]] = {
    "tanh": {"fp32": 11, "mufu": 2, "integer": 2.5},
    # tanh of a logit (ncdc_elementwise.cuh, op_tanh_logit: what the Hopper kernel's
    # functor runs, its argument's and result's constant scales folded in): FMUL, EX2,
    # FADD, RCP, FFMA
    "tanh_logit": {"fp32": 3, "mufu": 2},
    "exp": {"fp32": 2, "mufu": 1},
    "sigmoid": {"fp32": 3, "mufu": 2},
    "index": {"integer": 1},
}
# The FlashAttention-3 kernel's score functor (ncdc_attention_hopper.cuh, softmax_tile),
# per score, counted in the SASS of softcap_attention, alibi_attention and
# tests/specs/attn_bias_bhqx (h200, sm_90a): the statements of its base-2 form
# (`issued_statements`: the scale's multiply unless an add contracts it, log2 e's unless it
# folds), an index half an integer (a query's is hoisted out of the tile: its rows are
# fixed), and a tensor read at each key (a bias over the key axis) one global load and 1.6
# integer for its address.
FA3_INDEX_INTEGER = 0.5
FA3_KEY_INPUT_PER_SCORE = {"global": 1, "integer": 1.6}
# fp8 V (ncdc_attention_hopper.cuh, pack_p): per 32 keys of a row pair a thread packs its
# four pairs (F2FP, as the 16-bit P), then two shuffles and a byte permute per register of
# the 8-bit fragment: 0.5 SHFL and 0.25 PRMT a score, in attention_fp8's SASS (h200, sm_90a).
FA3_FP8_P_PER_SCORE = {"shuffle": 0.5, "integer": 0.25}
# A kernel whose masks bound the keys from below (a window, packed sequences) runs every
# tile through the masked loop (ncdc_attention.cuh: no clear tiles): per score the key's
# index, its compares against the row's bounds and their combination (ISETP, PLOP3, SEL,
# IADD3), and the select of -inf (FSEL); per chunk the mask.any test's branches and warp
# votes. A window's bounds are two bands per row (the window's and the causal one: 10
# integer a score in sliding_window_attention's SASS), packed sequences one sequence's
# start and the causal bound (5.5 in varlen_attention's).
LOWER_MASK_PER_SCORE: dict[str, dict[str, float]] = {
    "window": {"integer": 10, "fp32": 1},
    "packed": {"integer": 5.5, "fp32": 1},
}
LOWER_MASK_FIXED = {"barrier": 2, "control": 3}
# The masked copy of the loop (the diagonal's and the x tail's chunks of a kernel without a
# lower bound) selects -inf for the dropped keys and takes the max over the selected
# scores: 2 fp32 more per score than the unmasked copy (FSEL, FMNMX), its integer work
# about the same, in the SASS of attention and cross_attention (sm_80, sm_90a).
TAIL_MASK_FP32_PER_SCORE = 2
# Q's fragments read from the Q tile at each step (d x rows / 16 > Q_REGISTER_HEAD, as
# ncdc/families/attention/core.py's q_in_registers): one ldmatrix.x4 per 16 x 16 block of Q and
# its address, per warp and chunk.
Q_REGISTER_HEAD = 128
Q_SMEM_INTEGER_PER_BLOCK = 12


def masked_share(q: int, x: int, g_q: int, s_x: int, shift: int | None) -> float:
    """The share of a fused attention kernel's chunk iterations that run its masked loop
    (ncdc_attention.cuh, attention_forward): block t of g_q queries visits the chunks up to
    its last query's last key and runs those every one of its rows sees whole (below its
    first query's last key) unmasked, the rest (the diagonal's and the x tail's) masked.
    `shift`: a causal mask's offset (key j is seen by query i when j <= i + shift), None
    without one.

        >>> masked_share(4096, 4096, 128, 64, 0)   # 2 of a block's diagonal chunks
        0.06060606060606061
        >>> masked_share(4096, 77, 64, 80, None)   # every chunk is the x tail
        1.0
    """
    visits = masked = 0
    for q0 in range(0, q, g_q):
        first_last = x - 1 if shift is None else min(x - 1, q0 + shift)
        last = x - 1 if shift is None else min(x - 1, min(q0 + g_q, q) - 1 + shift)
        tiles = last // s_x + 1 if last >= 0 else 0
        clear = min(tiles, (first_last + 1) // s_x) if first_last >= 0 else 0
        visits += tiles
        masked += tiles - clear
    return masked / visits if visits else 0.0


def diagonal(kernel: Kernel, q: int, x: int) -> int | None:
    """The key offset of the diagonal past which the masked loop runs (j > i + shift): a
    causal mask's, else a mask rule's band's upper side (ncdc.model.masks.rule_band), else
    None (only the x tail is masked)."""
    causal = [op for op in kernel.ops if op.kind == "mask" and op.fn == "causal"]
    if causal:
        return x - q if causal[0].params.get("align", "end") == "end" else 0
    rule = read_mask_rule(kernel)
    return rule_band(rule)[1] if rule is not None else None


def _lower_bound(model: KernelModel | None) -> str:
    """The mask that bounds the keys from below: "window", "packed" (a varlen mask whose
    lengths run along an axis the output lacks) or ""."""
    if model is None:
        return ""
    ops = model.kernel.ops
    out_axes = set(model.diagram.tensor(model.kernel.outputs[0]).axes)
    masks = {op.fn: op for op in ops if op.kind == "mask"}
    rule = read_mask_rule(model.kernel)
    if "window" in masks or (rule is not None and rule_band(rule)[0] is not None):
        return "window"  # a window, or a mask rule's band bounded below
    if "varlen" in masks:
        lengths = model.diagram.tensor(masks["varlen"].params["lengths"])
        return "" if set(lengths.axes) <= out_axes else "packed"
    return ""


def issued_statements(model: KernelModel, base2: bool = True) -> list[str]:
    """The op functions (an index as "index") a score functor issues per score: the score
    path's ops in their logit forms, as `fold_scales` leaves them (a multiply by a constant
    folds into the next, or into a soft cap's tanh), those its result reads. `base2`: the
    FlashAttention-3 kernel's form (`Scores.in_log2`), times log2 e, and with the logits'
    scale multiply ("scale") unless it contracts into an add of theirs (an FFMA); the
    FlashAttention-2 kernel multiplies both apart (FUNCTOR_FP32_PER_SCORE). Empty without
    a score path. A tensor's value is its name, a constant its literal."""
    ops = [op for op in model.kernel.ops if op.kind in ("map", "binary", "index", "cast")]
    if not ops:
        return []
    made = _path_statements(ops, logit_maps(model.kernel.ops, ops[-1].out))
    result = made[-1].out
    if base2:
        made.append(Statement("ncdc_log2", "op_mul", (result, f"{LOG2E!r}f")))
        result = "ncdc_log2"
    issued = _issued(fold_scales(made), [result])
    if not base2:
        return issued
    logits = next((op.out for op in model.kernel.ops if op.kind == "contract"), None)
    first = next((st for st in made if logits in st.args), None)
    contracts = first is not None and first.fn in ("op_add", "op_sub")  # S x scale +- a: FFMA
    return ([] if contracts else ["scale"]) + issued


def _path_statements(ops: Sequence[Op], maps: frozenset[str]) -> list[Statement]:
    """The score path's ops as statements over their operands (a tensor's value its name, a
    constant its literal), the maps in `maps` in their logit forms."""
    made = []
    for op in ops:
        fn = "op_index" if op.kind == "index" else f"op_{op.fn}"
        fn = LOGIT_FORMS.get(fn, fn) if op.out in maps else fn
        args = tuple(o if isinstance(o, str) else f"{float(o)!r}f" for o in op.operands)
        made.append(Statement(op.out, fn, args))
    return made


def _issued(made: list[Statement], results: list[str]) -> list[str]:
    """The op functions of `made` that `results` read, in order."""
    live, issued = set(results), []
    for st in reversed(made):
        if st.out in live:
            live.update(st.args)
            issued.append(st.fn.removeprefix("op_"))
    return issued[::-1]


def split_statements(
    model: KernelModel, family: Family
) -> tuple[list[str] | None, list[str], bool] | None:
    """The FlashAttention-3 kernel's split score path (scores.split_logit; None where it does
    not split, or a mask rule's path): the op functions its pair part issues per score
    (None for the scaled logit alone, one FFMA with the key part; else the part times log2 e
    with the scale's multiply and the key part's add) and its key part per key, and whether
    the key part steps (linear in the key: a few instructions a tile)."""
    kernel = model.kernel
    soft = next((op for op in kernel.ops if op.kind == "softmax"), None)
    first = next((op for op in kernel.ops if op.kind == "contract"), None)
    if soft is None or first is None or read_mask_rule(kernel) is not None:
        return None
    by_out = {op.out: op for op in kernel.ops}
    logits = str(soft.operands[0])
    while logits in by_out and by_out[logits].kind == "mask":
        logits = str(by_out[logits].operands[0])
    chain = [op for op in kernel.ops if op.kind in ("map", "binary", "index", "cast")]
    (q,), (x,) = family.axes("q"), family.axes("x")
    parts = split_logit(chain, model.diagram, first.out, logits, q, x)
    if parts is None:
        return None
    pair, key, row = parts
    made = _path_statements(chain, logit_maps(kernel.ops, logits))
    pair_fns = [*_issued(made, [t.base for t in pair]), "scale", "log2", "add"]
    key_fns = [*_issued(made, [t.base for t in key]), *(["mul"] * len(key))]
    return (None if pair_identity(pair, first.out) else pair_fns), key_fns, linear(key, row)


def attention_mix(
    family: Family, c: Candidate, sizes: Mapping[str, int], model: KernelModel | None = None
) -> LoopMix:
    """The attention kernel's hot key chunk of one warp (estimate_mix): (d / 16)(s_x / 8) +
    (s_x / 16)(d_v / 8) HMMAs, as many ldmatrix.x4 for K and V over 16 x 16 blocks (Q's
    too where they do not stay in registers), the chunk's cp.async,
    SOFTMAX_FP32_PER_SCORE per score a thread holds plus the rescale of its output and
    SOFTMAX_FP32_FIXED, one exponential per score, ATTENTION_INTEGER and SOFTMAX_FIXED; a
    warp of 32 query rows (param `warp_q`) does twice the MMAs on the same K/V fragments.
    A score functor adds its statements per score (FUNCTOR_FP32_PER_SCORE,
    SCORE_OP_SLOTS: one fp32 for any other), and a mask bounding the keys from below its
    compares (LOWER_MASK_*): its kernel has no unmasked loop. Otherwise the diagonal's and
    the x tail's chunks run the masked copy of the loop, TAIL_MASK_FP32_PER_SCORE more
    per score, on their share of the chunks (`masked_share`)."""
    params = dict(c.params)
    threads = c.threads
    d = math.prod(sizes[a] for a in family.axes("d"))
    d_v = math.prod(sizes[a] for a in family.axes("d_v"))
    s_x = params["s_x"]
    rows = params.get("warp_q", 16)  # query rows of one warp (16 or 32)
    # K and V fragments: one ldmatrix.x4 per 16 x 16 block, shared by a warp's rows
    ldsm = (d // 16) * (s_x // 16) + (s_x // 16) * (d_v // 16)
    integer: float = ATTENTION_INTEGER
    if d * rows // 16 > Q_REGISTER_HEAD:  # Q's fragments read from SMEM at each step
        ldsm += (rows // 16) * (d // 16)
        integer += Q_SMEM_INTEGER_PER_BLOCK * (rows // 16) * (d // 16)
    copies = math.ceil(s_x * (d + d_v) * 2 / 16 / threads)
    scores = rows * s_x // 32  # per thread
    classes: dict[str, float] = {
        "tensor": rows // 16 * ((d // 16) * (s_x // 8) + (s_x // 16) * (d_v // 8)),
        "ldmatrix": ldsm,
        "async_copy": copies + 1,  # and the chunk's commit
        "fp32": SOFTMAX_FP32_PER_SCORE * scores + rows * d_v // 32 + SOFTMAX_FP32_FIXED,
        "fp16": scores // 2,
        "mufu": scores + 2,
        "integer": integer,
        **SOFTMAX_FIXED,
    }
    below = _lower_bound(model)
    statements = issued_statements(model, base2=False) if model is not None else []
    if statements:
        add_slots(classes, {"fp32": FUNCTOR_FP32_PER_SCORE}, scores)
        for fn in statements:
            add_slots(classes, SCORE_OP_SLOTS.get(fn, {"fp32": 1}), scores)
    if below:
        add_slots(classes, LOWER_MASK_PER_SCORE[below], scores)
        add_slots(classes, LOWER_MASK_FIXED)
    elif model is not None:  # the masked loop's share of the chunks (`masked_share`)
        (q_axis,), (x_axis,) = family.axes("q"), family.axes("x")
        q, x = sizes[q_axis], sizes[x_axis]
        shift = diagonal(model.kernel, q, x)
        share = masked_share(q, x, params.get("g_q", q), s_x, shift)
        add_slots(classes, {"fp32": TAIL_MASK_FP32_PER_SCORE * share}, scores)
    return LoopMix(classes, 2.0 * rows * s_x * (d + d_v), ESTIMATE)


def fa3_mix(
    family: Family, c: Candidate, sizes: Mapping[str, int], dtype: str,
    model: KernelModel | None = None,
) -> LoopMix:  # fmt: skip
    """The FlashAttention-3 kernel's key tile of one consumer warp (16 of its warpgroup's 64
    rows): d / 16 (fp8: d / 32) + s_x / 16 wgmmas, the softmax's FA3_FP32_*, MUFU and
    packing per score, the rescale per output value (V's head padded to a multiple of 64),
    FA3_INTEGER_* and FA3_FIXED; a score functor's statements per score, as in the
    FlashAttention-2 loop (`attention_mix`), on every tile, or, for a mask rule on the plain
    logits, on the tiles that run masked only (`fa3_masked_share`: the others run no
    functor); a split path (`split_statements`) its pair part per score and its key part
    per key."""
    params = dict(c.params)
    d = math.prod(sizes[a] for a in family.axes("d"))
    d_v = math.prod(sizes[a] for a in family.axes("d_v"))
    s_x = params["s_x"]
    scores = s_x // 2  # per thread: 64 rows x s_x over 128 threads
    qk = d // wgmma_k(DTYPES[dtype].bytes)  # S's wgmmas: k16, or k32 for fp8
    v8 = model is not None and _value_bytes(model, family) == 1
    pv = s_x // (32 if v8 else 16)  # P V's wgmmas: k16, or k32 for fp8 V
    # V's head padded to whole 128-byte blocks (wgmma.padded_heads; fp8 V is): O's values,
    # and for 192 two wgmmas a step (n 128 + 64)
    d_vp = ceil_div(d_v, 64) * 64
    pv *= 2 if d_vp == 192 else 1
    classes = {
        "tensor": qk + pv,
        "fp32": FA3_FP32_PER_SCORE * scores + d_vp // 2 + FA3_FP32_FIXED,
        "fp16": scores // 2,
        "mufu": scores + 2,
        "integer": FA3_INTEGER_PER_QK_WGMMA * qk
        + FA3_INTEGER_PER_PV_WGMMA * pv
        + FA3_INTEGER_FIXED
        + FA3_INTEGER_PER_TILE_HALVING * 128 / s_x,
        **FA3_FIXED,
    }
    statements = issued_statements(model) if model is not None else []
    split = split_statements(model, family) if statements and model is not None else None
    if split is not None and model is not None:
        # the pair part per score, the key part per key (stepped: a few a tile)
        pair, key, stepped = split
        if pair is None:  # ncdc_s alone: one FFMA with the key part
            add_slots(classes, {"fp32": 1}, scores)
        for fn in pair or []:
            add_slots(classes, SCORE_OP_SLOTS.get(fn, {"fp32": 1}), scores)
        for fn in [] if stepped else key:
            slots = {"integer": 2 * FA3_INDEX_INTEGER} if fn == "index" else None
            add_slots(classes, slots or SCORE_OP_SLOTS.get(fn, {"fp32": 1}), scores / 2)
        add_slots(classes, FA3_KEY_INPUT_PER_SCORE, scores / 2 * _key_inputs(model, family))
    elif statements and model is not None:
        plain = rule_keeps_plain(model.kernel, family)
        share = fa3_masked_share(model.kernel, family, model.sizes, s_x) if plain else 1.0
        for fn in statements:
            slots = {"integer": FA3_INDEX_INTEGER} if fn == "index" else None
            add_slots(classes, slots or SCORE_OP_SLOTS.get(fn, {"fp32": 1}), scores * share)
        add_slots(classes, FA3_KEY_INPUT_PER_SCORE, scores * _key_inputs(model, family) * share)
    if v8:  # P permuted into the 8-bit A fragment (pack_p)
        add_slots(classes, FA3_FP8_P_PER_SCORE, scores)
    return LoopMix(classes, 2.0 * WGMMA_ROWS_PER_WARP * s_x * (d + d_v), ESTIMATE)


def _value_bytes(model: KernelModel, family: Family) -> int:
    """Bytes of a V value (the P V product's operand type)."""
    (x_axis,) = family.axes("x")
    pv = [op for op in model.kernel.ops if op.kind == "contract"][-1]
    v = next((o for o in pv.operands if isinstance(o, str) and o in model.kernel.inputs and
              x_axis in model.diagram.tensor(o).axes), None)  # fmt: skip
    return DTYPES[model.diagram.tensor(v).dtype].bytes if v else 2


def rule_keeps_plain(kernel: Kernel, family: Family) -> bool:
    """Whether the kernel's mask rule, over its query and key positions, keeps the plain
    logits (`where(keep, S, -inf)` on the scores themselves): the Hopper kernel runs no
    functor on the tiles it keeps whole (kKeptIdentity in ncdc_attention_hopper.cuh)."""
    select, rule = mask_select(kernel), read_mask_rule(kernel)
    if (
        select is None
        or rule is None
        or (rule.query, rule.key) != (*family.axes("q"), *family.axes("x"))
    ):
        return False
    a, b = select.operands[1:]
    kept = a if b == -math.inf else b
    first = next((op for op in kernel.ops if op.kind == "contract"), None)
    return first is not None and kept == first.out


def fa3_masked_share(kernel: Kernel, family: Family, sizes: Mapping[str, int], s_x: int) -> float:
    """The share of the Hopper kernel's visited key tiles that run masked (`tile_kinds`
    over its 128-query blocks: the band's edges and a mask rule's partial tiles; a varlen
    mask's lengths are data, not counted)."""
    from ncdc.families.attention.wgmma import BQ

    (q_axis,), (x_axis,) = family.axes("q"), family.axes("x")
    q, x = sizes[q_axis], sizes[x_axis]
    band = mask_band(kernel, sizes)
    lo, hi = (band.lo, band.hi) if band is not None else (None, None)
    rule = read_mask_rule(kernel)
    rule = rule if rule is not None and (rule.query, rule.key) == (q_axis, x_axis) else None
    visited, masked = tile_kinds(q, x, BQ, s_x, lo, hi, rule)
    return masked / visited if visited else 0.0


def _key_inputs(model: KernelModel, family: Family) -> int:
    """The kernel's input tensors over the key axis that its score path reads (a bias), each
    loaded once per score; Q, K and V are the contractions' operands, not the score path's."""
    keys = set(family.axes("x"))
    read = {n for op in model.kernel.ops if op.kind in ("map", "binary") for n in op.inputs}
    inputs = read & set(model.kernel.inputs)
    return sum(1 for n in inputs if keys & set(model.diagram.tensor(n).axes))


def plan_masked_share(kp: KernelPlan, axes: Mapping[str, int]) -> float:
    """`masked_share` of an attention kernel plan at the diagram's `axes` (its query and key
    axes, g_q and s_x); 0 for a kernel without a key chunk. The Hopper kernel's
    (`fa3_masked_share`) at the plan's sizes."""
    params = dict(kp.candidate.params) if kp.candidate is not None else {}
    if "s_x" not in params or not kp.family.axes("q") or not kp.family.axes("x"):
        return 0.0
    if params.get("wgmma"):
        return fa3_masked_share(kp.kernel, kp.family, axes, params["s_x"])
    (q_axis,), (x_axis,) = kp.family.axes("q"), kp.family.axes("x")
    q, x = axes[q_axis], axes[x_axis]
    shift = diagonal(kp.kernel, q, x)
    return masked_share(q, x, params.get("g_q", q), params["s_x"], shift)
