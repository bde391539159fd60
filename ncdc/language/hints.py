"""Hints by meaning: the names users bring from NumPy, PyTorch and JAX, with the spelling ncdc
wants or, for what the language has no construct for yet, what to write instead.

A spelling match (`did_you_mean`) suggests `sum` for `cumsum` and `max` for `argmax`, which
mean something else; these tables are consulted first, and say so when an op is not in the
language.

    >>> operation_hint("index_select")
    'write gather(T, I, axis=a): T along a at the int32 indices I'
    >>> dtype_hint("float16")
    "write 'fp16'"
"""

from __future__ import annotations

import re

_NOT_YET = "not in the language yet"

# What a user may write for an operation -> what to write in ncdc (or why it cannot be).
OPERATION_HINTS: dict[str, str] = {
    **dict.fromkeys(
        ("index_select", "take", "take_along_dim", "take_along_axis", "embedding"),
        "write gather(T, I, axis=a): T along a at the int32 indices I",
    ),
    **dict.fromkeys(
        ("rope", "rotary", "rotary_embedding", "apply_rotary_emb", "apply_rotary_pos_emb"),
        "write roll(X, axis=d, by=half), a sign from index(d), and mul/add with cos and sin "
        "tables (diagrams/rope.yaml); before attention, fused into its Q and K loads",
    ),
    **dict.fromkeys(
        ("paged", "paged_gather", "block_table", "paged_attention", "page_gather"),
        "write gather(C, table, axis=page, within=slot, into=x): row i of x is row i % |slot| "
        "of page table[.., i // |slot|] of the cache C",
    ),
    **dict.fromkeys(
        (
            "scatter",
            "scatter_reduce",
            "index_add",
            "index_put",
            "segment_sum",
            "unsorted_segment_sum",
            "bincount",
            "embedding_backward",
        ),
        "write scatter_add(G, I, axis=a): G added along a at the int32 indices I",
    ),
    **dict.fromkeys(
        ("einsum", "matmul", "mm", "bmm", "dot", "linear", "tensordot", "gemm"),
        "write contract(A, B, over=k): a product summed over the named axis k",
    ),
    **dict.fromkeys(
        ("grouped_mm", "grouped_gemm", "_grouped_mm", "gmm", "segment_mm", "moe", "experts"),
        "write contract(X, W, over=k, offsets=ends): rows of X in runs that ends[e] ends, run "
        "e times W's slice e (W: [e, k, n]); gather the rows first by token: gather(X, rows, "
        "axis=t)",
    ),
    **dict.fromkeys(
        ("cumulative_sum", "scan", "associative_scan", "prefix_sum", "inclusive_scan"),
        "write cumsum(X, over=a): the running sum along a (reverse=true: from its end)",
    ),
    "cumprod": f"{_NOT_YET}: a running product; of positive values, exp(cumsum(log(X)))",
    "logcumsumexp": f"{_NOT_YET}: a running log-sum-exp; cummax and cumsum are there",
    **dict.fromkeys(
        ("cumulative_max", "running_max", "accumulate"),
        "write cummax(X, over=a) (or cummin): the running largest value along a",
    ),
    **dict.fromkeys(
        ("top_k", "topk_indices", "largest", "nlargest", "argpartition"),
        "write topk(X, over=a, k=j): the positions of the k largest along a, k the size of a "
        "new axis j; their values: gather(X, I, axis=a)",
    ),
    **dict.fromkeys(
        ("sort", "argsort", "sort_values"),
        f"{_NOT_YET}: a whole sort; topk(X, over=a, k=j) gives the k largest (k <= 16), best first",
    ),
    "nanargmax": "write argmax(X, over=a): a NaN is picked first, as np.argmax picks it",
    **dict.fromkeys(
        ("transpose", "swapaxes", "moveaxis", "rearrange", "contiguous", "movedim"),
        "write permute(X, axes=[b, h, s, d]): X stored with its axes in that order; axes are "
        "named, so no other op needs its operands in any order",
    ),
    **dict.fromkeys(
        ("reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze", "expand"),
        f"{_NOT_YET}: broadcasting is by axis name, so a missing axis needs no unsqueeze; "
        "declare the axes a tensor has",
    ),
    **dict.fromkeys(
        ("narrow", "split", "chunk", "unbind", "select_range"),
        "write slice(X, axis=a, start=k, into=j): X along a from k, over a new axis j of the "
        "part's length",
    ),
    **dict.fromkeys(
        ("cat", "concat", "concatenate", "hstack", "vstack", "pad"),
        "write slices that pad into the joined axis, added: add(slice(A, axis=a, start=0, "
        "into=d), slice(B, axis=b, start=-n, into=d)), n the size of a",
    ),
    "stack": f"{_NOT_YET}: a new axis from several tensors; declare the stacked input whole",
    "rotate_half": "write roll(X, axis=d, by=half) and a sign: where(lt(index(d), half), -1, 1)",
    "conv1d": f"{_NOT_YET} as one op: a causal depthwise convolution is shifts weighted and "
    "added, shift(X, axis=s, by=k) per tap (diagrams/causal_conv1d.yaml)",
    **dict.fromkeys(
        ("masked_fill", "masked_select"), "write where(C, X, -inf): X where C holds, else -inf"
    ),
    **dict.fromkeys(("tril", "triu"), "write causal(S, query=q, key=x) or a where() rule"),
    **dict.fromkeys(("clamp", "clip"), "write max(min(X, hi), lo) as two ops: min(X, 6.0)"),
    "multiply": "write mul(A, B)",
    "subtract": "write sub(A, B)",
    "divide": "write div(A, B)",
    "true_divide": "write div(A, B)",
    "minimum": "write min(A, B)",
    "maximum": "write max(A, B)",
    "reciprocal": "write recip(X)",
    "greater": "write gt(A, B)",
    "less": "write lt(A, B)",
    "equal": "write eq(A, B)",
    "logical_and": "write and(A, B)",
    "logical_or": "write or(A, B)",
    "logical_not": "write not(A)",
    "select": "write where(C, A, B)",
    "amax": "write max(X, over=a)",
    "pow": "write square(X) or exp(mul(log(X), p))",
    "layer_norm": "write layernorm(X, over=d)",
    "rms_norm": "write rmsnorm(X, over=d)",
    "swish": "write silu(X)",
    "arange": "write index(a): the position along the axis a",
    "to": "write cast(X, to=fp16)",
    "astype": "write cast(X, to=fp16)",
}

