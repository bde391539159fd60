"""The plan as versioned JSON (ncdc.model.records)."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.records import FORMAT, plan_to_dict
from ncdc.plan.search import plan_diagram


def test_plan_to_dict_fields():
    plan = plan_diagram(
        load_diagram("diagrams/attention.yaml"), load_hardware("h200"), compare_unfused=True
    )
    data = plan_to_dict(plan)
    assert data["format"] == FORMAT
    for key in ("spec", "hardware", "flops", "tiles", "levels", "transfers", "compute_time_s",
                "predicted_time_s", "predicted_time_no_overlap_s", "bound", "kernels",
                "intensity_flop_per_byte", "ridge_flop_per_byte", "unfused"):  # fmt: skip
        assert key in data, key
    assert [t["upper"] for t in data["transfers"]] == ["hbm", "l2", "smem"]
    assert data["unfused"]["ratio"] > 10  # fusion keeps the q x scores on chip
