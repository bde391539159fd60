"""`ncdc calibrate`'s measurements on the GPU: one short microbenchmark per figure the cost
model takes from a profile (ncdc.measure.calibrate turns them into a profile).

The kernels are `templates/include/ncdc_calibrate.cuh`, compiled with NVRTC for the
device's arch and loaded with CuPy. Each figure is the median of a few CUDA-event-timed
runs after one untimed run; a size or a count is chosen so that a run takes about a
millisecond or more (launch overhead a small share of it). Needs a GPU: the arithmetic that
turns times into figures is `ncdc.measure.calibrate` and is tested on any machine.

    >>> raw = measure(cupy, load_hardware("h200"), quick=True)  # doctest: +SKIP
    >>> raw["hbm_copy"].bytes / raw["hbm_copy"].seconds / 1e12  # doctest: +SKIP
    3.9
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ncdc.hardware.machine import Hardware


@dataclass(frozen=True)
class Sample:
    """One microbenchmark's raw result: `amount` of work (bytes, FLOPs, operations,
    cycles) in `seconds`, and how it was measured."""

    amount: float
    seconds: float
    method: str

    @property
    def rate(self) -> float:
        return self.amount / self.seconds


THREADS = 256
MMA_KINDS = {"bf16": "mma_bf16", "fp16": "mma_fp16", "fp8_e4m3": "mma_fp8_e4m3"}
MMA_FLOPS = {"bf16": 2 * 16 * 8 * 16, "fp16": 2 * 16 * 8 * 16, "fp8_e4m3": 2 * 16 * 8 * 32}
UNROLL = 8  # ITERS_UNROLL in the header
CHAINS = 4  # independent accumulators or ex2 chains per thread (warp for mma)


def measure(
    cupy: Any, hw: Hardware, *, quick: bool = False, on_stage: Callable[[str], None] = print
) -> dict[str, Sample]:
    """Every microbenchmark's raw sample (bytes or operations, seconds), by figure name."""
    from ncdc.backends.cuda import device_arch
    from ncdc.backends.nvrtc import compile_cuda, ncdc_include_dir

    source = (ncdc_include_dir() / "ncdc_calibrate.cuh").read_text(encoding="utf-8")
    module = _load(cupy, compile_cuda(source, device_arch(cupy)))
    sms = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    l2 = int(cupy.cuda.Device().attributes["L2CacheSize"])
    reps = 3 if quick else 7
    out: dict[str, Sample] = {}
    on_stage("hbm")
    out.update(_hbm(cupy, module, sms, l2, reps))
    on_stage("l2")
    out.update(_l2(cupy, module, sms, l2, reps, quick))
    on_stage("smem, sfu, launch")
    out["smem"] = _smem(cupy, module, sms, reps)
    out["sfu_exp"] = _sfu(cupy, module, sms, reps)
    out["launch"] = _launch(cupy, module, reps)
    on_stage("tensor")
    major, minor = divmod(int(cupy.cuda.Device().compute_capability), 10)
    for dtype in MMA_KINDS:
        if dtype.startswith("fp8") and (major, minor) < (8, 9):
            continue  # fp8 mma.sync is sm_89 and later
        out[f"mma_sync_{dtype}"], clock = _mma(cupy, module, sms, dtype, reps)
        out.setdefault("clock", clock)
    out.update(_library_matmuls(quick))
    return out


def _load(cupy: Any, compiled: Any) -> Any:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calibrate.cubin"
        path.write_bytes(compiled.cubin)
        raw = cupy.RawModule(path=str(path))
        for name in compiled.resources:
            raw.get_function(name)  # loaded while the file exists
    return raw


def _time(cupy: Any, fn: Callable[[], None], reps: int) -> float:
    """Median seconds of `fn` over `reps` event-timed runs, after one untimed run."""
    fn()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def _hbm(cupy: Any, module: Any, sms: int, l2: int, reps: int) -> dict[str, Sample]:
    """Copy, read-only and write-only over 8 times the L2 (a 1:1, 1:0 and 0:1 mix)."""
    n4 = 8 * l2 // 16
    src = cupy.ones(n4 * 4, dtype=np.float32)
    dst = cupy.empty_like(src)
    sink = cupy.zeros(1, dtype=np.float32)
    grid = (sms * 8,)
    n = np.int64(n4)
    read, write, copy = (module.get_function(k) for k in ("read_passes", "write_only", "copy"))
    block = (THREADS,)
    times = {
        "hbm_copy": _time(cupy, lambda: copy(grid, block, (src, dst, n)), reps),
        "hbm_read": _time(cupy, lambda: read(grid, block, (src, n, np.int32(1), sink)), reps),
        "hbm_write": _time(cupy, lambda: write(grid, block, (dst, n, np.float32(1))), reps),
    }
    return {
        "hbm_copy": Sample(2 * n4 * 16, times["hbm_copy"], "copy of 8 x L2"),
        "hbm_read": Sample(n4 * 16, times["hbm_read"], "read of 8 x L2"),
        "hbm_write": Sample(n4 * 16, times["hbm_write"], "write of 8 x L2"),
    }


