"""CPU backend speed: a 256 x 256 x 256 bf16 mma.sync GEMM (cp.async, ldmatrix) on the emulator.

Target: well under 2 s per launch on 2 cores once built. Prints the build time, then the
median and best of a few launches, and checks the result against NumPy.

    .venv/bin/python benchmarks/bench_emulator.py [--size 256] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ncdc.backends import cpu

KERNEL = Path(__file__).resolve().parent.parent / "tests" / "emulator_kernels" / "gemm_bf16.cu"


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="M = N = K, a multiple of 64")
    parser.add_argument("--reps", type=int, default=5)
    opts = parser.parse_args()
    n = opts.size
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        module = cpu.build(KERNEL, cache_dir=Path(cache))
        build_s = time.perf_counter() - start
        rng = np.random.default_rng(0)
        a, b = bf16_bits(rng.standard_normal((n, n))), bf16_bits(rng.standard_normal((n, n)))
        c = np.zeros((n, n), np.float32)
        times = []
        for _ in range(opts.reps):
            start = time.perf_counter()
            module.launch("gemm_bf16", (n // 64, n // 64), 128, [a, b, c, n, n, n])
            times.append(time.perf_counter() - start)
    ref = (a.astype(np.uint32) << 16).view(np.float32) @ (b.astype(np.uint32) << 16).view(
        np.float32
    )
    err = float(np.abs(c - ref).max())
    print(
        f"gemm_bf16 {n}x{n}x{n}: build {build_s:.2f} s, launch median "
        f"{statistics.median(times) * 1e3:.1f} ms, best {min(times) * 1e3:.1f} ms, "
        f"max |err| {err:.2e}"
    )


if __name__ == "__main__":
    main()
