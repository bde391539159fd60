"""The GPU path's logic, on a machine with no GPU: quantiles, L2-flush sizing, repetition
counts, Spearman correlation, the tuning cache (key, lookup, explicit > tuned > modelled),
the bench and tune records, and exit code 4 where a GPU is needed.

Where code would launch kernels, a small fake CuPy (events on a fake clock that each
launch advances) stands in: those tests check control flow only (how many flushes,
warm-up and timed calls, which events are read), not that anything runs on a GPU.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

import numpy as np
import pytest

from ncdc.backends import cuda
from ncdc.cli.main import main
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.measure import bench, tune
from ncdc.measure.bench import BaselineResult, BenchResult, Timing
from ncdc.plan import choose
from ncdc.plan.search import plan_diagram, rank_tiles
from tests import support
from tests.measure.fakes import FakeCupy, plan_of

REPO = support.ROOT
DIAGRAMS = REPO / "diagrams"
H200 = load_hardware("h200")


# --------------------------------------------------------------------------- timing


# ------------------------------------------------------------------------ baselines


# --------------------------------------------------------------------------- records


def a_result(**kw) -> BenchResult:
    base = dict(
        name="matmul", source="diagrams/matmul.yaml", axes={"m": 4096}, hardware="h200",
        gpu="NVIDIA H200", arch="sm_90a", families=("gemm",), bound_kind="compute",
        flops=2 * 4096**3, hbm_bytes=3 * 2 * 4096**2, peak=989.4e12, predicted_s=1.6e-4,
        tiles={"m": 128}, timing=Timing(0.2, 0.19, 0.21, 500),
        baselines=(
            BaselineResult("cuBLAS (torch.matmul)", Timing(0.16, 0.15, 0.17, 600)),
            BaselineResult("copy (device to device)", Timing(0.05, 0.05, 0.05, 900), bytes_moved=2**27),
            BaselineResult("other", None, "not installed"),
        ),
    )  # fmt: skip
    base.update(kw)
    return BenchResult(**base)


def test_bench_figures():
    r = a_result()
    assert math.isclose(r.achieved, 2 * 4096**3 / 2e-4)
    assert math.isclose(r.model_error, 0.2e-3 / 1.6e-4 - 1)  # +25%: slower than predicted
    assert r.baseline.name == "cuBLAS (torch.matmul)"  # the copy is a ceiling, not a baseline
    assert math.isclose(r.ratio, 0.8)  # 0.16 ms / 0.2 ms: 80% of cuBLAS's speed
    assert math.isclose(r.copy_bandwidth, 2**27 / 5e-5)
    mem = a_result(bound_kind="memory", peak=4.8e12)
    assert math.isclose(mem.achieved, 3 * 2 * 4096**2 / 2e-4)


def test_bench_record_is_strict_json():
    d = bench.bench_to_dict(a_result(baselines=()))
    text = json.dumps(d, allow_nan=False)  # no NaN or Infinity in the record
    assert d["format"] == "ncdc.bench/1"
    assert d["ratio"] is None and d["baseline"] is None
    assert set(d) >= {"timing", "achieved", "model", "baselines", "gpu", "tiles", "flops"}
    assert json.loads(text)["timing"]["median_ms"] == 0.2


def test_bench_table_row():
    row = bench.bench_row(a_result())
    assert row[0] == "matmul" and row[-1] == "0.80"
    assert len(row) == len(bench.BENCH_COLUMNS)
    assert "TFLOP/s" in row[2] and row[4] == "+25%"


def test_bench_plan_control_flow(monkeypatch):
    """Control flow only: bench_plan with a fake CuPy and a fake module loader times the
    prepared launches and fills the result from the plan."""
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    launches = []

    class Loaded:  # a DeviceModule as far as bench needs: its launches bound to buffers
        def __init__(self, module):
            self.module = module

        def bind(self, addresses, keep=None):
            def run():
                for spec in self.module.launches:
                    launches.append(spec.kernel)
                    cupy.clock.now += 0.25

            return run

    monkeypatch.setattr(cuda, "load_module", lambda cupy, module, arch: Loaded(module))
    monkeypatch.setattr(bench, "device_buffers", lambda *a, **k: defaultdict(object))
    plan = plan_of("softmax", m=64, n=256)
    r = bench.bench_plan(plan, warmup_ms=1, rep_ms=5, baseline=False)
    assert r.gpu == "Fake H200" and r.arch == "sm_90a"
    assert math.isclose(r.timing.median_ms, 0.25)
    assert r.bound_kind == plan.bound_kind and r.hbm_bytes == plan.top_bytes
    assert launches and all(n == plan_launch_name(plan) for n in launches)


def plan_launch_name(plan) -> str:
    from ncdc.render import render_plan

    return render_plan(plan).launches[0].kernel


# ----------------------------------------------------------------------------- tune


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path))
    return tmp_path


def test_tuning_key_names_the_problem():
    d = load_diagram(DIAGRAMS / "matmul.yaml")
    key = choose.tuning_key(d, "h200", "sm_90a", "NVIDIA H200")
    assert key["name"] == "matmul" and key["axes"] == {"m": 4096, "n": 4096, "k": 4096}
    assert key["dtypes"] == {"A": "bf16", "B": "bf16"} and key["hardware"] == "h200"
    assert key["arch"] == "sm_90a" and key["device"] == "NVIDIA H200"
    bigger = load_diagram(DIAGRAMS / "matmul.yaml", {"m": 8192})
    path = choose.tuning_path(d, "h200", "sm_90a", "NVIDIA H200")
    assert path != choose.tuning_path(bigger, "h200", "sm_90a", "NVIDIA H200")
    assert path != choose.tuning_path(d, "h100", "sm_90a", "NVIDIA H200")
    assert path != choose.tuning_path(d, "h200", "sm_80", "NVIDIA H200")  # the arch counts
    assert path != choose.tuning_path(d, "h200", "sm_90a", "NVIDIA H100 80GB HBM3")  # the GPU
    fp8 = load_diagram(DIAGRAMS / "fp8_matmul.yaml")
    assert choose.tuning_key(fp8, "h200", "sm_90a", "")["ops_sha256"] != key["ops_sha256"]


def test_tuned_beats_modelled_and_explicit_beats_tuned(cache):
    d = load_diagram(DIAGRAMS / "matmul.yaml")
    assert choose.read_tuned(d, "h200", "sm_90a") is None
    plans = rank_tiles(d, H200, 4)
    modelled = choose.plan_config(plans[0])
    runner_up = next(choose.plan_config(p) for p in plans if choose.plan_config(p) != modelled)
    path = choose.write_tuned(d, "h200", "sm_90a", "NVIDIA H200", runner_up, {"gpu": "test"})
    assert path.parent == cache / "tune" and not list(path.parent.glob("*.tmp"))
    assert choose.read_tuned(d, "h200", "sm_90a") == runner_up  # any GPU of the profile
    assert choose.read_tuned(d, "h200", "sm_90a", "NVIDIA H200") == runner_up
    assert choose.read_tuned(d, "h200", "sm_90a", "NVIDIA H100 80GB HBM3") is None
    assert choose.read_tuned(d, "h200", "sm_80") is None  # tuned for another arch
    tuned = choose.choose_plan(d, H200)
    assert choose.plan_config(tuned) == runner_up  # tuned > modelled
    # the entry stores the candidates, and the plan rebuilt from them launches exactly them
    assert [k.candidate for k in tuned.kernels] == list(runner_up.candidates)
    explicit = choose.choose_plan(d, H200, {"m": 64, "n": 64})
    assert explicit.tiles["m"] == 64 and explicit.tiles["n"] == 64  # explicit > tuned
    other = load_diagram(DIAGRAMS / "matmul.yaml", {"k": 1024})
    assert choose.plan_config(choose.choose_plan(other, H200)) == choose.plan_config(
        plan_diagram(other, H200)
    )  # another problem: modelled


def test_stale_or_corrupt_entries_are_ignored(cache, monkeypatch):
    d = load_diagram(DIAGRAMS / "softmax.yaml")
    config = choose.plan_config(plan_diagram(d, H200))
    path = choose.write_tuned(d, "h200", "sm_90a", "gpu", config, {})
    path.write_text("{ not json")
    assert choose.read_tuned(d, "h200", "sm_90a") is None
    choose.write_tuned(d, "h200", "sm_90a", "gpu", config, {})
    monkeypatch.setattr(choose, "__version__", "9.9.9")  # a new ncdc: the key no longer matches
    assert choose.read_tuned(d, "h200", "sm_90a") is None


# ----------------------------------------------------------------------- no GPU here


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "diagrams/softmax.yaml"],
        ["bench", "diagrams"],
        ["tune", "diagrams/matmul.yaml"],
        ["run", "diagrams/softmax.yaml", "--backend", "cuda", "--set", "m=4", "--set", "n=64"],
    ],
)
def test_gpu_commands_exit_4_with_one_line(argv, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: CuPy is not installed")


def test_percent_of_peak_uses_the_true_peak_with_the_mma_sync_ceiling_beside_it():
    """H200's profile discounts mma.sync to a share of the tensor peak (wgmma reaches the
    rest): % of peak is against the datasheet peak, the ceiling is share x peak."""
    from ncdc.measure.bench import mma_sync_ceiling_of, peak_of

    hw = load_hardware("h200")
    assert hw.mma_sync_share < 1
    # k = 4095 rows are not 16-byte aligned, which TMA needs: the mma.sync kernel runs, here
    # in its compute-bound 256 x 128 tiles (the search's 128 x 128, two blocks an SM, is
    # held by L2 -> SMEM)
    tiles = {"m": 256, "n": 128}
    plan = plan_diagram(load_diagram(DIAGRAMS / "matmul.yaml", {"k": 4095}), hw, tiles)
    assert "wgmma" not in dict(plan.kernels[0].candidate.params)
    assert plan.bound_kind == "compute"
    assert peak_of(plan) == hw.rate("tensor", "bf16")
    assert mma_sync_ceiling_of(plan) == pytest.approx(hw.rate("tensor", "bf16") * hw.mma_sync_share)
    a100 = load_hardware("a100")
    assert a100.mma_sync_share == 1
    p = plan_diagram(load_diagram(DIAGRAMS / "matmul.yaml"), a100)
    assert peak_of(p) == mma_sync_ceiling_of(p)


def test_bench_and_tune_json_follow_their_schemas():
    from ncdc.schema import load_schema, validate

    assert validate(bench.bench_to_dict(a_result()), load_schema("bench")) == []
    c = tune.Config({"m": 128}, ((8, 2, 1),))
    r = tune.TuneResult(
        "matmul", "h200", "NVIDIA H200", "sm_90a", {"m": 4096}, {"m": 256},
        (tune.Candidate(0, c, 1.0e-4, 0.30), tune.Candidate(1, c, 1.1e-4, math.inf, "x")),
    )  # fmt: skip
    assert validate(tune.tune_to_dict(r), load_schema("tune")) == []


class NumpyAsCupy:
    """NumPy in CuPy's place for `bench.device_buffers`: the same calls, host arrays."""

    random = np.random
    float16, float32, uint16, uint32 = np.float16, np.float32, np.uint16, np.uint32
    asarray, empty, zeros = staticmethod(np.asarray), staticmethod(np.empty), staticmethod(np.zeros)
    asnumpy = staticmethod(np.asarray)


