"""What the attention kernels share: reading a kernel as attention (query, key, head and
batch roles from the structure), its score path and masks, what the templates cover, and
the sizes, registers and names of a variant.

Tensors are addressed from the diagram's axis order (row-major); the head axes must be the
last axis of Q, K, V and O, so that rows are contiguous 16-byte chunks. The attention family
(ncdc.families.attention.family) and the decode family (decode) read kernels here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ncdc.errors import PlanError
from ncdc.families.attention.loads import (
    LOAD_KINDS,
    Load,
    operand_load,
    operand_ops,
    recomputed_loads,
)
from ncdc.families.attention.scores import SCORE_KINDS, Scores, pitch_of, read_scores, unsupported
from ncdc.families.base import Param, Workspace, round_up
from ncdc.families.codegen import cpp_type, size_name, status_param, status_workspace
from ncdc.hardware.arch import MMA_TILE
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.model.launch import MAX_GRID_YZ, Family
from ncdc.model.masks import read_mask_rule
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from ncdc.model.graph import Kernel
    from ncdc.model.structure import KernelModel


TILES: dict[str, tuple[int, ...]] = {
    "g_q": (64, 128),  # queries per block
    "s_x": (32, 64, 128),  # keys per streamed chunk
    # queries per warp: 32 (two mma row blocks) share each K and V fragment read from
    # SMEM, half the ldmatrix per mma of 16; where O (d_v <= WIDE_WARP_HEAD) and Q's
    # fragments (d <= Q_REGISTER_HEAD / 2) fit registers
    "warp_q": (16, 32),
    "stages": (2, 3),  # K/V chunks in the cp.async ring (stages - 1 in flight)
}


HEAD_STEP, HEAD_MIN, HEAD_MAX = 16, 32, 256  # head sizes: whole mma k-steps (compile-time)


Q_REGISTER_HEAD = 128  # Q's fragments (head x rows / 16) stay in registers up to this; above, SMEM


WIDE_WARP_HEAD = 128  # a warp of 32 queries holds O (d_v / 2 fp32 per thread) up to this head


WIDE_WARPS = 4  # warps of 32 queries come 4 to a block


WIDE_WARP_KEYS = 64  # and take at most this many keys a chunk (the scores: s_x / 4 a thread)


# Above this head a masked kernel (or one with a score functor) streams 16 keys a chunk:
# causal with 32, ptxas spilled at d = 208 (sm_89) and d = 240 (sm_89, sm_90a), 255
# registers and up to 276 B; with 16, 222 and none.
CAUSAL_WIDE_HEAD = 192


# KeyMask's per-row key limits and rows, and the warp's first and last rows' intervals
MASK_REGISTERS = 12


SPILLY_HEAD = 48  # a head whose kernels get __launch_bounds__(threads, 1): see min_blocks


INPUT_DTYPES = ("bf16", "fp16")  # mma.m16n8k16 inputs


FP8_DTYPES = ("fp8_e4m3", "fp8_e5m2")  # Q and K only, V and O 16-bit: the sm_90a kernel's


MMA_ROWS = 16  # queries per warp (the mma's m)


STAGES = 2  # K/V chunks in flight: the ring is double-buffered


DECODE_MAX_QUERIES = 16  # a query axis this short is a decode step: split the keys instead


def is_lse(op: Op, soft: Op) -> bool:
    """Whether `op` is the log-sum-exp of the softmax's logits over its axis."""
    return op.fn == "logsumexp" and op.over == soft.over and op.operands == soft.operands


@dataclass(frozen=True)
class Paged:
    """K and V gathered from paged caches through one block table, in the kernel: key x of
    a slice is row x % rows of page table[.., x // rows] (ncdc_attention.cuh's load_kv)."""

    table: str  # the int32 block table
    offset: str  # C++: where this slice's row of the table starts
    pitch: str  # C++: elements between its pages
    rows: str  # the axis along a page (`within`)
    pages: str  # the caches' axis of pages
    count: str  # the table's axis of a sequence's pages
    k_pitch: str  # C++: elements between pages of K's cache
    v_pitch: str

    @property
    def axes(self) -> tuple[str, ...]:
        return (self.rows, self.pages, self.count)


def paged_reads(kernel: Kernel) -> dict[str, Op]:
    """The kernel's paged gathers of its inputs (a cache through a block table), by their
    results: the attention kernels read K and V through them."""
    return {
        op.out: op for op in kernel.ops
        if op.kind == "gather" and "into" in op.params
        and all(n in kernel.inputs for n in op.read_apart)
    }  # fmt: skip


