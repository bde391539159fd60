"""A GPU made of the CPU emulator: just enough of CuPy for the cuda backend's launch path,
where "device memory" is host memory the fake hands out and every launch runs the kernel's
own source emulated. With it a test drives ncdc.load's GPU path (argument order, outputs,
scratch, tensor maps, the shared-memory opt-in, the stream) end to end and checks the
results against the reference, with no GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ncdc.backends import cpu
from ncdc.backends.arguments import encode_emulated_tensor_map
from ncdc.verify.run import device_aligned


class FakeDeviceArray:
    """A cupy.ndarray as ncdc reads one: shape, dtype, flags, device and data.ptr, backed
    by an aligned host array."""

    def __init__(self, host: np.ndarray, device: int = 0):
        self.host = host
        self.shape = host.shape
        self.dtype = host.dtype
        self.flags = host.flags
        self.device = type("Device", (), {"id": device})()
        self.data = type("Pointer", (), {"ptr": host.ctypes.data})()


FakeDeviceArray.__module__ = "cupy._core.core"  # how ncdc.api.arrays tells CuPy arrays apart


class FakeFunction:
    def __init__(self, gpu: FakeGpu, name: str):
        self.gpu, self.name, self.ptr = gpu, name, id(self)

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0,
                 stream: Any = None) -> None:  # fmt: skip
        values = []
        for a in args:
            if isinstance(a, np.uint64):  # a buffer, by its device address
                values.append(self.gpu.memory[int(a)])
            else:
                values.append(a)
        self.gpu.launches.append((self.name, grid, block, shared_mem, stream))
        lib = self.gpu.library(self.name)
        lib.launch(self.name, grid, block, values, dynamic_smem=shared_mem)


class FakeGpu:
    """`sys.modules["cupy"]` for a test; `sources` maps each kernel name to the source
    that defines it (filled by the test from the build)."""

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}
        self.launches: list[tuple] = []
        self.attributes: list[tuple[str, int, int]] = []
        self.sources: dict[str, str] = {}
        self._libraries: dict[str, cpu.EmulatedModule] = {}
        gpu = self

        class Device:
            def __init__(self, index: int = 0) -> None:
                self.id = index

            compute_capability = "90"

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def synchronize(self) -> None:
                pass

        class Runtime:
            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def getDevice() -> int:
                return 0

        class Module:
            def load(self, cubin: bytes) -> None:
                assert cubin[:4] == b"\x7fELF", "the cuda backend loads a cubin"

            def get_function(self, name: str) -> FakeFunction:
                return FakeFunction(gpu, name)

        class Driver:
            @staticmethod
            def funcSetAttribute(ptr: int, attribute: int, value: int) -> None:
                gpu.attributes.append((str(ptr), attribute, value))

        class Cuda:
            pass

        Cuda.Device = Device  # type: ignore[attr-defined]
        Cuda.runtime = Runtime  # type: ignore[attr-defined]
        Cuda.function = type("function", (), {"Module": Module})  # type: ignore[attr-defined]
        Cuda.driver = Driver  # type: ignore[attr-defined]
        Cuda.ExternalStream = lambda ptr: contextlib.nullcontext()  # type: ignore[attr-defined]
        self.cuda = Cuda

    def library(self, kernel: str) -> cpu.EmulatedModule:
        if kernel not in self._libraries:
            lib = cpu.build(self.sources[kernel])
            for name, source in self.sources.items():
                if source == self.sources[kernel]:
                    self._libraries[name] = lib
        return self._libraries[kernel]

    def _keep(self, host: np.ndarray) -> FakeDeviceArray:
        a = FakeDeviceArray(host)
        self.memory[a.data.ptr] = host
        return a

    def empty(self, shape: Any, dtype: Any = np.float32) -> FakeDeviceArray:
        host = device_aligned(np.zeros(shape, dtype=dtype))
        host.view(np.uint8)[...] = 0xFF  # poisoned: an unwritten element shows
        return self._keep(host)

    def asarray(self, a: np.ndarray) -> FakeDeviceArray:
        return self._keep(device_aligned(np.ascontiguousarray(a)))

    @staticmethod
    def asnumpy(a: FakeDeviceArray) -> np.ndarray:
        return a.host.copy()


def emulated_tensor_map(spec: Any, address: int) -> np.ndarray:
    """The tensor map the emulator reads, over host memory at `address` (the driver's
    encoding stands in for on a GPU)."""
    return encode_emulated_tensor_map(spec, address=address)


@contextlib.contextmanager
def fake_gpu(monkeypatch: Any) -> Iterator[FakeGpu]:
    """Install a FakeGpu as CuPy, its tensor maps the emulator's, and record every build's
    sources so that its kernels run."""
    import sys

    from ncdc.api import kernel as kernel_module
    from ncdc.backends import cuda, launcher

    gpu = FakeGpu()
    monkeypatch.setitem(sys.modules, "cupy", gpu)
    monkeypatch.setattr(cuda, "tensor_map_argument", emulated_tensor_map)
    monkeypatch.setattr(launcher, "driver", lambda: None)  # the stand-in's functions launch
    original = kernel_module.build

    def recording_build(*args: Any, **kwargs: Any) -> Any:
        built = original(*args, **kwargs)
        for launch in built.module.launches:
            gpu.sources[launch.kernel] = built.module.source
        return built

    monkeypatch.setattr(kernel_module, "build", recording_build)
    yield gpu
