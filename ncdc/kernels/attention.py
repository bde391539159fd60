"""Code for the attention families: the fused forward pass and split-key decode.

`render_attention` fills `templates/attention.cu.j2`: one block per (batch..., g_q queries),
one warp per 16 queries, K and V streamed in chunks of s_x keys through a 2-stage cp.async
ring (FlashAttention-2 order). `render_decode_attention` fills
`templates/decode_attention.cu.j2`: the few queries of a decode step padded to one 16-row
mma block, the keys split across blocks (and across the warps of a block), each writing an
unnormalised partial (m, l, O) to an fp32 workspace, then a second kernel that merges them.
Device code lives in `templates/include/ncdc_attention.cuh`.

Tensors are addressed from the diagram's axis order (row-major); the head axes must be the
last axis of Q, K, V and O, so that rows are contiguous 16-byte chunks. Problem sizes are
runtime parameters; tiles and head sizes are compile-time.

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.tiling import plan_diagram
    >>> plan = plan_diagram(load_diagram("diagrams/attention.yaml"), load_hardware("h200"))
    >>> render_attention(plan.kernels[0], plan).launches[0].kernel
    'attention_attention_bf16_q128_x128_d128_w8_s2'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ncdc.cost import KernelPlan, Plan
from ncdc.errors import PlanError
from ncdc.render import KernelSource, Launch, Param, Workspace, cpp_type
from ncdc.spec import Diagram, Op

HEAD_SIZES = (64, 128)  # compile-time head sizes: rows of 8 or 16 chunks (the swizzle needs 8k)
INPUT_DTYPES = ("bf16", "fp16")  # mma.m16n8k16 inputs
MMA_ROWS = 16  # queries per warp (the mma's m)
STAGES = 2  # K/V chunks in flight: the ring is double-buffered
MERGE_THREADS = 128
MAX_GRID_Y = 65535
MAX_SMEM_BYTES = 227 * 1024  # opt-in dynamic shared memory per block on sm_90 (163 KiB sm_80)


@dataclass(frozen=True)
class _Attention:
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

    @property
    def sizes(self) -> tuple[str, ...]:
        """The runtime size parameters, in parameter order."""
        return (*self.batch, self.q_axis, self.x_axis)

    def size_params(self, axes: Mapping[str, int]) -> tuple[Param, ...]:
        return tuple(Param(size_name(a), "int64", value=axes[a]) for a in self.sizes)

    def context(self) -> dict[str, object]:
        return {
            "T": cpp_type(self.dtype),
            "q": self.q, "k": self.k, "v": self.v, "o": self.o,
            "batch": self.batch, "sizes": self.sizes,
            "q_axis": self.q_axis, "x_axis": self.x_axis,
            "d": self.d, "d_v": self.d_v, "causal": self.causal,
            "offset": dict(self.offset), "stride": dict(self.stride),
        }  # fmt: skip


def _variant_name(
    kp: KernelPlan, family: str, at: _Attention, g_q: int, s_x: int, warps: int
) -> str:
    """A name that carries every parameter of the variant (FlashInfer style)."""
    return (
        f"{kp.kernel.name}_{family}_{at.dtype}_q{g_q}_x{s_x}_d{at.d}"
        + (f"_dv{at.d_v}" if at.d_v != at.d else "")
        + f"_w{warps}_s{STAGES}"
        + ("_causal" if at.causal else "")
    )


def render_attention(kp: KernelPlan, plan: Plan) -> KernelSource:
    """The fused forward kernel of `kp`: one launch over (query tiles, batch...)."""
    diagram = plan.graph.diagram
    at = _read_attention(kp, diagram)
    g_q = _round16(kp.block_tile.get(at.q_axis, 64))
    s_x = _round16(kp.block_tile.get(at.x_axis, 64))
    warps = g_q // MMA_ROWS
    smem = (g_q * max(at.d, at.d_v) + STAGES * s_x * (at.d + at.d_v)) * 2
    _check_smem(smem, kp)
    name = _variant_name(kp, "attention", at, g_q, s_x, warps)
    axes = diagram.axes
    grid = (-(-axes[at.q_axis] // g_q), _batch_count(at, axes), 1)
    params = (
        Param(at.q, "tensor", at.dtype),
        Param(at.k, "tensor", at.dtype),
        Param(at.v, "tensor", at.dtype),
        Param(at.o, "tensor", at.dtype, writes=True),
        *at.size_params(axes),
        Param("ncdc_scale_log2", "float32", value=at.scale * math.log2(math.e)),
    )
    context = {
        **at.context(),
        "kernel": name,
        "threads": 32 * warps,
        "g_q": g_q,
        "s_x": s_x,
        "summary": f"fused attention, {g_q} queries per block, keys streamed {s_x} at a time "
        f"through a {STAGES}-stage cp.async ring, {warps} warps"
        + (", causal" if at.causal else ""),
    }
    launch = Launch(name, grid, (32 * warps, 1, 1), smem, params)
    return KernelSource("attention.cu.j2", context, (launch,))


def render_decode_attention(kp: KernelPlan, plan: Plan) -> KernelSource:
    """Decode attention of `kp`: split-key partials into an fp32 workspace, then a merge.

    The keys of each (batch..., head) are split across the plan's `splits` blocks (the cost
    model weighs the grid's fill against the merge's traffic), whole s_x chunks each, and
    within a block across its warps: every warp keeps its own online softmax over its keys,
    so no merge happens inside a block.
    """
    diagram = plan.graph.diagram
    at = _read_attention(kp, diagram)
    axes = diagram.axes
    q_len, x_len = axes[at.q_axis], axes[at.x_axis]
    s_x = _round16(kp.block_tile.get(at.x_axis, 64))
    warps = next(w for w in (4, 2, 1) if w <= max(kp.warps, 1) and s_x % (MMA_ROWS * w) == 0)
    batch = _batch_count(at, axes)
    chunks = -(-x_len // s_x)
    keys_per_split = -(-chunks // min(max(kp.splits, 1), chunks)) * s_x
    splits = -(-x_len // keys_per_split)  # none empty
    partials = splits * warps
    smem = (MMA_ROWS * at.d + STAGES * s_x * (at.d + at.d_v)) * 2
    _check_smem(smem, kp)
    name = _variant_name(kp, "decode_attention", at, MMA_ROWS, s_x, warps)
    merge = f"{kp.kernel.name}_decode_merge_{at.dtype}_d{at.d_v}"
    part_o, part_ml = f"ncdc_partial_o_{kp.kernel.name}", f"ncdc_partial_ml_{kp.kernel.name}"
    workspace = (
        Workspace(part_o, "fp32", batch * partials * q_len * at.d_v),
        Workspace(part_ml, "fp32", batch * partials * q_len * 2),
    )
    sizes = at.size_params(axes)
    first = Launch(
        name,
        (splits, batch, 1),
        (32 * warps, 1, 1),
        smem,
        (
            Param(at.q, "tensor", at.dtype),
            Param(at.k, "tensor", at.dtype),
            Param(at.v, "tensor", at.dtype),
            Param(part_o, "workspace", "fp32", writes=True),
            Param(part_ml, "workspace", "fp32", writes=True),
            *sizes,
            Param("ncdc_scale_log2", "float32", value=at.scale * math.log2(math.e)),
            Param("ncdc_keys_per_split", "int64", value=keys_per_split),
        ),
    )
    second = Launch(
        merge,
        (1, batch, 1),
        (MERGE_THREADS, 1, 1),
        q_len * partials * 4,
        (
            Param(part_o, "workspace", "fp32"),
            Param(part_ml, "workspace", "fp32"),
            Param(at.o, "tensor", at.dtype, writes=True),
            *sizes,
            Param("ncdc_partials", "int64", value=partials),
        ),
    )
    context = {
        **at.context(),
        "kernel": name,
        "merge_kernel": merge,
        "threads": 32 * warps,
        "merge_threads": MERGE_THREADS,
        "warps": warps,
        "s_x": s_x,
        "part_o": part_o,
        "part_ml": part_ml,
        "summary": f"decode attention, up to {MMA_ROWS} queries against keys split across "
        f"blocks, {s_x} keys per stage ({s_x // warps} per warp), {STAGES}-stage cp.async; "
        "partials in fp32, merged by a second kernel",
    }
    return KernelSource("decode_attention.cu.j2", context, (first, second), workspace)


# ------------------------------------------------------------------------------ helpers


def _round16(n: int) -> int:
    return max(MMA_ROWS, -(-n // MMA_ROWS) * MMA_ROWS)


def _batch_count(at: _Attention, axes: Mapping[str, int]) -> int:
    n = math.prod(axes[a] for a in at.batch)
    if n > MAX_GRID_Y:
        raise PlanError(
            f"attention over {n} (batch, head) slices: more than the grid's {MAX_GRID_Y} rows",
            hint="split the batch into several runs",
        )
    return n


def _check_smem(smem: int, kp: KernelPlan) -> None:
    if smem > MAX_SMEM_BYTES:
        raise PlanError(
            f"attention kernel {kp.kernel.name} needs {smem} bytes of shared memory per block "
            f"(at most {MAX_SMEM_BYTES})",
            hint="use smaller tiles: --tile q=64 --tile x=64",
        )


def _read_attention(kp: KernelPlan, diagram: Diagram) -> _Attention:
    """Tensors, axes, mask and scale of an attention kernel; PlanError for what the
    templates do not cover (other ops in the chain, a scale tensor, mixed types...)."""
    roles = kp.family.roles
    (q_axis,), (x_axis,) = roles["q"], roles["x"]
    if len(roles["d"]) != 1 or len(roles["d_v"]) != 1:
        raise PlanError(
            f"attention kernel {kp.kernel.name}: one head axis each for Q.K and V expected, "
            f"found {roles['d']} and {roles['d_v']}",
            hint="merge the head axes into one",
        )
    (d_axis,), (dv_axis,) = roles["d"], roles["d_v"]
    contracts = [op for op in kp.kernel.ops if op.kind == "contract"]
    first, second = contracts
    soft = next(op for op in kp.kernel.ops if op.kind == "softmax")
    causal = False
    for op in kp.kernel.ops:
        if op.kind == "mask" and op.fn == "causal":
            if (op.params.get("query"), op.params.get("key")) != (q_axis, x_axis):
                raise PlanError(_unsupported(kp, op, f"a causal mask over ({q_axis}, {x_axis})"))
            causal = True
        elif op.kind not in ("contract", "softmax"):
            raise PlanError(_unsupported(kp, op, "contract, causal, softmax, contract"))
    if second.scale:
        raise PlanError(_unsupported(kp, second, "a scale on the first contraction only"))
    scale = 1.0
    for factor in first.scale:
        if isinstance(factor, str):
            raise PlanError(_unsupported(kp, first, "a constant scale (a number)"))
        scale *= float(factor)
    q_name, k_name = (o for o in first.operands if isinstance(o, str))
    if q_axis not in diagram.tensor(q_name).axes:
        q_name, k_name = k_name, q_name
    v_name = next(o for o in second.operands if isinstance(o, str) and o != soft.out)
    (o_name,) = kp.kernel.outputs
    names = {"Q": q_name, "K": k_name, "V": v_name, "O": o_name}
    dtype = diagram.tensor(q_name).dtype
    for role, n in names.items():
        t = diagram.tensor(n)
        if t.dtype != dtype or dtype not in INPUT_DTYPES:
            raise PlanError(
                f"attention kernel {kp.kernel.name}: {role} ({n}) is {t.dtype}; expected Q, K, "
                f"V and O all of one type among {', '.join(INPUT_DTYPES)}",
                hint="add casts around the attention",
            )
    d, d_v = diagram.axes[d_axis], diagram.axes[dv_axis]
    for size in (d, d_v):
        if size not in HEAD_SIZES:
            raise PlanError(
                f"attention kernel {kp.kernel.name}: head size {size} is not one of "
                f"{', '.join(map(str, HEAD_SIZES))}",
                hint="pad the head axis",
            )
    batch = tuple(roles["batch"])
    row_axis = {"Q": q_axis, "K": x_axis, "V": x_axis, "O": q_axis}
    head_axis = {"Q": d_axis, "K": d_axis, "V": dv_axis, "O": dv_axis}
    fixed = {d_axis: str(d), dv_axis: str(d_v)}
    offset, stride = {}, {}
    for role, n in names.items():
        axes = diagram.tensor(n).axes
        allowed = {*batch, row_axis[role], head_axis[role]}
        if axes[-1] != head_axis[role] or row_axis[role] not in axes or not set(axes) <= allowed:
            raise PlanError(
                f"attention kernel {kp.kernel.name}: {role} ({n}) has axes {list(axes)}; "
                f"expected batch axes, {row_axis[role]} and {head_axis[role]} last",
                hint=f"put {head_axis[role]} last in {n}",
            )
        pitch = {a: _pitch(axes, a, fixed) for a in axes}
        terms = [f"ncdc_i_{a} * {pitch[a]}" for a in batch if a in axes]
        offset[n] = " + ".join(terms) or "0"
        stride[n] = pitch[row_axis[role]]
    return _Attention(q_name, k_name, v_name, o_name, batch, q_axis, x_axis, d, d_v, dtype,
                      causal, scale, offset, stride)  # fmt: skip


def _pitch(axes: tuple[str, ...], axis: str, fixed: Mapping[str, str]) -> str:
    """Elements between neighbours along `axis` of a row-major tensor, as C++ over the size
    parameters (the head sizes are numbers)."""
    after = axes[axes.index(axis) + 1 :]
    return " * ".join(fixed.get(a, size_name(a)) for a in after) or "1"


def size_name(axis: str) -> str:
    """The kernel parameter that carries an axis size at run time: names the generated code
    makes up start with ncdc_, which no diagram name may, so none meets a tensor's name."""
    return f"ncdc_size_{axis}"


def _unsupported(kp: KernelPlan, op: Op, expected: str) -> str:
    return (
        f"attention kernel {kp.kernel.name}: no code for {op.fn} ({op.out}) here; "
        f"the generator covers {expected}"
    )
