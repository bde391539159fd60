"""Hints by meaning (ncdc.language.hints): what users write from other libraries, and the
one error line each gets from `ncdc check`."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.language.hints import OPERATION_HINTS, dtype_hint, infix_hint, keyword_hint
from ncdc.language.load import load_diagram_text
from ncdc.language.ops import OPERATIONS

SPEC = """
ncdc: 1
name: h
axes: {m: 4, n: 8}
inputs: {X: {axes: [m, n], dtype: DTYPE}, I: {axes: [m], dtype: int32}}
ops: ["OP"]
outputs: [Y]
"""


def hint_of(op: str, dtype: str = "bf16") -> str:
    with pytest.raises(SpecError) as e:
        load_diagram_text(SPEC.replace("OP", op).replace("DTYPE", dtype))
    assert e.value.hint is not None, e.value.message
    return e.value.hint


@pytest.mark.parametrize(
    "op, dtype, want",
    [
        ("Y = cumprod(X, over=n)", "bf16", "exp(cumsum(log(X)))"),  # not 'cumsum' or 'prod'
        ("Y = prefix_sum(X, over=n)", "bf16", "write cumsum(X, over=a)"),
        ("Y = cumsum(X, dim=n)", "bf16", "write over=n"),
        ("Y = argsort(X, over=n)", "bf16", "topk(X, over=a, k=j) gives the k largest"),
        ("Y = top_k(X, over=n)", "bf16", "write topk(X, over=a, k=j)"),
        ("Y = index_select(X, I, axis=n)", "bf16", "write gather(T, I, axis=a)"),
        ("Y = index_add(X, I, axis=n)", "bf16", "write scatter_add(G, I, axis=a)"),
        ("Y = transpose(X)", "bf16", "write permute(X, axes=[b, h, s, d])"),
        ("Y = permute(X)", "bf16", "e.g. Y = permute(X, axes=[b, h, s, d])"),
        ("Y = einsum(X, X)", "bf16", "write contract(A, B, over=k)"),
        ("Y = narrow(X, n, 0, 4)", "bf16", "write slice(X, axis=a, start=k, into=j)"),
        ("Y = cat(X, X)", "bf16", "slices that pad into the joined axis"),
        ("Y = rotate_half(X)", "bf16", "write roll(X, axis=d, by=half)"),
        ("Y = softmax(X, dim=n)", "bf16", "write over=n"),
        ("Y = softmax(X, dim=-1)", "bf16", "axes go by name, not number"),
        ("Y = sum(X, axis=n)", "bf16", "write over=n"),
        ("Y = X * 0.02", "bf16", "write Y = mul(X, 0.02)"),
        ("Y = X @ X", "bf16", "write Y = contract(X, X, over=k)"),
        ("Y = relu(X)", "float16", "write 'fp16'"),
        ("Y = relu(X)", "int64", "int32"),
    ],
)
def test_names_from_other_libraries_get_the_ncdc_spelling(op, dtype, want):
    assert want in hint_of(op, dtype)


def test_a_spelling_match_still_serves_a_typo():
    assert hint_of("Y = softmx(X, over=n)") == "did you mean 'softmax'?"


def test_the_table_never_shadows_a_real_operation():
    assert not set(OPERATION_HINTS) & set(OPERATIONS)


def test_the_helpers_say_nothing_where_they_know_nothing():
    assert dtype_hint("fp99") is None and infix_hint("Y = gelu(X)") is None
    assert keyword_hint("relu", "dim", "n", ()) is None  # relu takes no axis at all
