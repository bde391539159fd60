"""`ncdc bench`: time a diagram's kernels on the GPU beside the library a user would run.

Timing follows Triton's `do_bench`: a few calls estimate one call's time, then warm-up and
repetitions are given in milliseconds, each repetition between its own pair of CUDA events,
with L2 flushed before it (a buffer twice the profile's L2 is overwritten) so no run reads
what the previous one left in cache. The result is the median and the 20th and 80th
percentiles. Inputs are random (never zeros), drawn on the device once.

The report gives the time, the achieved TFLOP/s (compute-bound plans) or TB/s of HBM
traffic (memory-bound plans, from the model's top-level bytes), the percentage of the
profile's peak for that bound, the model's predicted time and its error
(measured / predicted - 1), and the baseline (`ncdc.measure.baselines`) with the speed ratio
baseline time / ncdc time (0.6 means ncdc runs at 60% of the library's speed).

    >>> result = bench_spec(Path("diagrams/matmul.yaml"), load_hardware("h200"))  # doctest: +SKIP
    >>> result.timing.median_ms, result.ratio  # doctest: +SKIP
    (0.21, 0.64)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.language.load import load_diagram
from ncdc.measure.timing import BaselineResult, Replay, Timer, Timing
from ncdc.model.records import dominant_rate
from ncdc.model.values import Plan
from ncdc.output import json_number
from ncdc.render import RenderedModule, render_plan
from ncdc.verify.reference import from_storage, make_inputs, round_to, to_storage

FORMAT = "ncdc.bench/1"
DEFAULT_WARMUP_MS = 25.0
DEFAULT_REP_MS = 100.0
ESTIMATE_CALLS = 5
MAX_REPETITIONS = 5000  # a 2 us kernel at 100 ms would otherwise take 50k flushes
QUANTILES = (0.5, 0.2, 0.8)


@dataclass(frozen=True)
class BenchResult:
    """A timed diagram: what it did, how fast, against the model and the baselines."""

    name: str
    source: str
    axes: Mapping[str, int] = field(hash=False)
    hardware: str  # the profile the model used
    gpu: str  # the device it ran on
    arch: str
    families: tuple[str, ...]
    bound_kind: str  # compute | memory (the model's)
    flops: int
    hbm_bytes: int
    peak: float  # FLOP/s or B/s, by bound_kind: the hardware's true peak
    predicted_s: float
    tiles: Mapping[str, int] = field(hash=False)
    timing: Timing
    baselines: tuple[BaselineResult, ...] = ()
    mma_sync_ceiling: float = math.nan  # the peak mma.sync can reach (Hopper: below peak)

    @property
    def seconds(self) -> float:
        return self.timing.median_ms / 1e3

    @property
    def achieved(self) -> float:
        """FLOP/s for a compute-bound plan, HBM B/s for a memory-bound one."""
        work = self.flops if self.bound_kind == "compute" else self.hbm_bytes
        return work / self.seconds if self.seconds > 0 else math.nan

    @property
    def percent_of_peak(self) -> float:
        return 100.0 * self.achieved / self.peak if self.peak else math.nan

    @property
    def percent_of_mma_sync_ceiling(self) -> float:
        c = self.mma_sync_ceiling
        return 100.0 * self.achieved / c if c and math.isfinite(c) else math.nan

    @property
    def model_error(self) -> float:
        """measured / predicted - 1: +0.25 means 25% slower than the model said."""
        return self.seconds / self.predicted_s - 1 if self.predicted_s else math.nan

    @property
    def baseline(self) -> BaselineResult | None:
        """The fastest library baseline that ran (the copy ceiling is not one)."""
        ran = [b for b in self.baselines if b.timing is not None and not b.bytes_moved]
        return min(ran, key=lambda b: b.ms) if ran else None

    @property
    def ratio(self) -> float:
        """Speed relative to the baseline: baseline time / ncdc time."""
        b = self.baseline
        return b.ms / self.timing.median_ms if b and self.timing.median_ms else math.nan

    @property
    def copy_bandwidth(self) -> float:
        """Measured device-to-device copy rate (bytes read plus written per second)."""
        for b in self.baselines:
            if b.bytes_moved and b.timing is not None:
                return b.bytes_moved / (b.ms / 1e3)
        return math.nan


# ------------------------------------------------------------------------ timing (pure)


def quantiles(times_ms: Sequence[float]) -> Timing:
    """Median, 20th and 80th percentile (linear interpolation, as `torch.quantile`).

    >>> quantiles([1.0, 2.0, 3.0, 4.0, 5.0])
    Timing(median_ms=3.0, p20_ms=1.8, p80_ms=4.2, repetitions=5, method='direct')
    """
    if not times_ms:
        raise ValueError("no times to summarise")
    med, p20, p80 = (float(q) for q in np.quantile(np.asarray(times_ms, float), QUANTILES))
    return Timing(med, p20, p80, len(times_ms))


def flush_bytes(hardware: Hardware) -> int:
    """Bytes to overwrite between repetitions so the next one finds nothing of its inputs
    in L2: twice the profile's L2 (the H200's 60 MiB gives 120 MiB)."""
    return 2 * hardware.limits.l2_bytes


def repetitions(estimate_ms: float, warmup_ms: float, rep_ms: float) -> tuple[int, int]:
    """(warm-up calls, timed calls) that fill the given milliseconds, at least one each."""
    per_call = max(estimate_ms, 1e-4)
    warm = max(1, min(MAX_REPETITIONS, int(warmup_ms / per_call)))
    reps = max(1, min(MAX_REPETITIONS, int(rep_ms / per_call)))
    return warm, reps


def capture(cupy: Any, fn: Callable[[], None]) -> Replay:
    """`fn` as a CUDA graph: PyTorch work (a callable `torch_work` marked) through
    `torch.cuda.CUDAGraph`, the rest through CuPy's stream capture on a stream of its own.
    `fn` runs once before the capture (lazy module loads, library handles). Work that
    cannot be captured is timed directly, its dispatch included, and says so."""
    try:
        graph = getattr(fn, "torch_graph", None)
        return graph() if graph is not None else _cupy_graph(cupy, fn)
    except Exception:  # a launch CUDA graphs refuse: time it as it is
        cupy.cuda.Device().synchronize()
        return Replay(fn)


def _cupy_graph(cupy: Any, fn: Callable[[], None]) -> Replay:
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        try:
            fn()
        finally:
            graph = stream.end_capture()
    return Replay(lambda: graph.launch(stream), stream, "cuda graph (cupy)")


def time_gpu(
    cupy: Any, fn: Callable[[], None] | Replay, *, flush: Any, warmup_ms: float, rep_ms: float
) -> Timing:
    """Time `fn` with CUDA events, flushing L2 (overwriting `flush`) before every call.
    Given a `Replay`, everything runs on its stream: the flush, the replay and the events
    around the replay alone."""
    replay = fn if isinstance(fn, Replay) else Replay(fn)
    if replay.stream is None:
        return _time_on_stream(cupy, replay, flush, warmup_ms, rep_ms)
    with replay.stream:
        return _time_on_stream(cupy, replay, flush, warmup_ms, rep_ms)


def _time_on_stream(
    cupy: Any, replay: Replay, flush: Any, warmup_ms: float, rep_ms: float
) -> Timing:
    run = replay.run
    run()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(ESTIMATE_CALLS):
        flush.fill(0)
        run()
    end.record()
    end.synchronize()
    estimate = cupy.cuda.get_elapsed_time(start, end) / ESTIMATE_CALLS
    warm, reps = repetitions(estimate, warmup_ms, rep_ms)
    for _ in range(warm):
        run()
    starts = [cupy.cuda.Event() for _ in range(reps)]
    ends = [cupy.cuda.Event() for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        flush.fill(0)
        s.record()
        run()
        e.record()
    ends[-1].synchronize()
    times = [cupy.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends, strict=True)]
    return dataclasses.replace(quantiles(times), method=replay.method)


def make_timer(cupy: Any, hardware: Hardware, warmup_ms: float, rep_ms: float) -> Timer:
    """`time_gpu` of each callable's CUDA graph (`capture`), with its flush buffer
    allocated once (on the device, float32 words)."""
    flush = cupy.empty(flush_bytes(hardware) // 4, dtype=cupy.float32)

    def timer(fn: Callable[[], None]) -> Timing:
        replay = capture(cupy, fn)
        return time_gpu(cupy, replay, flush=flush, warmup_ms=warmup_ms, rep_ms=rep_ms)

    return timer


# ----------------------------------------------------------------------- device inputs


def random_device_array(cupy: Any, shape: tuple[int, ...], dtype: str, rng: Any) -> Any:
    """Random values in `dtype`'s storage, drawn on the device: normal for 16- and 32-bit
    floats, codes of magnitude at most 8 for fp8, [-100, 100) for int8, [0.5, 2) for
    scalars (per-tensor scales)."""
    if not shape:
        value = 0.5 + 1.5 * float(cupy.asnumpy(rng.random(size=1))[0])
        return cupy.asarray(to_storage(round_to(np.asarray(value), dtype), dtype))
    if dtype == "int8":
        return rng.integers(-100, 100, size=shape, dtype=np.int32).astype(np.int8)
    if dtype.startswith("fp8"):
        values = from_storage(np.arange(256, dtype=np.uint8), dtype)
        codes = np.flatnonzero(np.isfinite(values) & (np.abs(values) <= 8.0)).astype(np.uint8)
        picks = rng.integers(0, len(codes), size=shape, dtype=np.int32)
        return cupy.asarray(codes)[picks]
    x = rng.standard_normal(size=shape, dtype=cupy.float32)
    if dtype == "fp32":
        return x
    if dtype == "fp16":
        return x.astype(cupy.float16)
    if dtype == "bf16":  # round to nearest even on the top 16 bits
        u = x.view(cupy.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cupy.uint16)
    raise ValueError(f"no random values for dtype {dtype}")


def device_buffers(cupy: Any, diagram: Diagram, module: RenderedModule, seed: int = 0) -> dict:
    """Every buffer a launch of `module` names: inputs random, the rest uninitialised."""
    rng = cupy.random.default_rng(seed)
    named = {p.name for launch in module.launches for p in launch.params}
    inputs = {t.name for t in diagram.inputs}
    # Integer inputs carry structure (a gather's indices, varlen lengths, document ids):
    # drawn as the reference draws them, here, and copied over; they are small.
    structured = make_inputs(diagram, seed, only=frozenset(
        t.name for t in diagram.inputs if DTYPES[t.dtype].integer and t.dtype != "int8"
    ))  # fmt: skip
    out: dict[str, Any] = {}
    for t in diagram.tensors:
        if t.name not in named and t.name not in diagram.outputs:
            continue
        shape = tuple(diagram.axes[a] for a in t.axes)
        if t.name in structured:
            out[t.name] = cupy.asarray(to_storage(structured[t.name], t.dtype))
        elif t.name in inputs:
            out[t.name] = random_device_array(cupy, shape, t.dtype, rng)
        else:
            out[t.name] = cupy.empty(shape, dtype=np.dtype(DTYPES[t.dtype].bits))
    for w in module.workspace:
        make = cupy.zeros if w.zeroed else cupy.empty
        out[w.name] = make(w.values, dtype=np.dtype(DTYPES[w.dtype].bits))
    return out


def module_runner(
    cupy: Any, diagram: Diagram, module: RenderedModule, arch: str, seed: int = 0
) -> Callable[[], None]:
    """Load `module` (compiled through the cache), allocate its buffers once, and return a
    callable that runs all its launches."""
    from ncdc.backends.cuda import load_module

    buffers = device_buffers(cupy, diagram, module, seed)
    addresses = {name: int(a.data.ptr) for name, a in buffers.items()}
    return load_module(cupy, module, arch).bind(addresses, keep=buffers)


# ------------------------------------------------------------------------------ bench


def peak_of(plan: Plan) -> float:
    """The hardware's true peak for the plan's bound: the tensor (or CUDA-core) rate of its
    dominant unit and dtype when compute-bound (not discounted to what mma.sync reaches),
    the top level's bandwidth when memory-bound."""
    if plan.bound_kind == "compute":
        hw = plan.graph.hardware
        undiscounted = replace(hw, hmma_cycles=0.0)
        return dominant_rate(replace(plan, graph=replace(plan.graph, hardware=undiscounted)))
    return plan.graph.hardware.levels[0].bandwidth_bytes_per_s


