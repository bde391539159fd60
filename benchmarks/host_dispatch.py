"""Host time of a cached `ncdc.load` call on GPU arrays: what a call costs the program
before the GPU does any work (issue: kernels a program can call; target < 10 us).

The GPU is a stand-in (tests/api/fakes.py: CuPy whose arrays live on the host), and its
launches are stubbed, so the figure is ncdc's own work per call:
viewing the arrays, binding sizes, checking dtypes and layout, finding the cached build,
allocating outputs and scratch memory (the stand-in's allocator as a pool hit), building
each launch's arguments and tensor maps (cached per address, as on a GPU). Allocation by
torch or CuPy adds its own cost on a real GPU (a pool hit, a few microseconds each);
`out=` shows the figure without the outputs' allocation. The figures are CPU time of this
process per call (steadier than wall time on a loaded machine), the least of 5 rounds (as
`timeit` advises: other work on the machine only ever adds to a round).

    .venv/bin/python benchmarks/host_dispatch.py [--calls 20000] [--driver]

`--driver` launches through ncdc's cuLaunchKernel path (ncdc.backends.launcher) into a
driver library that does nothing (the recording driver of the tests, not recording): the
parameter arrays packed once, one foreign call per kernel.

Exit code 0 when every case is within the target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ncdc  # noqa: E402
from ncdc.backends import cuda, launcher  # noqa: E402
from tests.api import fakes  # noqa: E402

TARGET_S = 10e-6
CASES = {  # diagram, shapes of its inputs (bf16)
    "softmax (one row-wise kernel)": ("diagrams/softmax.yaml", [(64, 1000)]),
    "matmul (wgmma over TMA: three tensor maps)": (
        "diagrams/matmul.yaml",
        [(256, 128), (128, 256)],
    ),
    "mlp (two GEMM kernels, an intermediate)": (
        "tests/specs/multi_mlp_two_gemms.yaml",
        [(24, 1024), (1024, 4096), (4096,), (4096, 1024), (1024,)],
    ),
}


def per_call(kernel, args, out, calls: int) -> float:
    """The least CPU seconds per call of 5 rounds of `calls` calls (this process's CPU
    time: on a loaded machine wall time counts the other processes too)."""
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            kernel(*args, out=out)
        rounds.append((time.process_time() - start) / calls)
    return min(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--driver", action="store_true",
                        help="launch through cuLaunchKernel of a driver that does nothing "
                        "(tests/backends/fake_libcuda.c), as where libcuda loads")  # fmt: skip
    options = parser.parse_args()
    calls = options.calls
    rows, ok = [], True
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as folder:
        gpu = fakes.FakeGpu()
        gpu.memory = _Forgetful()  # no launch reads the stand-in's memory map: keep nothing
        gpu.empty = _Pool(gpu.empty)  # type: ignore[method-assign]
        mp.setitem(sys.modules, "cupy", gpu)
        mp.setattr(cuda, "tensor_map_argument", functools.cache(fakes.emulated_tensor_map))
        mp.setattr(fakes.FakeFunction, "__call__", _no_launch)
        if options.driver:
            _do_nothing_driver(mp, gpu, Path(folder))
        else:
            mp.setattr(launcher, "driver", lambda: None)  # the stand-in's (stubbed) launch
        for label, (spec, shapes) in CASES.items():
            kernel = ncdc.load(str(ROOT / spec))
            rng = np.random.default_rng(0)
            args = [gpu.asarray(rng.standard_normal(s).astype(ml_dtypes.bfloat16).view(np.uint16))
                    for s in shapes]  # fmt: skip
            kernel(*args)  # the first call builds (plans, renders, compiles): not timed
            fresh = per_call(kernel, args, None, calls)
            out = kernel(*args)
            given = per_call(kernel, args, out, calls)
            ok &= fresh < TARGET_S and given < TARGET_S
            rows.append((label, fresh, given))
    print(f"{'case':46} {'outputs allocated':>18} {'out= given':>11}")
    for label, fresh, given in rows:
        print(f"{label:46} {fresh * 1e6:15.2f} us {given * 1e6:8.2f} us")
    print(f"target: < {TARGET_S * 1e6:.0f} us per call: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def _do_nothing_driver(mp: pytest.MonkeyPatch, gpu: fakes.FakeGpu, folder: Path) -> None:
    """ncdc's driver launch, into the recording driver with no log: cuLaunchKernel returns
    at once, so what is timed is ncdc's work and the foreign call. Each function's handle
    is its name, which that driver reads."""
    from tests.backends import fakecuda

    library = fakecuda.build_driver(folder) / "libcuda.so.1"
    mp.delenv("FAKE_CUDA_LOG", raising=False)
    mp.setattr(launcher, "DRIVER_LIBRARY", str(library))
    launcher.driver.cache_clear()
    names: dict[str, ctypes.Array] = {}
    plain = fakes.FakeFunction.__init__

    def named(self: fakes.FakeFunction, owner: fakes.FakeGpu, name: str) -> None:
        plain(self, owner, name)
        self.ptr = ctypes.addressof(
            names.setdefault(name, ctypes.create_string_buffer(name.encode()))
        )

    mp.setattr(fakes.FakeFunction, "__init__", named)
    gpu.cuda.get_current_stream = lambda: _Stream  # type: ignore[attr-defined]


class _Stream:
    ptr = 0


class _Pool:
    """The stand-in's allocation as a memory pool's hit: the block of an earlier request of
    the same size handed back (CuPy's pool and torch's caching allocator do so for a block
    freed on the stream), not a fresh host array zeroed and poisoned."""

    def __init__(self, allocate) -> None:
        self.allocate = allocate
        self.blocks: dict[tuple, object] = {}

    def __call__(self, shape, dtype=np.float32):
        key = (shape if isinstance(shape, tuple) else (shape,), np.dtype(dtype))
        found = self.blocks.get(key)
        if found is None:
            found = self.blocks[key] = self.allocate(shape, dtype)
        return found


class _Forgetful(dict):
    def __setitem__(self, key, value) -> None:
        pass


def _no_launch(self, grid, block, arguments, shared_mem=0, stream=None) -> None:
    """The stand-in's launch, stubbed: what is timed is the host's work before it."""


if __name__ == "__main__":
    sys.exit(main())