@dataclass(frozen=True)
class Attention:
    """What the templates need of one attention kernel, read from the diagram."""

    q: str  # tensor names
    k: str
    v: str
    o: str
    batch: tuple[str, ...]  # batch axes, innermost last: the grid's y index
    q_axis: str
    x_axis: str
    d: int  # head size of Q and K (compile-time)
    d_v: int  # head size of V and O
    dtype: str
    causal: bool
    scale: float  # multiplied into the logits
    offset: Mapping[str, str]  # tensor -> C++ offset of the slice from the batch indices
    stride: Mapping[str, str]  # tensor -> C++ row pitch (along q or x), in elements
    scores: Scores = Scores()
    lse: str = ""  # the fp32 log-sum-exp output over (batch..., q), or none
    v_dtype: str = ""  # V's (and O's unless o_dtype) type where not Q's and K's (fp8 Q and K)
    paged: Paged | None = None  # K and V read through a block table: k and v the caches
    page_rows: int = 0  # rows a page holds (compile-time, as the head sizes)
    q_load: Load | None = None  # Q computed as its tile loads (RoPE...), or copied
    k_load: Load | None = None
    load_dtypes: Mapping[str, str] = field(default_factory=dict)  # the loads' inputs' types
    o_dtype: str = ""  # O's type where it is not V's: 16-bit O of fp8 V (and P)

    @property
    def loads(self) -> tuple[Load, ...]:
        return tuple(ld for ld in (self.q_load, self.k_load) if ld is not None)

    @property
    def load_inputs(self) -> tuple[str, ...]:
        """The inputs only the loads read (the tensors of Q, K, V and the score path are
        parameters of their own)."""
        own = {self.v, *(t.name for t in self.scores.inputs), self.scores.lengths}
        own |= {self.q} if self.q_load is None else set()
        own |= {self.k} if self.k_load is None else set()
        if self.paged:
            own.add(self.paged.table)
        return tuple(dict.fromkeys(n for ld in self.loads for n in ld.inputs if n not in own))

    @property
    def status(self) -> bool:
        """Whether the kernel checks indices (a paged cache's pages, a load's gathers)."""
        return bool(self.paged) or any(ld.gathers for ld in self.loads)

    @property
    def value_dtype(self) -> str:
        return self.v_dtype or self.dtype

    @property
    def out_dtype(self) -> str:
        return self.o_dtype or self.value_dtype

    @property
    def sizes(self) -> tuple[str, ...]:
        """The runtime size parameters, in parameter order."""
        packed = (self.scores.sequences,) if self.scores.sequences else ()
        pages = self.paged.axes if self.paged else ()
        loads = tuple(a for ld in self.loads for a in ld.axes)
        return tuple(
            dict.fromkeys((*self.batch, self.q_axis, self.x_axis, *packed, *pages, *loads))
        )

    def size_params(self, axes: Mapping[str, int]) -> tuple[Param, ...]:
        return tuple(Param(size_name(a), "int64", value=axes[a]) for a in self.sizes)

    def context(self, warp_q: int = 16) -> dict[str, object]:
        sc = self.scores
        return {
            "T": cpp_type(self.dtype),
            "q": self.q, "k": self.k, "v": self.v, "o": self.o,
            "batch": self.batch, "sizes": self.sizes,
            "q_axis": self.q_axis, "x_axis": self.x_axis,
            "d": self.d, "d_v": self.d_v, "causal": self.causal or sc.bounded,
            "q_regs": q_in_registers(self.d, warp_q),
            "offset": dict(self.offset), "stride": dict(self.stride),
            "statements": [{"out": st.out, "fn": st.fn, "args": st.args} for st in sc.statements],
            "score_result": sc.result,
            "tile_rule": sc.tile_rule, "kept_result": sc.kept_result,
            "tile_rule_data": sc.tile_rule_data,
            "tile_data": [{"name": t.name, "along": "q" if t.q_pitch != "0" else
                           "x" if t.x_pitch != "0" else ""} for t in sc.tile_data],
            "kept_statements": [{"out": st.out, "fn": st.fn, "args": st.args}
                                for st in sc.kept_statements],
            "kept_identity": sc.kept_identity,
            **_log2_context(sc),
            "score_inputs": [{"name": t.name, "ctype": cpp_type(t.dtype), "offset": t.offset,
                              "q_pitch": t.q_pitch, "x_pitch": t.x_pitch} for t in sc.inputs],
            "score_batch": sc.batch, "band_lo": sc.lo, "band_hi": sc.hi,
            "lengths": sc.lengths, "lengths_offset": sc.lengths_offset,
            "sequences": sc.sequences, "lse": self.lse,
            "upper": bool(sc.hi), "below": bool(sc.lo or sc.sequences),
            "paged": self.paged, "page_rows": self.page_rows,
            "loads": self.loads, "q_load": self.q_load, "k_load": self.k_load,
            "load_inputs": [{"name": n, "ctype": cpp_type(self.load_dtypes[n])}
                            for n in self.load_inputs],
            "status": self.status,
        }  # fmt: skip

    def load_recomputes(
        self, diagram: Diagram, q_tiles: int, splits: int = 1, pack: int = 1
    ) -> tuple[tuple[str, float], ...]:
        """`Candidate.recomputes` of the loads: K's values once per query tile and per
        query head of a block that shares its K (the batch axes K lacks, `pack` of them to a
        block), Q's once per split of the keys."""
        if self.k_load is None:
            shared = 1
        else:
            k_axes = diagram.tensor(self.k_load.operand).axes
            shared = math.prod(diagram.axes[a] for a in self.batch if a not in k_axes)
        times = {"q": float(splits), "k": q_tiles * shared / pack}
        return recomputed_loads((self.q_load, self.k_load), times)

    def unstaged(self, diagram: Diagram, kernel: Kernel) -> tuple[str, ...]:
        """`Candidate.unstaged`: what the loads read (their inputs, and the gathers among
        their ops) straight into registers, but the input over the operand's own axes,
        which stands for the computed tile the shared memory holds."""
        gathers = {op.out for op in kernel.ops if op.kind == "gather"}
        out = []
        for ld in self.loads:
            axes = set(diagram.tensor(ld.operand).axes)
            own = next((n for n in ld.inputs if set(diagram.tensor(n).axes) == axes), "")
            out += [
                n for n in (*ld.inputs, *ld.ops) if n != own and (n in gathers or n in ld.inputs)
            ]
        return tuple(dict.fromkeys(out))

    def operand_params(self) -> tuple[Param, ...]:
        """Q, K and V, but for Q or K computed as its tile loads (their inputs are among
        `score_params`)."""
        q = () if self.q_load else (Param(self.q, "tensor", self.dtype),)
        k = () if self.k_load else (Param(self.k, "tensor", self.dtype),)
        return (*q, *k, Param(self.v, "tensor", self.value_dtype))

    def score_params(self) -> tuple[Param, ...]:
        """The tensors the score path reads (biases and slopes, then the lengths), those
        only Q's and K's loads read, a paged cache's block table, and the status word the
        indices are checked into."""
        sc = self.scores
        out = [Param(t.name, "tensor", t.dtype) for t in sc.inputs]
        if sc.lengths:
            out.append(Param(sc.lengths, "tensor", "int32"))
        out += [Param(n, "tensor", self.load_dtypes[n]) for n in self.load_inputs]
        if self.paged:
            out.append(Param(self.paged.table, "tensor", "int32"))
        if self.status:
            out.append(status_param())
        return tuple(out)

    def workspace(self) -> tuple[Workspace, ...]:
        """The status word of the index checks."""
        return (status_workspace(),) if self.status else ()

    def lse_params(self) -> tuple[Param, ...]:
        """The log-sum-exp output, when the diagram has one."""
        return (Param(self.lse, "tensor", "fp32", writes=True),) if self.lse else ()

    def scale_param(self) -> Param:
        """The logits' scale in base 2: the kernels take exp2(s x scale x log2 e - m)."""
        return Param("ncdc_scale_log2", "float32", value=self.scale * math.log2(math.e))


