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


def test_kernel_time_leaves_the_launches_out_of_the_call() -> None:
    """A call's time is its kernels' and one launch latency per launch; the kernel time, as
    a profiler or a CUDA-graph replay measures it, is the kernels' alone, per kernel and
    summed (a split decode: two launches, the merge its own)."""
    hw = load_hardware("h200")
    for name, launches in (("softmax", 1), ("decode_attention", 2)):
        plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml"), hw)
        assert sum(len(k.candidate.launches) for k in plan.kernels if k.candidate) == launches
        assert abs(plan.launch_s - launches * hw.launch_s) < 1e-12
        assert abs(plan.predicted_time_s - plan.kernel_time_s - plan.launch_s) < 1e-12
        assert plan.kernel_time_s == sum(k.kernel_time_s for k in plan.kernels) > 0
        data = plan_to_dict(plan)
        assert data["kernel_time_s"] == plan.kernel_time_s
        assert data["launch_s"] == plan.launch_s
        assert data["kernels"][0]["kernel_time_s"] == plan.kernels[0].kernel_time_s
    abstract = plan_diagram(load_diagram("diagrams/softmax.yaml"), load_hardware("napkin"))
    assert abstract.launch_s == 0 and abstract.kernel_time_s == abstract.predicted_time_s
