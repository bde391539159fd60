"""The CI cost gate: predicted time and top-level bytes per diagram, kept in one JSON file,
and a comparison that names every figure that grew past a tolerance.

    >>> base = {"format": "ncdc.baseline/1", "diagrams": {"mm": {"predicted_time_s": 1.0,
    ...         "hbm_bytes": 100}}}
    >>> cur = {"format": "ncdc.baseline/1", "diagrams": {"mm": {"predicted_time_s": 1.2,
    ...        "hbm_bytes": 100}}}
    >>> compare_to_baseline(cur, base, 0.05)
    ['mm: predicted_time_s grew from 1 to 1.2 (+20.0%, tolerance 5.0%)']
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ncdc.cost import Plan
from ncdc.errors import UsageError
from ncdc.hardware import Hardware
from ncdc.spec import load_diagram
from ncdc.tiling import plan_diagram

FORMAT = "ncdc.baseline/1"
FIGURES = ("predicted_time_s", "hbm_bytes")


def baseline_from_plans(plans: Iterable[Plan]) -> dict[str, Any]:
    """One object for a folder of diagrams: per diagram, its predicted time and top bytes."""
    diagrams: dict[str, Any] = {}
    hardware = set()
    for plan in plans:
        hardware.add(plan.graph.hardware.name)
        diagrams[plan.graph.diagram.name] = {
            "predicted_time_s": plan.predicted_time_s,
            "hbm_bytes": plan.top_bytes,
            "bound": plan.bound,
        }
    return {"format": FORMAT, "hardware": sorted(hardware), "diagrams": diagrams}


def compare_to_baseline(
    current: dict[str, Any], baseline: dict[str, Any], tolerance: float
) -> list[str]:
    """One message per diagram and figure that grew by more than `tolerance` (0.05 = 5%).

    Diagrams only in one of the two are not compared; figures that shrank pass.
    """
    messages = []
    old = baseline.get("diagrams", {})
    for name, figures in sorted(current.get("diagrams", {}).items()):
        if name not in old:
            continue
        for figure in FIGURES:
            before, after = old[name].get(figure), figures.get(figure)
            if before is None or after is None:
                continue
            if after > before * (1 + tolerance):
                growth = (after / before - 1) * 100 if before else float("inf")
                messages.append(
                    f"{name}: {figure} grew from {before:.6g} to {after:.6g} "
                    f"(+{growth:.1f}%, tolerance {tolerance * 100:.1f}%)"
                )
    return messages


def parse_tolerance(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05."""
    text = text.strip()
    if text.endswith("%"):
        return float(text[:-1]) / 100
    return float(text)


def plan_specs(
    paths: Iterable[Path],
    hardware: Hardware,
    sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None,
) -> list[Plan]:
    """The best plan of every spec file in `paths`, in order (for a folder of diagrams)."""
    return [plan_diagram(load_diagram(path, sizes), hardware, tiles) for path in paths]


def read_baseline(path: Path) -> dict[str, Any]:
    """A baseline written by `ncdc cost FOLDER --format json`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UsageError(
            f"cannot read baseline: {error}",
            where=str(path),
            hint="write one with `ncdc cost FOLDER --format json > FILE`",
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(
            f"expected a baseline with format {FORMAT!r}",
            where=str(path),
            hint="write one with `ncdc cost FOLDER --format json > FILE`",
        )
    return data
