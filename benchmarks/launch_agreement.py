"""Does the kernel the cost model priced launch as priced? Per spec and kernel, the planned
launch (`KernelPlan`: grid, 32 x warps threads, smem_bytes) beside the rendered one (the
family's first `Launch`: grid, block, dynamic shared memory), and the count of kernels
where any of the three differs, over diagrams/ and tests/specs/.

With `--compile`, the launch `ncdc compile` reports is compared too (after the compiler's
feedback, which may replace a candidate: the report's plan must launch what it compiled).

    .venv/bin/python benchmarks/launch_agreement.py [--hardware h200] [--compile]

Exit code 0 when every kernel agrees, 1 otherwise (a count, not a speed target).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ncdc.families import get_family
from ncdc.families.base import Launch
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.values import KernelPlan, Plan
from ncdc.plan.search import plan_diagram

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Agreement:
    """One kernel: what the plan priced and what the renderer launches."""

    diagram: str
    kernel: str
    family: str
    planned: tuple[int, int, int]  # grid blocks, threads per block, shared memory bytes
    rendered: tuple[int, int, int]
    launches: int  # launches the renderer makes for this kernel (split-k adds a combine)

    @property
    def differs(self) -> list[str]:
        names = ("grid", "threads", "smem")
        return [n for n, p, r in zip(names, self.planned, self.rendered, strict=True) if p != r]


def compare_kernel(kp: KernelPlan, plan: Plan, compiled: list[Launch] | None) -> Agreement:
    """The planned launch of `kp` beside the first launch its family renders (or, given
    `compiled`, the launches `ncdc compile` reported for the plan)."""
    launches = get_family(kp.family.name).render(kp, plan).launches
    main: Launch = launches[0]
    if compiled is not None:
        main = next(c for c in compiled if c.kernel == main.kernel)
    smem = main.dynamic_smem
    return Agreement(
        plan.graph.diagram.name, kp.kernel.name, kp.family.name,
        (kp.grid, 32 * kp.warps, kp.smem_bytes),
        (math.prod(main.grid), math.prod(main.block), smem),
        len(launches),
    )  # fmt: skip


def compiled_plan(plan: Plan, arch: str) -> tuple[Plan, list[Launch]]:
    """The plan `ncdc compile` settles on and the launches it reports (cached compiles)."""
    from ncdc.backends.compile import compile_plan

    report = compile_plan(plan, arch)
    return report.plan, [k.launch for k in report.kernels]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--compile", action="store_true", help="compare the compiled launch")
    args = parser.parse_args()
    hw = load_hardware(args.hardware)
    rows: list[Agreement] = []
    specs = sorted((ROOT / "diagrams").glob("*.yaml")) + sorted(
        (ROOT / "tests/specs").glob("*.yaml")
    )
    for spec in specs:
        plan = plan_diagram(load_diagram(spec), hw)
        compiled = None
        if args.compile:
            plan, compiled = compiled_plan(plan, hw.arch)
        rows.extend(compare_kernel(kp, plan, compiled) for kp in plan.kernels)
    print(
        f"{'diagram':<18} {'kernel':<26} {'family':<17} "
        f"{'planned grid/threads/smem':>28} {'rendered grid/threads/smem':>28}  differs"
    )
    for r in rows:
        planned = "/".join(map(str, r.planned))
        extra = f" (+{r.launches - 1})" if r.launches > 1 else ""  # a split-k combine
        rendered = "/".join(map(str, r.rendered)) + extra
        print(
            f"{r.diagram:<18} {r.kernel:<26} {r.family:<17} {planned:>28} {rendered:>28}  "
            f"{', '.join(r.differs) or '-'}"
        )
    bad = [r for r in rows if r.differs]
    against = "the compiled launch" if args.compile else "the rendered launch"
    print(
        f"\n{len(bad)} of {len(rows)} kernels launch differently from their plan on "
        f"{hw.name} ({against}); grid {sum('grid' in r.differs for r in rows)}, "
        f"threads {sum('threads' in r.differs for r in rows)}, "
        f"smem {sum('smem' in r.differs for r in rows)}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