def variant_name(
    kernel: Kernel, family: str, at: Attention, g_q: int, s_x: int, warps: int,
    stages: int = STAGES, warp_q: int = 16,
) -> str:  # fmt: skip
    """A name that carries every parameter of the variant (FlashInfer style)."""
    return (
        f"{kernel.name}_{family}_{at.dtype}_q{g_q}_x{s_x}_d{at.d}"
        + (f"_dv{at.d_v}" if at.d_v != at.d else "")
        + f"_w{warps}_s{stages}"
        + ("" if q_in_registers(at.d, warp_q) else "_qsmem")
        + ("_causal" if at.causal else "")
        + ("_window" if at.scores.window else "")
        + ("_packed" if at.scores.sequences else "_varlen" if at.scores.lengths else "")
        + ("" if at.scores.plain else "_scores")
        + ("_lse" if at.lse else "")
        + (f"_page{at.page_rows}" if at.paged else "")
    )


def _log2_context(sc: Scores) -> dict[str, object]:
    """The score functor's base-2 forms (Scores.in_log2), for attention_scores.j2."""

    def listed(made: tuple) -> list[dict[str, object]]:
        return [{"out": st.out, "fn": st.fn, "args": st.args} for st in made]

    made, result = sc.in_log2()
    kept, kept_result = sc.in_log2(kept=True)
    return {
        "log2_statements": listed(made),
        "log2_result": result,
        "kept_log2_statements": listed(kept),
        "kept_log2_result": kept_result,
    }


