"""Q and K computed as their tiles load (ncdc.families.attention.loads): RoPE fused into the
attention kernels, with cos and sin tables over the positions, gathered by position ids, or
angles computed from positions, on the CPU emulator at odd sizes against the float64
reference (forward, causal, split keys, decode); an index out of range inside a load is
refused; the model prices K's values once per query tile that loads them, and the break
search then rotates K in a kernel of its own where that is cheaper.
"""

from __future__ import annotations

import pytest

from ncdc.errors import IndexRangeError
from ncdc.families.attention.wgmma import is_wgmma
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.breaks import with_breaks
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import run_diagram
from tests import support
from tests.families.attention.helpers import assert_ok, run_attention

HW = load_hardware("h200")

SIGN = """
  - i = index(d)
  - first = lt(i, 32)
  - twice = mul(first, -2)
  - sign = add(twice, 1)
"""


def rotated(name: str, axis: str, cos: str, sin: str) -> str:
    """`name` rotated by RoPE's half split (a head of 64): name * cos + rotate_half * sin."""
    return f"""
  - R{name} = roll({name}, axis=d, by=32)
  - H{name} = mul(R{name}, sign)
  - A{name} = mul({name}, {cos})
  - B{name} = mul(H{name}, {sin})
  - {name}r = add(A{name}, B{name}, dtype=bf16)
"""


def rope_attention(*, q: int, x: int, keys: bool = True, fused: bool = True) -> str:
    """Causal attention of Q (and K, `keys`) rotated by tables over their positions;
    `fused`: every op in one kernel (the spec states its breaks: none)."""
    k_ops = rotated("K", "x", "ck", "sk") if keys else ""
    return f"""
ncdc: 1
name: rope
axes: {{b: 2, h: 3, q: {q}, x: {x}, d: 64}}
inputs:
  Q: {{axes: [b, q, h, d], dtype: bf16}}
  K: {{axes: [b, x, h, d], dtype: bf16}}
  V: {{axes: [b, x, h, d], dtype: bf16}}
  cq: {{axes: [q, d], dtype: fp32}}
  sq: {{axes: [q, d], dtype: fp32}}
  ck: {{axes: [x, d], dtype: fp32}}
  sk: {{axes: [x, d], dtype: fp32}}
ops:{SIGN}{rotated("Q", "q", "cq", "sq")}{k_ops}
  - S = contract(Qr, {"Kr" if keys else "K"}, over=d) * 0.125
  - M = causal(S, query=q, key=x)
  - P = softmax(M, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
{"schedule: {materialize: []}" if fused else ""}
"""


@pytest.mark.parametrize(
    "case, q, x, tiles, kernel",
    [
        ("forward, causal, q < x", 37, 53, {"q": 64, "x": 32}, "_attention_bf16_"),
        ("forward, q > x", 70, 45, {"q": 64, "x": 32}, "_attention_bf16_"),
        ("decode", 1, 300, {"x": 32}, "_decode_attention_"),
    ],
)
def test_rope_fused_into_both_loads_runs_as_the_reference(case, q, x, tiles, kernel) -> None:
    check, _, module, _ = run_attention("rope", {}, tiles, text=rope_attention(q=q, x=x))
    assert kernel in module.launches[0].kernel, module.launches
    assert len(module.launches) <= 2  # one kernel (decode: and its merge): nothing saved
    assert_ok(check)


def test_split_keys_compute_q_again_in_each_split() -> None:
    text = rope_attention(q=40, x=150)
    check, _, module, _ = run_attention("rope", {}, {"q": 64, "x": 32}, splits=3, text=text)
    assert "_merge" in module.launches[-1].kernel
    assert_ok(check)


# Decode with K already rotated in its cache (as serving stacks store it) and Q rotated by
# angles computed from its position: cos(p * f) and sin(p * f) for a frequency per head
# index, p gathered from int32 positions.
DECODE = f"""
ncdc: 1
name: rope_decode
axes: {{b: 3, g: 2, r: 3, q: 1, x: 77, d: 64}}
inputs:
  Q: {{axes: [b, g, r, q, d], dtype: bf16}}
  K: {{axes: [b, g, x, d], dtype: bf16}}
  V: {{axes: [b, g, x, d], dtype: bf16}}
  pos: {{axes: [b], dtype: int32}}
  freq: {{axes: [d], dtype: fp32}}
  at: {{axes: [t], dtype: fp32}}
ops:{SIGN}
  - p = gather(at, pos, axis=t)
  - angle = mul(p, freq)
  - c = cos(angle)
  - s = sin(angle)
{rotated("Q", "q", "c", "s")}
  - S = contract(Qr, K, over=d) * 0.125
  - P = softmax(S, over=x)
  - O = contract(P, V, over=x)
outputs: [O]
"""


