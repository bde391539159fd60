"""The gemm family (ncdc.families.gemm.family): the kernels it composes and the
architectures each needs."""

from __future__ import annotations

from ncdc.families.gemm.family import FAMILY
from ncdc.families.gemm.splitk import is_splitk
from ncdc.families.gemm.wgmma import is_wgmma
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram


def _all(name: str, profile: str, sizes: dict[str, int] | None = None) -> list:
    plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml", sizes), load_hardware(profile))
    return [k.candidate for k in kernel_alternatives(plan, 0, 5000)], plan


def test_hopper_adds_the_wgmma_kernel_and_a_small_grid_split_k() -> None:
    big, _ = _all("matmul", "h200")
    assert any(is_wgmma(c) for c in big) and not any(is_splitk(c) for c in big)
    small, _ = _all("matmul", "h200", {"m": 128, "n": 128, "k": 16384})
    assert any(is_splitk(c) for c in small)
    ampere, _ = _all("matmul", "a100")
    assert not any(is_wgmma(c) for c in ampere)


def test_an_arch_problem_names_what_the_kernel_needs() -> None:
    _, plan = _all("fp8_matmul", "l40s")
    kp = plan.kernels[0]
    assert "sm_89 or newer" in FAMILY.arch_problem(plan.graph.diagram, kp, 80)
    assert FAMILY.arch_problem(plan.graph.diagram, kp, 89) == ""
    _, hopper = _all("matmul", "h200")
    assert "only sm_90a has" in FAMILY.arch_problem(hopper.graph.diagram, hopper.kernels[0], 80)