# Keyword arguments other libraries use for the axis an op runs along.
_AXIS_KEYWORDS = ("dim", "axis", "axes", "dims")


def operation_hint(name: str) -> str | None:
    """What to write for an operation ncdc does not know by this name, if the table knows it."""
    return OPERATION_HINTS.get(name) or OPERATION_HINTS.get(name.lower())


def keyword_hint(fn: str, key: str, value: object, keywords: tuple[str, ...]) -> str | None:
    """For `softmax(X, dim=n)`: write over=n (axes go by name, never by number)."""
    if key in _AXIS_KEYWORDS:
        wanted = "over" if "over" in keywords else "axis" if "axis" in keywords else None
        if wanted is None:
            return None
        if isinstance(value, str):
            return f"write {wanted}={value}"
        return f"axes go by name, not number: write {wanted}=<axis name>, e.g. {wanted}=n"
    if key == "keepdim" or key == "keepdims":
        return "drop it: a result keeps the axes it is not reduced over, by name"
    if key == "dtype" and "to" in keywords:
        return f"write to=..., e.g. {fn}(X, to=fp16)"
    return None


DTYPE_HINTS: dict[str, str] = {
    **dict.fromkeys(("float16", "half", "f16", "torch.float16", "float16_t"), "fp16"),
    **dict.fromkeys(("bfloat16", "torch.bfloat16", "bf16_t"), "bf16"),
    **dict.fromkeys(("float32", "float", "single", "f32", "torch.float32", "tf32"), "fp32"),
    **dict.fromkeys(
        ("float8_e4m3fn", "float8_e4m3", "e4m3", "fp8", "torch.float8_e4m3fn"), "fp8_e4m3"
    ),  # fmt: skip
    **dict.fromkeys(("float8_e5m2", "e5m2", "torch.float8_e5m2"), "fp8_e5m2"),
    **dict.fromkeys(("int", "i32", "torch.int32", "long", "int64"), "int32"),
    **dict.fromkeys(("i8", "char", "torch.int8", "uint8"), "int8"),
}


def dtype_hint(name: str) -> str | None:
    """The ncdc name of a dtype written as another library spells it."""
    found = DTYPE_HINTS.get(name) or DTYPE_HINTS.get(name.lower())
    if found is None:
        return None
    if name.lower() in ("int64", "long"):
        return "write 'int32': indices and lengths are int32"
    if name.lower() == "uint8":
        return "write 'int8' (signed) or an fp8 type"
    return f"write '{found}'"


_INFIX = re.compile(r"^\s*(\w+)\s*=\s*([\w.]+)\s*([-+*/@])\s*([\w.]+)\s*$")
_INFIX_OPS = {"*": "mul", "+": "add", "-": "sub", "/": "div"}


def infix_hint(text: str) -> str | None:
    """For `Y = X * 0.02`: operations are calls, `Y = mul(X, 0.02)`; `A @ B` is a contract."""
    m = _INFIX.match(text)
    if m is None:
        return None
    out, a, op, b = m.groups()
    if op == "@":
        return f"write {out} = contract({a}, {b}, over=k), k the axis they share"
    return f"operations are calls: write {out} = {_INFIX_OPS[op]}({a}, {b})"
