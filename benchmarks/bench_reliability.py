"""The CPU backend's guard and the reading limits, measured: the memory estimate against the
measured peak of a few emulations, the Ctrl-C latency of an emulated kernel, and the time
to validate a diagram of 3,000 operations.

    .venv/bin/python benchmarks/bench_reliability.py [--ctrl-c-trials 5]

Each emulation runs `ncdc run --backend cpu` in its own process, whose peak resident
memory (ru_maxrss) is the measurement. Prints one markdown table per measurement
(BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CASES = [
    ("softmax", {"m": 512, "n": 4096}),
    ("softmax", {"m": 2048, "n": 8192}),
    ("layernorm", {"m": 1024, "n": 4096}),
    ("matmul", {"m": 256, "n": 256, "k": 256}),
    ("attention", {"b": 1, "h": 2, "q": 256, "x": 256}),
    ("attention", {"b": 1, "h": 4, "q": 1024, "x": 1024}),
]

SPIN = '''
import sys, time
import numpy as np
from ncdc.backends import cpu
src = """#include "ncdc_runtime.cuh"
#include <ctime>
extern "C" __global__ void spin(int* x) {
  timespec t0, t; clock_gettime(CLOCK_MONOTONIC, &t0);
  do { clock_gettime(CLOCK_MONOTONIC, &t); } while (t.tv_sec - t0.tv_sec < 30);
  x[0] = 1;
}
NCDC_EXPORT_KERNEL(spin);
"""
module = cpu.build(src)
print("launching", flush=True)
try:
    module.launch("spin", 1, 1, [np.zeros(1, np.int32)])
except KeyboardInterrupt:
    sys.exit(130)
'''


def peak_of_run(name: str, sizes: dict[str, int], env: dict[str, str]) -> tuple[int, float]:
    """(peak RSS in bytes, wall seconds) of one `ncdc run` in a fresh process."""
    sets = [arg for axis, size in sizes.items() for arg in ("--set", f"{axis}={size}")]
    args = [sys.executable, "-m", "ncdc", "run", str(REPO / "diagrams" / f"{name}.yaml"), *sets]
    # A fresh grandchild per run, so RUSAGE_CHILDREN holds only its peak.
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "p = subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, "
        "time.perf_counter() - t, p.returncode)"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    if out[2] != "0":
        raise SystemExit(f"ncdc run {name} {sizes} exited {out[2]}")
    return int(out[0]), float(out[1])


def estimate_of(name: str, sizes: dict[str, int]) -> int:
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.model.records import plan_to_dict
    from ncdc.plan.choose import choose_plan
    from ncdc.render import render_plan
    from ncdc.verify.run import estimate_emulation

    d = load_diagram(REPO / "diagrams" / f"{name}.yaml", sizes)
    plan = choose_plan(d, load_hardware("h200"), use_tuned=False)
    return estimate_emulation(d, render_plan(plan), plan_to_dict(plan)).memory_bytes


def memory_table(env: dict[str, str]) -> None:
    print("| diagram | sizes | estimate | measured peak | estimate / peak | run |")
    print("|---|---|---:|---:|---:|---:|")
    for name, sizes in CASES:
        peak, seconds = peak_of_run(name, sizes, env)
        est = estimate_of(name, sizes)
        shown = " ".join(f"{a}={n}" for a, n in sizes.items())
        print(f"| {name} | {shown} | {est / 2**20:.0f} MiB | {peak / 2**20:.0f} MiB | "
              f"{est / peak:.2f} | {seconds:.1f} s |")  # fmt: skip


def ctrl_c_latency(env: dict[str, str], trials: int) -> None:
    latencies = []
    for _ in range(trials):
        proc = subprocess.Popen([sys.executable, "-c", SPIN], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "launching"
        time.sleep(0.5)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        latencies.append(time.perf_counter() - sent)
    median, worst = statistics.median(latencies) * 1e3, max(latencies) * 1e3
    print(f"Ctrl-C to exit during an emulated kernel, {trials} trials: median {median:.0f} ms, "
          f"worst {worst:.0f} ms")  # fmt: skip


def validation_time() -> None:
    from ncdc.language.load import load_diagram_text

    for n in (300, 3000):
        ops = "\n".join(f"  - Y{i} = relu(Y{i - 1})" for i in range(2, n + 1))
        text = (
            "ncdc: 1\nname: chain\naxes: {m: 64, n: 64}\ninputs:\n"
            f"  X: {{axes: [m, n], dtype: fp32}}\nops:\n  - Y1 = relu(X)\n{ops}\noutputs: [Y{n}]\n"
        )
        best = min(_timed(lambda t=text: load_diagram_text(t, "chain.yaml")) for _ in range(3))
        print(f"validating {n} operations (read, parse, infer): best of 3 {best * 1e3:.0f} ms")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctrl-c-trials", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ncdc-bench-") as tmp:
        env = {**os.environ, "NCDC_CACHE": tmp, "PYTHONPATH": str(REPO)}
        memory_table(env)
        print()
        ctrl_c_latency(env, opts.ctrl_c_trials)
    validation_time()


if __name__ == "__main__":
    main()
