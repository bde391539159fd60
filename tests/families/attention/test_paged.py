"""Attention through a paged KV cache: K and V gathered through a block table
(`gather(C, table, axis=page, within=slot, into=x)`) inside the decode and forward kernels,
on the CPU emulator at odd sizes against the float64 reference. Every way a tile meets its
pages runs (a page holding a whole tile, tiles of whole pages, pages of a few rows or one,
K and V heads of different sizes), with caches in two layouts, a table with a batch axis,
grouped heads packed, and split keys; a page out of range is refused, table entries past
the sequence are never read; the model counts each row once, as the kernel reads it.
"""

from __future__ import annotations

import pytest

from ncdc.errors import IndexRangeError, SpecError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import run_diagram
from tests.families.attention.helpers import assert_ok, run_attention

HW = load_hardware("h200")


def paged(
    *, q: int, x: int, page: int, d: int = 64, e: int = 64, causal: bool = False,
    k_cache: str = "[blk, slot, g, d]", v_cache: str = "[blk, slot, g, e]",
    table: str = "[b, n]", pages: int = 0,
) -> str:  # fmt: skip
    """A grouped-query attention diagram (2 groups of 2 query heads) whose K and V come from
    paged caches through a block table of just enough pages for x (`pages` in the caches,
    twice as many by default)."""
    n = -(-x // page)
    blk = pages or 2 * n + 3
    return f"""
ncdc: 1
name: paged
axes: {{b: 2, g: 2, r: 2, q: {q}, x: {x}, d: {d}, e: {e}, blk: {blk}, slot: {page}, n: {n}}}
inputs:
  Q: {{axes: [b, g, r, q, d], dtype: bf16}}
  Kc: {{axes: {k_cache}, dtype: bf16}}
  Vc: {{axes: {v_cache}, dtype: bf16}}
  table: {{axes: {table}, dtype: int32}}
ops:
  - K = gather(Kc, table, axis=blk, within=slot, into=x)
  - V = gather(Vc, table, axis=blk, within=slot, into=x)
  - S = contract(Q, K, over=d) * 0.125
{"  - M = causal(S, query=q, key=x)" if causal else "  - M = add(S, 0.0)"}
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""


@pytest.mark.parametrize(
    "case, kw, tiles, kernel",
    [
        # decode, 16-row pages, tiles of whole pages (one table read a page), heads packed
        ("decode, whole pages", dict(q=1, x=77, page=16), {"x": 32}, "_decode_attention_"),
        # token-level pages (sglang's page size 1): a table read a row
        ("decode, pages of one row", dict(q=3, x=45, page=1), {"x": 32}, "_decode_attention_"),
        # forward, causal, 5-row pages (a row's page apart), the caches in two layouts and a
        # table per key/value group (its pages g apart)
        (
            "forward, odd pages",
            dict(q=37, x=83, page=5, causal=True, k_cache="[blk, g, slot, d]", table="[b, n, g]"),
            {"q": 64, "x": 32},
            "_attention_bf16_",
        ),  # fmt: skip
        # forward, 64-row pages that each hold a 32-key tile whole
        (
            "forward, a page a tile",
            dict(q=50, x=150, page=64),
            {"q": 64, "x": 32},
            "_attention_bf16_",
        ),  # fmt: skip
        # forward, K and V heads of different sizes: each cache's rows find their pages apart
        (
            "forward, d != d_v",
            dict(q=20, x=61, page=8, e=32),
            {"q": 64, "x": 32},
            "_attention_bf16_",
        ),  # fmt: skip
    ],
)
def test_paged_attention_runs_as_the_reference(case, kw, tiles, kernel) -> None:
    text = paged(**kw)
    check, _, module, _ = run_attention("paged", {}, tiles, text=text)
    names = [launch.kernel for launch in module.launches]
    assert kernel in names[0] and f"_page{kw['page']}" in names[0], names
    assert len(module.launches) <= 2  # the gathers fused: no copy of the cache is made
    assert_ok(check)


def test_split_keys_through_the_table() -> None:
    check, _, module, _ = run_attention(
        "paged", {}, {"q": 64, "x": 32}, splits=2, text=paged(q=40, x=150, page=16)
    )
    assert "_merge" in module.launches[-1].kernel
    assert_ok(check)


def test_a_page_out_of_range_is_refused_and_entries_past_the_sequence_are_not_read() -> None:
    for tiles in ({"x": 32}, {"q": 64, "x": 32}):  # decode, forward
        q = 1 if len(tiles) == 1 else 30
        d = load_diagram_text(paged(q=q, x=40, page=16), sizes={})
        module = render_plan(plan_diagram(d, HW, tiles=tiles))
        assert len(module.launches) <= 2
        drawn = make_inputs(d, 0)
        drawn["table"][:, 2] = 10**6  # x = 40 ends in page 2 (rows 32 .. 39)
        with pytest.raises(
            IndexRangeError,
            match=r"index table\[0, 2\] = 1e\+06 is out of "
            r"range: K = gather\(Kc, table, axis=blk, within=slot, into=x\)",
        ):
            run_diagram(d, module, backend="cpu", inputs=drawn)
        d = load_diagram_text(paged(q=q, x=32, page=16).replace("n: 2}", "n: 3}"), sizes={})
        drawn = make_inputs(d, 0)
        drawn["table"][:, 2] = -7  # page 2 is past x = 32: never read
        result = run_diagram(d, render_plan(plan_diagram(d, HW, tiles=tiles)), backend="cpu",
                             inputs=drawn)  # fmt: skip
        assert result.ok, result.checks


def test_unfused_paged_gathers_copy_the_rows_the_table_maps() -> None:
    """Saved, K and V are elementwise gathers of their own (row x of page x // 5 at x % 5)."""
    text = paged(q=9, x=23, page=5).replace(
        "outputs: [O]", "outputs: [O]\nschedule: {materialize: [K, V]}"
    )
    d = load_diagram_text(text, sizes={})
    module = render_plan(plan_diagram(d, HW, tiles={"q": 64, "x": 32}))
    assert all("_elementwise_" in la.kernel for la in module.launches[:2]), module.launches
    result = run_diagram(d, module, backend="cpu", inputs=make_inputs(d, 3))
    assert result.ok, result.checks


def test_the_model_reads_each_row_of_the_sequence_once() -> None:
    """From device memory: the rows the tables map (whatever the caches' size) and Q, O and
    the tables once, as the same attention over K and V stored whole."""

    def top(text: str) -> int:
        kernels = plan_diagram(load_diagram_text(text, sizes={}), HW).kernels
        assert len(kernels) == 1 or "merge" in kernels[1].family.name, kernels
        return next(t.bytes for t in kernels[0].transfers if t.upper == "hbm")

    text = paged(q=1, x=4000, page=16, pages=50_000)  # caches 200 times what is read
    whole = text.replace("Kc: {axes: [blk, slot, g, d]", "K: {axes: [b, x, g, d]").replace(
        "Vc: {axes: [blk, slot, g, e]", "V: {axes: [b, x, g, e]"
    )
    whole = "\n".join(
        line for line in whole.splitlines() if "gather" not in line and "table" not in line
    )
    tables = 2 * 250 * 4
    assert top(whole) <= top(text) <= top(whole) + tables + 64


@pytest.mark.parametrize(
    "op, message",
    [
        ("K = gather(Kc, table, axis=blk, within=slot)", "names the rows of a page ('within')"),
        ("K = gather(Kc, table, axis=blk, within=blk, into=x)", "'within' names the axis of Kc"),
        ("K = gather(Kc, table, axis=blk, within=slot, into=g)", "Kc already has the axis 'g'"),
        (
            "K = gather(Kc, table, axis=blk, within=slot, into=big)",
            "big of 200 rows is more than the 10 pages of 16 rows (n x slot)",
        ),  # fmt: skip
        ("K = gather(Kc, lone, axis=blk, within=slot, into=x)", "lone has no axis of its own"),
    ],
)
def test_paged_gathers_refuse_what_they_cannot_mean(op: str, message: str) -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {b: 2, g: 2, x: 100, big: 200, d: 64, blk: 30, slot: 16, "
        "n: 10}\ninputs:\n  Kc: {axes: [blk, slot, g, d], dtype: bf16}\n"
        "  table: {axes: [b, n], dtype: int32}\n  lone: {axes: [g], dtype: int32}\n"
        f"ops:\n  - {op}\noutputs: [K]\n"
    )
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_diagram_text(text, sizes={})


def test_no_gradient_is_derived_for_a_paged_cache() -> None:
    from ncdc.grad.derive import derive

    d = load_diagram_text(paged(q=9, x=23, page=5), sizes={})
    with pytest.raises(SpecError, match="the gradient of the paged cache Vc is not derived"):
        derive(d)
    assert list(derive(d, wrt=("Q",)).grads) == ["Q"]  # through K and V, gathered as they are
