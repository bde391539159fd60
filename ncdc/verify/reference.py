"""The reference: a diagram evaluated in float64 NumPy, straight from its operations.

It shares no code with the kernels, so a wrong template cannot pass by agreeing with
itself. Values are float64 throughout; inputs are rounded to their dtype when they are made,
explicit casts round to the cast's dtype (fp8 and integers saturating), and every materialised
result (an output, or an intermediate a kernel saves to global memory) is rounded to its
stored dtype, as the kernel that stores it and the kernel that reads it back see it. A
fused intermediate, which never leaves the chip, is not rounded. A contraction a kernel sums
on tensor cores that keep less than an fp32 sum (Hopper's fp8 wgmma: `sums`, from the
rendered module) is summed here as those tensor cores sum it (ncdc.hardware.arch.TensorCoreSum).

    >>> from ncdc.language.load import load_diagram
    >>> d = load_diagram("diagrams/softmax.yaml", {"m": 2, "n": 3})
    >>> out = evaluate(d, make_inputs(d, seed=0))
    >>> np.allclose(out["Y"].sum(axis=1), 1.0, atol=1e-2)  # Y is stored as bf16
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import ml_dtypes
import numpy as np

from ncdc.hardware.arch import TensorCoreSum, TiledSoftmax
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.language.ops import record
from ncdc.model.geometry import group_spans

# --------------------------------------------------------------------------------------
# Low-precision formats: rounding (to nearest, ties to even) and storage as raw bits, with
# ml_dtypes' bfloat16 and float8 types.


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to the values `dtype` can hold, as float64: bf16 from fp32 (as a kernel
    rounds its fp32 result), fp8 saturating at the largest finite value (the hardware's
    cvt.rn.satfinite; NaN stays NaN), integers as `round_int`."""
    x = np.asarray(x, dtype=np.float64)
    d = DTYPES[dtype]
    if d.integer:
        return round_int(x, dtype)
    if d.is_fp8:
        x = np.clip(x, d.min_value, d.max_value)  # NaN passes through
    with np.errstate(over="ignore"):  # past the largest finite value: an infinity, as cvt.rn
        if dtype == "bf16":
            x = x.astype(np.float32)
        return x.astype(value_dtype(dtype)).astype(np.float64)


def round_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to the nearest integer, ties to even, saturating to the type's range; NaN gives
    0 (the hardware's cvt.rni.sat.s8.f32 and cvt.rni.sat.s32.f32)."""
    d = DTYPES[dtype]
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), 0.0, np.clip(np.rint(np.nan_to_num(x)), d.min_value, d.max_value))


def value_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype holding `dtype`'s values (ml_dtypes for bf16 and fp8)."""
    name = DTYPES[dtype].values
    return np.dtype(getattr(ml_dtypes, name) if hasattr(ml_dtypes, name) else name)


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """Values (float64, already representable) -> the array a kernel reads as `dtype` (raw
    bits for bf16 and fp8); an array even for a scalar (NumPy's operators turn a 0-d array
    into a scalar, which a kernel cannot write into)."""
    x = np.asarray(x, dtype=np.float64)
    d = DTYPES[dtype]
    if d.integer:
        # NaN, which no integer holds, stores as the type's minimum: outputs are poisoned with
        # NaN before a run, and an element left unwritten then reads far from any result.
        return np.asarray(np.where(np.isnan(x), d.min_value, round_int(x, dtype)).astype(d.bits))
    return np.asarray(round_to(x, dtype).astype(value_dtype(dtype)).view(d.bits))


def from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """The array a kernel wrote as `dtype` -> float64 values (an array, 0-d for a scalar)."""
    a = np.asarray(a)
    d = DTYPES[dtype]
    if not d.integer and a.dtype != value_dtype(dtype):
        a = a.view(value_dtype(dtype))
    return np.asarray(a.astype(np.float64))


# --------------------------------------------------------------------------------------
# Inputs and evaluation


