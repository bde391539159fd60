"""Static speed of every library diagram's kernels, read from their SASS (no GPU).

For each diagrams/*.yaml on h200 (sm_90a) and a100 (sm_80), `ncdc compile` builds the
kernels and `ncdc.backends.sass` reads each one's main loop (a memory-bound loop: the path a
planned row runs, `loop_bounds.stream_path`). Per kernel, one row:

- tensor FLOP per issued instruction in the main loop (0 for memory-bound kernels);
- issue: the fraction of peak the loop reaches if issue slots were its only limit, with
  one warp per sub-partition (4 an SM, one instruction a clock each). Tensor kernels: the
  tensor pipe's busy share, tensor cycles / issue cycles (capped at 1). Memory kernels:
  the global bytes 4 warps move per issue-cycle of the loop over the copy bandwidth per
  SM per clock (the profile's measured HBM copy bandwidth / SMs / sustained clock);
- smem: the same with the shared-memory cycles (128 B a clock an SM) as the only limit;
- latency (memory kernels): Little's law. The SM's resident warps (ptxas's occupancy)
  each wait `round trips` times `--latency` cycles per iteration (`loop_bounds.round_trips`:
  loads issued before the first use share a trip) and move the loop's global bytes
  meanwhile: warps x bytes / (trips x latency) per clock, over the copy bandwidth.

A fraction of 1 means that resource does not bound the kernel below peak; for memory
kernels the table adds how far above the copy bandwidth the limit lies ("3.2x"). The compile runs
in a source tree of choice (`--tree`, e.g. a `git worktree` of an older commit), the
analysis always with this tree's `ncdc.backends.sass`, so two trees compare under one ruler.

    python benchmarks/static_speed.py                      # this tree
    python benchmarks/static_speed.py --tree /tmp/before   # another checkout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ncdc.backends import loop_bounds, sass
from ncdc.hardware.arch import SUB_PARTITIONS
from ncdc.hardware.load import load_hardware

ROOT = Path(__file__).resolve().parent.parent
TARGETS = (("h200", "sm_90a"), ("a100", "sm_80"))
# Loaded DRAM latency in SM cycles assumed for the latency bound: idle DRAM latency is
# some 500-600 cycles on Ampere and Hopper; under full bandwidth queues add to it, so a
# figure above it keeps the estimate on the safe side.
LATENCY_CYCLES = 800


def compile_diagram(tree: Path, spec: Path, hw: str, arch: str, out: Path) -> dict | None:
    """`ncdc compile` of `spec` inside `tree` (its package and templates): its JSON report,
    or None when the architecture cannot run it (fp8 on sm_80: exit 2, one line)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "ncdc", "compile", str(spec), "--hardware", hw,
           "--arch", arch, "-o", str(out), "-j", "1", "--format", "json"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    # an architecture without what the diagram needs (fp8 before sm_89, wgmma-only fp8
    # attention before sm_90a): one line naming the architecture to use
    if done.returncode == 2 and ("--arch" in done.stderr or "sm_90a" in done.stderr):
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{spec.name} on {hw}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def kernel_rows(report: dict, cubin: bytes, hw_name: str, latency: float) -> list[dict]:
    hw = load_hardware(hw_name)
    quoted = hw.quoted_hz.get("tensor.bf16", hw.clock_hz)
    per_clock = hw.rates["tensor"].get("bf16", 0.0) / (hw.limits.sms * quoted)
    sustained = hw.achievable.clock_hz or hw.clock_hz
    copy = hw.achieved_bandwidth("hbm") / (hw.limits.sms * sustained)  # B per clock an SM
    warps = {  # resident warps an SM, from ptxas's registers and the launch
        k["name"]: k["resources"]["blocks_per_sm"] * math.prod(k["block"]) // 32
        for k in report["kernels"]
    }
    rows = []
    for name, body in sass.split_functions(sass.disassemble(cubin)).items():
        b = loop_bounds.kernel_bound(sass.parse_sass(body), per_clock)
        c = b.cycles
        row = {"kernel": name, "flop_per_issue": b.flops_per_issue, "trips": b.round_trips}
        if b.tensor_flops:
            row["issue"] = min(1.0, c["tensor"] / c["issue"]) if c["issue"] else 0.0
            row["smem"] = min(1.0, c["tensor"] / c["smem"]) if c["smem"] else 1.0
            row["latency"] = None
        else:
            moved = SUB_PARTITIONS * b.global_bytes  # 4 warps, one iteration each
            row["issue"] = moved / c["issue"] / copy if c["issue"] else float("inf")
            row["smem"] = moved / c["smem"] / copy if c["smem"] else float("inf")
            in_flight = warps.get(name, 0) * b.global_bytes
            trips = max(1, b.round_trips)
            row["latency"] = in_flight / (trips * latency) / copy
        rows.append(row)
    return rows


def measure(tree: Path, latency: float) -> list[dict]:
    out = []
    for spec in sorted((tree / "diagrams").glob("*.yaml")):
        for hw, arch in TARGETS:
            with tempfile.TemporaryDirectory(prefix="ncdc-static-") as tmp:
                report = compile_diagram(tree, spec, hw, arch, Path(tmp))
                if report is None:
                    continue
                cubin = (Path(tmp) / f"{report['name']}.cubin").read_bytes()
            for row in kernel_rows(report, cubin, hw, latency):
                out.append({"diagram": spec.stem, "hardware": f"{hw}/{arch}", **row})
    return out


def print_table(rows: list[dict]) -> None:
    def pct(x: float | None) -> str:  # over 1: the headroom beside the capped fraction
        if x is None:
            return "-"
        return f"{min(x, 1.0):.0%}" + (f" ({x:.1f}x)" if x > 1 and x != float("inf") else "")

    print("| diagram | hardware | kernel | tensor FLOP/issue | issue | smem | latency (trips) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        lat = "-" if r["latency"] is None else f"{pct(r['latency'])} ({r['trips']})"
        print(f"| {r['diagram']} | {r['hardware']} | {r['kernel']} | {r['flop_per_issue']:.0f} "
              f"| {pct(r['issue'])} | {pct(r['smem'])} | {lat} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree to compile in")
    parser.add_argument("--latency", type=float, default=LATENCY_CYCLES, help="DRAM cycles")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = measure(args.tree.resolve(), args.latency)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
