"""The CUDA backend: load ncdc's own cubins with CuPy and launch them from the launch metadata.

CuPy's compile path targets plain sm_90 on Hopper and asks the driver for a device before
it compiles, so ncdc compiles with NVRTC itself (for sm_90a where the GPU has it) and
hands CuPy the cubin. This is the only module that imports CuPy, and only inside functions.

    >>> run_cuda(module, buffers)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ncdc.backends import launcher
from ncdc.backends.arguments import (
    SWIZZLE_MODES,
    mend_tensor_map,
    scalar_argument,
    tensor_map_arguments,
    tensor_map_problem,
)
from ncdc.errors import NcdcError, NoGpuError
from ncdc.families.base import Param, TensorMapSpec
from ncdc.language.dtypes import DTYPES
from ncdc.render import Launch, RenderedModule

# What to try without a GPU, named with its command: bench has no CPU backend.
CPU_HINT = "without a GPU, `ncdc run SPEC --backend cpu` checks a spec on the CPU emulator"

DEFAULT_SMEM_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory


def require_gpu() -> Any:
    """CuPy with at least one CUDA device, or NoGpuError (exit 4) saying what is missing."""
    try:
        import cupy
    except ImportError:
        raise NoGpuError(
            "CuPy is not installed, so nothing can run on a GPU",
            hint=f"pip install 'ncdc[cuda]'; {CPU_HINT}",
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # CUDARuntimeError when there is no driver or no device
        count = 0
    if count == 0:
        raise NoGpuError("no CUDA GPU found", hint=CPU_HINT)
    return cupy


def device_arch(cupy: Any) -> str:
    """The arch to compile for on the current device; sm_90 becomes sm_90a."""
    arch = f"sm_{cupy.cuda.Device().compute_capability}"  # e.g. "90"
    return arch + "a" if arch in ("sm_90", "sm_100") else arch


def load_module(cupy: Any, module: RenderedModule, arch: str) -> DeviceModule:
    """Compile (through the cache) and load `module` for `arch` on the current device."""
    from ncdc.backends.cache import cached_compile
    from ncdc.backends.compile import check_entry_registers

    compiled = cached_compile(
        module.source, arch, name=module.cache_name, line_origin=module.origin
    )
    check_entry_registers(module, compiled)  # budgets ptxas did not give would hang
    return DeviceModule(cupy, module, compiled.cubin)


BOUND_ARGUMENTS = 64  # argument sets a loaded module keeps, by buffer addresses
MAX_DYNAMIC_SMEM_ATTRIBUTE = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h)


class DeviceModule:
    """A compiled module loaded on one GPU: the function of each launch, its shared-memory
    opt-in set once, ready to run every launch in order on buffers given by address.

    A buffer travels as its 64-bit device address (the bytes of a pointer parameter),
    whichever library allocated it; scalars by value in their C type; a tensor map encoded
    by the driver over its buffer's address (`tensor_map_argument`, cached per address).
    """

    def __init__(self, cupy: Any, module: RenderedModule, cubin: bytes, device: int = -1):
        self.module = module
        self._cupy = cupy
        self._driver = launcher.driver()  # None: CuPy's own launch
        self.device = cupy.cuda.runtime.getDevice() if device < 0 else device
        with cupy.cuda.Device(self.device):
            self._loaded = cupy.cuda.function.Module()
            self._loaded.load(cubin)
            self._launches = [self._prepare(cupy, spec) for spec in module.launches]
        # the argument tuples of the buffer addresses seen last (at most BOUND_ARGUMENTS
        # sets): arguments depend on the addresses alone, the sizes being the module's
        self._bound: dict[tuple[int, ...], tuple[Any, ...]] = {}
        # every buffer a launch passes (as a pointer or under a tensor map), by name
        self.buffer_names = sorted({
            what if kind == "buffer" else what.tensor
            for *_, recipe in self._launches for kind, what in recipe if kind != "value"
        })  # fmt: skip

    def _prepare(self, cupy: Any, spec: Launch) -> tuple[Any, ...]:
        fn = self._loaded.get_function(spec.kernel)
        if spec.dynamic_smem > DEFAULT_SMEM_LIMIT:
            cupy.cuda.driver.funcSetAttribute(fn.ptr, MAX_DYNAMIC_SMEM_ATTRIBUTE, spec.dynamic_smem)
        tensor_map_arguments(spec.params)  # every map names a buffer the launch passes
        recipe = tuple(_recipe(p) for p in spec.params)
        return fn, spec.grid, spec.block, spec.dynamic_smem, recipe

    def arguments(self, addresses: Mapping[str, int]) -> list[tuple[Any, ...]]:
        """Each launch's argument tuple over the buffers at `addresses` (by name)."""
        return [
            tuple(_argument(kind, what, addresses) for kind, what in recipe)
            for *_, recipe in self._launches
        ]

    def run(self, addresses: Mapping[str, int], stream: Any = None) -> None:
        """Enqueue every launch, in order, on `stream` (anything with the stream's handle
        as `.ptr`; None: CuPy's current stream)."""
        self.run_at(tuple([addresses[name] for name in self.buffer_names]), stream)

    def run_at(self, key: tuple[int, ...], stream: Any = None) -> None:
        """`run` over the buffers' addresses in `buffer_names` order (what a caller that
        calls many times builds without a mapping). A program's loop passes the same
        buffers again: their argument tuples are kept by these addresses."""
        calls: tuple[Any, ...] | None = self._bound.get(key)
        if calls is None:
            if len(self._bound) >= BOUND_ARGUMENTS:
                self._bound.clear()
            calls = self._bound[key] = self._calls(dict(zip(self.buffer_names, key, strict=True)))
        if self._driver is None:
            for fn, grid, block, args, smem in calls:
                fn(grid, block, args, shared_mem=smem, stream=stream)
            return
        handle = stream.ptr if stream is not None else self._cupy.cuda.get_current_stream().ptr
        for packed in calls:
            self._driver.launch(packed, handle)

    def _calls(self, addresses: Mapping[str, int]) -> tuple[Any, ...]:
        """What `run_at` keeps per set of addresses: each launch's parameter array packed
        for the driver's cuLaunchKernel, or its argument tuple for CuPy's launch."""
        if self._driver is None:
            return self.bind(addresses).calls
        return tuple(
            launcher.pack(spec.kernel, self.device, fn.ptr, grid, block, smem, args)
            for spec, (fn, grid, block, smem, _), args in zip(
                self.module.launches, self._launches, self.arguments(addresses), strict=True
            )
        )  # fmt: skip

    def bind(
        self, addresses: Mapping[str, int], stream: Any = None, keep: Any = None
    ) -> BoundLaunches:
        """Every launch on the buffers at `addresses`, its arguments built once: what
        `ncdc bench` and `ncdc tune` time between CUDA events. `keep` (the buffers
        themselves) lives as long as the result."""
        calls = tuple(
            (fn, grid, block, args, smem)
            for (fn, grid, block, smem, _), args in zip(
                self._launches, self.arguments(addresses), strict=True
            )
        )
        return BoundLaunches(calls, stream, keep)


