"""scripts/device-check: each row in a child of its own with its own timeout, so a kernel
that hangs or faults is one row, named with its stage, and the rest carry on; the record
and the table grow as rows arrive. No GPU here: the cpu backend runs the real rows, and a
planted child plays the kernels that hang (an infinite wait) and fault (an out-of-bounds
store that kills its process)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT
SCRIPT = ROOT / "scripts" / "device-check"


def load_script():
    loader = SourceFileLoader("device_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("device_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _no_gpu() -> None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount():
            pytest.skip("a GPU is here: the check would run on it")
    except Exception:
        pass


def test_preflight_stops_early_with_a_clear_report(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    _no_gpu()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    record = json.loads((tmp_path / "device-check.json").read_text())
    rows = {r["name"]: r for r in record["rows"]}
    assert Path(rows["headers"]["detail"], "cuda_bf16.h").is_file()
    assert rows["compile"]["status"] == "ok"
    assert rows["gpu"]["status"] == "failed"
    assert re.search("no CUDA GPU|CuPy is not installed", rows["gpu"]["detail"])
    assert set(rows) == {"headers", "compile", "gpu"}  # nothing after it
    assert {"python", "ncdc", "numpy", "cupy", "torch", "nvrtc"} <= set(record["versions"])
    assert "FAILED at" in proc.stdout and "Traceback" not in proc.stderr + proc.stdout


# A child that plays a kernel per row: "hang" waits forever after entering its run stage,
# "fault" dies with SIGSEGV there (what a CUDA illegal-address does to a process is to
# poison its context; here the process is gone), the others finish.
PLANTED = r"""
import os, signal, sys, time
from pathlib import Path
from ncdc.measure.isolate import Stages

stages = Stages(Path(sys.argv[-1]))
job = stages.job()
stages.enter("compile")
stages.enter("run")
if job["name"] == "hang":
    time.sleep(600)
if job["name"] == "fault":
    os.kill(os.getpid(), signal.SIGSEGV)
stages.finish({"ok": True, "checks": [{"name": "O", "max_rel_error": 0.001, "tolerance": 0.02}],
               "kernel": job["name"] + "_kernel"})
