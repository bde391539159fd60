"""The reference: a diagram evaluated in float64 NumPy, straight from its operations.

It shares no code with the kernels, so a wrong template cannot pass by agreeing with
itself. Values are float64 throughout; inputs are rounded to their dtype when they are made,
explicit casts round to the cast's dtype (fp8 and integers saturating), and every materialised
result (an output, or an intermediate a kernel saves to global memory) is rounded to its
stored dtype, as the kernel that stores it and the kernel that reads it back see it. A
fused intermediate, which never leaves the chip, is not rounded.

    >>> from ncdc.language.spec import load_diagram
    >>> d = load_diagram("diagrams/softmax.yaml", {"m": 2, "n": 3})
    >>> out = evaluate(d, make_inputs(d, seed=0))
    >>> np.allclose(out["Y"].sum(axis=1), 1.0, atol=1e-2)  # Y is stored as bf16
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache

import numpy as np

from ncdc.language.spec import INTEGER_DTYPES, Diagram, Op

# --------------------------------------------------------------------------------------
# Low-precision formats: rounding (to nearest, ties to even) and storage as raw bits.

FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


@cache
def _fp8_table(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """All finite non-negative values of an fp8 format, ascending, with their bit codes."""
    exp_bits, man_bits, bias = (4, 3, 7) if dtype == "fp8_e4m3" else (5, 2, 15)
    values, codes = [], []
    for code in range(128):
        e, m = code >> man_bits, code & ((1 << man_bits) - 1)
        if dtype == "fp8_e4m3" and code == 0x7F:
            continue  # e4m3 has no infinities; 0x7f is NaN
        if dtype == "fp8_e5m2" and e == (1 << exp_bits) - 1:
            continue  # inf and NaN
        if e == 0:
            v = m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        values.append(v)
        codes.append(code)
    return np.array(values), np.array(codes, dtype=np.uint8)


def round_fp8(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to the nearest fp8 value, ties to even, saturating at the largest finite one
    (the hardware's cvt.rn.satfinite); NaN stays NaN."""
    values, codes = _fp8_table(dtype)
    a = np.abs(np.asarray(x, dtype=np.float64))
    a_clip = np.minimum(np.nan_to_num(a, nan=0.0, posinf=np.inf), values[-1])
    hi = np.clip(np.searchsorted(values, a_clip), 0, len(values) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a_clip - values[lo], values[hi] - a_clip
    even_hi = (codes[hi] & 1) == 0
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & even_hi)
    r = np.where(pick_hi, values[hi], values[lo])
    r = np.where(np.isnan(a), np.nan, r)
    return np.copysign(r, x)


def round_bf16(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    out = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(x), np.nan, out)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to the values `dtype` can hold, as float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "fp32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return round_bf16(x)
    if dtype in FP8_MAX:
        return round_fp8(x, dtype)
    if dtype in INTEGER_DTYPES:
        return round_int(x, dtype)
    raise ValueError(dtype)


def round_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to the nearest integer, ties to even, saturating to the type's range; NaN gives
    0 (the hardware's cvt.rni.sat.s8.f32 and cvt.rni.sat.s32.f32)."""
    lo, hi = INTEGER_DTYPES[dtype]
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), 0.0, np.clip(np.rint(np.nan_to_num(x)), lo, hi))


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """Values (float64, already representable) -> the array a kernel reads as `dtype`; an
    array even for a scalar (NumPy's operators turn a 0-d array into a scalar, which a
    kernel cannot write into)."""
    return np.asarray(_to_storage(np.asarray(x, dtype=np.float64), dtype))


def _to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype == "fp16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return (round_bf16(x).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in FP8_MAX:
        values, codes = _fp8_table(dtype)
        r = round_fp8(x, dtype)
        idx = np.searchsorted(values, np.abs(np.nan_to_num(r)))
        bits = codes[np.clip(idx, 0, len(codes) - 1)] | np.where(np.signbit(r), 0x80, 0)
        return np.where(np.isnan(r), 0x7F, bits).astype(np.uint8)
    if dtype in INTEGER_DTYPES:
        # NaN, which no integer holds, stores as the type's minimum: outputs are poisoned with
        # NaN before a run, and an element left unwritten then reads far from any result.
        lo = INTEGER_DTYPES[dtype][0]
        return np.where(np.isnan(x), lo, round_int(x, dtype)).astype(storage_dtype(dtype))
    raise ValueError(dtype)


def from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """The array a kernel wrote as `dtype` -> float64 values (an array, 0-d for a scalar)."""
    return np.asarray(_from_storage(np.asarray(a), dtype))


def _from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in ("fp32", "fp16", *INTEGER_DTYPES):
        return a.astype(np.float64)
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in FP8_MAX:
        values, codes = _fp8_table(dtype)
        lookup = np.full(256, np.nan)
        lookup[codes] = values
        lookup[codes | 0x80] = -values
        return lookup[a]
    raise ValueError(dtype)


