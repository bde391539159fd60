"""The plan as versioned, JSON-ready data (`ncdc cost --format json`), and the roofline
figures computed from it (intensity, the ridge point, the dominant unit's rate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ncdc.model.cost import unit_rate
from ncdc.model.structure import kernel_flops
from ncdc.model.values import KernelPlan, LevelCost, Plan

FORMAT = "ncdc.cost/1"


def dominant_rate(plan: Plan) -> float:
    """FLOP/s of the unit doing most of the plan's FLOPs (the ridge point's numerator)."""
    hw = plan.graph.hardware
    best: tuple[float, float] = (0.0, hw.rate("cuda", "fp32"))
    for k in plan.kernels:
        model_flops = kernel_flops(plan.graph.diagram, k.kernel)
        for (unit, kind), n in model_flops.items():
            if unit != "sfu" and n > best[0]:
                best = (n, unit_rate(hw, unit, kind, k.candidate))
    return best[1]


def intensity(plan: Plan) -> float:
    """FLOPs per byte moved at the top level."""
    return plan.flops / plan.top_bytes if plan.top_bytes else math.inf


def ridge(plan: Plan) -> float:
    """FLOPs per top-level byte above which compute, not the top level, bounds."""
    hw = plan.graph.hardware
    return dominant_rate(plan) / hw.achieved_bandwidth(hw.levels[0].name)


def _cost_fields(x: Plan | KernelPlan, tiles: Mapping[str, int]) -> dict[str, Any]:
    return {
        "flops": x.flops,
        "tiles": dict(tiles),
        "levels": [
            {
                "name": lv.level,
                "capacity_bytes": lv.capacity_bytes,
                "resident_values": lv.resident_values,
                "resident_bytes": lv.resident_bytes,
            }
            for lv in (x.levels if isinstance(x, KernelPlan) else _plan_levels(x))
        ],
        "transfers": [
            {
                "upper": t.upper,
                "lower": t.lower,
                "values": t.values,
                "bytes": t.bytes,
                "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
                "time_s": t.time_s,
            }
            for t in x.transfers
        ],
        "compute_time_s": x.compute_time_s,
        "predicted_time_s": x.predicted_time_s,
        "kernel_time_s": x.kernel_time_s,
        "launch_s": x.launch_s,
        "fill_s": x.fill_s,
        "predicted_time_no_overlap_s": x.predicted_time_no_overlap_s,
        "bound": x.bound,
        "bound_kind": x.bound_kind,
    }


def _plan_levels(plan: Plan) -> list[LevelCost]:
    """Per level, the largest residency of any kernel."""
    out = []
    for i, lv in enumerate(plan.kernels[0].levels):
        worst = max((k.levels[i] for k in plan.kernels), key=lambda c: c.resident_bytes)
        out.append(
            LevelCost(lv.level, lv.capacity_bytes, worst.resident_values, worst.resident_bytes)
        )
    return out


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as versioned, JSON-ready data (`ncdc cost --format json`); every field is
    described in docs/cost-model.md."""
    d = plan.graph.diagram
    out: dict[str, Any] = {
        "format": FORMAT,
        "spec": d.name,
        "source": d.source,
        "hardware": plan.graph.hardware.name,
        "axes": dict(d.axes),
        **_cost_fields(plan, plan.tiles),
        "intensity_flop_per_byte": intensity(plan),
        "ridge_flop_per_byte": ridge(plan),
    }
    if plan.bound != plan.graph.hardware.levels[0].name:
        out["achieved_tflops"] = plan.flops / plan.predicted_time_s / 1e12
    else:
        out["achieved_tbps"] = plan.top_bytes / plan.predicted_time_s / 1e12
    out["kernels"] = [
        {
            "name": k.kernel.name,
            "family": k.family.name,
            "roles": {r: list(a) for r, a in k.family.roles.items()},
            **_cost_fields(k, k.block_tile),
            "partitions": {
                lv: {"group": dict(p.group), "stream": dict(p.stream)} for lv, p in k.tiles.items()
            },
            "warps": k.warps,
            "stages": k.stages,
            "splits": k.splits,
            "grid": k.grid,
            "waves": k.waves,
            "blocks_per_sm": k.blocks_per_sm,
            "registers_per_thread": k.registers_per_thread,
            "smem_bytes": k.smem_bytes,
            "launches": [
                {"grid": list(s.grid), "block": list(s.block), "dynamic_smem_bytes": s.dynamic_smem}
                for s in (k.candidate.launches if k.candidate else ())
            ],
            "instructions": k.instructions.to_dict() if k.instructions else None,
        }
        for k in plan.kernels
    ]
    if plan.breaks:
        out["breaks"] = [
            {
                "saved": list(b.saved),
                "hbm_bytes": b.top_bytes,
                "predicted_time_s": b.predicted_time_s,
                "least_time_s": b.least_time_s,
                "problem": b.problem,
                "chosen": b.chosen,
            }
            for b in plan.breaks
        ]
    if plan.notes:
        out["notes"] = list(plan.notes)
    if plan.unfused is not None:
        out["unfused"] = {
            "hbm_bytes": plan.unfused.top_bytes,
            "predicted_time_s": plan.unfused.predicted_time_s,
            "ratio": plan.unfused.ratio,
        }
    return out
