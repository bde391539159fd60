"""Save or recompute by price (ncdc.grad.choose), and the chosen backward's kernels run on
the CPU backend at odd sizes against the float64 reference (tolerance: the output dtype's,
bf16 2e-2 relative to the largest value, as every run)."""

from __future__ import annotations

import pytest

from ncdc.errors import UsageError
from ncdc.grad.choose import choose_pair, ways_text
from ncdc.grad.pair import LSE, RECOMPUTE
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import round_to
from ncdc.verify.run import run_diagram
from tests.grad.helpers import backward_inputs
from tests.support import DIAGRAMS

H200 = load_hardware("h200")


def test_attention_arrives_at_flashattention_choice_by_price() -> None:
    # At the library's sizes (b 4, h 16, q = x = 4096, d 128) on the h200: saving P (or S,
    # or M) writes a 2 GiB matrix and breaks the fused forward; recomputing P by softmax
    # cannot join the S GEMM (a row statistic); exp(M - lse) can, so the lse way is fastest.
    c = choose_pair(load_diagram(DIAGRAMS / "attention_causal.yaml"), H200)
    assert c.pair.ways == {"P": LSE, "M": RECOMPUTE, "S": RECOMPUTE}
    assert c.pair.saved == ("lse_P",)
    chosen = next(a for a in c.alternatives if a.chosen)
    assert chosen.held_bytes == 4 * 16 * 4096 * 4  # one fp32 per query row
    others = [a.total_s for a in c.alternatives if not a.chosen and a.total_s is not None]
    assert chosen.total_s is not None and len(others) == 6
    assert all(chosen.total_s < t for t in others)
    assert chosen.total_s == c.forward.predicted_time_s + c.backward.predicted_time_s


def test_save_and_recompute_override_the_price() -> None:
    d = load_diagram(DIAGRAMS / "attention.yaml", {"b": 1, "h": 2, "q": 256, "x": 256})
    assert choose_pair(d, H200, save=["P"]).pair.saved == ("P",)
    assert "P" not in choose_pair(d, H200, recompute=["P", "S"]).pair.saved
    with pytest.raises(UsageError, match="reads no intermediate Z"):
        choose_pair(d, H200, save=["Z"])
    with pytest.raises(UsageError, match="both --save and --recompute"):
        choose_pair(d, H200, save=["P"], recompute=["P"])


def test_ways_text() -> None:
    assert ways_text({"P": LSE, "S": RECOMPUTE}) == "P lse, S recompute"
    assert ways_text({}) == "nothing to get"


ODD = {
    "attention_causal": {"b": 1, "h": 2, "q": 37, "x": 45, "d": 64},  # a causal GEMM epilogue
    "gqa_attention": {"b": 1, "g": 2, "r": 3, "q": 33, "x": 41, "d": 32},  # dK over [r, q]
    "mlp": {"m": 37, "k": 24, "n": 40},  # gelu's derivative (erf), the bias summed over m
    "layernorm": {"m": 19, "n": 72},  # row stages: dX and dW in one pass
    "rmsnorm": {"m": 37, "n": 130},
    "softmax": {"m": 37, "n": 130},
    "vocab_cross_entropy": {"t": 37, "v": 1001},
    "swiglu_mlp": {"m": 37, "d": 40, "f": 24},
    "embedding": {"t": 37, "v": 101, "d": 130},  # a scatter-add into rows picked many times
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_backward_kernels_match_the_reference_on_the_cpu(name: str) -> None:
    d = load_diagram(DIAGRAMS / f"{name}.yaml", ODD[name])
    c = choose_pair(d, H200)
    backward = c.pair.backward
    # the forward's values (float64, saved results rounded to their dtype as stored)
    inputs = {k: round_to(v, backward.tensor(k).dtype)
              for k, v in backward_inputs(d, c.pair, seed=3).items()}  # fmt: skip
    result = run_diagram(backward, render_plan(c.backward), inputs=inputs)
    assert result.ok, result.checks
    assert {x.name for x in result.checks} == set(backward.outputs)


@pytest.mark.parametrize(
    "name, wrt",
    [
        ("prefix_lm_attention", None),  # a rule of positions: where(K0, S, -inf)
        ("varlen_attention", None),  # a varlen mask read by a causal one
        ("softcap_attention", None),  # tanh on the logits, grouped-query heads
        ("alibi_attention", ("Q", "K", "V")),  # slopes times positions, not differentiated
    ],
)
def test_score_paths_and_mask_rules_arrive_at_flashattention_choice(name, wrt) -> None:
    """A mask, or a select of -inf, that only the softmax reads passes the gradient through
    (the softmax's is 0 where it put -inf), and a rule's positions and comparisons are
    recomputed, never offered for saving: the lse way wins, and its backward runs in the
    fused kernel with the score path's gradient beside the row-wise D."""
    c = choose_pair(load_diagram(DIAGRAMS / f"{name}.yaml"), H200, wrt=wrt)
    assert c.pair.saved == ("lse_P",)
    assert set(c.pair.ways.values()) == {LSE, RECOMPUTE}
    assert [k.family.name for k in c.backward.kernels] == ["rowwise", "attention_backward"]
    assert not [op for op in c.pair.backward.ops if op.fn in ("where", "eq", "ne")
                and op.out.startswith("d")]  # fmt: skip
    assert all(len(a.ways) <= 8 for a in c.alternatives)  # no save of a rule's parts weighed
