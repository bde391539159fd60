"""The model's values (ncdc.model.values): a plan's totals are its kernels' sums."""

from __future__ import annotations

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram


def test_a_plans_totals_are_its_kernels_sums() -> None:
    d = load_diagram("diagrams/attention_unfused.yaml", {"b": 1, "h": 2, "q": 256, "x": 256})
    plan = plan_diagram(d, load_hardware("h200"))
    assert len(plan.kernels) == 3
    assert plan.flops == sum(k.flops for k in plan.kernels)
    assert plan.predicted_time_s == pytest.approx(sum(k.predicted_time_s for k in plan.kernels))
    for i, t in enumerate(plan.transfers):
        assert t.bytes == sum(k.transfers[i].bytes for k in plan.kernels)
    assert plan.top_bytes == plan.transfers[0].bytes
    assert plan.bound_kind in ("memory", "compute")
    assert plan.tiles == {a: v for k in plan.kernels for a, v in k.block_tile.items()}


def test_a_transfer_adds_to_anothers_on_the_same_boundary() -> None:
    from ncdc.model.values import Transfer

    a = Transfer("hbm", "l2", 10, 20, 1e12, 2e-11)
    b = Transfer("hbm", "l2", 1, 2, 1e12, 2e-12)
    both = a.plus(b)
    assert both[:5] == ("hbm", "l2", 11, 22, 1e12) and both.time_s == pytest.approx(2.2e-11)