def split_context(sc: Scores) -> dict[str, object] | None:
    """The score functor's pair, key and row parts (Scores.split), for attention_scores.j2:
    the FlashAttention-3 kernel's (the others take the logit whole)."""
    sp = sc.split
    if sp is None:
        return None

    def listed(made: tuple) -> list[dict[str, object]]:
        return [{"out": st.out, "fn": st.fn, "args": st.args} for st in made]

    return {
        "pair": listed(sp.pair), "pair_result": sp.pair_result,
        "key": listed(sp.key), "key_result": sp.key_result,
        "row": listed(sp.row), "row_result": sp.row_result,
        "step": listed(sp.step), "step_result": sp.step_result,
        "identity": sp.identity, "shift": sp.shift,
    }  # fmt: skip


def q_in_registers(d: int, warp_q: int = 16) -> bool:
    """Whether Q's mma fragments are held in registers for the whole key loop (d / 4 per
    thread for each 16 rows of the warp) or read from the Q tile at each step, which keeps
    large heads (and 32-row warps of d = 128) from spilling."""
    return d * warp_q // 16 <= Q_REGISTER_HEAD


def row_values(head: int) -> int:
    """Values one SMEM row of a head takes (ncdc_attention.cuh's row_chunks): 16-byte chunks
    swizzled when there are 8k of them, else padded by one chunk to an odd pitch."""
    chunks = head // 8
    return 8 * (chunks if chunks % 8 == 0 else chunks + 1)


def attention_smem(at: Attention, q_rows: int, q_head: int, s_x: int, stages: int = STAGES) -> int:
    """Bytes of the Q tile of q_rows rows of q_head values and the K and V rings."""
    rows = q_rows * row_values(q_head) + stages * s_x * (row_values(at.d) + row_values(at.d_v))
    return rows * DTYPES[at.dtype].bytes


def attention_roles(diagram: Diagram, kernel: Kernel) -> dict[str, tuple[str, ...]] | None:
    """Roles of contract(Q, K) [-> mask / maps] -> softmax over x -> contract(P, V) over x:
    batch, q (queries), x (keys), d (Q.K head) and d_v (V head) axes; None otherwise.

    Roles come from the structure, never from positions: K is the operand of the first
    contraction that carries the softmax axis x (so contract(K, Q) reads as contract(Q, K)),
    and the query axis is the one a mask names as its query, else the longest axis that Q
    has and K lacks (the others, such as the query heads of a group, are batch axes)."""
    contracts = [op for op in kernel.ops if op.kind == "contract"]
    if len(contracts) != 2 or any(op.grouped for op in contracts):
        return None
    first, second = contracts
    soft = [op for op in kernel.ops if op.kind == "softmax"]
    if len(soft) != 1 or len(soft[0].over) != 1:
        return None
    (x,) = soft[0].over
    if second.over != (x,) or soft[0].out not in second.inputs or x in first.over:
        return None
    paged = paged_reads(kernel)
    loaded = operand_ops(kernel, [str(o) for o in first.operands], set(paged))
    for op in kernel.ops:
        if op in (first, second, soft[0]) or op.kind in SCORE_KINDS or is_lse(op, soft[0]):
            continue
        if op.out in paged and op.out in (*first.operands, *second.operands):
            continue  # K or V, read through its block table
        if op in loaded and op.kind in LOAD_KINDS:
            continue  # computes Q or K as its tile loads
        return None
    operands = [o for o in first.operands if isinstance(o, str)]
    if len(operands) != 2:
        return None
    k_name = next((n for n in operands if x in diagram.tensor(n).axes), None)
    if k_name is None:
        return None
    q_name = next(n for n in operands if n != k_name)
    v_name = next(o for o in second.operands if isinstance(o, str) and o != soft[0].out)
    q_axes, k_axes = diagram.tensor(q_name).axes, diagram.tensor(k_name).axes
    v_axes = diagram.tensor(v_name).axes
    only_q = [a for a in first.axes if a in q_axes and a not in k_axes]
    named = {str(op.params.get("query")) for op in kernel.ops if op.kind == "mask"}
    rule = read_mask_rule(kernel)
    if rule is not None and rule.query is not None:
        named.add(rule.query)  # a mask rule compares the key's position with this one's
    named &= set(only_q)
    if len(named) > 1 or not only_q:
        return None
    # the longest; of equals, the innermost in Q (the query axis of [.., r, q, d])
    query = tuple(named) or (max(only_q, key=lambda a: (diagram.axes[a], q_axes.index(a))),)
    head = tuple(a for a in second.axes if a in v_axes and a not in q_axes + k_axes) or tuple(
        a for a in first.over if a in v_axes
    )
    batch = tuple(a for a in kernel.woven if a not in query + head)
    return {"batch": batch, "q": query, "x": (x,), "d": first.over, "d_v": head}