def make_inputs(
    diagram: Diagram, seed: int, only: frozenset[str] | None = None
) -> dict[str, np.ndarray]:
    """Fresh random inputs (float64 values already rounded to each input's dtype); with
    `only`, just those inputs (the integer ones a benchmark draws here and copies over).

    Scalars (per-tensor scales) are drawn from [0.5, 2]; tensors from a normal
    distribution, wider for fp8 so its range is used; integer tensors from [-100,
    100), but a gather's index from 0 to the size of the axis it selects along, and int32
    ids compared for equality as runs of equal ids. Lengths (the int32 `lengths` of a
    varlen mask) are drawn from 0 to the axis they measure, and always include a 0 and a 1
    when there are enough of them; packed lengths add up to at most the axis. A grouped
    contraction's offsets end runs of random lengths, in order (`_random_ends`).
    """
    rng = np.random.default_rng(seed)
    lengths = {
        op.params["lengths"]: (diagram.axes[op.params["key"]], _packed(diagram, op))
        for op in diagram.ops
        if op.fn == "varlen"
    }
    indices = index_ranges(diagram)
    ends = {op.params["offsets"]: diagram.axes[op.params["rows"]] for op in diagram.ops
            if op.grouped}  # fmt: skip
    labels = {o for op in diagram.ops if op.fn in ("eq", "ne") for o in op.operands}
    out = {}
    for t in diagram.inputs:
        if only is not None and t.name not in only:
            continue
        shape = tuple(diagram.axes[a] for a in t.axes)
        if t.name in lengths:
            x = _random_lengths(rng, shape, *lengths[t.name])
        elif t.name in ends:  # a grouped contraction's offsets: runs of rows, in order
            x = _random_ends(rng, shape[0], ends[t.name])
        elif t.name in indices:  # a gather's index: within the axis it selects along
            x = rng.integers(0, indices[t.name], size=shape).astype(np.float64)
        elif t.name in labels and DTYPES[t.dtype].integer and shape:
            # ids compared for equality (documents of packed sequences): runs of equal ids
            # along the last axis, so both outcomes occur
            x = np.cumsum(rng.random(shape) < 4 / shape[-1], axis=-1).astype(np.float64)
        elif not shape:
            x = rng.uniform(0.5, 2.0, size=())
        elif DTYPES[t.dtype].integer:
            x = rng.integers(-100, 100, size=shape).astype(np.float64)
        else:
            x = rng.standard_normal(shape) * (8.0 if DTYPES[t.dtype].is_fp8 else 1.0)
        out[t.name] = round_to(x, t.dtype)
    return out


def index_ranges(diagram: Diagram) -> dict[str, int]:
    """The inputs that index a gather or a scatter-add, each with the size of the axis it
    selects along (the smallest, where it indexes several)."""
    out: dict[str, int] = {}
    for op in diagram.ops:
        if op.kind in ("gather", "scatter") and diagram.producer(str(op.operands[1])) is None:
            name, size = str(op.operands[1]), diagram.axes[op.params["axis"]]
            out[name] = min(size, out.get(name, size))
    return out


