"""Which architecture to build for, and which profile to plan with: `--arch` alone plans for
that architecture's profile, `--hardware` wins when given, and a plan made for a profile
whose target has features the chosen architecture lacks (wgmma on sm_90a) is planned again
without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ncdc.errors import UsageError
from ncdc.hardware.arch import A_FEATURES, SMEM_PER_BLOCK, arch_number
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.values import Plan
from ncdc.plan.choose import PlanSource, choose_plan_source


def default_arch(hardware: Hardware) -> str:
    if hardware.arch in ("", "none"):
        raise UsageError(
            f"profile '{hardware.name}' has no GPU architecture to compile for",
            where="--arch",
            hint="pass --arch sm_90a, or --hardware h200",
        )
    return hardware.arch


ARCH_PROFILES = {80: "a100", 86: "rtx4090", 89: "l40s", 90: "h200", 100: "b200"}


DEFAULT_PROFILE = "h200"  # what a command plans for when neither --hardware nor --arch is given


def profile_for_arch(hardware: str | None, arch: str | None) -> tuple[str, str]:
    """The profile to plan with and a one-line note saying why, when it is not the one the
    user named or the default: `--arch` alone plans for that architecture's profile (its
    shared memory and SM count), `--hardware` wins when given, and neither means h200.

        >>> profile_for_arch(None, "sm_80")
        ('a100', 'planning for the a100 profile of sm_80 (choose another with --hardware NAME)')
        >>> profile_for_arch("l40s", "sm_89")
        ('l40s', '')
    """
    if hardware is not None:
        if arch is not None:
            check_arch_name(arch)
        return hardware, ""
    if arch is None:
        return DEFAULT_PROFILE, ""
    check_arch_name(arch)
    profile = ARCH_PROFILES.get(arch_number(arch))
    if profile is None:
        return DEFAULT_PROFILE, (
            f"no profile matches {arch}; planning for {DEFAULT_PROFILE} (--hardware FILE "
            "for your own)"
        )
    if profile == DEFAULT_PROFILE:  # what the command plans for anyway: nothing to say
        return profile, ""
    return (
        profile,
        f"planning for the {profile} profile of {arch} (choose another with --hardware NAME)",
    )


def check_arch_name(arch: str) -> None:
    """A UsageError for an `--arch` ncdc does not build for, listing those it does."""
    from ncdc.backends.nvrtc import ARCHES

    if arch not in ARCHES:
        raise UsageError(
            f"unknown architecture {arch!r}",
            where="--arch",
            hint=f"choose one of {', '.join(ARCHES)}",
        )


def target_hardware(hardware: Hardware, arch: str | None) -> Hardware:
    """What `ncdc cost` and `ncdc check` plan for with `--arch`: `hardware_for_arch` of a
    checked architecture name, so that they price and accept the kernels compile builds."""
    if arch is None:
        return hardware
    check_arch_name(arch)
    return hardware_for_arch(hardware, arch)


def arch_notes(
    diagram: Diagram, hardware: Hardware, tiles: Mapping[str, int] | None, arch: str | None
) -> tuple[str, ...]:
    """The notes `ncdc compile --arch` prints for `diagram` (`plan_for_arch`), for `cost`."""
    if arch is None or hardware_for_arch(hardware, arch) is hardware:
        return ()
    return plan_for_arch(diagram, hardware, tiles, arch)[2]


def hardware_for_arch(hardware: Hardware, arch: str | None) -> Hardware:
    """`hardware` with its architecture replaced by the one compiled for when that one lacks
    the profile's architecture-specific features (`A_FEATURES`: a plan for a profile
    with that target, compiled for another, is planned again without them), so that the families
    offer only what `arch` runs (no wgmma variant for sm_90 on an h200 profile); as it is
    otherwise (an a100 plan compiled for sm_90a stays an a100 plan).

        >>> from ncdc.hardware.load import load_hardware
        >>> hardware_for_arch(load_hardware("h200"), "sm_90").arch
        'sm_90'
    """
    if arch is None or arch == hardware.arch or hardware.arch not in A_FEATURES:
        return hardware
    return dataclasses.replace(hardware, arch=arch)


def plan_for_arch(
    diagram: Diagram, hardware: Hardware, tiles: Mapping[str, int] | None, arch: str | None,
    *, use_tuned: bool = True,
) -> tuple[Plan, PlanSource, tuple[str, ...]]:  # fmt: skip
    """The plan `compile` builds for `arch` (explicit beats tuned beats modelled), where its
    tiles came from, and a note when `arch` lacks features of the profile's own target that
    the profile's plan uses (`A_FEATURES`): the kernels then fall back to what `arch` has.

        >>> from ncdc.hardware.load import load_hardware
        >>> from ncdc.language.load import load_diagram
        >>> d = load_diagram("diagrams/matmul.yaml")
        >>> plan_for_arch(d, load_hardware("h200"), None, "sm_90")[2]
        ('sm_90 lacks wgmma and setmaxnreg; --arch sm_90a builds the Hopper kernel',)
    """
    target = hardware_for_arch(hardware, arch)
    plan, source = choose_plan_source(
        diagram, target, tiles, arch=arch or target.arch, use_tuned=use_tuned
    )
    if target is hardware:
        return plan, source, ()
    own, _ = choose_plan_source(diagram, hardware, tiles, arch=hardware.arch, use_tuned=use_tuned)
    if [k.candidate for k in own.kernels] == [k.candidate for k in plan.kernels]:
        return plan, source, ()
    lacks, builds = A_FEATURES[hardware.arch]
    return plan, source, (f"{target.arch} lacks {lacks}; --arch {hardware.arch} builds {builds}",)


def check_arch_supports(plan: Plan, arch: str) -> None:
    """Refuse early, in one line, an architecture the plan's kernels cannot run on: a
    family's own limit (fp8 mma.sync before sm_89), or more shared memory than the
    architecture gives a block (a plan made for another profile's limits)."""
    from ncdc.families import get_family

    sm = arch_number(arch)
    diagram = plan.graph.diagram
    profile = ARCH_PROFILES.get(sm, "")
    for kp in plan.kernels:
        problem = get_family(kp.family.name).arch_problem(diagram, kp, sm)
        if problem:
            raise UsageError(
                problem,
                where="--arch",
                hint="compile for an architecture that has it: a newer --arch, such as sm_90a",
            )
        allowed = SMEM_PER_BLOCK.get(sm)
        c = kp.candidate
        if c is None or allowed is None:
            continue
        need = max(shape.dynamic_smem for shape in c.launches)
        if need > allowed:
            raise UsageError(
                f"kernel {kp.kernel.name} was planned on {plan.graph.hardware.name} with "
                f"{need:,} B of shared memory per block; {arch} allows {allowed:,} B",
                where="--arch",
                hint=f"plan for that GPU: --hardware {profile}"
                if profile
                else "pick another --arch",
            )
