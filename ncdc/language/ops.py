"""The operations of the language: one record each, read by every layer.

A record holds what an operation is everywhere at once: its signature (kind, operands,
keyword arguments), its price (CUDA-core FLOPs and special-function-unit exponentials per
value), its float64 meaning (a function of NumPy arrays, which the reference evaluates) and
the device function the generated code calls (`ncdc::op_<name>`, in
`templates/include/ncdc_runtime.cuh`), or, for an operation a kernel family builds from its
structure (a contraction, a softmax, a mask), the kind the reference evaluates it as.
tests/language/test_ops.py checks every record has all four. A map or binary record also
holds its derivative, an expression in the language's own operations (`ncdc grad` expands
it into op lines), or the reason it has none. Adding a unary operation is one record here
and its device function.

    >>> OPERATIONS["exp"].kind, OPERATIONS["exp"].sfu, OPERATIONS["exp"].device
    ('map', 1, 'op_exp')
    >>> record("reduce", "max").keywords == frozenset({"over", "dtype"})
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# kind -> what an operation of it is
KINDS = {
    "contract": "a contraction over shared axes (einsum), with scales",
    "map": "an elementwise function of one tensor",
    "binary": "an elementwise function of two operands (three for `where`), broadcast by axis name",
    "reduce": "a reduction that removes its axes",
    "softmax": "softmax over an axis",
    "norm": "a normalisation over axes that keeps them",
    "cast": "a conversion to another dtype, with scales",
    "mask": "a mask that sets dropped scores to -inf",
    "index": "the position along an axis, as a value",
    "gather": "values selected along an axis by an index tensor (int32)",
    "scatter": "values added along an axis at the places an index tensor (int32) names",
    "scan": "a running sum, max or min along an axis, from either end",
    "select": "the positions of the largest (or smallest) values along an axis, as int32",
    "permute": "the same values with the axes in another order: a layout in memory",
    "slice": "values read along an axis at a fixed offset from each position: a slice, a "
    "shift or a rotation",
}
# kinds whose operations a family builds from the kernel's structure and the reference
# evaluates by kind (ncdc.verify.reference), not by a function of the record
STRUCTURAL = ("contract", "cast", "mask", "index", "gather", "scatter", "permute", "slice")

Meaning = Callable[..., Any]  # (np, *arrays[, axis, eps]) -> float64 array


@dataclass(frozen=True)
class OpRecord:
    """One operation (see the module docstring). `cuda_flops` are per value of the result
    (of the input, for a reduction); `sfu` the exponentials per value; `meaning` takes the
    NumPy module first, then the operands (a reduction, softmax or norm also `axis`, a norm
    `eps`), so that importing the language does not import NumPy. `spelled` is False for
    an operation the language reaches through another's argument (gelu's `approximate=`).
    `derivative` is, per operand, the incoming gradient `g` times the partial derivative,
    written with the operands (`x`; `a`, `b`, `c`), the result `y` and numbers, or "" where
    no gradient flows to that operand (a piecewise-constant function: zero almost
    everywhere); `no_derivative` says why an operation has none (a map or binary record
    has one or the other)."""

    name: str
    kind: str
    operands: int
    keywords: frozenset[str]
    required: frozenset[str]
    cuda_flops: int
    sfu: int
    meaning: Meaning | None
    device: str
    spelled: bool = True
    derivative: tuple[str, ...] = ()
    no_derivative: str = ""


def _op(
    name: str, kind: str, operands: int, keywords: str, required: str = "", *,
    flops: int, sfu: int = 0, meaning: Meaning | None = None, device: bool = False,
    spelled: bool = True, d: tuple[str, ...] = (), no_d: str = "",
) -> OpRecord:  # fmt: skip
    return OpRecord(
        name, kind, operands, frozenset(keywords.split()), frozenset(required.split()),
        flops, sfu, meaning, f"op_{name}" if device else "", spelled, d, no_d,
    )  # fmt: skip


# Derivatives through comparisons: a step (relu, 0 at 0 as PyTorch has it), a sign (abs, 0 at
# 0) and a pick (max and min: the larger or smaller operand, a tie split in halves, as
# torch.maximum's backward splits it).
_D_PICK = "mul(g, add({}(a, b), mul(eq(a, b), 0.5)))"
# gelu'(x) = Phi(x) + x phi(x) (exact); 1 / sqrt(2) = 0.7071..., 1 / sqrt(2 pi) = 0.3989...
_D_GELU = (
    "mul(g, add(mul(add(erf(mul(x, 0.7071067811865476)), 1), 0.5), "
    "mul(x, mul(exp(mul(square(x), -0.5)), 0.3989422804014327))))"
)
# tanh form: t = tanh(c (x + 0.044715 x^3)), c = sqrt(2/pi); d/dx = 0.5 (1 + t)
# + 0.5 c x (1 - t^2)(1 + 3 * 0.044715 x^2), with 0.5 c = 0.3989...
_T = "tanh(mul(add(x, mul(mul(x, square(x)), 0.044715)), 0.7978845608028654))"
_D_GELU_TANH = (
    f"mul(g, add(mul(add({_T}, 1), 0.5), mul(mul(x, sub(1, square({_T}))), "
    "mul(add(mul(square(x), 0.134145), 1), 0.3989422804014327))))"
)
_FLAT = ("",)  # piecewise constant: zero almost everywhere, no gradient flows through it
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


def _erf(np: Any, x: Any) -> Any:
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=np.float64)


def _logsumexp(np: Any, x: Any, axis: tuple[int, ...], keepdims: bool = False) -> Any:
    """log(sum(exp(x))) around the row's max: -inf for a row of -inf, NaN kept."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    out = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _softmax(np: Any, x: Any, axis: tuple[int, ...]) -> Any:
    """Softmax that gives zeros (not NaN) for a row whose entries are all -inf."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return np.where(s == 0, 0.0, e / np.where(s == 0, 1.0, s))


def _layernorm(np: Any, x: Any, axis: tuple[int, ...], eps: float) -> Any:
    mean = np.mean(x, axis=axis, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def _rmsnorm(np: Any, x: Any, axis: tuple[int, ...], eps: float) -> Any:
    return x / np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)


def _log_softmax(np: Any, x: Any, axis: tuple[int, ...], eps: float) -> Any:
    return x - _logsumexp(np, x, axis, keepdims=True)


_MAPS = (
    _op("exp", "map", 1, "dtype", flops=1, sfu=1, meaning=lambda np, x: np.exp(x), device=True,
        d=("mul(g, y)",)),
    _op("log", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.log(x), device=True,
        d=("div(g, x)",)),
    _op("relu", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.maximum(x, 0.0),
        device=True, d=("mul(g, gt(x, 0))",)),
    _op("gelu", "map", 1, "dtype approximate", flops=8, sfu=1, device=True, d=(_D_GELU,),
        meaning=lambda np, x: 0.5 * x * (1.0 + _erf(np, x / math.sqrt(2.0)))),
    # gelu(x, approximate=tanh): Hendrycks and Gimpel (2016), as PyTorch and GPT-2 write it;
    # x / (1 + exp(-2 u)), u = c (x + 0.044715 x^3): the cubic, the divide
    _op("gelu_tanh", "map", 1, "dtype", flops=6, sfu=1, device=True, spelled=False,
        d=(_D_GELU_TANH,), meaning=lambda np, x: 0.5 * x * (
            1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))),
    # erf, which gelu's derivative reads (erff's polynomial); 2 / sqrt(pi) = 1.1283...
    _op("erf", "map", 1, "dtype", flops=8, meaning=lambda np, x: _erf(np, x), device=True,
        d=("mul(g, mul(exp(neg(square(x))), 1.1283791670955126))",)),
    _op("silu", "map", 1, "dtype", flops=4, sfu=1, device=True,
        meaning=lambda np, x: x / (1.0 + np.exp(-x)),
        d=("mul(g, mul(sigmoid(x), add(mul(x, sub(1, sigmoid(x))), 1)))",)),
    _op("sigmoid", "map", 1, "dtype", flops=4, sfu=1, device=True,
        meaning=lambda np, x: 1.0 / (1.0 + np.exp(-x)), d=("mul(g, mul(y, sub(1, y)))",)),
    _op("tanh", "map", 1, "dtype", flops=2, sfu=1, meaning=lambda np, x: np.tanh(x),
        device=True, d=("mul(g, sub(1, square(y)))",)),
    _op("neg", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.negative(x), device=True,
        d=("neg(g)",)),
    _op("abs", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.abs(x), device=True,
        d=("mul(g, sub(gt(x, 0), lt(x, 0)))",)),
    _op("sqrt", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.sqrt(x), device=True,
        d=("div(mul(g, 0.5), y)",)),
    _op("rsqrt", "map", 1, "dtype", flops=1, meaning=lambda np, x: 1.0 / np.sqrt(x),
        device=True, d=("mul(g, mul(mul(y, square(y)), -0.5))",)),
    _op("recip", "map", 1, "dtype", flops=1, meaning=lambda np, x: 1.0 / x, device=True,
        d=("mul(g, neg(square(y)))",)),
    _op("square", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.square(x), device=True,
        d=("mul(g, mul(x, 2))",)),
    _op("floor", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.floor(x), device=True,
        d=_FLAT),
    # cosf and sinf: a Payne-Hanek or Cody-Waite range reduction and a degree-8 polynomial
    # (libdevice), about 12 fp32 instructions for the arguments positions give
    _op("cos", "map", 1, "dtype", flops=12, meaning=lambda np, x: np.cos(x), device=True,
        d=("mul(g, neg(sin(x)))",)),
    _op("sin", "map", 1, "dtype", flops=12, meaning=lambda np, x: np.sin(x), device=True,
        d=("mul(g, cos(x))",)),
    # logic on truth values: 0 is false, anything else (NaN included) true
    _op("not", "map", 1, "dtype", flops=1, meaning=lambda np, x: np.where(x != 0, 0.0, 1.0),
        device=True, d=_FLAT),
)  # fmt: skip
# A binary map's `axes=` states its result's axes: a broadcast that adds an axis meant as one
# (an outer product), which ncdc.language.broadcast then does not warn about.
_BINARY = (
    _op("add", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: a + b, device=True,
        d=("g", "g")),
    _op("sub", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: a - b, device=True,
        d=("g", "neg(g)")),
    _op("mul", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: a * b, device=True,
        d=("mul(g, b)", "mul(g, a)")),
    _op("div", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: a / b, device=True,
        d=("div(g, b)", "neg(div(mul(g, a), square(b)))")),
    _op("max", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: np.maximum(a, b),
        device=True, d=(_D_PICK.format("gt"), _D_PICK.format("lt"))),
    _op("min", "binary", 2, "dtype axes", flops=1, meaning=lambda np, a, b: np.minimum(a, b),
        device=True, d=(_D_PICK.format("lt"), _D_PICK.format("gt"))),

    # Comparisons give 1 where they hold and 0 elsewhere (NaN compares false but for ne), in
    # the type of their widest operand; a compare and a select each
    *(_op(name, "binary", 2, "dtype axes", flops=2, device=True, d=_FLAT * 2,
          meaning=lambda np, a, b, f=f: np.where(f(a, b), 1.0, 0.0))
      for name, f in COMPARISONS.items()),
    _op("and", "binary", 2, "dtype axes", flops=2, device=True, d=_FLAT * 2,
        meaning=lambda np, a, b: np.where((a != 0) & (b != 0), 1.0, 0.0)),
    _op("or", "binary", 2, "dtype axes", flops=2, device=True, d=_FLAT * 2,
        meaning=lambda np, a, b: np.where((a != 0) | (b != 0), 1.0, 0.0)),
    # where(C, A, B): A where C is true (not 0), else B; a compare and a select. Its type is
    # its values' (A's and B's), not the condition's.
    _op("where", "binary", 3, "dtype axes", flops=2, device=True,
        d=("", "mul(g, ne(a, 0))", "mul(g, eq(a, 0))"),  # `a` is the condition here
        meaning=lambda np, c, a, b: np.where(c != 0, a, b)),
)  # fmt: skip
# Reductions and row operations: the row kernels' device code reduces (ncdc_rowwise.cuh);
# their price per input value: softmax's running max, subtract, running sum and scale (4),
# log-softmax's max, subtract, sum and the log's subtract (4), logsumexp's max, subtract
# and sum (3), layernorm's mean, variance (2), subtract, scale, weight and bias (8),
# rmsnorm's square, sum, scale and weight (5).
_ROWS = (
    _op("sum", "reduce", 1, "over dtype", "over", flops=1,
        meaning=lambda np, x, axis: np.sum(x, axis=axis)),
    _op("max", "reduce", 1, "over dtype", "over", flops=1,
        meaning=lambda np, x, axis: np.max(x, axis=axis)),
    _op("mean", "reduce", 1, "over dtype", "over", flops=1,
        meaning=lambda np, x, axis: np.mean(x, axis=axis)),
    # logsumexp reduces a row (cross-entropy); log-softmax normalises it as a norm does
    _op("logsumexp", "reduce", 1, "over dtype", "over", flops=3, sfu=1, meaning=_logsumexp),
    _op("softmax", "softmax", 1, "over dtype", "over", flops=4, sfu=1, meaning=_softmax),
    _op("log_softmax", "norm", 1, "over dtype", "over", flops=4, sfu=1, meaning=_log_softmax),
    _op("layernorm", "norm", 1, "over weight bias eps dtype", "over", flops=8,
        meaning=_layernorm),
    _op("rmsnorm", "norm", 1, "over weight eps dtype", "over", flops=5, meaning=_rmsnorm),
)  # fmt: skip


def _scan(ufunc: str) -> Meaning:
    """The running `ufunc` (add, maximum, minimum) along one axis, from its end where
    `reverse`; NaN carries on from where it appears (np.maximum propagates it)."""

    def meaning(np: Any, x: Any, axis: tuple[int, ...], reverse: bool = False) -> Any:
        (a,) = axis
        f = getattr(np, ufunc)
        if not reverse:
            return f.accumulate(x, axis=a)
        return np.flip(f.accumulate(np.flip(x, axis=a), axis=a), axis=a)

    return meaning


# Scans along one axis (ncdc.families.scan): a combine per value, in fp32, each value's
# running result from the values before it (after it, with reverse=true)
_SCANS = (
    _op("cumsum", "scan", 1, "over reverse dtype", "over", flops=1, meaning=_scan("add")),
    _op("cummax", "scan", 1, "over reverse dtype", "over", flops=1, meaning=_scan("maximum")),
    _op("cummin", "scan", 1, "over reverse dtype", "over", flops=1, meaning=_scan("minimum")),
)  # fmt: skip


def _select(np: Any, x: Any, axis: tuple[int, ...], k: int, largest: bool, keep: bool) -> Any:
    """The positions along `axis` of the k largest (smallest) values, best first: a NaN
    before any number (NaN is the extreme either way, as np.argmax and np.argmin have it),
    equal values by position. With `keep` the axis is replaced in place by the k picks
    (topk), else removed (argmax, argmin, k = 1)."""
    (a,) = axis
    x = np.moveaxis(x, a, -1)
    position = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    nan = np.isnan(x)
    value = np.where(nan, 0.0, -x if largest else x)
    order = np.lexsort((position, value, ~nan), axis=-1)[..., :k].astype(np.float64)
    return np.moveaxis(order, -1, a) if keep else order[..., 0]


# Selections along one axis (ncdc.families.select): a compare and a select per value into
# each thread's list of the k best so far. Each meaning takes the op's `k` and `largest`
# (argmax and argmin: 1, and which end).
_SELECTS = (
    _op("argmax", "select", 1, "over dtype", "over", flops=2,
        meaning=lambda np, x, axis, k, largest: _select(np, x, axis, k, largest, False)),
    _op("argmin", "select", 1, "over dtype", "over", flops=2,
        meaning=lambda np, x, axis, k, largest: _select(np, x, axis, k, largest, False)),
    # I = topk(X, over=v, k=j): v replaced in place by the axis j, whose size is k
    _op("topk", "select", 1, "over k largest dtype", "over k", flops=2,
        meaning=lambda np, x, axis, k, largest: _select(np, x, axis, k, largest, True)),
)  # fmt: skip
# Structural operations: built by a family from the kernel's structure, evaluated by kind.
_STRUCTURAL = (
    # 2k FLOPs per output value on the tensor cores (ncdc.model.structure), one per scale
    # with offsets=: a grouped contraction (MoE experts), rows of the first operand taken
    # in runs, run e multiplied by slice e of the second along the offsets' axis
    _op("contract", "contract", 2, "over scale dtype offsets", flops=0),
    _op("cast", "cast", 1, "to scale", "to", flops=2, device=True),  # scale and convert
    _op("causal", "mask", 1, "query key align", "query key", flops=1, device=True),
    # key j kept for query i when i + shift - left <= j <= i + shift + right (see MASK_ALIGN):
    # two compares and a select
    _op("window", "mask", 1, "query key left right align", "query key left", flops=2),
    # per-sequence lengths (int32): padded (over batch axes) or packed (over a sequence axis)
    _op("varlen", "mask", 1, "query key lengths", "query key lengths", flops=2),
    # I = index(q): the position i along axis q, as a value (ALiBi's j - i is sub(J, I));
    # an index the kernel has: no arithmetic
    _op("index", "index", 1, "dtype", flops=0),
    # Y = gather(T, I, axis=v): T with its axis v replaced by I's axes, Y[.., i.., ..] =
    # T[.., I[i..], ..]; the index is rounded to the nearest whole number and checked against
    # v's size first (out of range is an error, never a read): a compare and a convert.
    # Paged, gather(C, T, axis=p, within=r, into=x): T's last own axis counts pages, and
    # Y[.., x, ..] = C[.., T[.., x // |r|], x % |r|, ..] (a block table into a KV cache)
    _op("gather", "gather", 2, "axis within into dtype", "axis", flops=2, device=True),
    # Y = scatter_add(G, I, axis=v): G with I's axes (those of `over=`, else all) replaced by
    # v, Y[.., k, ..] = sum of G[.., i.., ..] where I[i..] = k (gather's adjoint); an index
    # out of range is an error and adds nothing. A compare and an add per value of G, each
    # add an fp32 atomic (ncdc.families.scatter)
    _op("scatter_add", "scatter", 2, "axis over dtype", "axis", flops=2),
    # Y = permute(X, axes=[b, h, s, d]): X's values, the axes stored in that order (BSHD to
    # BHSD); nothing to compute, a read and a write in another order
    _op("permute", "permute", 1, "axes dtype", "axes", flops=0),
    # Y = slice(X, axis=d, start=s, into=h): Y[.., i, ..] = X[.., s + i, ..] along h (d when
    # `into` is left out), 0 where s + i falls outside d; Y = shift(X, axis=d, by=k) is
    # slice(X, axis=d, start=-k); Y = roll(X, axis=d, by=k): Y[i] = X[(i - k) mod size(d)].
    # An offset and a bounds check (a select) per value; the read is the source's
    _op("slice", "slice", 1, "axis start into dtype", "axis", flops=2),
    _op("shift", "slice", 1, "axis by dtype", "axis by", flops=2),
    _op("roll", "slice", 1, "axis by dtype", "axis by", flops=2),
)  # fmt: skip

RECORDS: dict[tuple[str, str], OpRecord] = {
    (r.kind, r.name): r for r in (*_MAPS, *_BINARY, *_ROWS, *_SCANS, *_SELECTS, *_STRUCTURAL)
}
# The operations a spec may name (`max` with two operands; with one and `over=`, the
# reduction: REDUCE_MAX). A plain dict: its errors list the names.
OPERATIONS: dict[str, OpRecord] = {
    r.name: r for r in RECORDS.values() if r.spelled and (r.kind, r.name) != ("reduce", "max")
}
REDUCE_MAX = RECORDS[("reduce", "max")]
UNARY_MAPS = tuple(r.name for r in _MAPS if r.spelled)
BINARY_MAPS = tuple(r.name for r in _BINARY if r.operands == 2)  # `where` takes three
REDUCTIONS = ("sum", "max", "mean")
SCANS = tuple(r.name for r in _SCANS)
MAX_TOPK = 16  # picks a thread keeps in its registers (ncdc.families.select)

# gelu's `approximate=` (PyTorch's spelling) -> the op it stands for
GELU_APPROXIMATIONS = {"none": "gelu", "tanh": "gelu_tanh"}
# Where a causal or window mask puts its diagonal when the query and key axes differ in
# size: `end` (bottom-right, key i + x - q for query i, so a decode step sees every key) or
# `start` (top-left, key i for query i).
MASK_ALIGN = ("end", "start")


def record(kind: str, name: str) -> OpRecord:
    """The record of an operation as a validated diagram names it (`Op.kind`, `Op.fn`)."""
    return RECORDS[(kind, name)]
