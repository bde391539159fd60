"""How `ncdc check` and `ncdc draw` scale with a diagram's length: a chain of n elementwise
operations (Y1 = relu(X), Y2 = relu(Y1), ...), checked (validated, planned with its kernel
breaks weighed, rendered) and drawn, for n from 10 to 3,000.

    .venv/bin/python benchmarks/bench_check_scaling.py [--sizes 10,100,1000] [--no-draw]

Targets (issue 31): a 1,000-op chain checks in under 5 s and draws in under 10 s. The time
per operation should stay flat as n grows; a quadratic step shows as a column that grows
with n. Prints one markdown table (BENCHMARKS.md records it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = (10, 30, 100, 300, 1000, 3000)


def chain_text(n: int) -> str:
    """A spec of `n` operations, each reading the one before it."""
    ops = "".join(f"  - Y{i} = relu(Y{i - 1})\n" for i in range(2, n + 1))
    return (
        "ncdc: 1\nname: chain\naxes: {m: 64, n: 64}\ninputs:\n"
        f"  X: {{axes: [m, n], dtype: fp32}}\nops:\n  - Y1 = relu(X)\n{ops}outputs: [Y{n}]\n"
    )


def time_check(spec: Path) -> float:
    from ncdc.backends.targets import target_hardware
    from ncdc.hardware.load import load_hardware
    from ncdc.verify.gate import check_spec

    machine = target_hardware(load_hardware("h200"), None)
    start = time.perf_counter()
    result = check_spec(spec, machine)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"{spec}: {result.error}")
    return elapsed


def time_draw(spec: Path, out: Path) -> float:
    from ncdc.draw import draw_to_file, pick_mode
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram

    start = time.perf_counter()
    draw_to_file(load_diagram(spec), load_hardware("h200"), out, pick_mode(False, False, False))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--no-draw", action="store_true", help="time check only")
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    print("| ops | spec bytes | check s | check ms/op | draw s | draw ms/op |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="ncdc-bench-") as tmp:
        for n in sizes:
            spec = Path(tmp) / f"chain{n}.yaml"
            spec.write_text(chain_text(n))
            checked = time_check(spec)
            row = f"| {n} | {spec.stat().st_size:,} | {checked:.2f} | {checked / n * 1e3:.2f}"
            if opts.no_draw:
                print(f"{row} | - | - |", flush=True)
                continue
            drawn = time_draw(spec, Path(tmp) / f"chain{n}.svg")
            print(f"{row} | {drawn:.2f} | {drawn / n * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
