"""The library a user would otherwise run for a diagram, timed beside ncdc's kernels.

Chosen from the structure of the plan (its kernel families and operations), never from
the file name:

- GEMM and batched GEMM: cuBLAS through `torch.matmul` when PyTorch is importable (CuPy
  has bf16 only through the optional ml_dtypes), else through `cupy.matmul` in fp16 (same
  bytes and tensor rate; CuPy 14 may run a batched fp16 one in fp32, cupy/cupy#10317);
  fp8 through `torch._scaled_mm`, skipped with a reason without PyTorch.
- Attention (fused or not, grouped-query, decode): `scaled_dot_product_attention` with its
  flash and cuDNN back ends (`torch.nn.attention.sdpa_kernel`), else a CuPy composition
  (two matmuls and a softmax in fp16).
- softmax, layernorm, rmsnorm: PyTorch's functional ops, else a CuPy composition.
- Always: a device-to-device copy of half the plan's HBM bytes (so it reads and writes as
  many bytes as the plan moves): the bandwidth ceiling for memory-bound kernels.

Every baseline draws its own random inputs. One that cannot run is reported as skipped
with its reason; it never stops the bench.

    >>> [b.name for b in run_baselines(plan, cupy, timer)]  # doctest: +SKIP
    ['cuBLAS (torch.matmul)', 'copy (device to device)']
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ncdc.families import get_family
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.measure.timing import BaselineResult, Timer, torch_work
from ncdc.model.launch import Family
from ncdc.model.values import Plan

Candidate = tuple[str, Callable[[], None]]
# the dtypes the library baselines (cuBLAS, SDPA, torch row ops) are timed in
BASELINE_DTYPES = ("bf16", "fp16", "fp32")
COPY_NAME = "copy (device to device)"


class Skip(Exception):
    """A baseline that does not apply here; the message says why."""


@dataclass(frozen=True)
class GemmShape:
    batch: int
    m: int
    n: int
    k: int
    dtype: str  # of the inputs


@dataclass(frozen=True)
class AttentionShape:
    q_heads: int  # batch x query heads, flattened
    kv_heads: int  # batch x key/value heads, flattened
    queries: int
    keys: int
    d: int
    d_v: int
    dtype: str
    causal: bool
    scale: float


@dataclass(frozen=True)
class RowShape:
    rows: int
    n: int
    op: Op  # the softmax or norm
    dtype: str


def run_baselines(plan: Plan, cupy: Any, timer: Timer) -> list[BaselineResult]:
    """Time every baseline that applies to `plan` with `timer`, then the copy ceiling."""
    out = []
    for name, make in _makers(plan):
        try:
            for label, fn in make(cupy):
                out.append(_timed(label, fn, timer))
        except Skip as e:
            out.append(BaselineResult(name, None, str(e)))
        except Exception as e:  # a library error is a skipped baseline, not a failed bench
            out.append(BaselineResult(name, None, f"{type(e).__name__}: {e}"[:200]))
    out.append(copy_baseline(plan, cupy, timer))
    return out


def copy_baseline(plan: Plan, cupy: Any, timer: Timer) -> BaselineResult:
    """cudaMemcpy of half the plan's top-level bytes: as many bytes read plus written."""
    nbytes = max(plan.top_bytes // 2, 1)
    try:
        src = cupy.empty(nbytes, dtype=cupy.uint8)
        dst = cupy.empty(nbytes, dtype=cupy.uint8)
        src.fill(1)
        timing = timer(lambda: dst.data.copy_from_device_async(src.data, nbytes))
    except Exception as e:
        return BaselineResult(COPY_NAME, None, f"{type(e).__name__}: {e}"[:200])
    return BaselineResult(COPY_NAME, timing, bytes_moved=2 * nbytes)


def _timed(label: str, fn: Callable[[], None], timer: Timer) -> BaselineResult:
    try:
        return BaselineResult(label, timer(fn))
    except Exception as e:
        return BaselineResult(label, None, f"{type(e).__name__}: {e}"[:200])


BASELINE_ORDER = ("attention", "gemm", "rowwise")


def baseline_kind(plan: Plan) -> str:
    """attention | gemm | rowwise | none: the baseline each kernel's family names, the
    first of BASELINE_ORDER among them (an unfused attention is still attention)."""
    kinds = {get_family(k.family.name).baseline for k in plan.kernels}
    if _attention_ops(plan.graph.diagram):
        kinds.add("attention")
    return next((kind for kind in BASELINE_ORDER if kind in kinds), "none")


def _makers(plan: Plan) -> Iterator[tuple[str, Callable[[Any], list[Candidate]]]]:
    """(name, maker) per library; each maker reads its shape when called, inside
    `run_baselines`' try, so a plan the shape readers do not understand is a skipped
    baseline rather than a failed bench."""
    kind = baseline_kind(plan)
    if kind == "attention":
        yield "sdpa", lambda cupy: _attention(cupy, attention_shape(plan.graph.diagram))
    elif kind == "gemm":
        yield "cuBLAS", lambda cupy: _gemm(cupy, gemm_shape(plan))
    elif kind == "rowwise":
        ops = plan.graph.diagram.ops
        name = next((op.fn for op in ops if op.kind in ("softmax", "norm")), "rowwise")
        yield name, lambda cupy: _rowwise(cupy, row_shape(plan))


# ----------------------------------------------------------------------------- shapes


def _prod(diagram: Diagram, axes: tuple[str, ...] | list[str]) -> int:
    return math.prod(diagram.axes[a] for a in axes)


def _family(plan: Plan, kind: str) -> Family:
    """The family of the plan's first kernel whose baseline is `kind`."""
    return next(k.family for k in plan.kernels if get_family(k.family.name).baseline == kind)


def gemm_shape(plan: Plan) -> GemmShape:
    """batch, m, n, k of the plan's (first) GEMM kernel: products of its role axes."""
    d = plan.graph.diagram
    f = _family(plan, "gemm")
    mm = next(op for op in d.ops if op.kind == "contract")
    if mm.grouped:
        raise Skip("a grouped GEMM: no one library GEMM of its shape")
    dtype = d.tensor(next(o for o in mm.operands if isinstance(o, str))).dtype
    return GemmShape(
        _prod(d, f.axes("batch")),
        _prod(d, f.axes("m")),
        _prod(d, f.axes("n")),
        _prod(d, f.axes("k")),
        dtype,
    )


def _attention_ops(d: Diagram) -> tuple[Op, Op, Op] | None:
    contracts = [op for op in d.ops if op.kind == "contract"]
    soft = [op for op in d.ops if op.kind == "softmax"]
    if len(contracts) != 2 or len(soft) != 1:
        return None
    return contracts[0], soft[0], contracts[1]


def attention_shape(d: Diagram) -> AttentionShape:
    """Heads, sequence lengths and head sizes of contract(Q, K) -> softmax -> contract(P, V),
    flattened the way `scaled_dot_product_attention` takes them (query heads of one
    key/value head adjacent, as grouped-query attention's [b, g, r] order gives)."""
    ops = _attention_ops(d)
    if ops is None:
        raise Skip("not an attention diagram")
    first, soft, second = ops
    q_name, k_name = (o for o in first.operands if isinstance(o, str))
    v_name = next(o for o in second.operands if isinstance(o, str) and o != soft.out)
    q_axes, k_axes, v_axes = (d.tensor(n).axes for n in (q_name, k_name, v_name))
    (x,) = soft.over
    query = [a for a in q_axes if a not in k_axes and a not in first.over][-1]
    kv_batch = [a for a in k_axes if a != x and a not in first.over]
    scale = math.prod(s for s in first.scale if isinstance(s, (int, float)))
    return AttentionShape(
        q_heads=_prod(d, [a for a in q_axes if a != query and a not in first.over]),
        kv_heads=_prod(d, kv_batch),
        queries=d.axes[query],
        keys=d.axes[x],
        d=_prod(d, first.over),
        d_v=_prod(d, [a for a in v_axes if a != x and a not in kv_batch]),
        dtype=d.tensor(q_name).dtype,
        causal=any(op.kind == "mask" for op in d.ops),
        scale=float(scale),
    )


def row_shape(plan: Plan) -> RowShape:
    d = plan.graph.diagram
    f = _family(plan, "rowwise")
    op = next(op for op in d.ops if op.kind in ("softmax", "norm"))
    src = next(o for o in op.operands if isinstance(o, str))
    return RowShape(_prod(d, f.axes("rows")), _prod(d, f.axes("row")), op, d.tensor(src).dtype)


# ------------------------------------------------------------------------ the libraries


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _gemm(cupy: Any, g: GemmShape) -> list[Candidate]:
    torch = _torch()
    if g.dtype.startswith("fp8"):
        if torch is None or g.batch != 1:
            raise Skip("an fp8 baseline needs PyTorch (torch._scaled_mm, unbatched)")
        a = torch.randn(g.m, g.k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(g.n, g.k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major
        one = torch.ones((), device="cuda")

        def scaled() -> None:
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return [("cuBLAS fp8 (torch._scaled_mm)", torch_work(torch, scaled))]
    if torch is not None and g.dtype in BASELINE_DTYPES:
        dt = getattr(torch, DTYPES[g.dtype].torch)
        a = torch.randn(*operand_shape(g.batch, g.m, g.k), device="cuda", dtype=dt)
        b = torch.randn(*operand_shape(g.batch, g.k, g.n), device="cuda", dtype=dt)
        return [("cuBLAS (torch.matmul)", torch_work(torch, lambda: torch.matmul(a, b)))]
    dt = cupy.float32 if g.dtype == "fp32" else cupy.float16
    a = cupy.random.standard_normal(operand_shape(g.batch, g.m, g.k), dtype=cupy.float32)
    b = cupy.random.standard_normal(operand_shape(g.batch, g.k, g.n), dtype=cupy.float32)
    a, b = a.astype(dt), b.astype(dt)
    label = "cuBLAS (cupy.matmul)" if g.dtype in ("fp16", "fp32") else "cuBLAS fp16 (cupy.matmul)"
    return [(label, lambda: cupy.matmul(a, b))]


def operand_shape(batch: int, rows: int, cols: int) -> tuple[int, ...]:
    """A GEMM operand's shape: plain 2-D when unbatched. CuPy 14 computes a 3-D fp16
    `cupy.matmul` in fp32 on upcast copies (cupy/cupy#10317), so a batch of one would time
    that, not fp16 cuBLAS; a 2-D one goes to cublasGemmEx in fp16.

    >>> operand_shape(1, 64, 32), operand_shape(4, 64, 32)
    ((64, 32), (4, 64, 32))
    """
    return (rows, cols) if batch == 1 else (batch, rows, cols)


def _attention(cupy: Any, s: AttentionShape) -> list[Candidate]:
    torch = _torch()
    if torch is not None and s.dtype in BASELINE_DTYPES:
        return _sdpa(torch, s)
    return [("attention (CuPy fp16 matmul-softmax-matmul)", _cupy_attention(cupy, s))]


def _sdpa(torch: Any, s: AttentionShape) -> list[Candidate]:
    from torch.nn.attention import SDPBackend

    dt = getattr(torch, DTYPES[s.dtype].torch)
    q = torch.randn(1, s.q_heads, s.queries, s.d, device="cuda", dtype=dt)
    k = torch.randn(1, s.kv_heads, s.keys, s.d, device="cuda", dtype=dt)
    v = torch.randn(1, s.kv_heads, s.keys, s.d_v, device="cuda", dtype=dt)
    backends = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
    return [(f"torch sdpa ({label})", _sdpa_call(b, (q, k, v), s)) for label, b in backends]


def _sdpa_call(backend: Any, qkv: tuple[Any, Any, Any], s: AttentionShape) -> Callable[[], None]:
    """SDPA restricted to one back end; an unavailable one raises on the first call."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    extra = {"enable_gqa": True} if s.q_heads != s.kv_heads else {}

    def call() -> None:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(*qkv, is_causal=s.causal, scale=s.scale, **extra)

    return torch_work(torch, call)


def _cupy_attention(cupy: Any, s: AttentionShape) -> Callable[[], None]:
    group = s.q_heads // max(s.kv_heads, 1)
    q = cupy.random.standard_normal((s.kv_heads, group * s.queries, s.d), dtype=cupy.float32)
    k = cupy.random.standard_normal((s.kv_heads, s.d, s.keys), dtype=cupy.float32)
    v = cupy.random.standard_normal((s.kv_heads, s.keys, s.d_v), dtype=cupy.float32)
    q, k, v = (t.astype(cupy.float16) for t in (q, k, v))
    mask = None
    if s.causal:
        rows = cupy.arange(group * s.queries) % s.queries
        mask = cupy.arange(s.keys)[None, :] > (rows[:, None] + s.keys - s.queries)

    def run() -> None:
        scores = cupy.matmul(q, k).astype(cupy.float32) * s.scale
        if mask is not None:
            scores = cupy.where(mask, -cupy.inf, scores)
        scores = cupy.exp(scores - scores.max(axis=-1, keepdims=True))
        p = (scores / scores.sum(axis=-1, keepdims=True)).astype(cupy.float16)
        cupy.matmul(p, v)

    return run


def _rowwise(cupy: Any, r: RowShape) -> list[Candidate]:
    torch = _torch()
    eps = float(r.op.params.get("eps", 1e-5))
    if torch is not None and r.dtype in BASELINE_DTYPES:
        import torch.nn.functional as F

        dt = getattr(torch, DTYPES[r.dtype].torch)
        x = torch.randn(r.rows, r.n, device="cuda", dtype=dt)
        w = torch.randn(r.n, device="cuda", dtype=dt)
        b = torch.randn(r.n, device="cuda", dtype=dt)
        if r.op.fn == "softmax":
            return [("torch softmax", torch_work(torch, lambda: F.softmax(x, dim=-1)))]
        if r.op.fn == "layernorm":
            return [
                ("torch layer_norm", torch_work(torch, lambda: F.layer_norm(x, (r.n,), w, b, eps)))
            ]
        if r.op.fn == "rmsnorm" and hasattr(F, "rms_norm"):
            return [("torch rms_norm", torch_work(torch, lambda: F.rms_norm(x, (r.n,), w, eps)))]
    return [(f"{r.op.fn} (CuPy composition)", _cupy_rowwise(cupy, r, eps))]


def _cupy_rowwise(cupy: Any, r: RowShape, eps: float) -> Callable[[], None]:
    dt = cupy.float32 if r.dtype == "fp32" else cupy.float16
    x = cupy.random.standard_normal((r.rows, r.n), dtype=cupy.float32).astype(dt)
    w = cupy.random.standard_normal(r.n, dtype=cupy.float32).astype(dt)

    def run() -> None:
        y = x.astype(cupy.float32)
        if r.op.fn == "softmax":
            e = cupy.exp(y - y.max(axis=-1, keepdims=True))
            out = e / e.sum(axis=-1, keepdims=True)
        elif r.op.fn == "layernorm":
            c = y - y.mean(axis=-1, keepdims=True)
            out = c / cupy.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * w
        else:
            out = y / cupy.sqrt((y * y).mean(axis=-1, keepdims=True) + eps) * w
        out.astype(dt)

    return run
