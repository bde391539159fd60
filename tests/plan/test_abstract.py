"""The search on an abstract machine (ncdc.plan.abstract): the paper's two-level napkin
machine, every power of two of every woven and streamed axis."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram, rank_tiles


def test_the_napkin_machine_picks_the_largest_tile_that_fits() -> None:
    # a bf16 matmul on 100 KiB of l1: the tile held (M) stays within the capacity
    d = load_diagram("diagrams/matmul.yaml", {"m": 1024, "n": 1024, "k": 1024})
    hw = load_hardware("napkin")
    plan = plan_diagram(d, hw)
    (kp,) = plan.kernels
    assert kp.candidate is None  # the model alone: no kernel
    resident = kp.levels[-1].resident_bytes
    assert resident <= hw.level("l1").capacity_bytes
    ranked = rank_tiles(d, hw, 5)
    assert [p.predicted_time_s for p in ranked] == sorted(p.predicted_time_s for p in ranked)


def test_a_continuous_search_tries_sizes_between_the_powers_of_two() -> None:
    d = load_diagram("diagrams/matmul.yaml", {"m": 3000, "n": 3000, "k": 3000})
    hw = load_hardware("napkin")
    coarse = plan_diagram(d, hw).predicted_time_s
    fine = plan_diagram(d, hw, continuous=True).predicted_time_s
    assert fine <= coarse
