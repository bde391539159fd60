"""Speed of `ncdc cost`: the whole process per diagram (median of several runs, for the
table a person reads and for `--format json`) and the tile search alone, with a check that
repeated runs print identical output.

Targets (issue: cost): process < 0.5 s and search < 50 ms per diagram on 2 cores. On a
loaded machine wall times swing; the CPU times (the child's user + system time, and the
search's `time.process_time`) are steadier and are the figures the verdict uses.

The child processes run as a user's would: with bytecode caches written (an environment
that sets PYTHONDONTWRITEBYTECODE recompiles every module on every start, about 0.1 s),
after one run that is not counted.

    .venv/bin/python benchmarks/bench_cost.py [--hardware h200] [--repeat 5]

Exit code 0 when every figure is within its target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram

ROOT = Path(__file__).resolve().parent.parent
PROCESS_TARGET_S = 0.5
SEARCH_TARGET_S = 0.050


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(spec: Path, hardware: str, fmt: str, repeat: int) -> tuple[float, float, bool]:
    """Median wall and CPU seconds of `ncdc cost SPEC --format FMT`, and whether every run
    printed the same."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, "-m", "ncdc", "cost", str(spec), "--hardware", hardware,
               "--format", fmt]  # fmt: skip
    subprocess.run(command, capture_output=True, check=True, cwd=ROOT, env=env)
    wall, cpu, outputs = [], [], set()
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), _child_cpu_s()
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, cwd=ROOT, env=env
        )
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    head = ["table", "(cpu)", "json", "(cpu)", "search", "(cpu)"]
    print(f"{'diagram':<20} " + " ".join(f"{h:>10}" for h in head) + "  same output")
    worst = [0.0] * len(head)
    all_same = True
    for spec in sorted((ROOT / "diagrams").glob("*.yaml")):
        *table, same_table = time_process(spec, args.hardware, "table", args.repeat)
        *json, same_json = time_process(spec, args.hardware, "json", args.repeat)
        figures = [*table, *json, *time_search(spec, args.hardware, args.repeat)]
        worst = [max(w, f) for w, f in zip(worst, figures, strict=True)]
        all_same = all_same and same_table and same_json
        print(f"{spec.stem:<20} " + _row(figures) + f"  {same_table and same_json}")
    print(f"{'worst':<20} " + _row(worst))
    process_cpu, search_cpu = max(worst[1], worst[3]), worst[5]
    met = process_cpu < PROCESS_TARGET_S and search_cpu < SEARCH_TARGET_S and all_same
    print(
        f"targets: process {process_cpu * 1e3:.0f} ms CPU (< {PROCESS_TARGET_S * 1e3:.0f}), "
        f"search {search_cpu * 1e3:.1f} ms CPU (< {SEARCH_TARGET_S * 1e3:.0f}), "
        f"identical output {all_same}: {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


def _row(figures: list[float]) -> str:
    return " ".join(f"{f * 1e3:8.1f}ms" for f in figures)


if __name__ == "__main__":
    sys.exit(main())