def attention_group(
    model: KernelModel, family: Family, g_q: int, fixed: Mapping[str, int]
) -> dict[str, int]:
    """A block's group: g_q queries of one (batch..., head) slice, the whole V head."""
    (q,) = family.axes("q")
    group = {
        a: (g_q if a == q else model.sizes[a] if a in family.axes("d_v") else 1)
        for a in model.kernel.woven
    }
    group.update({a: v for a, v in fixed.items() if a in group and a != q})
    return group


def attention_registers(
    model: KernelModel, family: Family, g_q: int, s_x: int, threads: int, warp_q: int = 16,
    masked: bool = False,
) -> int:  # fmt: skip
    """fp32 accumulators (O and the scores of one chunk), the Q fragments per thread (all
    of them when held in registers, else the one in use), P's, and a masked loop's key
    limits (`masked`)."""
    from ncdc.model.cost import estimate_registers

    head = sum(model.sizes[a] for a in family.axes("d"))
    head_v = math.prod(model.sizes[a] for a in family.axes("d_v"))
    first = next(op for op in model.kernel.ops if op.kind == "contract")
    p = DTYPES[model.diagram.tensor(str(first.operands[0])).dtype].bytes  # Q's (or K's)
    held = head if q_in_registers(head, warp_q) else MMA_TILE
    # Q's fragments, and P's: the chunk's probabilities packed two to a register as the
    # A operand of P V, live beside the fp32 scores they come from
    fragments = ceil_div(g_q * held * p, (4 * threads)) + ceil_div(g_q * s_x * p, (4 * threads))
    fragments += MASK_REGISTERS if masked else 0
    return estimate_registers(g_q * head_v + g_q * s_x, threads, fragments)


def min_blocks(at: Attention, masked: bool) -> int:
    """The `__launch_bounds__` minimum of blocks per SM, 0 for none. ptxas left to itself
    picks its own register target, and for masked loops over heads of 6 chunks (d = 48)
    that target spilled the 2-stage tiles: causal q64 x64 on sm_80 took 128 registers and
    spilled 12 B, decode x128 on sm_90a 96 and 8 B; with a minimum of 1 they take 136 and
    117 and spill none. (A minimum of 1 everywhere spilled causal d = 176 at 255 registers
    instead, and the plain d = 48 tile, clean at 104, took 134.)"""
    return 1 if masked and SPILLY_HEAD in (at.d, at.d_v) else 0


def is_masked(at: Attention) -> bool:
    """Whether the forward kernel runs a masked loop beside its clear one (any mask or
    score functor)."""
    sc = at.scores
    return at.causal or sc.bounded or bool(sc.lo or sc.lengths) or not sc.plain


def mma_rows(
    axis: str, defaults: tuple[int, ...], size: int, fixed: Mapping[str, int]
) -> list[int]:
    """Candidate query or key tiles: whole 16-row mma blocks, each default clamped to the
    axis rounded up to 16 (a decode step's one query runs as 16)."""
    if axis in fixed:
        return [round_up(fixed[axis], MMA_TILE)]
    return sorted({min(c, round_up(size, MMA_TILE)) for c in defaults})


def require_streamed(model: KernelModel, family: Family, streams: tuple[str, ...]) -> None:
    (x,) = family.axes("x")
    if x not in streams:
        raise PlanError(
            f"attention kernel {model.kernel.name} needs {x} streamed",
            hint=f"remove {x} from schedule.group and let it stream",
        )


def batch_count(at: Attention, axes: Mapping[str, int]) -> int:
    n = math.prod(axes[a] for a in at.batch)
    if n > MAX_GRID_YZ:
        split = max(at.batch, key=lambda a: axes[a])
        raise PlanError(
            f"attention over {n} (batch, head) slices: more than the grid's {MAX_GRID_YZ} rows",
            hint=f"run it in parts, e.g. --set {split}={max(1, axes[split] * MAX_GRID_YZ // n)}",
        )
    return n


