"""How close `ncdc cost` comes to published measurements, against a naive roofline.

Each data set in benchmarks/external/*.yaml names its source, GPU, dtype, the structure of
the measured kernels and, per point, a diagram, its axes and the measured time (or rate).
ncdc prices the diagram on the set's GPU profile (with the measured kernel's tiles where
the set gives them); the naive roofline is max(useful FLOPs / datasheet tensor peak,
compulsory bytes / datasheet HBM bandwidth). The model is fitted to no point it scores:
every constant comes from the profiles (each figure with its source) and the kernels'
structure. A set whose timing includes
a fixed cost outside the kernel (the host side of a framework call inside the timed
region) marks half its points `calibrate: true`: the median of measured - predicted over
those is that harness overhead, added to the other points, and only the other points are
scored ("kernel only" scores every point without it). Each set says what its harness timed
(`timing`): `kernel` (a profiler's kernel durations, CUDA-graph replays: ncdc's
`kernel_time_s`) or `call` (launches timed from the host or by events around them, the
default: `predicted_time_s`, the launch latency included); it is scored on that one. A
point that fixed a figure of a profile says so (`fitted: <figure>`) and is not scored
either. Beside each set's scores the table prints those before the pipeline fill and the
power limit were priced (benchmarks/results/model_accuracy-before.yaml), and under it the
points measured under 30 us (short calls), over every set.

    .venv/bin/python benchmarks/model_accuracy.py            # table on stdout
    .venv/bin/python benchmarks/model_accuracy.py --svg out.svg
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ncdc.draw.model import Dot, Picture, Rect, Shape, Text
from ncdc.draw.model import Path as Line
from ncdc.draw.svg import write_picture
from ncdc.hardware.load import load_hardware
from ncdc.hardware.machine import Hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = ROOT / "benchmarks" / "external"
BEFORE = ROOT / "benchmarks" / "results" / "model_accuracy-before.yaml"
SHORT_S = 30e-6  # a short call: measured under this
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True)
class Point:
    """One measured kernel: what ncdc and the naive roofline predict for it."""

    set_name: str
    label: str
    measured_s: float
    ncdc_s: float
    naive_s: float
    calibrate: bool = False  # used to calibrate the set's harness overhead, not scored
    fitted: str = ""  # the profile figure this point fixed: not scored


TIMINGS = ("kernel", "call")  # what a set's harness timed (see the module's docstring)


def timing_of(data: dict) -> str:
    timing = data.get("timing", "call")
    if timing not in TIMINGS:
        raise SystemExit(f"{data['name']}: timing {timing!r}; expected one of {TIMINGS}")
    return timing


def diagram_path(name: str) -> Path:
    local = EXTERNAL / f"{name}.yaml"
    return local if local.exists() else ROOT / "diagrams" / f"{name}.yaml"


def measured_seconds(point: dict, flops: float, nbytes: float) -> float:
    """The point's time: given, or its rate's FLOPs (4 q x d per score, halved when causal,
    as attention benchmarks count) or bytes over the rate."""
    if "time_ms" in point:
        return point["time_ms"] * 1e-3
    if "tflops" in point:
        return flops / (point["tflops"] * 1e12)
    return nbytes / (point["gbps"] * 1e9)


def hardware_for(name: str) -> Hardware:
    """A built-in profile, or one kept beside the sets (benchmarks/external/<name>.yaml)."""
    local = EXTERNAL / f"{name}.yaml"
    return load_hardware(local if local.exists() else name)


def price(data: dict, point: dict) -> Point:
    hw = hardware_for(point.get("gpu", data.get("gpu")))
    if "arch" in data:  # the measured kernels' build: sm_90 plans no wgmma variant
        hw = replace(hw, arch=data["arch"])
    diagram = load_diagram(diagram_path(point["diagram"]), point["axes"])
    plan = plan_diagram(diagram, hw, point.get("tiles", data.get("tiles")))  # a point's own first
    a = point["axes"]
    compulsory = sum(k.levels[0].resident_bytes for k in plan.kernels)
    if {"q", "x", "d"} <= set(a):  # attention: the benchmark's own FLOP count
        heads = a.get("h", a.get("g", 1) * a.get("r", 1))
        flops = 4 * a["b"] * heads * a["q"] * a["x"] * a["d"] / (2 if point.get("causal") else 1)
    else:
        flops = plan.flops
    tensor = hw.rates["tensor"].get("bf16", 0.0)
    naive = max(plan.flops / tensor if "m" not in a or "k" in a or "d" in a else 0.0,
                compulsory / hw.levels[0].bandwidth_bytes_per_s)  # fmt: skip
    label = f"{point['diagram']} {' '.join(f'{k}={v}' for k, v in a.items())} on {hw.name}"
    predicted = plan.kernel_time_s if timing_of(data) == "kernel" else plan.predicted_time_s
    return Point(data["name"], label, measured_seconds(point, flops, compulsory),
                 predicted, naive, bool(point.get("calibrate")),
                 str(point.get("fitted", "")))  # fmt: skip


def harness_overhead(points: list[Point]) -> float:
    """The set's fixed cost outside the kernel: the median of measured - predicted over its
    calibration points (0 without any)."""
    gaps = [p.measured_s - p.ncdc_s for p in points if p.calibrate]
    return max(0.0, statistics.median(gaps)) if gaps else 0.0


def scored(points: list[Point]) -> list[Point]:
    """The held-out points, their ncdc time with the calibrated harness overhead added."""
    extra = harness_overhead(points)
    return [replace(p, ncdc_s=p.ncdc_s + extra) for p in points if not (p.calibrate or p.fitted)]


def error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def load_sets() -> list[tuple[dict, list[Point]]]:
    out = []
    for path in sorted(EXTERNAL.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if "points" not in data:
            continue  # a diagram or a GPU profile the sets use
        out.append((data, [price(data, p) for p in data["points"]]))
    return out


def summary_rows(
    sets: list[tuple[dict, list[Point]]], before: dict | None = None, since: str = "-"
) -> list[tuple[str, ...]]:
    before = before or {}
    rows = []
    for data, points in sets:
        held = scored(points)
        if not held:
            raise SystemExit(f"{data['name']}: every point calibrates or fixed a figure")
        e_ncdc = [error(p.ncdc_s, p.measured_s) for p in held]
        e_kernel = [error(p.ncdc_s, p.measured_s) for p in points if not p.fitted]
        e_naive = [error(p.naive_s, p.measured_s) for p in held]
        extra = harness_overhead(points)
        then = before.get(data["name"])
        rows.append((
            data["name"], data["structure"], timing_of(data), str(len(held)),
            f"{statistics.median(e_ncdc):.0%}", f"{max(e_ncdc):.0%}",
            f"{then['median']:.0%}" if then else "-", f"{then['worst']:.0%}" if then else "-",
            str(then.get("commit", since)) if then else "-",
            f"{statistics.median(e_kernel):.0%}" if extra else "-",
            f"{extra * 1e6:.1f} us" if extra else "-",
            f"{statistics.median(e_naive):.0%}", f"{max(e_naive):.0%}",
        ))  # fmt: skip
    return rows


def short_calls(sets: list[tuple[dict, list[Point]]]) -> list[float]:
    """The errors of the held-out points measured under SHORT_S, over every set."""
    return [
        error(p.ncdc_s, p.measured_s)
        for _, points in sets
        for p in scored(points)
        if p.measured_s < SHORT_S
    ]


def load_before() -> dict:
    """The scores before (BEFORE): {"sets": {name: {n, median, worst}}, "short": {...}}."""
    return yaml.safe_load(BEFORE.read_text()) if BEFORE.exists() else {}


def draw(sets: list[tuple[dict, list[Point]]], path: Path) -> None:
    """Predicted against measured, log-log, one colour per set, the diagonal = exact."""
    times = [t for _, ps in sets for p in ps for t in (p.measured_s, p.ncdc_s)]
    lo, hi = math.log10(min(times)) - 0.2, math.log10(max(times)) + 0.2
    left, top, size = 70.0, 40.0, 420.0

    def px(t: float) -> float:
        return left + (math.log10(t) - lo) / (hi - lo) * size

    def py(t: float) -> float:
        return top + size - (math.log10(t) - lo) / (hi - lo) * size

    items: list = [
        Text(left, 24, "ncdc predicted (y) against measured (x), seconds, log-log", 12),
        Shape(Rect(left, top, size, size), "none"),
        Line(((px(10**lo), py(10**lo)), (px(10**hi), py(10**hi))), "#999999", 1.0, "4 3"),
    ]
    for e in range(math.ceil(lo), math.floor(hi) + 1):
        items.append(Text(px(10**e) - 10, top + size + 16, f"1e{e}", 9))
        items.append(Text(left - 36, py(10**e) + 3, f"1e{e}", 9))
    for i, (data, points) in enumerate(sets):
        colour = COLOURS[i % len(COLOURS)]
        items += [Dot(px(p.measured_s), py(p.ncdc_s), 4, colour) for p in points]
        items.append(Dot(left + size + 20, top + 14 * i + 6, 4, colour))
        items.append(Text(left + size + 30, top + 14 * i + 10, data["name"], 10))
    write_picture(Picture("model accuracy", left + size + 170, top + size + 40, tuple(items)), path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, help="write predicted against measured here")
    parser.add_argument("--points", action="store_true", help="print every point too")
    args = parser.parse_args(argv)
    sets = load_sets()
    before = load_before()
    since = before.get("commit", "?")
    head = ("set", "structure", "timing", "n", "ncdc median", "ncdc worst", "median before",
            "worst before", "before at", "kernel only median", "harness overhead",
            "naive median", "naive worst")  # fmt: skip
    print(" | ".join(head))
    for row in summary_rows(sets, before.get("sets"), since):
        print(" | ".join(row))
    short, then = short_calls(sets), before.get("short")
    if short:
        was = f" (at {since}: {then['median']:.0%}, {then['worst']:.0%})" if then else ""
        print(f"calls under {SHORT_S * 1e6:.0f} us: {len(short)} points, median "
              f"{statistics.median(short):.0%}, worst {max(short):.0%}{was}")  # fmt: skip
    if args.points:
        for _, points in sets:
            for p in points:
                mark = " (calibration)" if p.calibrate else ""
                mark += f" (fixed {p.fitted})" if p.fitted else ""
                print(f"{p.set_name}: {p.label}{mark}: measured {p.measured_s * 1e6:.1f} us, "
                      f"ncdc {p.ncdc_s * 1e6:.1f} us, naive {p.naive_s * 1e6:.1f} us")  # fmt: skip
    if args.svg:
        draw(sets, args.svg)
        print(f"wrote {args.svg}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