@dataclass(frozen=True)
class BoundLaunches:
    """A module's launches with their arguments built: calling it enqueues them in order."""

    calls: tuple[tuple[Any, ...], ...]
    stream: Any
    buffers: Any  # what the addresses point into: kept alive with the launches

    def __call__(self) -> None:
        for fn, grid, block, args, smem in self.calls:
            fn(grid, block, args, shared_mem=smem, stream=self.stream)


def _recipe(p: Param) -> tuple[str, Any]:
    """How one parameter's argument is made at each call: ("buffer", name), ("map", spec)
    or ("value", the scalar in its C type)."""
    if p.kind in ("tensor", "workspace"):
        return "buffer", p.name
    if p.tensor_map is not None:
        return "map", p.tensor_map
    return "value", scalar_argument(p)


def _argument(kind: str, what: Any, addresses: Mapping[str, int]) -> Any:
    if kind == "buffer":
        return np.uint64(addresses[what])
    if kind == "map":
        return tensor_map_argument(what, addresses[what.tensor])
    return what


def device_arguments(params: Sequence[Param], addresses: Mapping[str, int]) -> tuple[Any, ...]:
    """One launch's arguments over buffers at device `addresses`, as `DeviceModule` passes
    them."""
    tensor_map_arguments(params)
    return tuple(_argument(*_recipe(p), addresses) for p in params)


# The CUtensorMap as a kernel argument: 128 bytes (the kernel's `const __grid_constant__
# ncdc::TensorMap`, alignas(64)). CuPy passes a NumPy array of size one by value (its
# CNumpyArray: a pointer to the array's bytes in cuLaunchKernel's kernelParams; the driver
# copies as many bytes as the kernel's parameter info gives that ordinal, 128, to the
# 64-byte-aligned offset ptxas chose), where a NumPy scalar of a structured dtype is not a
# type its scalar conversion takes.
TENSOR_MAP_DTYPE = np.dtype({"names": [f"w{i}" for i in range(16)], "formats": ["<u8"] * 16})
TENSOR_MAP_BYTES = 128
MAX_TENSOR_MAPS = 4096  # encoded maps kept: a program cycling through buffers stays bounded
_TENSOR_MAPS: OrderedDict[tuple[TensorMapSpec, int], Any] = OrderedDict()


