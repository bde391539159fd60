"""scripts/device-check's pre-flight: on a machine without a GPU it stops within seconds with
a clear report (versions, headers, a compiled kernel, then the missing GPU) and exit 4."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT


def test_preflight_stops_early_with_a_clear_report(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount():
            pytest.skip("a GPU is here: the pre-flight would pass and the check run")
    except Exception:
        pass
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device-check"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert time.perf_counter() - start < 60
    assert proc.returncode == 4, proc.stderr
    report = json.loads((tmp_path / "device-check.json").read_text())["preflight"]
    steps = {s["step"]: s for s in report["steps"]}
    assert steps["headers"]["ok"] and Path(steps["headers"]["detail"], "cuda_bf16.h").is_file()
    assert steps["compile"]["ok"]
    assert not steps["gpu"]["ok"] and "run" not in steps
    assert {"python", "ncdc", "numpy", "cupy", "torch", "nvrtc"} <= set(report["versions"])
    assert "pre-flight gpu: FAILED" in proc.stderr and "Traceback" not in proc.stderr


def test_workers_are_spawned_not_forked():
    text = (ROOT / "scripts" / "device-check").read_text()
    assert 'get_context("spawn")' in text and "mp_context=spawn" in text


def test_every_variant_it_checks_is_planned_on_h200():
    """Each VARIANT_SIZES diagram offers, at its odd sizes on h200, every variant the GPU
    run forces (a missing one would be an error row, found only on a GPU)."""
    import importlib.util
    from importlib.machinery import SourceFileLoader

    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.plan.feedback import kernel_alternatives
    from ncdc.plan.search import plan_diagram

    loader = SourceFileLoader("device_check", str(ROOT / "scripts" / "device-check"))
    spec = importlib.util.spec_from_loader("device_check", loader)
    assert spec is not None
    check = importlib.util.module_from_spec(spec)
    loader.exec_module(check)
    hw = load_hardware("h200")
    for name, sizes in check.VARIANT_SIZES.items():
        diagram = load_diagram(ROOT / "diagrams" / f"{name}.yaml", sizes)
        found = {
            check._variant(k.candidate)
            for k in kernel_alternatives(plan_diagram(diagram, hw), 0, 1000)
        }
        want = {"mma.sync", "wgmma"} | (set() if "attention" in name else {"wgmma_c2"})
        assert want <= found, (name, found)