def storage_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that holds `dtype`'s bits."""
    return np.dtype(
        {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16, "fp8_e4m3": np.uint8,
         "fp8_e5m2": np.uint8, "int8": np.int8, "int32": np.int32}[dtype]
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# Inputs and evaluation


def make_inputs(diagram: Diagram, seed: int) -> dict[str, np.ndarray]:
    """Fresh random inputs (float64 values already rounded to each input's dtype).

    Scalars (per-tensor scales) are drawn from [0.5, 2]; tensors from a normal
    distribution, wider for fp8 so its range is used; integer tensors from [-100,
    100). Lengths (the int32 `lengths` of a varlen mask) are drawn from 0 to the axis
    they measure, and always include a 0 and a 1 when there are enough of them; packed
    lengths add up to at most the axis.
    """
    rng = np.random.default_rng(seed)
    lengths = {
        op.params["lengths"]: (diagram.axes[op.params["key"]], _packed(diagram, op))
        for op in diagram.ops
        if op.fn == "varlen"
    }
    out = {}
    for t in diagram.inputs:
        shape = tuple(diagram.axes[a] for a in t.axes)
        if t.name in lengths:
            x = _random_lengths(rng, shape, *lengths[t.name])
        elif not shape:
            x = rng.uniform(0.5, 2.0, size=())
        elif t.dtype in INTEGER_DTYPES:
            x = rng.integers(-100, 100, size=shape).astype(np.float64)
        else:
            x = rng.standard_normal(shape) * (8.0 if t.dtype in FP8_MAX else 1.0)
        out[t.name] = round_to(x, t.dtype)
    return out


def _packed(diagram: Diagram, op: Op) -> bool:
    """Whether a varlen mask's lengths run along an axis of their own: sequences packed."""
    source = diagram.tensor(str(op.operands[0])).axes
    return any(a not in source for a in diagram.tensor(op.params["lengths"]).axes)


def _random_lengths(
    rng: np.random.Generator, shape: tuple[int, ...], tokens: int, packed: bool
) -> np.ndarray:
    """Lengths over `shape`, each from 0 to `tokens`, a 0 and a 1 among the first; the
    lengths of sequences packed along the last axis add up to at most `tokens`."""
    x = rng.integers(0, tokens + 1, size=shape).astype(np.float64)
    flat = x.reshape(-1)
    flat[: min(2, flat.size)] = [0, min(1, tokens)][: min(2, flat.size)]
    if packed:  # halve the longest until the row fits
        rows = x.reshape(-1, shape[-1])
        for row in rows:
            while row.sum() > tokens:
                row[np.argmax(row)] //= 2
    return x


def evaluate(
    diagram: Diagram, inputs: Mapping[str, np.ndarray], materialized: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Every tensor of the diagram (inputs and results), in float64.

    `materialized` names the results stored in global memory, each rounded to its dtype
    before later operations read it; by default the outputs and the schedule's
    `materialize` list (a run passes the tensors its kernels actually store).
    """
    saved = set(diagram.outputs) | set(
        diagram.schedule.materialize if materialized is None else materialized
    )
    env: dict[str, np.ndarray] = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    axes_of = {t.name: t.axes for t in diagram.tensors}
    for op in diagram.ops:
        value = _evaluate_op(op, env, axes_of, diagram)
        env[op.out] = round_to(value, diagram.tensor(op.out).dtype) if op.out in saved else value
    return env


def _aligned(x: np.ndarray, axes: tuple[str, ...], target: tuple[str, ...]) -> np.ndarray:
    """View `x` (over `axes`) broadcastable against a tensor over `target`."""
    order = [axes.index(a) for a in target if a in axes]
    x = np.transpose(x, order) if order else x
    shape = [x.shape[[a for a in target if a in axes].index(a)] if a in axes else 1 for a in target]
    return x.reshape(shape)


def _scale(op: Op, env: Mapping[str, np.ndarray], axes_of: Mapping[str, tuple[str, ...]],
           out_axes: tuple[str, ...]) -> np.ndarray | float:  # fmt: skip
    """The product of `op`'s scale factors, broadcast against its result over `out_axes`."""
    s: np.ndarray | float = 1.0
    for f in op.scale:
        s = s * (_aligned(env[f], axes_of[f], out_axes) if isinstance(f, str) else f)
    return s


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    # gelu(x, approximate=tanh): Hendrycks and Gimpel (2016), as PyTorch and GPT-2 write it
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "neg": np.negative,
    "abs": np.abs,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "recip": lambda x: 1.0 / x,
    "square": np.square,
}
_BINARY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


def _logsumexp(x: np.ndarray, axis: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(x))) around the row's max: -inf for a row of -inf, NaN kept."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    out = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


_REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "max": np.max,
    "mean": np.mean,
    "logsumexp": _logsumexp,
}

_erf_vec = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf_vec(x), dtype=np.float64)


