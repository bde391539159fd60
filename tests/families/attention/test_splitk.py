"""Split-key forward attention (ncdc.families.attention.splitk): partials per key range, then
their merge.
"""

from __future__ import annotations

from ncdc.families.attention.splitk import is_split
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives, with_kernel
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.run import run_diagram
from tests import support
from tests.families.attention.helpers import SMALL

DIAGRAMS = support.DIAGRAMS


HW = load_hardware("h200")


# soft-capped logits (a score functor), causal, and the log-sum-exp the merge writes
_SOFTCAP_LSE = (
    (DIAGRAMS / "softcap_attention.yaml")
    .read_text()
    .replace(
        "  - P = softmax(M, over=x)\n",
        "  - P = softmax(M, over=x)\n  - Z = logsumexp(M, over=x, dtype=fp32)\n",
    )
    .replace("outputs: [O]", "outputs: [O, Z]")
)


def test_split_keys_forward() -> None:
    # 70 keys in chunks of 32, 3 splits of one chunk (the last of 6 keys); query i sees
    # j <= i - 20, so queries 0..19 see no key at all (O = 0, Z = -inf) and query tile 0
    # nothing of split 2; 90 queries: a partial second tile
    sizes = {"b": 1, "g": 1, "r": 2, "q": 90, "x": 70, "d": 64}
    diagram = load_diagram_text(_SOFTCAP_LSE, sizes=sizes)
    plan = plan_diagram(diagram, HW, tiles=SMALL)
    kp = next(
        k for k in kernel_alternatives(plan, 0, 1000) if is_split(k.candidate) and k.splits == 3
    )
    module = render_plan(with_kernel(plan, 0, kp))
    first, merge = module.launches
    assert first.grid[2] == 3 and first.kernel.endswith("_causal_scores_lse_split")  # as priced
    assert kp.candidate is not None
    assert [s.grid for s in kp.candidate.launches] == [first.grid, merge.grid]
    for seed in (0, 1):
        checks = run_diagram(diagram, module, backend="cpu", seed=seed).checks
        assert {c.name for c in checks} == {"O", "Z"}
        for check in checks:
            assert check.ok and check.unexpected_nan == 0, check


def test_split_keys_chosen_for_a_grid_that_cannot_fill_the_gpu() -> None:
    # 77 queries (two tiles of 64) x 16 heads: 32 blocks on 132 SMs, 4096 keys to split
    small = plan_diagram(
        load_diagram(DIAGRAMS / "cross_attention.yaml", {"b": 1, "q": 77, "x": 4096}), HW
    )
    (kp,) = small.kernels
    assert is_split(kp.candidate) and kp.splits > 1 and len(kp.candidate.launches) == 2
    unsplit = [
        a.predicted_time_s for a in kernel_alternatives(small, 0, 2000) if a.splits == 1
    ]  # fmt: skip
    assert unsplit and kp.predicted_time_s < min(unsplit)
    # the library's cross-attention (4096 queries: 1024 blocks) and attention stay whole
    for name in ("cross_attention", "attention"):
        big = plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml"), HW).kernels[0]
        assert big.splits == 1 and not is_split(big.candidate)
