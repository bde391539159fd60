"""`ncdc check` proves a spec can be built and `ncdc cost` refuses what cannot be.

tests/unbuildable/ holds valid specs that the model prices but no kernel template renders
(a head size, a dtype, an op inside the fused attention) or no GPU's memory holds; each passed `ncdc check` and
`ncdc cost` before both rendered the plan, and each fails `ncdc compile` with exit 2.
Now `check` and `cost` on a GPU profile exit 2 with one line naming the spec, the kernel
and what is supported; `cost --abstract` and the napkin profile still price them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncdc.errors import PlanError
from ncdc.hardware.load import list_profiles, load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.graph import build_graph
from ncdc.verify.buildable import MODEL_ONLY, check_buildable, rank_buildable
from tests import support

ROOT = support.ROOT
FOLDER = ROOT / "tests" / "unbuildable"
UNBUILDABLE = sorted(FOLDER.glob("*.yaml"))
DIAGRAMS = sorted((ROOT / "diagrams").glob("*.yaml"))
# fp8 Q and K attention runs only in the sm_90a wgmma kernel: other GPU profiles refuse it
SM90A_ONLY = {"attention_fp8"}
# What each spec lacks, as the renderer's error says it.
REASONS = {
    "attention_d72": "head size d=72 is not a multiple of 16 from 32 to 256",
    "attention_dv40": "head size e=40 is not a multiple of 16 from 32 to 256",
    "attention_mask_first": "no code for causal (M) here; the generator covers masks applied last",
    "attention_fp32": "expected Q, K, V and O all of one type among bf16, fp16",
    "attention_scale_tensor": "the generator covers a constant scale (a number)",
    "matmul_fp16_bf16": "no GEMM kernel for A (fp16) times B (bf16)",
    "outer_product_over_hbm": "is 512.00 GiB, more than the 131.32 GiB of hbm on h200",
}


def ncdc(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "ncdc", *args], capture_output=True, text=True, env=env,
        cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip


def test_every_unbuildable_spec_has_its_reason():
    assert sorted(REASONS) == [p.stem for p in UNBUILDABLE]


@pytest.mark.parametrize("spec", UNBUILDABLE, ids=lambda p: p.stem)
def test_unbuildable_spec_is_valid_but_not_buildable(spec: Path):
    h200 = load_hardware("h200")
    diagram = load_diagram(spec)
    build_graph(diagram, h200)  # all that `check` asked before
    with pytest.raises(PlanError) as info:
        check_buildable(diagram, h200)
    line = info.value.line()
    assert line.startswith(f"{spec}: ") and REASONS[spec.stem] in line
    assert "\n" not in line and info.value.exit_code == 2


def test_check_exits_2_naming_every_unbuildable_spec():
    result = ncdc("check", str(FOLDER))
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(UNBUILDABLE)
    for spec, line in zip(UNBUILDABLE, errors, strict=True):
        assert line.startswith(f"error: {spec}: ") and REASONS[spec.stem] in line
    assert result.stderr.splitlines()[-1] == f"0 of {len(UNBUILDABLE)} specs valid"


@pytest.mark.parametrize("spec", UNBUILDABLE, ids=lambda p: p.stem)
def test_cost_exits_2_for_an_unbuildable_spec_and_prices_it_with_abstract(spec: Path):
    refused = ncdc("cost", str(spec))
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"error: {spec}: ") and REASONS[spec.stem] in line
    model = ncdc("cost", str(spec), "--abstract")
    assert model.returncode == 0, model.stderr
    assert "predicted time" in model.stdout
    assert model.stdout.rstrip().splitlines()[-1] == MODEL_ONLY


def test_cost_json_says_whether_a_kernel_was_built():
    abstract = ncdc("cost", str(FOLDER), "--abstract", "--format", "json")
    assert abstract.returncode == 0, abstract.stderr
    data = json.loads(abstract.stdout)
    assert data["abstract"] is True and len(data["diagrams"]) == len(UNBUILDABLE)
    assert ncdc("cost", str(FOLDER)).returncode == 2
    built = json.loads(ncdc("cost", str(DIAGRAMS[0]), "--format", "json").stdout)
    assert built["abstract"] is False


def test_napkin_cost_is_the_model_alone():
    """The napkin machine is not a GPU: no kernel to build, so nothing is refused."""
    result = ncdc("cost", str(FOLDER), "--hardware", "napkin", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["abstract"] is True
    assert ncdc("check", str(FOLDER), "--hardware", "napkin").returncode == 0


@pytest.mark.parametrize("name", list_profiles())
def test_every_bundled_diagram_builds_on_every_profile(name: str):
    hw = load_hardware(name)
    for spec in DIAGRAMS:
        if spec.stem in SM90A_ONLY and hw.is_gpu and hw.arch != "sm_90a":
            for ask in (rank_buildable, check_buildable):
                with pytest.raises(PlanError) as info:
                    ask(load_diagram(spec), hw)
                line = info.value.line()
                assert line.startswith(f"{spec}: ") and "\n" not in line and "sm_90a" in line
            continue
        rank_buildable(load_diagram(spec), hw)
        check_buildable(load_diagram(spec), hw)


def test_a_gpu_profile_has_shared_memory_and_registers():
    assert load_hardware("h200").is_gpu and not load_hardware("napkin").is_gpu


def test_checking_a_chain_reads_its_ops_a_linear_number_of_times(monkeypatch):
    # Issue 31: a 1,000-op chain took 98 s to check, Op.inputs read 9.6 million times for
    # 300 ops under the kernel-break search. Doubling the chain must about double the
    # reads (a quadratic step would quadruple them); benchmarks/bench_check_scaling.py
    # has the times.
    from ncdc.language.diagram import Op
    from ncdc.language.load import load_diagram_text

    hw = load_hardware("h200")
    counts = []
    for n in (60, 120):
        diagram = load_diagram_text(support.chain_spec(n), "chain.yaml")
        reads = support.count_calls(monkeypatch, Op, "inputs")
        check_buildable(diagram, hw)
        counts.append(reads[0])
        monkeypatch.undo()
    assert counts[1] < 2.6 * counts[0], counts