def mma_sync_ceiling_of(plan: Plan) -> float:
    """The ceiling ncdc's own kernels can reach: the peak with mma.sync's share applied
    (Hopper's full tensor rate needs wgmma). Equal to `peak_of` where mma.sync is full rate."""
    if plan.bound_kind == "compute":
        return dominant_rate(plan)
    return peak_of(plan)


def bench_plan(
    plan: Plan, *, warmup_ms: float = DEFAULT_WARMUP_MS, rep_ms: float = DEFAULT_REP_MS,
    baseline: bool = True, seed: int = 0,
) -> BenchResult:  # fmt: skip
    """Time `plan`'s kernels on the current GPU, and the baselines beside them."""
    from ncdc.backends.cuda import device_arch, device_info, require_gpu
    from ncdc.measure.baselines import run_baselines

    cupy = require_gpu()
    hardware = plan.graph.hardware
    diagram = plan.graph.diagram
    arch = device_arch(cupy)
    timer = make_timer(cupy, hardware, warmup_ms, rep_ms)
    timing = timer(module_runner(cupy, diagram, render_plan(plan), arch, seed))
    baselines = tuple(run_baselines(plan, cupy, timer)) if baseline else ()
    return BenchResult(
        name=diagram.name, source=diagram.source, axes=dict(diagram.axes),
        hardware=hardware.name, gpu=device_info(cupy)["name"], arch=arch,
        families=tuple(dict.fromkeys(k.family.name for k in plan.kernels)),
        bound_kind=plan.bound_kind, flops=plan.flops, hbm_bytes=plan.top_bytes,
        peak=peak_of(plan), predicted_s=plan.predicted_time_s, tiles=plan.tiles,
        timing=timing, baselines=baselines, mma_sync_ceiling=mma_sync_ceiling_of(plan),
    )  # fmt: skip


