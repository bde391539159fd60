"""The compiler's word on a plan: a kernel priced again with the registers ptxas gave it or
with its compiled SASS's main loop, and the next-best candidates to try when the compiler
refutes the model's first (a spill, lost occupancy); `settle` picks the one that compiles
as priced, the same whether the outcomes come from NVRTC (`ncdc compile`) or from the
compile cache (`ncdc cost`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ncdc.model.cost import evaluate_kernel, summarize
from ncdc.model.issue import LoopMix
from ncdc.model.structure import KernelModel
from ncdc.model.values import KernelPlan, Plan, TileChoice
from ncdc.plan.kernels import rank_kernel


def kernel_alternatives(plan: Plan, index: int, top_k: int) -> list[KernelPlan]:
    """The `top_k` best candidates of the plan's kernel `index` under its fixed tiles, best
    first (the plan's own choice is the first, unless tuned tiles put it elsewhere)."""
    graph = plan.graph
    return rank_kernel(graph, graph.kernels[index], plan.fixed, top_k)


def with_kernel(plan: Plan, index: int, kp: KernelPlan) -> Plan:
    """`plan` with its kernel `index` run as `kp`; the totals summed again."""
    kernels = list(plan.kernels)
    kernels[index] = kp
    return _with_kernels(plan, kernels)


def retime_kernel(plan: Plan, kp: KernelPlan, registers: int) -> KernelPlan:
    """`kp` priced again with the registers per thread the compiler reported: occupancy,
    waves and time follow from them (ncdc.backends.compile feeds ptxas's count back here)."""
    c = kp.candidate
    if c is None or c.registers == registers:
        return kp
    hw = plan.graph.hardware
    model = KernelModel(plan.graph.diagram, kp.kernel)
    choice = TileChoice(kp.tiles, kp.block_tile, c.with_registers(registers))
    return evaluate_kernel(model, kp.family, hw, choice, kp.instructions)


def with_instructions(plan: Plan, mixes: Mapping[int, LoopMix]) -> Plan:
    """`plan` with kernel i priced on the main-loop mix `mixes[i]` (counted from its
    compiled SASS, ncdc.backends.loop_mixes.loop_mix) instead of its family's estimate."""
    if not mixes:
        return plan
    kernels = list(plan.kernels)
    for i, mix in mixes.items():
        kp = kernels[i]
        model = KernelModel(plan.graph.diagram, kp.kernel)
        choice = TileChoice(kp.tiles, kp.block_tile, kp.candidate)
        kernels[i] = evaluate_kernel(model, kp.family, plan.graph.hardware, choice, mix)
    return _with_kernels(plan, kernels)


def _with_kernels(plan: Plan, kernels: list[KernelPlan]) -> Plan:
    """`plan` with these kernel plans, the totals summed again; what the plan knew beside
    its kernels (the fixed tiles, the breaks weighed, the unfused comparison, the notes)
    kept."""
    return replace(
        summarize(plan.graph, tuple(kernels), plan.unfused),
        fixed=plan.fixed, breaks=plan.breaks, notes=plan.notes,
    )  # fmt: skip


# ------------------------------------------------------------------ settling on a candidate

FALLBACK_TRIES = 4  # candidates of one kernel compiled before settling for the best seen


@dataclass(frozen=True)
class Built:
    """What the compiler made of one kernel of a plan, over its launches: the registers
    and spilled bytes ptxas reported, and the main launch's registers and blocks per SM."""

    spills: int
    registers: int  # the most of any launch: the plan is priced with these
    main_registers: int
    main_blocks_per_sm: int

    def problem(self, kp: KernelPlan) -> str:
        """Why the kernel is not as `kp` priced it, or "" when it is."""
        if self.spills:
            return f"spills {self.spills} B of registers"
        if kp.candidate is not None and self.main_blocks_per_sm < kp.blocks_per_sm:
            return (
                f"takes {self.main_registers} registers per thread, so "
                f"{self.main_blocks_per_sm} blocks per SM instead of the {kp.blocks_per_sm} "
                "priced"
            )
        return ""


# A plan -> what the compiler made of each of its kernels; None where that is not known (a
# kernel not in the compile cache, when nothing may be compiled).
Build = Callable[[Plan], Sequence[Built] | None]


@dataclass(frozen=True)
class Settled:
    """The candidates the compiler confirmed: `built` is the plan as compiled, `plan` the
    same priced with the compiler's registers, `notes` what was replaced and why."""

    built: Plan
    plan: Plan
    notes: tuple[str, ...]


def settle(plan: Plan, build: Build, tries: int = FALLBACK_TRIES) -> Settled | None:
    """The plan the compiler confirms, kernel by kernel: a kernel that spills, or whose
    registers give fewer blocks per SM than the plan assumed so that its re-priced time
    exceeds the next-best candidate's, is replaced by that candidate when it compiles to
    something better (up to `tries` candidates a kernel). When every candidate tried
    spills, the one fastest re-priced is kept, with a note. None when `build` cannot say
    what a plan compiles to (not compiled, and nothing may be)."""
    built = build(plan)
    if built is None:
        return None
    notes: list[str] = []
    for index in range(len(plan.kernels)):
        found = _settle_kernel(plan, built, index, build, tries, notes)
        if found is None:
            return None
        plan, built = found
    priced = plan
    for i, b in enumerate(built):
        priced = with_kernel(priced, i, retime_kernel(priced, priced.kernels[i], b.registers))
    return Settled(plan, replace(priced, notes=tuple(notes)), tuple(notes))


def _settle_kernel(
    plan: Plan, built: Sequence[Built], index: int, build: Build, tries: int, notes: list[str]
) -> tuple[Plan, Sequence[Built]] | None:
    """`plan` (and what it compiles to) with kernel `index` run by the best candidate the
    compiler confirms; a note appended when it is not the model's first."""
    first = plan.kernels[index]
    best: tuple[tuple[bool, float], Plan, Sequence[Built], str] | None = None
    alternatives: list[KernelPlan] | None = None
    first_why = ""
    while True:
        kp, b = plan.kernels[index], built[index]
        why = b.problem(kp)
        first_why = first_why or why
        score = (b.spills > 0, retime_kernel(plan, kp, b.registers).predicted_time_s)
        if best is None or score < best[0]:
            best = (score, plan, built, why)
        if not why:
            break  # compiled as priced
        if alternatives is None:
            alternatives = [
                a for a in kernel_alternatives(plan, index, tries)
                if a.candidate != first.candidate
            ]  # fmt: skip
        if not alternatives:
            break
        nxt = alternatives.pop(0)
        if not best[0][0] and best[0][1] <= nxt.predicted_time_s:
            break  # re-priced, it still beats what the next candidate can do
        plan = with_kernel(plan, index, nxt)
        found = build(plan)
        if found is None:
            return None
        built = found
    score, chosen, chosen_built, why = best
    kept = chosen.kernels[index]
    if kept.candidate != first.candidate:
        better = (
            "which compiles clean"
            if "spills" in first_why
            else "which is faster priced with the compiler's registers"
        )
        notes.append(
            f"kernel {first.kernel.name}: {candidate_text(first)} {first_why}; replaced by "
            f"the next-best {candidate_text(kept)}, {better}"
        )
    elif why and score[0]:
        notes.append(f"kernel {first.kernel.name}: {why}, and no other candidate compiled clean")
    return chosen, chosen_built


def candidate_text(kp: KernelPlan) -> str:
    """A candidate as notes name it: its tiles, warps and stages."""
    tiles = " ".join(f"{a}={v}" for a, v in kp.block_tile.items() if v > 1)
    return f"({tiles}, {kp.warps} warps, {kp.stages} stages)"