def _random_ends(rng: np.random.Generator, groups: int, rows: int) -> np.ndarray:
    """Where each of `groups` runs of rows ends, in order: runs of random lengths, the
    second empty and the third one row long when there are enough groups and rows, and
    some rows after the last run (a router sends no token to an expert, one to another)."""
    share = rng.uniform(0.2, 1.8, size=groups + 1)
    ends = np.floor(np.cumsum(share)[:-1] / share.sum() * rows)
    if groups >= 3 and rows >= 4:
        ends[1] = ends[0]
        ends[2] = ends[1] + 1
        ends = np.maximum.accumulate(ends)
    return np.minimum(ends, rows)


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
    diagram: Diagram,
    inputs: Mapping[str, np.ndarray],
    materialized: Iterable[str] | None = None,
    *,
    rounded: bool = True,
    sums: Mapping[str, TensorCoreSum] | None = None,
    softmaxes: Mapping[str, TiledSoftmax] | None = None,
) -> dict[str, np.ndarray]:
    """Every tensor of the diagram (inputs and results), in float64.

    `materialized` names the results stored in global memory, each rounded to its dtype
    before later operations read it; by default the outputs and the schedule's
    `materialize` list (a run passes the tensors its kernels actually store). With
    `rounded=False` nothing is rounded but by a cast: the diagram's exact function, which
    finite differences can differentiate (ncdc grad's tests). `sums` names the contractions
    (by result) to sum as the tensor cores that run them do (RenderedModule.sums), and
    `softmaxes` the softmaxes (by result) to round as the fused kernels that feed them to a
    product do (RenderedModule.softmaxes: `tiled_softmax`).
    """
    saved = set(diagram.outputs) | set(
        diagram.schedule.materialize if materialized is None else materialized
    )
    if not rounded:
        saved = set()
    env: dict[str, np.ndarray] = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    if rounded:  # every kernel computes on an int32 in fp32 (exact below 2^24), as it reads it
        for k in env:
            if diagram.tensor(k).dtype == "int32":
                env[k] = env[k].astype(np.float32).astype(np.float64)
    axes_of = {t.name: t.axes for t in diagram.tensors}
    # NaN and inf are values of the reference, compared by kind and counted in the run's
    # report (OutputCheck.reference_nonfinite): NumPy's warnings about them say nothing more.
    with np.errstate(all="ignore"):
        for op in diagram.ops:
            if sums and op.out in sums and op.kind == "contract":
                value = _contract(op, env, axes_of, diagram, sums[op.out])
            elif softmaxes and op.out in softmaxes and op.kind == "softmax":
                x = env[str(op.operands[0])]
                axis = axes_of[str(op.operands[0])].index(op.over[0])
                value = tiled_softmax(x, axis, softmaxes[op.out])
            else:
                value = _evaluate_op(op, env, axes_of, diagram)
            stored = op.out in saved
            env[op.out] = round_to(value, diagram.tensor(op.out).dtype) if stored else value
    return env


def tiled_softmax(x: np.ndarray, axis: int, how: TiledSoftmax) -> np.ndarray:
    """Softmax of `x` along `axis` as an online softmax over tiles of `how.block` keys
    computes it for a product in `how.dtype`: each tile's exp(x - m) against the running max
    m of the tiles so far, rounded to the type, scaled to the final max, over the exact sum;
    a row of no finite entry gives zeros (as the exact softmax, ncdc.language.ops).

        >>> x = np.array([[0.0, -3.0, 2.0, -1.0]])
        >>> got = tiled_softmax(x, 1, TiledSoftmax(2, "fp8_e4m3"))
        >>> exact = np.exp(x - 2) / np.exp(x - 2).sum()
        >>> bool(abs(got.sum() - 1) < 0.06), bool(got[0, 1] != exact[0, 1])
        (True, True)
    """
    v = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    n = v.shape[-1]
    running = np.full(v.shape[:-1] + (1,), -np.inf)
    parts = []
    for start in range(0, n, how.block):
        tile = v[..., start : start + how.block]
        running = np.maximum(running, tile.max(axis=-1, keepdims=True))
        base = np.where(np.isneginf(running), 0.0, running)
        parts.append((round_to(np.exp(tile - base), how.dtype), base))
    final = np.where(np.isneginf(running), 0.0, running)
    total = np.exp(v - final).sum(axis=-1, keepdims=True)
    rounded = np.concatenate(
        [np.where(p == 0.0, 0.0, p * np.exp(np.minimum(base - final, 0.0))) for p, base in parts],
        axis=-1,
    )
    out = np.where(total == 0.0, 0.0, rounded / np.where(total == 0.0, 1.0, total))
    return np.moveaxis(out, -1, axis)


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