def tensor_map_argument(spec: TensorMapSpec, address: int) -> np.ndarray:
    """The CUtensorMap of `spec` over device memory at `address`, from the driver's
    cuTensorMapEncodeTiled (cuda-bindings), cached per pointer and spec, as the one-element
    array CuPy passes by value. Tile mode, no interleave, 128-byte L2 promotion, zero
    out-of-bounds fill, unit element strides."""
    key = (spec, address)
    found = _TENSOR_MAPS.get(key)
    if found is not None:
        with contextlib.suppress(KeyError):  # another thread may have just evicted it
            _TENSOR_MAPS.move_to_end(key)
        return found
    problem = tensor_map_problem(spec, address)
    if problem:
        raise NcdcError(f"tensor map of {spec.tensor}: {problem}")
    try:
        from cuda.bindings import driver
    except ImportError:
        raise NoGpuError(
            "cuda-bindings is not installed, so tensor maps cannot be encoded",
            hint=f"pip install cuda-bindings; {CPU_HINT}",
        ) from None
    rank = len(spec.dims)
    try:
        err, tmap = _encode_tiled(driver, spec, rank, address)
        version = _driver_version(driver)
    except Exception as e:  # no driver library: cuda-bindings raises its own loader errors
        raise NoGpuError(f"cannot encode tensor maps: {e}", hint=CPU_HINT) from None
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NcdcError(f"cuTensorMapEncodeTiled refused the map of {spec.tensor}: {err}")
    words = [int(w) for w in tmap.opaque]
    if len(words) * 8 != TENSOR_MAP_BYTES:
        raise NcdcError(f"cuTensorMapEncodeTiled gave {len(words) * 8} bytes, not 128")
    words = mend_tensor_map(words, spec, version)
    value = np.array([tuple(words)], dtype=TENSOR_MAP_DTYPE)
    value.flags.writeable = False  # cached: every launch over this pointer passes these bytes
    _TENSOR_MAPS[key] = value
    if len(_TENSOR_MAPS) > MAX_TENSOR_MAPS:
        with contextlib.suppress(KeyError):  # emptied meanwhile by another thread
            _TENSOR_MAPS.popitem(last=False)
    return value


def _driver_version(driver: Any) -> int:
    """The driver's CUDA version, 1000 major + 10 minor (cuDriverGetVersion)."""
    err, version = driver.cuDriverGetVersion()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NoGpuError(f"cuDriverGetVersion failed: {err}", hint=CPU_HINT)
    return int(version)


def _encode_tiled(driver: Any, spec: TensorMapSpec, rank: int, address: int) -> Any:
    return driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType(DTYPES[spec.dtype].tensor_map), rank, address,
        [driver.cuuint64_t(d) for d in spec.dims],
        [driver.cuuint64_t(s) for s in spec.strides],
        [driver.cuuint32_t(b) for b in spec.box],
        [driver.cuuint32_t(1)] * rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle(SWIZZLE_MODES[spec.swizzle]),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )  # fmt: skip


def run_cuda(module: RenderedModule, buffers: MutableMapping[str, np.ndarray]) -> None:
    """Copy `buffers` to the GPU, run every launch in order, copy them back in place."""
    cupy = require_gpu()
    loaded = load_module(cupy, module, device_arch(cupy))
    device = {name: cupy.asarray(array) for name, array in buffers.items()}
    loaded.run({name: int(a.data.ptr) for name, a in device.items()})
    cupy.cuda.Device().synchronize()
    for name, array in device.items():
        buffers[name][...] = cupy.asnumpy(array)


def device_info(cupy: Any) -> dict[str, Any]:
    """Name, compute capability, driver and CUDA runtime versions of the current device."""
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "compute_capability": str(cupy.cuda.Device().compute_capability),
        "sms": int(props.get("multiProcessorCount", 0)),
        "l2_bytes": int(props.get("l2CacheSize", 0)),
        "driver_version": _cuda_version(runtime.driverGetVersion()),
        "runtime_version": _cuda_version(runtime.runtimeGetVersion()),
        "cupy_version": str(getattr(cupy, "__version__", "")),
    }


def _cuda_version(code: int) -> str:
    """12040 -> '12.4' (CUDA encodes versions as 1000 major + 10 minor)."""
    return f"{code // 1000}.{code % 1000 // 10}"