def bench_spec(
    spec: Path, hardware: Hardware, *, sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None, warmup_ms: float = DEFAULT_WARMUP_MS,
    rep_ms: float = DEFAULT_REP_MS, baseline: bool = True,
) -> BenchResult:  # fmt: skip
    """Plan a spec (explicit tiles, else tuned, else modelled) and bench it."""
    from ncdc.plan.choose import choose_plan

    plan = choose_plan(load_diagram(spec, sizes), hardware, tiles)
    return bench_plan(plan, warmup_ms=warmup_ms, rep_ms=rep_ms, baseline=baseline)


# ----------------------------------------------------------------------------- report


def timing_to_dict(t: Timing | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {
        "median_ms": t.median_ms,
        "p20_ms": t.p20_ms,
        "p80_ms": t.p80_ms,
        "repetitions": t.repetitions,
        "method": t.method,  # "cuda graph (cupy)", "cuda graph (torch)" or "direct"
    }


def bench_to_dict(r: BenchResult) -> dict[str, Any]:
    """The versioned record of one bench (documented in docs/gpu.md)."""
    base = r.baseline
    return {
        "format": FORMAT,
        "name": r.name,
        "spec": r.source,
        "axes": dict(r.axes),
        "hardware": r.hardware,
        "gpu": r.gpu,
        "arch": r.arch,
        "families": list(r.families),
        "tiles": dict(r.tiles),
        "bound_kind": r.bound_kind,
        "flops": r.flops,
        "hbm_bytes": r.hbm_bytes,
        "timing": timing_to_dict(r.timing),
        "achieved": {
            "unit": "FLOP/s" if r.bound_kind == "compute" else "B/s",
            "value": json_number(r.achieved),
            "peak": r.peak,
            "percent_of_peak": json_number(r.percent_of_peak),
            "mma_sync_ceiling": json_number(r.mma_sync_ceiling),
            "percent_of_mma_sync_ceiling": json_number(r.percent_of_mma_sync_ceiling),
        },
        "model": {"predicted_s": r.predicted_s, "error": json_number(r.model_error)},
        "baselines": [
            {
                "name": b.name,
                "timing": timing_to_dict(b.timing),
                "skipped": b.skipped or None,
                **({"bytes_moved": b.bytes_moved} if b.bytes_moved else {}),
            }
            for b in r.baselines
        ],
        "baseline": base.name if base else None,
        "ratio": json_number(r.ratio),
        "copy_bandwidth_bytes_per_s": json_number(r.copy_bandwidth),
    }


def format_rate(r: BenchResult) -> str:
    """'612.3 TFLOP/s' or '4.05 TB/s'."""
    if not math.isfinite(r.achieved):
        return "-"
    if r.bound_kind == "compute":
        return f"{r.achieved / 1e12:.1f} TFLOP/s"
    return f"{r.achieved / 1e12:.2f} TB/s"


def bench_row(r: BenchResult) -> list[str]:
    """One table row: diagram, ms (p20-p80), rate, % peak, model error, baseline, ratio."""
    base = r.baseline
    t = r.timing
    return [
        r.name,
        f"{t.median_ms:.3f} ({t.p20_ms:.3f}-{t.p80_ms:.3f})",
        format_rate(r),
        _percent(r),
        f"{r.model_error:+.0%}" if math.isfinite(r.model_error) else "-",
        f"{base.name} {base.ms:.3f} ms" if base else _skipped(r),
        f"{r.ratio:.2f}" if math.isfinite(r.ratio) else "-",
    ]


def _percent(r: BenchResult) -> str:
    """'% of the true peak', with the share of the mma.sync ceiling beside it when lower."""
    text = f"{r.percent_of_peak:.0f}%"
    ceiling = r.percent_of_mma_sync_ceiling
    if math.isfinite(ceiling) and r.mma_sync_ceiling < r.peak:
        text += f" ({ceiling:.0f}% of mma.sync)"
    return text


def _skipped(r: BenchResult) -> str:
    reasons = [b.skipped for b in r.baselines if b.skipped]
    return f"- ({reasons[0]})" if reasons else "-"


BENCH_COLUMNS = (
    "diagram", "ms (p20-p80)", "rate", "% peak", "model error", "baseline", "ratio",
)  # fmt: skip


def bench_table(results: Sequence[BenchResult]) -> Any:
    """A rich table, one row per diagram; the caption says how to read the ratio."""
    from rich.table import Table

    gpu = results[0].gpu if results else ""
    table = Table(title=f"ncdc bench on {gpu}")
    for col in BENCH_COLUMNS:
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(*bench_row(r))
    table.caption = (
        "ratio = baseline time / ncdc time (1.0 = as fast as the library); model error = "
        "measured / predicted - 1; % peak of the profile's tensor rate or HBM bandwidth"
    )
    return table


def bench_specs(
    specs: Sequence[Path], hardware: Hardware, *, sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None, warmup_ms: float = DEFAULT_WARMUP_MS,
    rep_ms: float = DEFAULT_REP_MS, baseline: bool = True,
) -> list[BenchResult]:  # fmt: skip
    """Bench each spec in turn (one GPU: never in parallel); on a terminal the status line
    names the spec being timed, silence in CI."""
    from ncdc.backends.cuda import require_gpu
    from ncdc.output import phase, progress

    require_gpu()  # one clear error before any planning
    results = []
    for i, spec in enumerate(specs, 1):
        with phase("benchmarking"):
            progress(f"benchmarking {spec.stem} ({i}/{len(specs)})")
            results.append(
                bench_spec(spec, hardware, sizes=sizes, tiles=tiles, warmup_ms=warmup_ms,
                           rep_ms=rep_ms, baseline=baseline)
            )  # fmt: skip
    return results


def compile_for_device(
    spec: Path, sizes: Mapping[str, int] | None, hardware: Hardware, arch: str
) -> str:
    """Plan (explicit, tuned or modelled) and compile one spec into the compile cache, as a
    worker process does before a bench; the error as one line, or '' when it compiled."""
    from ncdc.backends.compile import compile_plan
    from ncdc.errors import NcdcError
    from ncdc.plan.choose import choose_plan

    try:
        compile_plan(choose_plan(load_diagram(spec, sizes), hardware), arch)
    except NcdcError as e:
        return e.line()
    except Exception as e:  # a broken family renderer is one failed diagram, not a crash
        return f"{type(e).__name__}: {e}"
    return ""