def _l2(cupy: Any, module: Any, sms: int, l2: int, reps: int, quick: bool) -> dict[str, Sample]:
    """Reads repeated over buffers from an eighth of the L2 to twice it: the bandwidth of
    each (`l2_sweep_<MiB>`), and the L2's size as the device reports it."""
    read = module.get_function("read_passes")
    sink = cupy.zeros(1, dtype=np.float32)
    out = {"l2_size": Sample(l2, 1.0, "cudaDevAttrL2CacheSize")}
    shares = (
        (0.125, 0.5, 1.0, 2.0) if quick else (0.125, 0.25, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 2.0)
    )
    for share in shares:
        n4 = int(l2 * share) // 16
        buf = cupy.ones(n4 * 4, dtype=np.float32)
        passes = max(2, 128 * l2 // max(n4 * 16, 1))  # about 128 x L2 read: a millisecond
        args = (buf, np.int64(n4), np.int32(passes), sink)

        def reads(args: tuple[Any, ...] = args) -> None:
            read((sms * 8,), (THREADS,), args)

        seconds = _time(cupy, reads, reps)
        out[f"l2_sweep_{share:g}"] = Sample(
            n4 * 16 * passes, seconds, f"{passes} reads of {share:g} x L2"
        )
    return out


def _smem(cupy: Any, module: Any, sms: int, reps: int) -> Sample:
    iters, blocks = 4096, sms * 4
    sink = cupy.zeros(1, dtype=np.float32)
    fn = module.get_function("smem_reads")
    seconds = _time(cupy, lambda: fn((blocks,), (1024,), (np.int32(iters), sink)), reps)
    return Sample(blocks * 1024 * iters * UNROLL * 16, seconds, "16-byte conflict-free ld.shared")


def _sfu(cupy: Any, module: Any, sms: int, reps: int) -> Sample:
    iters, blocks = 4096, sms * 8
    sink = cupy.zeros(1, dtype=np.float32)
    fn = module.get_function("sfu_exp2")
    seconds = _time(cupy, lambda: fn((blocks,), (THREADS,), (np.int32(iters), sink)), reps)
    return Sample(
        blocks * THREADS * iters * UNROLL * CHAINS, seconds, "ex2.approx.ftz.f32, 4 chains a thread"
    )


def _launch(cupy: Any, module: Any, reps: int) -> Sample:
    fn = module.get_function("empty")
    count = 1000

    def launches() -> None:
        for _ in range(count):
            fn((1,), (32,), ())

    return Sample(count, _time(cupy, launches, reps), "1000 back-to-back empty launches")


def _mma(cupy: Any, module: Any, sms: int, dtype: str, reps: int) -> tuple[Sample, Sample]:
    """mma.sync's rate for `dtype`, and the SM clock it ran at (clock64 over %globaltimer)."""
    iters, blocks, threads = 2048, sms * 4, 256  # 1.1e12 FLOPs on 132 SMs: ~2 ms at 600 TFLOP/s
    sink = cupy.zeros(1, dtype=np.float32)
    clocks = cupy.zeros(4 * blocks, dtype=np.int64)
    fn = module.get_function(MMA_KINDS[dtype])
    seconds = _time(cupy, lambda: fn((blocks,), (threads,), (np.int32(iters), sink, clocks)), reps)
    warps = blocks * threads // 32
    flops = warps * iters * UNROLL * CHAINS * MMA_FLOPS[dtype]
    c = cupy.asnumpy(clocks).reshape(blocks, 4)
    cycles, ns = float(np.median(c[:, 1] - c[:, 0])), float(np.median(c[:, 3] - c[:, 2]))
    clock = Sample(cycles, ns / 1e9, f"clock64 over %globaltimer during mma.sync {dtype}")
    return Sample(flops, seconds, f"mma.sync {dtype}, 4 accumulators a warp"), clock


def _library_matmuls(quick: bool) -> dict[str, Sample]:
    """The tensor rate a library reaches on sm_90 (wgmma): 8192^3 matrix products through
    PyTorch (cuBLAS; fp8 by torch._scaled_mm); none without PyTorch."""
    try:
        import torch
    except ImportError:
        return {}
    n = 4096 if quick else 8192
    out = {}
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        a = torch.randn(n, n, device="cuda").to(dtype)
        b = torch.randn(n, n, device="cuda").to(dtype)

        def product(a: Any = a, b: Any = b) -> Any:
            return a @ b

        seconds = _torch_time(torch, product)
        out[f"library_{name}"] = Sample(2 * n**3, seconds, f"torch.matmul {n}^3")
    if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")

        def scaled() -> Any:
            return torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)

        out["library_fp8_e4m3"] = Sample(
            2 * n**3, _torch_time(torch, scaled), f"torch._scaled_mm {n}^3"
        )
    return out


def _torch_time(torch: Any, fn: Callable[[], Any], reps: int = 10) -> float:
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)
