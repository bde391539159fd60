"""Does the kernel the cost model priced launch as priced? Per diagram and kernel, the
planned launch (`KernelPlan`: grid, 32 x warps threads, smem_bytes) beside the rendered one
(the family renderer's first `Launch`: grid, block, dynamic shared memory), and the count
of kernels where any of the three differs.

With `--compile`, the shared memory of the rendered kernel is its static (from NVRTC's
resource report) plus its dynamic bytes; without, only the dynamic bytes are known, so a
kernel that declares its shared memory statically shows 0 there.

    .venv/bin/python benchmarks/launch_agreement.py [--hardware h200] [--compile]

Exit code 0 when every kernel agrees, 1 otherwise (a count, not a speed target).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ncdc.cost import KernelPlan, Plan
from ncdc.hardware import load_hardware
from ncdc.render import Launch, get_renderer
from ncdc.spec import load_diagram
from ncdc.tiling import plan_diagram

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


def compare_kernel(kp: KernelPlan, plan: Plan, static_smem: dict[str, int] | None) -> Agreement:
    """The planned launch of `kp` beside the first launch its family renders."""
    launches = get_renderer(kp.family.name)(kp, plan).launches
    main: Launch = launches[0]
    smem = main.dynamic_smem + (static_smem or {}).get(main.kernel, 0)
    return Agreement(
        plan.graph.diagram.name, kp.kernel.name, kp.family.name,
        (kp.grid, 32 * kp.warps, kp.smem_bytes),
        (math.prod(main.grid), math.prod(main.block), smem),
        len(launches),
    )  # fmt: skip


def static_smem_of(plan: Plan, arch: str) -> dict[str, int]:
    """Static shared memory per kernel name, from NVRTC's resource report (cached)."""
    from ncdc.compile import compile_plan

    report = compile_plan(plan, arch)
    return {k.launch.kernel: k.static_smem_bytes for k in report.kernels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--compile", action="store_true", help="add NVRTC's static smem")
    args = parser.parse_args()
    hw = load_hardware(args.hardware)
    rows: list[Agreement] = []
    for spec in sorted((ROOT / "diagrams").glob("*.yaml")):
        plan = plan_diagram(load_diagram(spec), hw)
        static = static_smem_of(plan, hw.arch) if args.compile else None
        rows.extend(compare_kernel(kp, plan, static) for kp in plan.kernels)
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
    smem_note = "static + dynamic" if args.compile else "dynamic only"
    print(
        f"\n{len(bad)} of {len(rows)} kernels launch differently from their plan on "
        f"{hw.name} (rendered smem: {smem_note}); grid {sum('grid' in r.differs for r in rows)}, "
        f"threads {sum('threads' in r.differs for r in rows)}, "
        f"smem {sum('smem' in r.differs for r in rows)}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
