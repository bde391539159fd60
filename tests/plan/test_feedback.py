"""The compiler feeds back into the plan: ptxas's registers re-price each kernel, and a
candidate that spills, or loses the occupancy it was priced at, gives way to the next-best.

The real case compiles a spec whose model-chosen tile spills on sm_90a (a d=64 attention
at q=100, x=130: 64 x 32 tiles spill 12 B); the logic cases fake NVRTC's report so that
every branch runs without depending on what one compiler version spills.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ncdc.backends import compile as compile_module
from ncdc.backends.batch import compile_specs
from ncdc.backends.compile import CompileReport, compile_plan
from ncdc.errors import CompileError
from ncdc.hardware.load import load_hardware
from ncdc.hardware.occupancy import blocks_per_sm
from ncdc.language.load import load_diagram
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram
from tests import support

ROOT = support.ROOT
H200 = load_hardware("h200")


def test_the_default_d64_attention_plan_compiles_clean() -> None:
    # it used to spill 12 B on sm_90a (a 64-bit division in the slice index) and be
    # replaced; the replacement itself is covered with faked spills below
    plan = plan_diagram(load_diagram(ROOT / "tests/specs/attn_d64_odd.yaml"), H200)
    report = compile_plan(plan, "sm_90a")
    assert report.spills == 0 and not report.notes
    got, planned = report.plan.kernels[0].candidate, plan.kernels[0].candidate
    assert got is not None and planned is not None
    assert got.with_registers(planned.registers) == planned  # re-priced, not replaced


def _fake(spilling: set, registers: int | None = None):
    """A `_compile_once` that reports spills for the candidates in `spilling` (their
    tile sizes) and, optionally, `registers` per thread for every kernel."""
    real = compile_module._compile_once

    def once(plan, arch, use_cache) -> CompileReport:
        report = real(plan, arch, use_cache)
        kernels = []
        for kp, k in zip(plan.kernels, report.kernels, strict=False):
            tile = tuple(sorted(kp.block_tile.items()))
            k = dataclasses.replace(k, spill_stores_bytes=16 if tile in spilling else 0)
            if registers is not None:
                k = dataclasses.replace(k, registers=registers)
            kernels.append(k)
        return dataclasses.replace(report, kernels=tuple(kernels))

    return once


def _tile(kp) -> tuple:
    return tuple(sorted(kp.block_tile.items()))


def test_every_candidate_spilling_keeps_the_fastest_and_strict_refuses_it(monkeypatch) -> None:
    d = load_diagram(ROOT / "diagrams/matmul.yaml", {"m": 512, "n": 512, "k": 512})
    plan = plan_diagram(d, H200)
    everything = {_tile(kp) for kp in kernel_alternatives(plan, 0, 1000)}
    monkeypatch.setattr(compile_module, "_compile_once", _fake(everything))
    report = compile_plan(plan, "sm_90a")
    assert report.spills and "no other candidate compiled clean" in report.notes[-1]
    spec = ROOT / "diagrams/matmul.yaml"
    with pytest.raises(CompileError):
        compile_specs([spec], H200, out_dir=Path("/nonexistent-never-written"),
                      sizes={"m": 512, "n": 512, "k": 512}, strict=True)  # fmt: skip


def test_the_next_best_that_compiles_clean_wins(monkeypatch) -> None:
    d = load_diagram(ROOT / "diagrams/matmul.yaml", {"m": 512, "n": 512, "k": 512})
    plan = plan_diagram(d, H200)
    first = _tile(plan.kernels[0])
    monkeypatch.setattr(compile_module, "_compile_once", _fake({first}))
    report = compile_plan(plan, "sm_90a")
    assert report.spills == 0 and _tile(report.plan.kernels[0]) != first
    assert "replaced by the next-best" in report.notes[0]


def test_registers_reprice_the_plan(monkeypatch) -> None:
    # 255 registers a thread: one 8-warp block per SM where the model assumed more; the
    # plan the report carries is priced with them and says so in its occupancy
    d = load_diagram(ROOT / "diagrams/softmax.yaml", {"m": 4096})
    plan = plan_diagram(d, H200)
    monkeypatch.setattr(compile_module, "_compile_once", _fake(set(), registers=255))
    report = compile_plan(plan, "sm_90a")
    kp = report.plan.kernels[0]
    assert kp.candidate.registers == 255 and kp.registers_per_thread == 255
    expected, _ = blocks_per_sm(kp.candidate.threads, 255, kp.smem_bytes, H200.limits)
    assert kp.blocks_per_sm == max(expected, 1) < plan.kernels[0].blocks_per_sm
    assert report.plan.predicted_time_s >= plan.predicted_time_s


def test_cost_shows_the_launch_compile_settles_on(tmp_path) -> None:
    # The model's first fp8 GEMM tile spills 8 B on sm_90a (NVRTC 13.5) and `compile`
    # replaces it: `cost` prices the model's first until the compile cache holds what
    # compile built, then the replacement, with compile's note; `--compile` gets there
    # in one step from an empty cache.
    spec = str(ROOT / "tests/specs/gemm_fp8_e4m3_transposed.yaml")
    env = {"NCDC_CACHE": str(tmp_path / "cache")}
    import json

    def cost(*extra: str, cache: str = "cache") -> dict:
        r = support.ncdc("cost", spec, "--format", "json", *extra,
                         env={"NCDC_CACHE": str(tmp_path / cache)})  # fmt: skip
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    before = cost()
    assert "notes" not in before
    built = support.ncdc("compile", spec, "-o", str(tmp_path / "out"), env=env)
    assert built.returncode == 0 and "replaced by the next-best" in built.stderr, built.stderr
    after = cost()
    assert after["notes"] and "replaced by the next-best" in after["notes"][0]
    assert after["notes"][0] in built.stderr
    assert after["kernels"][0]["tiles"] != before["kernels"][0]["tiles"]
    report = json.loads((tmp_path / "out" / "gemm_fp8_e4m3_transposed.json").read_text())
    launch = report["kernels"][0]
    assert after["kernels"][0]["launches"][0]["grid"] == launch["grid"]
    assert after["kernels"][0]["registers_per_thread"] == launch["resources"]["registers"]
    assert cost("--compile", cache="fresh") == {**after, "tiles_from": after["tiles_from"]}


def test_settling_from_the_cache_stops_where_an_entry_is_missing(monkeypatch) -> None:
    # nothing compiled: the model's plan, no note; a plan is never half settled
    from ncdc.backends import cache
    from ncdc.backends.compile import settle_from_cache

    d = load_diagram(ROOT / "diagrams/softmax.yaml", {"m": 4096})
    plan = plan_diagram(d, H200)
    monkeypatch.setattr(cache, "find_cached", lambda *a, **k: None)
    assert settle_from_cache(plan, "sm_90a") is plan
