"""One plan, one kernel: the launch the model prices is the launch that is built.

For every library diagram and every spec of tests/specs (every family, odd sizes, every
dtype, head sizes, GQA, decode, causal, several kernels), on every GPU profile: the
candidate each kernel plan carries is priced with its own grid, threads and shared memory,
the renderer launches exactly its launches, and `ncdc compile` reports exactly the
launches of the plan it settles on (for sm_90a on the h200 and sm_80 on the a100, and the
profile's own arch for the rest on a few diagrams, to keep NVRTC's time in bounds).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ncdc.backends.compile import compile_plan
from ncdc.hardware.load import list_profiles, load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.launch import Candidate, candidate_from_dict
from ncdc.model.values import Plan
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from tests import support

ROOT = support.ROOT
SPECS = sorted((ROOT / "diagrams").glob("*.yaml")) + sorted((ROOT / "tests/specs").glob("*.yaml"))
GPUS = [name for name in list_profiles() if load_hardware(name).is_gpu]
FP8 = {
    "fp8_matmul",
    "fp8_block_scaled_matmul",
    "gemm_block_scaled_pair",
    "gemm_block_scaled_cols",
    "gemm_fp8_kmajor",
    "gemm_fp8_e4m3_scaled",
    "gemm_fp8_e5m2_scaled",
    "gemm_fp8_e4m3_transposed",
    "attention_fp8",
    "attn_fp8_qk",
}
# fp8 Q and K attention runs only in the sm_90a wgmma kernel: other GPU profiles refuse it
# (tests/plan/test_search.py checks the one-line refusal)
SM90A_ONLY = {"attention_fp8", "attn_fp8_qk"}


def _launches(plan: Plan) -> list[tuple]:
    """(grid, block, dynamic smem) of every launch of the plan's candidates, in order."""
    out = []
    for kp in plan.kernels:
        assert kp.candidate is not None, f"{kp.kernel.name}: a GPU plan carries its candidate"
        out += [(s.grid, s.block, s.dynamic_smem) for s in kp.candidate.launches]
    return out


def _assert_priced_as_launched(plan: Plan) -> None:
    for kp in plan.kernels:
        c = kp.candidate
        assert c is not None
        main = c.main
        # the numbers the model's time and occupancy used are the launch's own
        assert kp.grid == main.blocks, kp.kernel.name
        assert 32 * kp.warps == main.threads, kp.kernel.name
        assert kp.smem_bytes == main.dynamic_smem, kp.kernel.name
        assert kp.splits == c.splits and kp.stages == c.stages, kp.kernel.name


def test_corpus_covers_every_family_and_enough_specs() -> None:
    own = [p for p in SPECS if "tests/specs" in str(p)]
    assert len(own) >= 20
    families = {
        kp.family.name
        for p in SPECS
        for kp in plan_diagram(load_diagram(p), load_hardware("h200")).kernels
    }
    assert families == {
        "gemm", "gemv", "attention", "decode_attention", "rowwise", "reduce", "scatter",
        "scan", "select", "elementwise",
    }  # fmt: skip


@pytest.mark.parametrize("profile", GPUS)
def test_planned_launch_is_the_rendered_launch(profile: str) -> None:
    hw = load_hardware(profile)
    checked = 0
    for path in SPECS:
        if path.stem in SM90A_ONLY and hw.arch != "sm_90a":
            continue
        plan = plan_diagram(load_diagram(path), hw)
        _assert_priced_as_launched(plan)
        module = render_plan(plan)
        rendered = [(launch.grid, launch.block, launch.dynamic_smem) for launch in module.launches]
        assert rendered == _launches(plan), path.name
        checked += len(rendered)
    assert checked >= 70


COMPILED = [("h200", "sm_90a", SPECS), ("a100", "sm_80", [p for p in SPECS if p.stem not in FP8])]
COMPILED += [
    (
        name,
        load_hardware(name).arch,
        [ROOT / "diagrams" / f"{d}.yaml" for d in ("matmul", "attention", "softmax")],
    )
    for name in ("h100", "l40s", "rtx4090", "b200")
]


# one test per (profile, spec): the slowest of the suite, spread over the cores this way
COMPILED_SPECS = [(profile, arch, path) for profile, arch, specs in COMPILED for path in specs]


@pytest.mark.parametrize(
    ("profile", "arch", "path"), COMPILED_SPECS, ids=[f"{c[0]}-{c[2].stem}" for c in COMPILED_SPECS]
)
def test_compiled_launch_is_the_planned_launch(profile: str, arch: str, path: Path) -> None:
    hw = load_hardware(profile)
    report = compile_plan(plan_diagram(load_diagram(path), hw), arch)
    # after the compiler's feedback the report's plan is what was compiled
    _assert_priced_as_launched(report.plan)
    compiled = [(k.launch.grid, k.launch.block, k.launch.dynamic_smem) for k in report.kernels]
    assert compiled == _launches(report.plan), path.name
    if path.parent.name == "diagrams":  # the library compiles with no spill
        spilled = [
            k.launch.kernel for k in report.kernels if k.spill_stores_bytes or k.spill_loads_bytes
        ]
        assert not spilled, (path.name, arch, spilled)
    # and its time is priced with ptxas's registers (the most of a kernel's launches)
    at = 0
    for kp in report.plan.kernels:
        assert kp.candidate is not None
        count = len(kp.candidate.launches)
        used = max(k.registers for k in report.kernels[at : at + count])
        assert kp.candidate.registers == used, kp.kernel.name
        at += count


def test_a_candidate_round_trips_through_json() -> None:
    plan = plan_diagram(
        load_diagram(ROOT / "diagrams/decode_attention.yaml"), load_hardware("h200")
    )
    c = plan.kernels[0].candidate
    assert isinstance(c, Candidate) and len(c.launches) == 2
    assert candidate_from_dict(c.to_dict()) == c
    # and every field the model reads, set (a tuned entry is priced as the search priced it)
    full = dataclasses.replace(
        c, in_flight=512, rule_tiles=True, fragment_rereads=(("Q", 7),), unstaged=("K",),
        accumulates=(("O", 2.0),), recomputes=(("S", 0.5),), cluster=(("q", 2),),
    )  # fmt: skip
    assert candidate_from_dict(full.to_dict()) == full