def read_attention(
    family: Family, kernel: Kernel, diagram: Diagram, fp8: bool = False
) -> Attention:
    """Tensors, axes, mask and scale of an attention kernel; PlanError for what the
    templates do not cover (other ops in the chain, a scale tensor, mixed types...).
    `fp8`: fp8 Q and K with 16-bit V and O are allowed (the sm_90a kernel runs them)."""
    roles = family.roles
    (q_axis,), (x_axis,) = roles["q"], roles["x"]
    if len(roles["d"]) != 1 or len(roles["d_v"]) != 1:
        raise PlanError(
            f"attention kernel {kernel.name}: one head axis each for Q.K and V expected, "
            f"found {roles['d']} and {roles['d_v']}",
            hint="use one head axis of their product size for Q and K (and one for V)",
        )
    (d_axis,), (dv_axis,) = roles["d"], roles["d_v"]
    first, second = (op for op in kernel.ops if op.kind == "contract")
    soft = next(op for op in kernel.ops if op.kind == "softmax")
    lse_op = next((op for op in kernel.ops if is_lse(op, soft)), None)
    _check_outputs(kernel, second, soft, lse_op, x_axis)
    batch = tuple(roles["batch"])
    q_name, k_name = (o for o in first.operands if isinstance(o, str))
    if x_axis in diagram.tensor(q_name).axes:  # contract(K, Q): the same logits
        q_name, k_name = k_name, q_name
    gathers = paged_reads(kernel)  # K and V read through a block table, by result
    skip = set(gathers)
    q_load = operand_load(kernel, diagram, "q", q_name, (*batch, q_axis, d_axis), q_axis,
                          d_axis, skip)  # fmt: skip
    k_load = operand_load(kernel, diagram, "k", k_name, (*batch, x_axis, d_axis), x_axis,
                          d_axis, skip)  # fmt: skip
    loaded = frozenset(n for ld in (q_load, k_load) if ld is not None for n in ld.ops)
    scores = read_scores(kernel, diagram, first, soft, batch, q_axis, x_axis, loaded)
    causal = any(op.fn == "causal" for op in kernel.ops)
    scale = _scale(kernel, first, second, soft)
    v_name = next(o for o in second.operands if isinstance(o, str) and o != soft.out)
    names = {"Q": q_name, "K": k_name, "V": v_name, "O": second.out}
    dtype, v_dtype, o_dtype, mixed = _dtypes(kernel, diagram, names, second, soft, x_axis, fp8)
    d, d_v = diagram.axes[d_axis], diagram.axes[dv_axis]
    for axis, size in ((d_axis, d), (dv_axis, d_v)):
        if size % HEAD_STEP or not HEAD_MIN <= size <= HEAD_MAX:
            fit = min(max(round_up(size, HEAD_STEP), HEAD_MIN), HEAD_MAX)
            raise PlanError(
                f"attention kernel {kernel.name}: head size {axis}={size} is not a multiple "
                f"of {HEAD_STEP} from {HEAD_MIN} to {HEAD_MAX}",
                hint=f"zero-pad the head to {fit} (axes: {{{axis}: {fit}}}, or --set {axis}={fit})"
                if size < HEAD_MAX
                else f"split the head into heads of at most {HEAD_MAX}",
            )
    axes_of = {"row": {"Q": q_axis, "K": x_axis, "V": x_axis, "O": q_axis},
               "head": {"Q": d_axis, "K": d_axis, "V": dv_axis, "O": dv_axis}}  # fmt: skip
    fixed = {d_axis: str(d), dv_axis: str(d_v)}
    paged = _paged(kernel, diagram, gathers, names, batch, fixed)
    if paged is not None:  # K and V are read from the caches, along a page's rows
        k_name, v_name = (str(gathers[names[r]].operands[0]) for r in ("K", "V"))
        names = {**names, "K": k_name, "V": v_name}
        axes_of["row"] = {**axes_of["row"], "K": paged.rows, "V": paged.rows}
    computed = {r for r, ld in (("Q", q_load), ("K", k_load)) if ld is not None}
    offset, stride = _layout(kernel, diagram, names, batch, axes_of, fixed, paged, computed)
    if lse_op is not None:  # over (batch..., q) in any order
        axes = lse_op.axes
        pitch = {a: pitch_of(axes, a, {d_axis: str(d), dv_axis: str(d_v)}) for a in axes}
        offset[lse_op.out] = (
            " + ".join(f"ncdc_i_{a} * {pitch[a]}" for a in batch if a in axes) or "0"
        )
        stride[lse_op.out] = pitch[q_axis]
    return Attention(q_name, k_name, v_name, second.out, batch, q_axis, x_axis, d, d_v, dtype,
                      causal, scale, offset, stride, scores,
                      lse_op.out if lse_op else "", v_dtype if mixed else "", paged,
                      diagram.axes[paged.rows] if paged else 0, q_load, k_load,
                      {n: diagram.tensor(n).dtype for ld in (q_load, k_load) if ld
                       for n in ld.inputs}, o_dtype)  # fmt: skip


