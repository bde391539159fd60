"""Speed of `ncdc cost`: the whole process per diagram (median of several runs) and the
tile search alone, with a check that repeated runs print identical output.

Targets: process < 0.5 s and search < 50 ms per diagram on 2 cores.

    .venv/bin/python benchmarks/bench_cost.py [--hardware h200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ncdc.hardware import load_hardware
from ncdc.spec import load_diagram
from ncdc.tiling import plan_diagram

ROOT = Path(__file__).resolve().parent.parent


def time_process(spec: Path, hardware: str, repeat: int) -> tuple[float, bool]:
    times, outputs = [], set()
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ncdc", "cost", str(spec), "--hardware", hardware,
             "--format", "json"],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        times.append(time.perf_counter() - start)
        outputs.add(done.stdout)
    return statistics.median(times), len(outputs) == 1


def time_search(spec: Path, hardware: str, repeat: int) -> float:
    hw = load_hardware(hardware)
    diagram = load_diagram(spec)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan_diagram(diagram, hw)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'diagram':<20} {'process':>10} {'search':>10}  same output")
    worst_process = worst_search = 0.0
    for spec in sorted((ROOT / "diagrams").glob("*.yaml")):
        process, same = time_process(spec, args.hardware, args.repeat)
        search = time_search(spec, args.hardware, args.repeat)
        worst_process, worst_search = max(worst_process, process), max(worst_search, search)
        print(f"{spec.stem:<20} {process * 1e3:8.0f}ms {search * 1e3:8.1f}ms  {same}")
    print(f"{'worst':<20} {worst_process * 1e3:8.0f}ms {worst_search * 1e3:8.1f}ms  "
          f"(targets 500 ms, 50 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
