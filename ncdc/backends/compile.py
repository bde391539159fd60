"""Compiling a plan: render, NVRTC through the compile cache, the resource report, and the
compiler's feedback into the plan.

    plan (cost + tiles) -> render (templates) -> NVRTC (through the compile cache)
      -> a CompileReport (cubin, registers, spills, occupancy per launch)

ptxas's registers re-price each kernel; a candidate the compiler refutes (a spill, lost
occupancy) is replaced by the next-best that compiles as priced (ncdc.plan.feedback).
Writing the files is ncdc.backends.outputs.

    >>> report = compile_spec(Path("diagrams/softmax.yaml"), load_hardware("h200"),
    ...                       arch="sm_90a")  # doctest: +SKIP
    >>> report.kernels[0].spill_stores_bytes  # doctest: +SKIP
    0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ncdc.backends.targets import check_arch_supports, default_arch, plan_for_arch
from ncdc.errors import CompileError
from ncdc.hardware.machine import Hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram
from ncdc.model.values import Plan
from ncdc.plan.choose import PlanSource
from ncdc.plan.feedback import Built, settle
from ncdc.render import Launch, RenderedModule, render_plan

if TYPE_CHECKING:
    from ncdc.backends.nvrtc import CompiledModule

MODELLED = PlanSource("model")


@dataclass(frozen=True)
class KernelReport:
    """One compiled kernel: how to launch it and what it uses."""

    launch: Launch
    registers: int
    spill_stores_bytes: int
    spill_loads_bytes: int
    static_smem_bytes: int
    blocks_per_sm: int
    limited_by: str
    occupancy: float  # resident threads / threads an SM can hold


@dataclass(frozen=True)
class CompileReport:
    """A compiled diagram: its plan, source, cubin and per-kernel resources."""

    diagram: Diagram
    plan: Plan
    module: RenderedModule
    arch: str
    cubin: bytes
    nvrtc_version: str
    kernels: tuple[KernelReport, ...]
    notes: tuple[str, ...] = ()  # candidates replaced after the compiler's report, and why
    source: PlanSource = MODELLED  # where the tiles came from

    @property
    def spills(self) -> int:
        return sum(k.spill_stores_bytes + k.spill_loads_bytes for k in self.kernels)


def compile_plan(
    plan: Plan, arch: str, *, use_cache: bool = True, source: PlanSource = MODELLED
) -> CompileReport:
    """Render and compile `plan` for `arch`; the cubin comes from the cache when it can.

    The compiler feeds back (ncdc.plan.feedback.settle): each kernel is priced again with
    ptxas's registers, and a candidate the compiler refutes (a spill, lost occupancy) is
    replaced by the next-best that compiles as priced; the report's `notes` say what was
    replaced and why. When every candidate tried spills, the one fastest re-priced is kept
    (and `--strict` refuses it). `source` says where the plan's tiles came from.
    """
    check_arch_supports(plan, arch)
    reports: dict[int, CompileReport] = {}

    def build(p: Plan) -> list[Built]:
        report = _compile_once(p, arch, use_cache)
        reports[id(p)] = report
        return built_kernels(report)

    settled = settle(plan, build)
    assert settled is not None, "a build that compiles always knows the outcome"
    report = reports[id(settled.built)]
    return dataclasses.replace(report, plan=settled.plan, notes=settled.notes, source=source)


def settle_from_cache(plan: Plan, arch: str) -> Plan:
    """`plan` as `compile_plan` would settle it, from the compile cache alone (nothing is
    compiled): the launch `ncdc compile` built, priced with ptxas's registers and with the
    notes it printed, wherever every kernel it compiled is cached; `plan` as it is
    otherwise."""
    from ncdc.backends.cache import find_cached

    def build(p: Plan) -> list[Built] | None:
        module = render_plan(p)
        compiled = find_cached(module.source, arch, module.cache_name)
        if compiled is None:
            return None
        return built_kernels(_report(p, module, compiled, arch))

    settled = settle(plan, build)
    if settled is None:
        return plan
    return replace_plan(settled.plan, plan)


def replace_plan(settled: Plan, model: Plan) -> Plan:
    """The settled plan with what the model's plan knew beside it (its breaks, the unfused
    comparison, the tiles the user fixed)."""
    return dataclasses.replace(
        settled, breaks=model.breaks, unfused=model.unfused, fixed=model.fixed
    )


def priced_from_sass(report: CompileReport) -> CompileReport:
    """`report` with its plan priced on the cubin's main loops (ncdc.backends.loop_mixes.loop_mix)
    where the SASS tools are installed (`ncdc compile` does this; the main loops are kept
    beside the compile cache, so `ncdc cost` of the same plan finds them); as it is
    otherwise."""
    from ncdc.backends import loop_mixes, sass
    from ncdc.plan.feedback import with_instructions

    if sass.find_tool("cuobjdump") is None or sass.find_tool("nvdisasm") is None:
        return report
    plan = report.plan
    functions = sass.main_loops(report.cubin)
    names = [launch.kernel for launch in report.module.launches]
    plan = with_instructions(plan, loop_mixes.mixes_by_kernel(plan, functions, names))
    return dataclasses.replace(report, plan=plan)


def built_kernels(report: CompileReport) -> list[Built]:
    """What ptxas made of each kernel plan of `report` (a kernel may launch twice)."""
    out, at = [], 0
    for kp in report.plan.kernels:
        count = len(kp.candidate.launches) if kp.candidate else 1
        per = report.kernels[at : at + count]
        at += count
        out.append(
            Built(
                spills=sum(k.spill_stores_bytes + k.spill_loads_bytes for k in per),
                registers=max(k.registers for k in per),
                main_registers=per[0].registers,
                main_blocks_per_sm=per[0].blocks_per_sm,
            )
        )
    return out


def _compile_once(plan: Plan, arch: str, use_cache: bool) -> CompileReport:
    """Render and compile `plan` as it is."""
    from ncdc.backends.cache import cached_compile
    from ncdc.output import progress

    module = render_plan(plan)
    progress(f"compiling {module.cache_name} for {arch}")
    compiled = cached_compile(
        module.source,
        arch,
        name=module.cache_name,
        use_cache=use_cache,
        line_origin=module.origin,
    )
    return _report(plan, module, compiled, arch)


def _report(
    plan: Plan, module: RenderedModule, compiled: CompiledModule, arch: str
) -> CompileReport:
    """The report of `module` (rendered from `plan`) compiled: each launch's resources."""
    check_entry_registers(module, compiled)
    limits = plan.graph.hardware.limits
    kernels = []
    for launch in module.launches:
        res = compiled.resources.get(launch.kernel)
        if res is None:
            raise CompileError(
                f"kernel {launch.kernel} is missing from the compiled module",
                hint="the template and its renderer disagree on the kernel's name",
            )
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        smem = res.static_smem_bytes + launch.dynamic_smem
        blocks, limiter = blocks_per_sm(threads, res.registers, smem, limits)
        kernels.append(
            KernelReport(
                launch, res.registers, res.spill_stores_bytes, res.spill_loads_bytes,
                res.static_smem_bytes, blocks, limiter,
                blocks * threads / limits.threads_per_sm,
            )
        )  # fmt: skip
    return CompileReport(
        plan.graph.diagram, plan, module, arch, compiled.cubin, compiled.nvrtc_version,
        tuple(kernels),
    )  # fmt: skip