def _evaluate_op(
    op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram
) -> np.ndarray:
    out_axes = op.axes
    with np.errstate(all="ignore"):
        if op.kind == "index":
            return np.arange(d.axes[op.params["axis"]], dtype=np.float64)
        if op.kind == "contract":
            a, b = op.operands
            letters = {ax: chr(ord("a") + i) for i, ax in enumerate(d.axes)}
            spec = "{},{}->{}".format(
                "".join(letters[x] for x in axes_of[a]),  # type: ignore[index]
                "".join(letters[x] for x in axes_of[b]),  # type: ignore[index]
                "".join(letters[x] for x in out_axes),
            )
            product = np.einsum(spec, env[a], env[b], optimize=True)
            return product * _scale(op, env, axes_of, out_axes)
        if op.kind == "map":
            return _UNARY[op.fn](env[op.operands[0]])
        if op.kind == "binary":
            args = [
                _aligned(env[o], axes_of[o], out_axes) if isinstance(o, str) else float(o)
                for o in op.operands
            ]
            return np.broadcast_to(_BINARY[op.fn](*args), [d.axes[a] for a in out_axes]).copy()
        x = env[op.operands[0]]  # type: ignore[index]
        src_axes = axes_of[op.operands[0]]  # type: ignore[index]
        over = tuple(src_axes.index(a) for a in op.over)
        if op.kind == "reduce":
            return _REDUCE[op.fn](x, axis=over)
        if op.kind == "softmax":
            return _softmax(x, over)
        if op.kind == "norm":
            return _norm(op, x, over, env, axes_of, src_axes)
        if op.kind == "cast":
            return round_to(x * _scale(op, env, axes_of, src_axes), op.params["to"])
        if op.kind == "mask":
            return np.where(_masked(op, x, src_axes, env, axes_of), -np.inf, x)
    raise ValueError(f"no reference for {op.kind}")


def _softmax(x: np.ndarray, over: tuple[int, ...]) -> np.ndarray:
    """Softmax that gives zeros (not NaN) for a row whose entries are all -inf."""
    m = np.max(x, axis=over, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(x - m)
    s = np.sum(e, axis=over, keepdims=True)
    return np.where(s == 0, 0.0, e / np.where(s == 0, 1.0, s))


def _norm(op: Op, x: np.ndarray, over: tuple[int, ...], env: dict, axes_of: Mapping,
          src_axes: tuple[str, ...]) -> np.ndarray:  # fmt: skip
    eps = op.params["eps"]
    if op.fn == "log_softmax":
        return x - _logsumexp(x, over, keepdims=True)
    if op.fn == "layernorm":
        mean = np.mean(x, axis=over, keepdims=True)
        var = np.mean((x - mean) ** 2, axis=over, keepdims=True)
        y = (x - mean) / np.sqrt(var + eps)
    else:
        y = x / np.sqrt(np.mean(x * x, axis=over, keepdims=True) + eps)
    if "weight" in op.params:
        w = op.params["weight"]
        y = y * _aligned(env[w], axes_of[w], src_axes)
    if "bias" in op.params:
        b = op.params["bias"]
        y = y + _aligned(env[b], axes_of[b], src_axes)
    return y


def _masked(
    op: Op, x: np.ndarray, axes: tuple[str, ...], env: dict, axes_of: Mapping
) -> np.ndarray:
    """Where a mask drops S[..., i, j] (broadcastable against x over `axes`).

    causal: j > i + shift; window: j outside [i + shift - left, i + shift + right]; shift is
    keys - queries aligned at the end (the default), 0 at the start. varlen, padded (lengths
    over batch axes): j >= L; packed (lengths along an axis of their own): i and j in
    different sequences, sequence s taking [sum L[:s], sum L[:s+1]) of both axes, and every
    index past the last sequence in none."""
    query, key = op.params["query"], op.params["key"]
    nq, nk = x.shape[axes.index(query)], x.shape[axes.index(key)]
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    if op.fn in ("causal", "window"):
        shift = nk - nq if op.params["align"] == "end" else 0
        if op.fn == "causal":
            return _aligned(j > i + shift, (query, key), axes)
        left, right = op.params["left"], op.params["right"]
        return _aligned((j < i + shift - left) | (j > i + shift + right), (query, key), axes)
    name = op.params["lengths"]
    lengths, own = env[name].astype(np.int64), axes_of[name]
    batch = tuple(a for a in own if a in axes)
    if len(batch) == len(own):  # padded: one length per batch entry
        full = _aligned(lengths, batch, axes)
        return _aligned(j, (query, key), axes) >= full
    ends = np.cumsum(lengths, axis=-1)  # packed: sequence s ends at ends[..., s]
    starts = ends - lengths
    seq_i = _sequence(np.arange(nq), starts, ends)  # [..., nq]: sequence of each index
    seq_j = _sequence(np.arange(nk), starts, ends)
    si = _aligned(seq_i, (*batch, query), axes)
    sj = _aligned(seq_j, (*batch, key), axes)
    return (si != sj) | (si < 0)


def _sequence(index: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The sequence holding each index (over the batch axes of starts, then the index),
    -1 past the last sequence."""
    at = index[..., None, :]
    inside = (at >= starts[..., :, None]) & (at < ends[..., :, None])
    seq = np.argmax(inside, axis=-2)
    return np.where(inside.any(axis=-2), seq, -1)
