"""Tuning over many GPUs and machines (ncdc.measure.distribute): trials planned here, run
by workers (local isolated children, or Ray tasks), merged per spec into the tuning cache.
No GPU here: the cpu backend stands in (correctness runs, not timings), and a fake worker
pool plays GPUs that time, hang and fault."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.measure import distribute
from ncdc.plan.choose import find_tuned
from tests import support

H200 = load_hardware("h200")
SOFTMAX = support.DIAGRAMS / "softmax.yaml"
MATMUL = support.DIAGRAMS / "matmul.yaml"
SMALL = {"m": 4, "n": 65}  # two candidate tilings, each emulated in a second or two


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache for the module: the emulator's builds are shared between its tests."""
    return tmp_path_factory.mktemp("cache")


def test_gpu_slots_follow_the_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert distribute.gpu_slots() == [{"CUDA_VISIBLE_DEVICES": "2"}, {"CUDA_VISIBLE_DEVICES": "5"}]
    assert distribute.gpu_slots(1) == [{"CUDA_VISIBLE_DEVICES": "2"}]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert distribute.gpu_slots() == [{}]  # no GPU: one slot, the cpu backend's


class FakeGpus:
    """Workers whose trials 'ran' on two H200s: rank 0 hung, rank 1 faulted, ranks 2 and
    3 were timed (3 the faster)."""

    def __init__(self):
        self.compiled, self.ran = [], []

    def compile(self, jobs):
        self.compiled += jobs
        return [""] * len(jobs)

    def run(self, jobs):
        self.ran += jobs
        outcome = {
            0: {"error": "timeout at trial: no end within 300 s"},
            1: {"error": "crashed at trial: killed by SIGSEGV"},
            2: {"measured_ms": 0.20},
            3: {"measured_ms": 0.15},
        }
        gpu = {"gpu": "NVIDIA H200", "arch": "sm_90a"}
        return [{"rank": j["rank"], "measured_ms": None, "error": "", **gpu, **outcome[j["rank"]]}
                for j in jobs]  # fmt: skip


def test_trials_are_merged_into_the_tuning_cache(monkeypatch, cache):
    monkeypatch.setenv("NCDC_CACHE", str(cache))
    workers = FakeGpus()
    (result,) = distribute.tune_many([MATMUL], H200, workers=workers, top_k=4)
    assert len(workers.compiled) == len(workers.ran) == len(result.candidates) == 4
    assert [c.error.split(" at ")[0] for c in result.candidates[:2]] == ["timeout", "crashed"]
    assert result.best.rank == 3 and result.gpu == "NVIDIA H200"
    tuned = find_tuned(load_diagram(MATMUL), "h200", "sm_90a", "NVIDIA H200")
    assert tuned is not None and tuned.config == result.best.config
    entry = json.loads(tuned.path.read_text())
    assert entry["result"]["best_rank"] == 3 and entry["backend"] == "cuda"


def test_local_children_on_the_cpu_backend(monkeypatch, cache):
    """A trial in its own child process, on the emulator: correct, and the model's pick
    kept under an emulated arch that no GPU compile reads."""
    monkeypatch.setenv("NCDC_CACHE", str(cache))
    (result,) = distribute.tune_specs([SOFTMAX], H200, top_k=1, backend="cpu", sizes=SMALL)
    assert [c.error for c in result.candidates] == [""] and not result.timed
    assert result.best.rank == 0 and result.arch == "emulated-sm_90a"
    small = load_diagram(SOFTMAX, SMALL)
    assert find_tuned(small, "h200", "emulated-sm_90a", "cpu emulator") is not None
    assert find_tuned(small, "h200", "sm_90a") is None


def test_a_folder_tune_on_a_local_ray_cluster(tmp_path, monkeypatch, cache):
    """`ncdc tune DIR --ray ADDRESS --backend cpu` against a Ray cluster this test starts:
    one task per trial (two specs: two tasks at once), results merged into the driver's
    tuning cache."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'ncdc[ray]')")
    monkeypatch.setenv("NCDC_CACHE", str(cache))
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("softmax", "layernorm"):
        (folder / f"{name}.yaml").write_text((support.DIAGRAMS / f"{name}.yaml").read_text())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        proc = subprocess.run(
            [sys.executable, "-m", "ncdc", "tune", str(folder), "--ray", address, "--backend",
             "cpu", "--top-k", "1", "--set", "m=4", "--set", "n=65", "--format", "json"],
            capture_output=True, text=True, timeout=600, cwd=support.ROOT,
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r["name"]: r for r in json.loads(proc.stdout)}
    assert sorted(results) == ["layernorm", "softmax"]
    for name, r in results.items():
        assert r["best_rank"] == 0 and all(c["error"] is None for c in r["candidates"]), name
        assert r["cache_file"] and json.loads(Path(r["cache_file"]).read_text())["backend"] == "cpu"


def test_ray_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(Exception, match="--ray needs Ray, which is not installed"):
        distribute.RayWorkers("127.0.0.1:6379")