@pytest.mark.parametrize("name", ["varlen_attention", "embedding", "cross_entropy"])
def test_device_buffers_draw_integer_inputs_as_the_reference_does(name):
    """A benchmark's integer inputs keep their meaning: varlen lengths that fit the packed
    axis (on an H200 these once had no random values at all), a gather's indices inside
    the axis they select along."""
    from ncdc.verify.reference import index_ranges

    spec = DIAGRAMS / f"{name}.yaml"
    diagram = load_diagram(spec, {a: min(n, 300) for a, n in load_diagram(spec).axes.items()})
    module = bench.render_plan(plan_diagram(diagram, H200))
    buffers = bench.device_buffers(NumpyAsCupy, diagram, module, seed=3)
    integers = [t for t in diagram.inputs if t.dtype == "int32"]
    assert integers
    for t in integers:
        values = buffers[t.name]
        assert values.dtype == np.int32
        assert values.shape == tuple(diagram.axes[a] for a in t.axes)
        assert values.min() >= 0
    for op in diagram.ops:
        if op.fn == "varlen":
            tokens = diagram.axes[op.params["key"]]
            assert buffers[op.params["lengths"]].sum(axis=-1).max() <= tokens
    for index, size in index_ranges(diagram).items():
        assert buffers[index].max() < size
