"""The GPU path's logic, on a machine with no GPU: quantiles, L2-flush sizing, repetition
counts, Spearman correlation, the tuning cache (key, lookup, explicit > tuned > modelled),
the bench and tune records, and exit code 4 where a GPU is needed.

Where code would launch kernels, a small fake CuPy (events on a fake clock that each
launch advances) stands in: those tests check control flow only (how many flushes,
warm-up and timed calls, which events are read), not that anything runs on a GPU.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections import defaultdict
from types import SimpleNamespace

import pytest

from ncdc.backends import cuda
from ncdc.cli.main import main
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.measure import bench, tune
from ncdc.measure.baselines import (
    attention_shape,
    baseline_kind,
    gemm_shape,
    row_shape,
    run_baselines,
)
from ncdc.measure.bench import BaselineResult, BenchResult, Timing
from ncdc.plan import choose
from ncdc.plan.search import plan_diagram, rank_tiles
from tests import support

REPO = support.ROOT
DIAGRAMS = REPO / "diagrams"
H200 = load_hardware("h200")


# ------------------------------------------------------------------------- fake CuPy


class FakeClock:
    now = 0.0  # milliseconds


class FakeEvent:
    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.t: float | None = None

    def record(self) -> None:
        self.t = self.clock.now

    def synchronize(self) -> None:
        pass


class FakeArray:
    def __init__(self, clock: FakeClock, nbytes: int, cost_ms: float):
        self.clock, self.nbytes, self.cost_ms = clock, nbytes, cost_ms
        self.fills = 0
        self.data = self

    def fill(self, value: float) -> None:
        self.fills += 1
        self.clock.now += self.cost_ms

    def copy_from_device_async(self, src: FakeArray, nbytes: int) -> None:
        self.clock.now += nbytes / 4e9  # 4 TB/s, in ms


class FakeCupy:
    """Just enough of CuPy for timing: events, a device, empty buffers, a runtime."""

    float32 = "float32"
    uint8 = "uint8"

    def __init__(self, flush_ms: float = 0.01):
        self.clock = FakeClock()
        self.flush_ms = flush_ms
        self.arrays: list[FakeArray] = []
        clock = self.clock

        class _Device:
            id = 0
            compute_capability = "90"

            def synchronize(self) -> None:
                pass

        class _Runtime:
            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def getDeviceProperties(i: int) -> dict:
                return {"name": b"Fake H200", "multiProcessorCount": 132, "l2CacheSize": 1 << 20}

            @staticmethod
            def driverGetVersion() -> int:
                return 13000

            @staticmethod
            def runtimeGetVersion() -> int:
                return 12090

        class _Cuda:
            Device = _Device
            runtime = _Runtime

            @staticmethod
            def Event() -> FakeEvent:
                return FakeEvent(clock)

            @staticmethod
            def get_elapsed_time(start: FakeEvent, end: FakeEvent) -> float:
                assert start.t is not None and end.t is not None, "event read before recorded"
                return end.t - start.t

        self.cuda = _Cuda

    def empty(self, n: int, dtype: str = "float32") -> FakeArray:
        size = 4 if dtype == "float32" else 1
        array = FakeArray(self.clock, n * size, self.flush_ms)
        self.arrays.append(array)
        return array


def kernel(cupy: FakeCupy, ms: float):
    calls = []

    def fn() -> None:
        calls.append(1)
        cupy.clock.now += ms

    return fn, calls


# --------------------------------------------------------------------------- timing


def test_quantiles_interpolate_like_torch_quantile():
    # numpy's default (linear) method: p20 of 1..5 sits 0.8 of the way from 1 to 2.
    t = bench.quantiles([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (t.median_ms, t.p20_ms, t.p80_ms, t.repetitions) == (3.0, 1.8, 4.2, 5)
    with pytest.raises(ValueError):
        bench.quantiles([])


def test_flush_is_twice_l2():
    # The H200 profile's L2 is 50 MiB: flushing writes 100 MiB.
    assert bench.flush_bytes(H200) == 2 * 50 * 2**20


def test_repetitions_fill_the_milliseconds():
    assert bench.repetitions(0.5, 25, 100) == (50, 200)
    assert bench.repetitions(500.0, 25, 100) == (1, 1)  # a slow kernel still runs once
    assert bench.repetitions(0.0, 25, 100) == (bench.MAX_REPETITIONS, bench.MAX_REPETITIONS)


def test_time_gpu_flushes_before_every_timed_call():
    """Control flow only: one untimed call, ESTIMATE_CALLS flushed estimate calls, the
    warm-up, then one flush and one event pair per repetition around the call alone."""
    cupy = FakeCupy(flush_ms=0.01)
    flush = cupy.empty(10)
    fn, calls = kernel(cupy, 0.49)  # estimate = 0.49 + 0.01 flush = 0.5 ms a call
    t = bench.time_gpu(cupy, fn, flush=flush, warmup_ms=25, rep_ms=100)
    warm, reps = bench.repetitions(0.5, 25, 100)
    assert len(calls) == 1 + bench.ESTIMATE_CALLS + warm + reps
    assert flush.fills == bench.ESTIMATE_CALLS + reps
    assert t.repetitions == reps
    assert math.isclose(t.median_ms, 0.49) and math.isclose(t.p80_ms, 0.49)  # flush excluded


def test_make_timer_sizes_its_flush_from_the_profile():
    cupy = FakeCupy()
    timer = bench.make_timer(cupy, H200, 1.0, 1.0)
    fn, _ = kernel(cupy, 0.1)
    timer(fn)
    assert cupy.arrays[0].nbytes == bench.flush_bytes(H200)


class CapturingCupy(FakeCupy):
    """A FakeCupy with streams that capture: while a stream captures, work costs no time
    and is recorded instead; a graph replays it. Python dispatch costs DISPATCH_MS a call
    outside a graph, which the events must not see once the work is captured."""

    DISPATCH_MS = 0.05

    def __init__(self) -> None:
        super().__init__()
        fake = self
        self.capturing = False
        self.current: object = None
        self.recorded_on: list[object] = []

        class _Graph:
            def __init__(self, work: list) -> None:
                self.work = work
                self.launches = 0

            def launch(self, stream: object) -> None:
                assert stream is fake.current, "a replay runs on its own stream"
                self.launches += 1
                for w in self.work:
                    w()

        class _Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.work: list = []

            def __enter__(self) -> _Stream:
                fake.current = self
                return self

            def __exit__(self, *exc: object) -> None:
                fake.current = None

            def synchronize(self) -> None:
                pass

            def begin_capture(self) -> None:
                fake.capturing = True

            def end_capture(self) -> _Graph:
                fake.capturing = False
                fake.graph = _Graph(self.work)
                return fake.graph

        class _Event(FakeEvent):
            def record(self) -> None:
                fake.recorded_on.append(fake.current)
                super().record()

        self.cuda.Stream = _Stream
        self.cuda.Event = staticmethod(lambda: _Event(fake.clock))


def test_the_timer_replays_a_cuda_graph_so_dispatch_is_not_timed():
    cupy = CapturingCupy()
    calls = []

    def launch() -> None:  # the kernel's time, once dispatched
        cupy.clock.now += 0.2

    def fn() -> None:  # what module_runner returns: Python dispatch, then the launch
        calls.append(1)
        if cupy.capturing:
            cupy.current.work.append(launch)
            return
        cupy.clock.now += cupy.DISPATCH_MS
        launch()

    t = bench.make_timer(cupy, H200, 1.0, 1.0)(fn)
    assert len(calls) == 2  # once to warm up, once captured: the loop replays the graph
    assert cupy.graph.launches > t.repetitions
    assert t.method == "cuda graph (cupy)" and math.isclose(t.median_ms, 0.2)  # no dispatch
    assert all(s is not None for s in cupy.recorded_on)  # events on the graph's stream


def test_work_a_graph_cannot_hold_is_timed_directly_and_says_so():
    cupy = FakeCupy()  # its streams cannot capture
    fn, calls = kernel(cupy, 0.1)
    t = bench.make_timer(cupy, H200, 1.0, 1.0)(fn)
    assert t.method == "direct" and math.isclose(t.median_ms, 0.1) and calls


def test_pytorch_work_is_captured_with_pytorch_graphs():
    replays = []

    class FakeGraph:
        def replay(self) -> None:
            replays.append(1)

    class FakeTorchCuda:
        CUDAGraph = FakeGraph

        @staticmethod
        def Stream() -> object:
            class S:
                def wait_stream(self, other: object) -> None:
                    pass

            return S()

        @staticmethod
        def current_stream() -> object:
            return FakeTorchCuda.Stream()

        @staticmethod
        def stream(s: object) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

        @staticmethod
        def graph(g: object) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

        @staticmethod
        def synchronize() -> None:
            pass

    class FakeTorch:
        cuda = FakeTorchCuda

    from ncdc.measure.timing import torch_work

    cupy = FakeCupy()
    ran = []
    fn = torch_work(FakeTorch, lambda: ran.append(1))
    replay = bench.capture(cupy, fn)
    assert replay.method == "cuda graph (torch)" and len(ran) == 2  # warm-up, capture
    replay.run()
    assert replays == [1]


# ------------------------------------------------------------------------ baselines


def plan_of(name: str, **sizes: int):
    return plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml", sizes or None), H200)


def test_baseline_is_chosen_by_structure_not_name():
    assert baseline_kind(plan_of("matmul")) == "gemm"
    assert baseline_kind(plan_of("batched_matmul")) == "gemm"
    assert baseline_kind(plan_of("attention")) == "attention"
    assert baseline_kind(plan_of("attention_unfused")) == "attention"  # three kernels
    assert baseline_kind(plan_of("decode_attention")) == "attention"
    assert baseline_kind(plan_of("softmax")) == "rowwise"


def test_baseline_shapes():
    g = gemm_shape(plan_of("batched_matmul"))
    assert (g.batch, g.m, g.n, g.k, g.dtype) == (16, 2048, 2048, 2048, "bf16")
    gqa = attention_shape(load_diagram(DIAGRAMS / "gqa_attention.yaml"))
    # [b, g, r] query heads over [b, g] key/value heads: 4*8*4 = 128 over 4*8 = 32.
    assert (gqa.q_heads, gqa.kv_heads, gqa.queries, gqa.keys, gqa.d, gqa.d_v) == (
        128, 32, 4096, 4096, 128, 128,
    )  # fmt: skip
    assert math.isclose(gqa.scale, 0.08838834764831845) and not gqa.causal
    assert attention_shape(load_diagram(DIAGRAMS / "attention_causal.yaml")).causal
    r = row_shape(plan_of("layernorm"))
    assert (r.rows, r.n, r.op.fn) == (16384, 4096, "layernorm")


def test_fp8_baseline_without_torch_is_skipped_with_a_reason(monkeypatch):
    """Control flow only: no PyTorch, so the fp8 GEMM baseline is skipped, and the copy
    ceiling still runs (on the fake clock)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    cupy = FakeCupy()
    plan = plan_of("fp8_matmul")
    out = run_baselines(plan, cupy, bench.make_timer(cupy, H200, 1.0, 1.0))
    assert out[0].timing is None and "PyTorch" in out[0].skipped
    copy = out[-1]
    assert copy.name == "copy (device to device)" and copy.timing is not None
    assert copy.bytes_moved == 2 * (plan.top_bytes // 2)


def test_a_shape_the_baselines_cannot_read_is_a_skip_not_a_failed_bench():
    """Control flow only: a plan with an attention kernel whose operations are not
    contract-softmax-contract. Reading its shape raised outside the skip handling and
    stopped the whole bench; now it is one skipped baseline and the copy still runs."""
    cupy = FakeCupy()
    real = plan_of("matmul")
    plan = SimpleNamespace(
        kernels=[SimpleNamespace(family=SimpleNamespace(name="attention"))],
        graph=real.graph, top_bytes=real.top_bytes,
    )  # fmt: skip
    out = run_baselines(plan, cupy, bench.make_timer(cupy, H200, 1.0, 1.0))
    assert [b.name for b in out] == ["sdpa", "copy (device to device)"]
    assert out[0].timing is None and "not an attention diagram" in out[0].skipped
    assert out[1].timing is not None


class FakeMatrix:
    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def astype(self, dtype: str) -> FakeMatrix:
        return self


def test_unbatched_cupy_gemm_baseline_is_two_dimensional(monkeypatch):
    """Control flow only: without PyTorch the GEMM baseline is `cupy.matmul` in fp16. CuPy 14
    runs a 3-D fp16 matmul in fp32 on upcast copies (cupy/cupy#10317), so an unbatched
    problem must be 2-D to time fp16 cuBLAS; a batched one stays 3-D."""
    from ncdc.measure.baselines import _gemm

    monkeypatch.setitem(sys.modules, "torch", None)
    shapes = []
    cupy = SimpleNamespace(
        float16="float16", float32="float32",
        random=SimpleNamespace(standard_normal=lambda shape, dtype: FakeMatrix(shape)),
        matmul=lambda a, b: shapes.append((a.shape, b.shape)),
    )  # fmt: skip
    for name, want in [
        ("matmul", ((4096, 4096), (4096, 4096))),
        ("batched_matmul", ((16, 2048, 2048), (16, 2048, 2048))),
    ]:
        ((label, fn),) = _gemm(cupy, gemm_shape(plan_of(name)))
        fn()
        assert label == "cuBLAS fp16 (cupy.matmul)" and shapes.pop() == want


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

    class Raw:
        def get_function(self, name):
            def fn(grid, block, args, shared_mem=0):
                launches.append(name)
                cupy.clock.now += 0.25

            return fn

    monkeypatch.setattr(cuda, "load_module", lambda cupy, module, arch: Raw())
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


def test_spearman():
    assert tune.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == 0.8
    assert tune.spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert tune.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == 1.0  # ties take mean ranks
    # Failed candidates (inf) are left out; one pair left is no correlation.
    assert math.isnan(tune.spearman([1, 2], [5.0, math.inf]))


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


def test_check_sizes_keep_two_tiles():
    d = load_diagram(DIAGRAMS / "matmul.yaml")
    configs = [tune.Config({"m": 256, "n": 128, "k": 64}, ((8, 2, 1),))]
    assert tune.check_sizes(d, configs) == {"m": 512, "n": 256, "k": 256}
    small = load_diagram(DIAGRAMS / "matmul.yaml", {"m": 100})
    assert tune.check_sizes(small, configs)["m"] == 100  # never grown


def test_tune_result_record():
    c = tune.Config({"m": 128}, ((8, 2, 1),))
    r = tune.TuneResult(
        "matmul", "h200", "NVIDIA H200", "sm_90a", {"m": 4096}, {"m": 256},
        (
            tune.Candidate(0, c, 1.0e-4, 0.30),
            tune.Candidate(1, c, 1.1e-4, 0.25),
            tune.Candidate(2, c, 1.2e-4, math.inf, "compile: error"),
            tune.Candidate(3, c, 1.3e-4, 0.40),
        ),
    )  # fmt: skip
    assert r.best.rank == 1
    assert math.isclose(r.model_pick_gap, 0.30 / 0.25 - 1)
    assert r.spearman == 0.5  # ranks (1, 2, 3) against (2, 1, 3)
    d = tune.tune_to_dict(r)
    json.dumps(d, allow_nan=False)
    assert d["format"] == "ncdc.tune/1" and d["best_rank"] == 1
    assert d["candidates"][2]["measured_ms"] is None and d["candidates"][2]["error"]


def test_a_candidate_cupy_refuses_to_launch_scores_infinity(monkeypatch):
    """Control flow only: a launch error that is not an NcdcError (CuPy's CUDADriverError for
    too much shared memory, say) fails that candidate, not the whole tuning run."""
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(
        tune, "compile_candidates", lambda spec, hw, arch, sizes, configs: [""] * len(configs)
    )

    def check(diagram, hardware, config, seed):
        if seed == 0:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE: invalid argument")
        return ""

    monkeypatch.setattr(tune, "check_candidate", check)
    monkeypatch.setattr(bench, "module_runner", lambda *a, **k: kernel(cupy, 0.2)[0])
    sizes = {"m": 256, "n": 256, "k": 256}
    r = tune.tune_spec(DIAGRAMS / "matmul.yaml", H200, sizes=sizes, top_k=3, warmup_ms=1,
                       rep_ms=2, write=False)  # fmt: skip
    first, *rest = r.candidates
    assert not first.ok and first.error.startswith("RuntimeError: CUDA_ERROR_INVALID_VALUE")
    assert rest and all(c.ok for c in rest) and r.best is not None


# ----------------------------------------------------------------------- device-check


def device_check_script():
    """scripts/device-check as a module (it has no .py suffix)."""
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = SourceFileLoader("device_check", str(REPO / "scripts" / "device-check"))
    module = module_from_spec(spec_from_loader("device_check", loader))
    loader.exec_module(module)
    return module


def test_device_check_table_survives_missing_figures(tmp_path, capsys):
    """No figure may crash the last table: a failed run, a skipped bench, a bench without a
    baseline or a model error, a failed tune; the partial record on disk names the step."""
    dc = device_check_script()
    bench_record = bench.bench_to_dict(a_result(baselines=(), predicted_s=0.0))
    record = {
        "gpu": {"name": "NVIDIA H200", "driver": "", "driver_version": "13.0",
                "runtime_version": "13.0"},
        "ncdc_version": "0", "date": "today",
        "diagrams": [
            {"name": "a", "ok": False, "error": "run: RuntimeError: boom"},
            {"name": "b", "ok": True, "bench_skipped": "time budget of 240 s spent"},
            {"name": "c", "ok": True, "bench": bench_record},
        ],
        "tune": [{"name": "matmul", "error": "CheckFailed"}, {"name": "attention", "skipped": "budget"}],
    }  # fmt: skip
    assert bench_record["ratio"] is None and bench_record["model"]["error"] is None
    dc.save(tmp_path / "device-check.json", record, 0.0, "diagram d")
    assert json.loads((tmp_path / "device-check.json").read_text())["in_progress"] == "diagram d"
    dc.print_table(record)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("ratio = ") and any(line.startswith("c ") for line in lines)


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


def test_no_device_is_exit_4(monkeypatch):
    """Control flow only: CuPy present but no device."""

    class NoDevice:
        class cuda:
            class runtime:
                @staticmethod
                def getDeviceCount() -> int:
                    raise RuntimeError("cudaErrorNoDevice")

    monkeypatch.setitem(sys.modules, "cupy", NoDevice)
    from ncdc.errors import NoGpuError

    with pytest.raises(NoGpuError) as e:
        cuda.require_gpu()
    assert e.value.exit_code == 4 and "no CUDA GPU" in e.value.line()


def test_device_info_versions():
    info = cuda.device_info(FakeCupy())
    assert info["name"] == "Fake H200"
    assert info["driver_version"] == "13.0" and info["runtime_version"] == "12.9"


def test_percent_of_peak_uses_the_true_peak_with_the_mma_sync_ceiling_beside_it():
    """H200's profile discounts mma.sync to a share of the tensor peak (wgmma reaches the
    rest): % of peak is against the datasheet peak, the ceiling is share x peak."""
    from ncdc.measure.bench import mma_sync_ceiling_of, peak_of

    hw = load_hardware("h200")
    assert hw.mma_sync_share < 1
    # k = 4095 rows are not 16-byte aligned, which TMA needs: the mma.sync kernel runs
    plan = plan_diagram(load_diagram(DIAGRAMS / "matmul.yaml", {"k": 4095}), hw)
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
