"""Speed of `ncdc cost`: the whole process per diagram (median of several runs) and the
tile search alone, with a check that repeated runs print identical output.

Targets: process < 0.5 s and search < 50 ms per diagram on 2 cores. On a loaded machine
wall times swing; the CPU times (the child's user + system time, and the search's
`time.process_time`) are steadier and are the figures to compare.

    .venv/bin/python benchmarks/bench_cost.py [--hardware h200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ncdc.hardware import load_hardware
from ncdc.spec import load_diagram
from ncdc.tiling import plan_diagram

ROOT = Path(__file__).resolve().parent.parent


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(spec: Path, hardware: str, repeat: int) -> tuple[float, float, bool]:
    """Median wall and CPU seconds of `ncdc cost SPEC`, and whether every run printed the same."""
    wall, cpu, outputs = [], [], set()
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), _child_cpu_s()
        done = subprocess.run(
            [sys.executable, "-m", "ncdc", "cost", str(spec), "--hardware", hardware,
             "--format", "json"],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        wall.append(time.perf_counter() - start)
        cpu.append(_child_cpu_s() - start_cpu)
        outputs.add(done.stdout)
    return statistics.median(wall), statistics.median(cpu), len(outputs) == 1


def time_search(spec: Path, hardware: str, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `plan_diagram` (with the unfused comparison), after
    one run that is not counted."""
    hw = load_hardware(hardware)
    diagram = load_diagram(spec)
    plan_diagram(diagram, hw)
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        plan_diagram(diagram, hw)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    head = ("diagram", "process", "(cpu)", "search", "(cpu)")
    print(f"{head[0]:<20} {head[1]:>10} {head[2]:>10} {head[3]:>10} {head[4]:>10}  same output")
    worst = [0.0] * 4
    for spec in sorted((ROOT / "diagrams").glob("*.yaml")):
        *process, same = time_process(spec, args.hardware, args.repeat)
        figures = [*process, *time_search(spec, args.hardware, args.repeat)]
        worst = [max(w, f) for w, f in zip(worst, figures, strict=True)]
        print(f"{spec.stem:<20} " + _row(figures) + f"  {same}")
    print(f"{'worst':<20} " + _row(worst) + "  (targets 500 ms, 50 ms)")


def _row(figures: list[float]) -> str:
    return " ".join(f"{f * 1e3:8.1f}ms" for f in figures)


if __name__ == "__main__":
    main()
