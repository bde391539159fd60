"""The cuda backend end to end: every diagram against the float64 reference at small and
odd sizes, bench numbers that make sense, tune writing and reusing its cache, and the
command line. Skipped without CuPy and a GPU (see conftest.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.verify.run import run_spec
from tests import support

pytestmark = pytest.mark.gpu

REPO = support.ROOT
DIAGRAMS = sorted((REPO / "diagrams").glob("*.yaml"))
H200 = load_hardware("h200")


HEAD_MAX = 128  # attention head sizes are 64 or 128 only: an odd target keeps them


def shrink(spec: Path, target: int) -> dict[str, int]:
    """Every axis longer than `target` cut to it: small enough for the CPU reference. An
    odd target cuts only axes longer than HEAD_MAX, so the head axis stays a size the
    attention kernels take (d = 97 would be a PlanError, not a test of the kernel)."""
    axes = load_diagram(spec).axes
    if target % 2:
        return {a: min(n, target) if n > HEAD_MAX else n for a, n in axes.items()}
    return {a: min(n, target) for a, n in axes.items()}


@pytest.mark.parametrize("spec", DIAGRAMS, ids=lambda p: p.stem)
@pytest.mark.parametrize("target", [64, 97], ids=["small", "odd"])
def test_every_diagram_matches_the_reference(spec, target, cache):
    sizes = shrink(spec, target)
    outcome = run_spec(spec, H200, backend="cuda", sizes=sizes, seed=target)
    bad = [c for c in outcome.result.checks if not c.ok]
    assert not bad, f"{spec.stem} at {sizes}: {bad}"


def test_bench_returns_sane_numbers(cache):
    from ncdc.measure.bench import bench_spec

    sizes = {"m": 1024, "n": 1024, "k": 1024}
    r = bench_spec(REPO / "diagrams" / "matmul.yaml", H200, sizes=sizes, warmup_ms=5, rep_ms=20)
    t = r.timing
    assert 0 < t.p20_ms <= t.median_ms <= t.p80_ms < 100
    assert t.repetitions >= 1
    assert 0 < r.percent_of_peak < 110  # no kernel beats the datasheet
    assert math.isfinite(r.model_error)
    copy = r.baselines[-1]
    assert copy.timing is not None and 0 < r.copy_bandwidth < 10e12
    assert r.baseline is not None and 0 < r.ratio < 10


def test_tune_writes_and_reuses_its_cache(cache):
    from ncdc.measure.tune import tune_spec
    from ncdc.plan.choose import choose_plan, plan_config, read_tuned

    spec = REPO / "diagrams" / "matmul.yaml"
    sizes = {"m": 512, "n": 512, "k": 512}
    result = tune_spec(spec, H200, sizes=sizes, top_k=3, warmup_ms=2, rep_ms=10)
    assert result.best is not None and Path(result.cache_file).is_file()
    diagram = load_diagram(spec, sizes)
    assert read_tuned(diagram, "h200", result.arch, result.gpu) == result.best.config
    assert plan_config(choose_plan(diagram, H200)) == result.best.config
    entry = json.loads(Path(result.cache_file).read_text())
    assert entry["format"] == "ncdc.tune/1" and entry["gpu"]


def test_cli_run_cuda_exits_0(cache, tmp_path):
    env = {**os.environ, "NCDC_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "ncdc", "run", "diagrams/softmax.yaml", "--backend", "cuda",
         "--set", "m=33", "--set", "n=200", "--format", "json"],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