"""


def test_a_planted_hang_and_fault_leave_the_other_rows_intact(tmp_path, capsys):
    check_module = load_script()
    from ncdc.hardware.load import load_hardware

    args = argparse.Namespace(out=str(tmp_path / "out"), quick=False, backend="cpu",
                              diagrams=str(ROOT / "diagrams"), static="")  # fmt: skip
    check = check_module.DeviceCheck(args, load_hardware("h200"))
    child = tmp_path / "planted.py"
    child.write_text(PLANTED)
    check.command = [sys.executable, str(child)]
    jobs = [{"kind": "variant", "name": n} for n in ("before", "hang", "fault", "after")]
    rows = check.rows("variants", jobs, timeout_s=5.0)
    status = {r["name"]: (r["status"], r["stage"]) for r in rows}
    assert status == {
        "before": ("ok", "run"), "hang": ("timeout", "run"), "fault": ("crashed", "run"),
        "after": ("ok", "run"),
    }  # fmt: skip
    record = json.loads((tmp_path / "out" / "device-check.json").read_text())
    assert [r["name"] for r in record["rows"]] == ["before", "hang", "fault", "after"]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and "TIMEOUT at run" in printed[1] and "CRASHED at run" in printed[2]
    assert "killed by SIGSEGV" in printed[2] and "after_kernel" in printed[3]


def test_cpu_backend_rows_and_a_broken_spec(tmp_path):
    """The whole script on the cpu backend (a profile without wgmma, --quick): the
    pre-flight, then a diagram that runs and one that cannot load, each its own row, and
    the api row (ncdc.load; ncdc.torch.op under torch.compile where PyTorch is)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "softmax.yaml").write_text((ROOT / "diagrams" / "softmax.yaml").read_text())
    (folder / "layernorm.yaml").write_text("ncdc: 1\nname: broken\naxes: {m: 4\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "out"), "--backend", "cpu", "--hardware",
         "a100", "--quick", "--diagrams", str(folder)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    record = json.loads((tmp_path / "out" / "device-check.json").read_text())
    rows = {r["name"]: r for r in record["rows"] if r["step"] == "diagrams"}
    assert rows["softmax"]["status"] == "ok" and rows["softmax"]["stage"] == "run"
    assert rows["layernorm"]["status"] == "failed" and rows["layernorm"]["stage"] == "load"
    assert "malformed YAML" in rows["layernorm"]["detail"] and record["in_progress"] is None
    # the API beside the command line, for the diagrams that loaded: ncdc.load into NaN out=
    (api,) = [r for r in record["rows"] if r["step"] == "api"]
    assert api["status"] == "ok" and api["name"] == "softmax", api
    assert api["result"]["checks"][0]["name"] == "softmax Y (ncdc.load)"
    assert list(api["result"]["diagrams"]) == ["softmax"]
    if importlib.util.find_spec("torch") is None:
        assert api["result"]["torch_compile"] == "not run: PyTorch is not installed"


def test_every_variant_it_checks_is_planned_on_h200():
    """Each variant the GPU run forces (pre-flight and VARIANT_SIZES) is offered at its
    sizes on h200: a missing one would be an error row, found only on a GPU."""
    from ncdc.hardware.load import load_hardware

    check = load_script()
    hw = load_hardware("h200")
    jobs = check.variant_jobs(hw, lambda n, s, v: check.variant_job_of(n, s, v, "h200", "cuda"))
    jobs += [check.variant_job_of(*v, "h200", "cuda") for v in check.PREFLIGHT_VARIANTS]
    assert len(jobs) == 4 * 3 + 3 * 2 + 4
    for job in jobs:
        _, module = check.variant_module(job)
        assert module.launches, job["name"]


def test_the_table_survives_missing_figures(capsys):
    """No row may crash the table or the summary: a failed run, a skipped row, a bench
    without a baseline or a model error, a failed tune, a row without a result."""
    from ncdc.measure.bench import BenchResult, Timing, bench_to_dict

    check = load_script()
    bare = BenchResult(
        name="c", source="c.yaml", axes={"m": 64}, hardware="h200", gpu="NVIDIA H200",
        arch="sm_90a", families=("gemm",), bound_kind="compute", flops=2e9, hbm_bytes=1e6,
        peak=989.4e12, predicted_s=0.0, tiles={}, timing=Timing(0.2, 0.19, 0.21, 500),
        baselines=(),
    )  # fmt: skip
    rows = [
        {"step": "diagrams", "name": "a", "status": "failed", "stage": "run",
         "detail": "run: RuntimeError: boom", "result": {}},
        {"step": "diagrams", "name": "b", "status": "skipped", "detail": "time budget spent"},
        {"step": "diagrams", "name": "c", "status": "ok", "result": {"bench": bench_to_dict(bare)}},
        {"step": "tune", "name": "tune matmul", "status": "failed", "stage": "tune",
         "detail": "CheckFailed", "result": None},
        {"step": "tune", "name": "tune attention", "status": "timeout", "stage": None},
    ]  # fmt: skip
    lines = [check.format_row(r) for r in rows]
    assert "FAILED at run" in lines[0] and "boom" in lines[0]
    assert "skipped" in lines[1] and "0.200 ms, 10.00 TFLOP/s" in lines[2]  # 2e9 FLOP in 0.2 ms
    assert "baseline" not in lines[2] and "model" not in lines[2]
    assert "FAILED at tune" in lines[3] and "TIMEOUT" in lines[4]
    check.print_summary({"rows": rows, "ncdc_version": "0", "date": "today", "seconds": 3.0})
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.endswith("3 s: 1 ok, 2 failed, 1 timeout, 1 skipped")


def test_the_training_rows_are_the_backwards_ncdc_grad_writes(tmp_path):
    """The backward diagrams the GPU run checks and benches: attention's with dQ by atomics
    and by the deterministic pass, and GQA's, each written once into OUT_DIR/grad."""
    check_module = load_script()
    from ncdc.hardware.load import load_hardware

    args = argparse.Namespace(out=str(tmp_path / "out"), quick=False, backend="cpu",
                              diagrams=str(ROOT / "diagrams"), static="")  # fmt: skip
    check = check_module.DeviceCheck(args, load_hardware("h200"))
    found = dict(check.training_specs())
    assert set(found) == {"attention_causal_bwd", "attention_causal_bwd_deterministic",
                          "gqa_attention_bwd"}  # fmt: skip
    assert "deterministic: true" in found["attention_causal_bwd_deterministic"].read_text()
    assert "deterministic" not in found["attention_causal_bwd"].read_text()
    assert dict(check.training_specs()) == found  # a rerun into the same folder reuses them
