"""scripts/device-check's pre-flight: on a machine without a GPU it stops within seconds with
a clear report (versions, headers, a compiled kernel, then the missing GPU) and exit 4."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