def test_decode_with_angles_computed_from_gathered_positions() -> None:
    text = DECODE.replace("axes: {b: 3", "axes: {t: 500, b: 3")
    check, _, module, _ = run_attention("rope_decode", {}, {"x": 32}, text=text)
    assert "_decode_attention_" in module.launches[0].kernel
    assert_ok(check)
    d = load_diagram_text(text, sizes={})
    module = render_plan(plan_diagram(d, HW, tiles={"x": 32}))
    drawn = make_inputs(d, 0)
    drawn["pos"][1] = 500  # t has 500 values: 0 .. 499
    with pytest.raises(IndexRangeError, match=r"index pos\[1\] = 500 is out of range"):
        run_diagram(d, module, backend="cpu", inputs=drawn)


def test_k_values_are_priced_once_per_query_tile_that_loads_them() -> None:
    d = load_diagram_text(rope_attention(q=300, x=300), sizes={})
    plan = plan_diagram(d, HW, tiles={"q": 64, "x": 32})
    kp = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == 1)
    shares = dict(kp.candidate.recomputes)
    assert shares["Kr"] == shares["HK"] == 5 - 1  # five query tiles of 64 load each K tile
    assert "Qr" not in shares  # Q's once a block
    assert shares["sign"] == 5 + 1 - 1  # the sign: in K's loads and in Q's
    split = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == 4)
    assert dict(split.candidate.recomputes)["Qr"] == 4 - 1  # Q: once in each split
    unstaged = set(kp.candidate.unstaged)
    assert {"cq", "sq", "ck", "sk"} <= unstaged and not {"Q", "K"} & unstaged


def test_the_break_search_rotates_q_and_k_apart_where_their_loads_cost_more() -> None:
    """At Llama 3's prefill sizes on h200, every query tile rotating every key tile costs
    more than one elementwise kernel writing rotated K (the positional sign, read by both
    rotations, is computed by each kernel); rotated Q written too lets attention take the
    TMA and wgmma kernel (its [b, s, g, r, d] rows strided: 5-D maps), faster than the
    mma.sync kernel that rotates Q as it loads."""
    d = load_diagram(support.DIAGRAMS / "rope_attention.yaml")
    plan = plan_diagram(d, HW)
    *rotate, attend = plan.kernels
    assert {k.family.name for k in rotate} == {"elementwise"}
    assert sorted(o for k in rotate for o in k.kernel.outputs) == ["Kr", "Qr"]
    assert all("sign" in {op.out for op in k.kernel.ops} for k in rotate)
    assert attend.family.name == "attention" and is_wgmma(attend.candidate)
    assert {"Qr", "Kr"} <= set(attend.kernel.inputs)
    q_in_load = plan_diagram(with_breaks(d, ("Kr",)), HW)
    assert not is_wgmma(q_in_load.kernels[-1].candidate)
    assert plan.predicted_time_s < q_in_load.predicted_time_s


def test_q_rotated_as_it_loads_beside_a_paged_cache() -> None:
    """A serving decode step: Q rotated in the kernel, K (rotated when it was cached) and V
    read through a block table, all in the one decode kernel."""
    text = DECODE.replace("axes: {b: 3", "axes: {t: 500, blk: 20, slot: 16, n: 5, b: 3")
    text = text.replace(
        "  K: {axes: [b, g, x, d], dtype: bf16}\n  V: {axes: [b, g, x, d], dtype: bf16}\n",
        "  Kc: {axes: [blk, slot, g, d], dtype: bf16}\n  Vc: {axes: [blk, slot, g, d], dtype: "
        "bf16}\n  table: {axes: [b, n], dtype: int32}\n",
    ).replace(
        "  - S = contract(",
        "  - K = gather(Kc, table, axis=blk, within=slot, into=x)\n"
        "  - V = gather(Vc, table, axis=blk, within=slot, into=x)\n  - S = contract(",
    )
    check, _, module, _ = run_attention("rope_paged", {}, {"x": 32}, text=text)
    assert "_page16" in module.launches[0].kernel and len(module.launches) == 2
    assert_ok(check)