def _paged(
    kernel: Kernel, diagram: Diagram, gathers: Mapping[str, Op], names: Mapping[str, str],
    batch: tuple[str, ...], fixed: Mapping[str, str],
) -> Paged | None:  # fmt: skip
    """K and V's block table, where the kernel gathers them from paged caches; PlanError
    unless both are gathered through one table with pages of one size, each cache in
    [pages, rows, batch..., head] order (any order but the head last) and of its result's
    type, and the table over batch axes and its pages. `gathers`: the kernel's
    `paged_reads`."""
    ops = [gathers.get(names[r]) for r in ("K", "V")]
    if not any(ops):
        return None
    k_op, v_op = ops
    if k_op is None or v_op is None:
        paged, whole = ("K", "V") if k_op else ("V", "K")
        raise PlanError(
            f"attention kernel {kernel.name}: {paged} ({names[paged]}) is read through a "
            f"block table and {whole} ({names[whole]}) from memory; the kernel pages both or "
            "neither",
            hint=f"gather {whole} from its cache through the same table too, or keep "
            f"{names[paged]} in a kernel of its own: schedule: {{materialize: [{names[paged]}]}}",
        )
    if k_op.operands[1] != v_op.operands[1] or any(
        k_op.params[p] != v_op.params[p] for p in ("within", "pages", "axis")
    ):
        raise PlanError(
            f"attention kernel {kernel.name}: K ({names['K']}) and V ({names['V']}) are read "
            "through block tables unlike each other; the kernel pages both through one table",
            hint="gather K and V from their caches with one table and the same axis, within "
            "and into",
        )
    table = diagram.tensor(str(k_op.operands[1]))
    pages, rows, count = k_op.params["axis"], k_op.params["within"], k_op.params["pages"]
    if not set(table.axes) <= {*batch, count}:
        raise PlanError(
            f"attention kernel {kernel.name}: the block table {table.name} has axes "
            f"{list(table.axes)}; expected batch axes and its pages ({count})",
            hint=f"give {table.name} one row of pages per sequence: axes [{', '.join(batch)}"
            f"{', ' if batch else ''}{count}]",
        )
    pitch = {}
    for op in (k_op, v_op):
        cache = diagram.tensor(str(op.operands[0]))
        if cache.dtype != op.dtype:
            raise PlanError(
                f"attention kernel {kernel.name}: {op.out} = {op.fn}({cache.name}, ...) is "
                f"{op.dtype}, its cache {cache.dtype}; the kernel reads the cache as it is stored",
                hint=f"drop dtype= from {op.out}, or store {cache.name} as {op.dtype}",
            )
        pitch[op.out] = pitch_of(cache.axes, pages, fixed)
    return Paged(
        table.name,
        " + ".join(f"ncdc_i_{a} * {pitch_of(table.axes, a, {})}" for a in batch
                   if a in table.axes) or "0",
        pitch_of(table.axes, count, {}), rows, pages, count, pitch[k_op.out], pitch[v_op.out],
    )  # fmt: skip


def _check_outputs(kernel: Kernel, second: Op, soft: Op, lse_op: Op | None, x_axis: str) -> None:
    """The fused kernel saves its output and the log-sum-exp (fp32) of the logits only."""
    extra = [n for n in kernel.outputs if n not in (second.out, getattr(lse_op, "out", None))]
    if extra:
        raise PlanError(
            f"attention kernel {kernel.name} saves {extra[0]}; the fused kernel saves only its "
            f"output {second.out} and the log-sum-exp of the logits",
            hint=f"remove {extra[0]} from outputs, or save it in a kernel of its own: "
            f"schedule: {{materialize: [{extra[0]}]}}",
        )
    if lse_op is not None and lse_op.dtype != "fp32":
        raise PlanError(
            f"attention kernel {kernel.name}: the log-sum-exp {lse_op.out} is "
            f"{lse_op.dtype}; the fused kernel writes it in fp32",
            hint=f"write {lse_op.out} = logsumexp({soft.operands[0]}, over={x_axis}, dtype=fp32)",
        )


def _scale(kernel: Kernel, first: Op, second: Op, soft: Op) -> float:
    """The logits' constant scale: numbers on the first contraction only."""
    if second.scale:
        raise PlanError(
            unsupported(kernel, second, "a scale on the first contraction only"),
            hint=f"scale {second.out} in a later kernel, or run it unfused: schedule: "
            f"{{materialize: [{first.out}, {soft.out}]}}",
        )
    scale = 1.0
    for factor in first.scale:
        if isinstance(factor, str):
            raise PlanError(
                unsupported(kernel, first, "a constant scale (a number)"),
                hint=f"write the scale as a number: {first.out} = contract(...) * 0.125",
            )
        scale *= float(factor)
    return scale


