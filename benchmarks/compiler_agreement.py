"""How often does the compiler refute the model's first choice? Per spec and kernel of
diagrams/ and tests/specs/, the candidate the model ranks first beside the one
`ncdc compile` settles on after ptxas's report (ncdc.plan.feedback.settle), and the
register count the family estimated beside the one ptxas allocated.

    .venv/bin/python benchmarks/compiler_agreement.py [--hardware h200] [--arch sm_90a]
        [--json out.json]

Prints one row per kernel whose launch was replaced, then the counts: kernels, replaced,
and the register estimate's error (median and worst ratio to ptxas's count). Compiles
every kernel with NVRTC (through the compile cache): minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ncdc.backends.compile import compile_plan
from ncdc.errors import NcdcError
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram

ROOT = Path(__file__).resolve().parent.parent


def measure(hardware: str, arch: str) -> list[dict]:
    hw = load_hardware(hardware)
    rows = []
    specs = sorted((ROOT / "diagrams").glob("*.yaml")) + sorted(
        (ROOT / "tests/specs").glob("*.yaml")
    )
    for spec in specs:
        try:
            plan = plan_diagram(load_diagram(spec), hw)
            report = compile_plan(plan, arch)
        except NcdcError:
            continue  # not built for this profile (refused by check too)
        at = 0
        for first, kept in zip(plan.kernels, report.plan.kernels, strict=True):
            count = len(kept.candidate.launches) if kept.candidate else 1
            launches = report.kernels[at : at + count]
            at += count
            estimated = first.candidate.registers if first.candidate else 0
            rows.append({
                "spec": spec.stem,
                "kernel": first.kernel.name,
                "family": first.family.name,
                "replaced": bool(first.candidate and kept.candidate)
                and first.candidate != kept.candidate.with_registers(estimated),
                "estimated_registers": estimated,
                "ptxas_registers": max(k.registers for k in launches),
                "spills": sum(k.spill_stores_bytes + k.spill_loads_bytes for k in launches),
                "notes": [n for n in report.notes if f"kernel {first.kernel.name}:" in n],
            })  # fmt: skip
    return rows


def summary(rows: list[dict]) -> str:
    replaced = [r for r in rows if r["replaced"]]
    ratios = [
        r["estimated_registers"] / r["ptxas_registers"]
        for r in rows
        if r["ptxas_registers"] and r["estimated_registers"]
    ]
    worst = max(ratios, key=lambda x: abs(x - 1)) if ratios else 0
    return (
        f"{len(rows)} kernels, {len(replaced)} replaced after the compiler's report; register "
        f"estimate / ptxas: median {statistics.median(ratios):.2f}, worst {worst:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--arch", default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    arch = args.arch or load_hardware(args.hardware).arch
    rows = measure(args.hardware, arch)
    for r in rows:
        if r["replaced"]:
            print(f"{r['spec']}/{r['kernel']} ({r['family']}): {'; '.join(r['notes'])}")
    print(summary(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