def _evaluate_op(
    op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram
) -> np.ndarray:
    """`op`'s result in float64: by its record's meaning (ncdc.language.ops), or, for a
    structural operation, by its kind."""
    out_axes = op.axes
    meaning = record(op.kind, op.fn).meaning
    with np.errstate(all="ignore"):
        if op.kind == "index":
            return np.arange(d.axes[op.params["axis"]], dtype=np.float64)
        if op.kind == "contract":
            return _contract(op, env, axes_of, d)
        if op.kind == "gather":
            return _gather(op, env, axes_of, d)
        if op.kind == "scatter":
            return _scatter(op, env, axes_of, d)
        if op.kind == "slice":
            return _slice(op, env, axes_of, d)
        if op.kind == "permute":
            src_axes = axes_of[str(op.operands[0])]
            return np.transpose(env[op.operands[0]], [src_axes.index(a) for a in op.axes])
        if op.kind == "binary":
            args = [
                _aligned(env[o], axes_of[o], out_axes) if isinstance(o, str) else float(o)
                for o in op.operands
            ]
            assert meaning is not None
            return np.broadcast_to(meaning(np, *args), [d.axes[a] for a in out_axes]).copy()
        x = env[op.operands[0]]  # type: ignore[index]
        if op.kind == "map":
            assert meaning is not None
            return np.asarray(meaning(np, x))
        src_axes = axes_of[op.operands[0]]  # type: ignore[index]
        over = tuple(src_axes.index(a) for a in op.over)
        if op.kind in ("reduce", "softmax"):
            assert meaning is not None
            return np.asarray(meaning(np, x, over))
        if op.kind == "select":
            assert meaning is not None
            return np.asarray(meaning(np, x, over, op.params["k"], op.params["largest"]))
        if op.kind == "scan":
            assert meaning is not None
            return np.asarray(meaning(np, x, over, bool(op.params.get("reverse", False))))
        if op.kind == "norm":
            return _norm(op, x, over, env, axes_of, src_axes)
        if op.kind == "cast":
            return round_to(x * _scale(op, env, axes_of, src_axes), op.params["to"])
        if op.kind == "mask":
            return np.where(_masked(op, x, src_axes, env, axes_of), -np.inf, x)
    raise ValueError(f"no reference for {op.kind}")


def _contract(
    op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram,
    summed: TensorCoreSum | None = None,
) -> np.ndarray:  # fmt: skip
    a, b = op.operands
    if op.grouped:
        return _grouped(op, env, axes_of, d, summed)
    if summed is not None:
        product = _tensor_core_sum(op, env, axes_of, d, summed)
        return product * _scale(op, env, axes_of, op.axes)
    letters = {ax: chr(ord("a") + i) for i, ax in enumerate(d.axes)}
    spec = "{},{}->{}".format(
        "".join(letters[x] for x in axes_of[a]),  # type: ignore[index]
        "".join(letters[x] for x in axes_of[b]),  # type: ignore[index]
        "".join(letters[x] for x in op.axes),
    )
    product = np.einsum(spec, env[a], env[b], optimize=True)
    return product * _scale(op, env, axes_of, op.axes)


def _grouped(
    op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram,
    summed: TensorCoreSum | None,
) -> np.ndarray:  # fmt: skip
    """A grouped contraction: each group's run of rows contracted with its slice of the
    second operand (as a contraction of its own, at those sizes); 0 in rows of no group."""
    a, b = (str(o) for o in op.operands)
    rows, group = op.params["rows"], op.params["group"]
    out = np.zeros([d.axes[x] for x in op.axes])
    axes = {**axes_of, b: tuple(x for x in axes_of[b] if x != group)}
    plain = dataclasses.replace(op, params={})
    cut = [n for n in (a, *op.scale) if isinstance(n, str) and rows in axes_of[n]]
    at = op.axes.index(rows)
    for e, (start, end) in enumerate(
        group_spans(env[op.params["offsets"]].reshape(-1), d.axes[rows])
    ):
        if end == start:
            continue
        part = dict(env)
        for n in cut:
            part[n] = np.take(env[n], range(start, end), axis=axes_of[n].index(rows))
        part[b] = np.take(env[b], e, axis=axes_of[b].index(group))
        sized = dataclasses.replace(d, axes={**d.axes, rows: end - start})
        out[(slice(None),) * at + (slice(start, end),)] = _contract(
            plain, part, axes, sized, summed
        )
    return out


# The smallest normal exponent of each operand type tensor cores take: a value below it
# counts at it (its significand below 1) when a product's exponent is formed.
_LEAST_EXPONENT = {"fp8_e4m3": -6, "fp8_e5m2": -14, "fp16": -14, "bf16": -126}
_SUM_CHUNK_VALUES = 1 << 22  # products held at once: 32 MiB of float64