def _dtypes(
    kernel: Kernel, diagram: Diagram, names: Mapping[str, str], second: Op, soft: Op,
    x_axis: str, fp8: bool,
) -> tuple[str, str, str, bool]:  # fmt: skip
    """Q's dtype, V's, O's where it is not V's, and whether they are a mix that only the
    sm_90a kernel runs (`fp8`): fp8 Q and K with 16-bit V and O, or fp8 Q, K, V and P (P V
    at the fp8 rate) with 16-bit O; every other kernel has one 16-bit type throughout."""
    q_name, k_name = names["Q"], names["K"]
    dtype = diagram.tensor(q_name).dtype
    v_dtype = diagram.tensor(names["V"]).dtype
    o_dtype = diagram.tensor(names["O"]).dtype
    v8 = dtype in FP8_DTYPES and v_dtype in FP8_DTYPES and o_dtype in INPUT_DTYPES
    mixed = dtype in FP8_DTYPES and (v_dtype in INPUT_DTYPES or v8)
    if mixed and not fp8:
        raise PlanError(
            f"attention kernel {kernel.name}: fp8 Q ({q_name}) and K run only in the sm_90a "
            f"wgmma kernel of fused attention (an sm_90a profile such as h200; not in "
            f"decode attention)",
            hint=f"store {q_name}, {k_name}"
            + (f" and {names['V']} as {o_dtype}" if v8 else f" as {v_dtype}"),
        )
    if v8 and soft.dtype != v_dtype:
        raise PlanError(
            f"attention kernel {kernel.name}: P ({soft.out}) is {soft.dtype} but V "
            f"({names['V']}) is {v_dtype}: the fp8 P V product takes P in V's type",
            hint=f"write {soft.out} = softmax({soft.operands[0]}, over={x_axis}, "
            f"dtype={v_dtype}), or store {names['V']} as {o_dtype}",
        )
    for role, n in names.items():
        t = diagram.tensor(n)
        own = dtype if role in ("Q", "K") else o_dtype if role == "O" and v8 else v_dtype
        if mixed and t.dtype == own:
            continue
        if t.dtype != dtype or dtype not in INPUT_DTYPES:
            want = dtype if dtype in INPUT_DTYPES else "bf16"
            raise PlanError(
                f"attention kernel {kernel.name}: {role} ({n}) is {t.dtype}; expected Q, K, "
                f"V and O all of one type among {', '.join(INPUT_DTYPES)}",
                hint=f"write {second.out} = contract({', '.join(map(str, second.operands))}, "
                f"over={x_axis}, dtype={want})"
                if role == "O"
                else f"store {n} as {want}: "
                f"inputs: {{{n}: {{axes: [{', '.join(t.axes)}], dtype: {want}}}}}",
            )
    return dtype, v_dtype, o_dtype if v8 else "", mixed


def _layout(
    kernel: Kernel, diagram: Diagram, names: Mapping[str, str], batch: tuple[str, ...],
    axes_of: Mapping[str, Mapping[str, str]], fixed: Mapping[str, str],
    paged: Paged | None = None, computed: set[str] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:  # fmt: skip
    """Each of Q, K, V and O's offset over the batch axes and its row stride, as C
    expressions; PlanError unless each has batch axes, its row axis and its head last
    (and, for paged K and V caches, their axis of pages). Q or K `computed` as its tile
    loads is never addressed (0)."""
    offset, stride = {}, {}
    for role, n in names.items():
        if role in (computed or set()):
            offset[n], stride[n] = "0", "0"
            continue
        axes = diagram.tensor(n).axes
        row, head = axes_of["row"][role], axes_of["head"][role]
        pages = {paged.pages} if paged and role in ("K", "V") else set()
        if axes[-1] != head or row not in axes or not set(axes) <= {*batch, row, head, *pages}:
            # O's axes are its contraction's: the probabilities' first, then V's
            p = next((op.out for op in kernel.ops if op.kind == "softmax"), "P")
            hint = (
                f"write {n} = contract({p}, {names.get('V', 'V')}, ...), the probabilities "
                f"first, so that {head} comes last" if role == "O" and head in axes
                else f"put {head} last in {n}"
            )  # fmt: skip
            raise PlanError(
                f"attention kernel {kernel.name}: {role} ({n}) has axes {list(axes)}; "
                f"expected batch axes, {row} and {head} last",
                hint=hint,
            )
        pitch = {a: pitch_of(axes, a, fixed) for a in axes}
        offset[n] = " + ".join(f"ncdc_i_{a} * {pitch[a]}" for a in batch if a in axes) or "0"
        stride[n] = pitch[row]
    return offset, stride