# ptxas's warning when it drops every setmaxnreg of a kernel (C7508: "'setmaxnreg' ignored;
# unable to determine register count at entry"); the kernel then runs on one flat allocation.
SETMAXNREG_IGNORED = "'setmaxnreg' ignored"


def check_entry_registers(module: RenderedModule, compiled: CompiledModule) -> None:
    """CompileError unless ptxas gave each setmaxnreg kernel of `module` exactly the
    registers its budgets assume at entry (`Launch.entry_registers`) and kept its
    setmaxnreg: with fewer, the block's pool cannot cover the budgets and the last
    setmaxnreg.inc waits forever on the GPU; with the instructions dropped, the kernel runs
    on budgets it was not priced with."""
    for launch in module.launches:
        res = compiled.resources.get(launch.kernel)
        if not launch.entry_registers or res is None:
            continue
        hint = (
            f"NVRTC {compiled.nvrtc_version} allocates differently from the one these budgets "
            "were set with: --arch sm_90 builds the mma.sync kernels instead"
        )
        if res.registers != launch.entry_registers:
            raise CompileError(
                f"kernel {launch.kernel}: ptxas gave {res.registers} registers a thread, its "
                f"setmaxnreg budgets assume {launch.entry_registers} (it would hang on a GPU)",
                hint=hint,
            )
        if SETMAXNREG_IGNORED in compiled.log:
            raise CompileError(f"kernel {launch.kernel}: ptxas ignored its setmaxnreg", hint=hint)


def compile_spec(
    spec: Path, hardware: Hardware, *, arch: str | None = None,
    sizes: Mapping[str, int] | None = None, tiles: Mapping[str, int] | None = None,
    use_cache: bool = True, use_tuned: bool = True,
) -> CompileReport:  # fmt: skip
    """Load, plan and compile one spec; `use_tuned=False` ignores the tuning cache."""
    return compile_diagram(
        load_diagram(spec, sizes), hardware, arch=arch, tiles=tiles, use_cache=use_cache,
        use_tuned=use_tuned,
    )  # fmt: skip


def compile_diagram(
    diagram: Diagram, hardware: Hardware, *, arch: str | None = None,
    tiles: Mapping[str, int] | None = None, use_cache: bool = True, use_tuned: bool = True,
) -> CompileReport:  # fmt: skip
    """Plan and compile `diagram` (explicit tiles beat tuned beat modelled) as `ncdc
    compile` does, priced on the cubin's SASS where the tools are installed."""
    from ncdc.output import phase

    arch = arch or default_arch(hardware)
    with phase("planning"):
        plan, source, notes = plan_for_arch(diagram, hardware, tiles, arch, use_tuned=use_tuned)
    with phase("compiling"):
        report = compile_plan(plan, arch, use_cache=use_cache, source=source)
    with phase("reading the SASS"):
        return priced_from_sass(dataclasses.replace(report, notes=notes + report.notes))