def _tensor_core_sum(
    op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram, summed: TensorCoreSum
) -> np.ndarray:
    """The contraction of `op` (before its scale) summed as `summed` says, step by step in
    the order of the contracted index (see TensorCoreSum), over chunks of the output."""
    a, b = (str(o) for o in op.operands)
    over = tuple(x for x in d.axes if x not in op.axes and (x in axes_of[a] or x in axes_of[b]))
    target = (*op.axes, *over)
    out_shape = tuple(d.axes[x] for x in op.axes)
    k = int(np.prod([d.axes[x] for x in over], dtype=np.int64))

    def flat(name: str) -> np.ndarray:  # broadcastable to out_shape + (k,)
        x = np.broadcast_to(
            _aligned(env[name], axes_of[name], target),
            tuple(d.axes[t] if t in axes_of[name] or t in over else 1 for t in target),
        )
        return np.ascontiguousarray(x).reshape(*x.shape[: len(op.axes)], k)

    x, y = flat(a), flat(b)
    ex, ey = _exponents(x, d.tensor(a).dtype), _exponents(y, d.tensor(b).dtype)
    out = np.empty(out_shape)
    axis = int(np.argmax(out_shape)) if out_shape else 0
    per = max(1, _SUM_CHUNK_VALUES // max(1, summed.block * (out.size // max(1, out_shape[axis]))))
    for start in range(0, out_shape[axis] if out_shape else 1, per):
        part = (slice(None),) * axis + (slice(start, start + per),)

        def cut(v: np.ndarray, p: tuple = part) -> np.ndarray:
            return v[p] if v.shape[axis] > 1 else v

        out[part] = _sum_in_steps(cut(x), cut(y), cut(ex), cut(ey), summed)
    return out


def _exponents(x: np.ndarray, dtype: str) -> np.ndarray:
    """Each value's exponent as a tensor core forms a product's: floor(log2 |x|), no less
    than the type's smallest normal exponent (zeros: that too; they never count)."""
    _, e = np.frexp(x)
    return np.maximum(e - 1, _LEAST_EXPONENT.get(dtype, -126))


def _sum_in_steps(
    x: np.ndarray, y: np.ndarray, ex: np.ndarray, ey: np.ndarray, summed: TensorCoreSum
) -> np.ndarray:
    """The sums over the last axis of x * y (broadcast), `summed.block` products and the
    running result a step, each step cut as TensorCoreSum says."""
    k = max(x.shape[-1], y.shape[-1])
    c: np.ndarray | None = None
    for k0 in range(0, k, summed.block):
        step = slice(k0, k0 + summed.block)
        p = x[..., step] * y[..., step]
        e = np.where(p != 0, ex[..., step] + ey[..., step], np.iinfo(np.int64).min // 2)
        emax = e.max(axis=-1)
        if c is not None:
            _, ec = np.frexp(c)
            emax = np.where(c != 0, np.maximum(emax, np.maximum(ec - 1, -126)), emax)
        terms = np.where(emax < -(1 << 20), 0, emax)  # no nonzero term: any exponent will do
        shift = summed.fraction_bits - terms
        total = np.trunc(np.ldexp(p, shift[..., None])).sum(axis=-1)
        if c is not None:
            total = total + np.trunc(np.ldexp(c, shift))
        value = np.ldexp(total, -shift)
        _, ev = np.frexp(value)
        kept = summed.kept_bits - ev  # ev - 1 is floor(log2 |value|)
        value = np.ldexp(np.trunc(np.ldexp(value, kept)), -kept)
        plain = p.sum(axis=-1) + (0.0 if c is None else c)
        c = np.where(np.isfinite(plain) & np.isfinite(value), value, plain)  # NaN, inf: IEEE
    return c if c is not None else np.zeros(np.broadcast_shapes(x.shape[:-1], y.shape[:-1]))


def gather_indices(op: Op, env: Mapping[str, np.ndarray], axes_of: Mapping, d: Diagram
                   ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A gather's index at each value of its result, rounded to the nearest whole number
    (ties to even, as an int32 stores it), and where it is out of range (or NaN)."""
    name = str(op.operands[1])
    table, axes = np.asarray(env[name]), axes_of[name]
    if "into" in op.params:  # paged: the page of each row along `into`
        pages, into = op.params["pages"], op.params["into"]
        at = np.arange(d.axes[into]) // d.axes[op.params["within"]]
        table = np.take(table, at, axis=axes.index(pages))
        axes = tuple(into if a == pages else a for a in axes)
    k = np.rint(_aligned(table, axes, op.axes))
    bad = ~((k >= 0) & (k < d.axes[op.params["axis"]]))  # NaN compares false: bad
    return np.where(bad, 0, k).astype(np.int64), bad


def read_index(op: Op, values: np.ndarray, axes: tuple[str, ...], d: Diagram) -> np.ndarray:
    """The part of a gather's index that it reads: all of it, or a block table's pages up
    to the last that holds a row of the paged axis."""
    if "into" not in op.params:
        return values
    used = -(-d.axes[op.params["into"]] // d.axes[op.params["within"]])
    return np.take(values, np.arange(used), axis=axes.index(op.params["pages"]))


def _gather(op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram) -> np.ndarray:
    """T[.., I[i..], ..] over the result's axes (paged: T[.., I[.., x // r], x % r, ..]);
    NaN where the index is out of range (a run refuses those: ncdc.verify.run.check_indices)."""
    source = str(op.operands[0])
    k, bad = gather_indices(op, env, axes_of, d)
    shape = [d.axes[a] for a in op.axes]
    at = []
    for a in axes_of[source]:
        if a == op.params["axis"]:
            at.append(np.broadcast_to(k, shape))
        elif a == op.params.get("within"):  # the row in the page
            into = op.params["into"]
            row = np.arange(d.axes[into]) % d.axes[a]
            at.append(
                np.broadcast_to(row.reshape([-1 if b == into else 1 for b in op.axes]), shape)
            )
        else:
            axis = np.arange(d.axes[a]).reshape([-1 if b == a else 1 for b in op.axes])
            at.append(np.broadcast_to(axis, shape))
    return np.where(np.broadcast_to(bad, shape), np.nan, env[source][tuple(at)])


def _slice(op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram
           ) -> np.ndarray:  # fmt: skip
    """X read along its axis at each position of `into` plus the start: 0 outside the axis,
    around it for a roll."""
    source = str(op.operands[0])
    axis = op.params["axis"]
    where = axes_of[source].index(axis)
    n = d.axes[axis]
    position = np.arange(d.axes[op.params["into"]]) + int(op.params["start"])
    if op.params.get("wrap"):
        position %= n
    inside = (position >= 0) & (position < n)
    taken = np.take(env[source], np.clip(position, 0, n - 1), axis=where)
    shape = [1] * taken.ndim
    shape[where] = len(position)
    return np.where(inside.reshape(shape), taken, 0.0)


def _scatter(op: Op, env: dict, axes_of: Mapping[str, tuple[str, ...]], d: Diagram
             ) -> np.ndarray:  # fmt: skip
    """Y[.., k, ..] = the sum of G[.., i.., ..] over the places i.. where I[i..] = k (the
    index rounded as gather rounds it); NaN throughout where an index is out of range (a run
    refuses those: ncdc.verify.run.check_indices)."""
    source, name = (str(o) for o in op.operands)
    axis, src_axes = op.params["axis"], axes_of[source]
    g = np.asarray(env[source], dtype=np.float64)
    shape = [d.axes[a] for a in op.axes]
    k = np.broadcast_to(np.rint(_aligned(env[name], axes_of[name], src_axes)), g.shape)
    if (~((k >= 0) & (k < d.axes[axis]))).any():  # NaN compares false: out of range
        return np.full(shape, np.nan)
    at = []
    for a in op.axes:  # where each value of G lands in the result
        if a == axis:
            at.append(k.astype(np.int64))
        else:
            place = np.arange(d.axes[a]).reshape([-1 if b == a else 1 for b in src_axes])
            at.append(np.broadcast_to(place, g.shape))
    out = np.zeros(shape)
    np.add.at(out, tuple(at), g)
    return out


def _norm(op: Op, x: np.ndarray, over: tuple[int, ...], env: dict, axes_of: Mapping,
          src_axes: tuple[str, ...]) -> np.ndarray:  # fmt: skip
    """A norm's normalisation (its record's meaning), then its weight and bias."""
    meaning = record(op.kind, op.fn).meaning
    assert meaning is not None
    y = meaning(np, x, over, op.params["eps"])
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
