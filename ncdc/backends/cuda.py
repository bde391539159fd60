"""The CUDA backend: load ncdc's own cubins with CuPy and launch them from the launch metadata.

CuPy's compile path targets plain sm_90 on Hopper and asks the driver for a device before
it compiles, so ncdc compiles with NVRTC itself (for sm_90a where the GPU has it) and
hands CuPy the cubin. This is the only module that imports CuPy, and only inside functions.

    >>> run_cuda(module, buffers)  # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ncdc.backends.arguments import (
    SWIZZLE_MODES,
    launch_arguments,
    mend_tensor_map,
    tensor_map_problem,
)
from ncdc.errors import NcdcError, NoGpuError
from ncdc.families.base import Param, TensorMapSpec
from ncdc.language.dtypes import DTYPES
from ncdc.render import Launch, RenderedModule

DEFAULT_SMEM_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory


def require_gpu() -> Any:
    """CuPy with at least one CUDA device, or NoGpuError (exit 4) saying what is missing."""
    try:
        import cupy
    except ImportError:
        raise NoGpuError(
            "CuPy is not installed, so the cuda backend cannot run",
            hint="pip install 'ncdc[cuda]', or use --backend cpu",
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # CUDARuntimeError when there is no driver or no device
        count = 0
    if count == 0:
        raise NoGpuError("no CUDA GPU found", hint="use --backend cpu on a machine without one")
    return cupy


def device_arch(cupy: Any) -> str:
    """The arch to compile for on the current device; sm_90 becomes sm_90a."""
    arch = f"sm_{cupy.cuda.Device().compute_capability}"  # e.g. "90"
    return arch + "a" if arch in ("sm_90", "sm_100") else arch


def load_module(cupy: Any, module: RenderedModule, arch: str) -> Any:
    """Compile (through the cache) and load `module` for `arch`; returns a cupy.RawModule."""
    from ncdc.backends.cache import cached_compile
    from ncdc.backends.compile import check_entry_registers

    name = module.cache_name
    compiled = cached_compile(module.source, arch, name=name, line_origin=module.origin)
    check_entry_registers(module, compiled)  # budgets ptxas did not give would hang
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.cubin"
        path.write_bytes(compiled.cubin)
        raw = cupy.RawModule(path=str(path))
        raw.get_function(module.launches[0].kernel)  # load now, while the file exists
    return raw


def launch(cupy: Any, raw: Any, spec: Launch, device: MutableMapping[str, Any]) -> None:
    """One launch with the arguments named by its parameters."""
    fn, args = _prepared(raw, spec, device)
    fn(spec.grid, spec.block, args, shared_mem=spec.dynamic_smem)


def _prepared(raw: Any, spec: Launch, device: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """The launch's function, its shared-memory opt-in set, and its arguments over the
    `device` buffers (a tensor map encoded by the driver over its buffer's pointer)."""
    fn = raw.get_function(spec.kernel)
    if spec.dynamic_smem > DEFAULT_SMEM_LIMIT:
        fn.max_dynamic_shared_size_bytes = spec.dynamic_smem
    return fn, device_arguments(spec.params, device)


def device_arguments(params: Sequence[Param], device: Mapping[str, Any]) -> tuple[Any, ...]:
    """A launch's arguments over CuPy `device` buffers: each buffer as CuPy passes it, a
    tensor map encoded by the driver over its buffer's pointer, scalars by value."""
    args = launch_arguments(
        params, device, lambda m, _: tensor_map_argument(m, int(device[m.tensor].data.ptr))
    )
    return tuple(args)


# The CUtensorMap as a kernel argument: 128 bytes (the kernel's `const __grid_constant__
# ncdc::TensorMap`, alignas(64)). CuPy passes a NumPy array of size one by value (its
# CNumpyArray: a pointer to the array's bytes in cuLaunchKernel's kernelParams; the driver
# copies as many bytes as the kernel's parameter info gives that ordinal, 128, to the
# 64-byte-aligned offset ptxas chose), where a NumPy scalar of a structured dtype is not a
# type its scalar conversion takes.
TENSOR_MAP_DTYPE = np.dtype({"names": [f"w{i}" for i in range(16)], "formats": ["<u8"] * 16})
TENSOR_MAP_BYTES = 128
_TENSOR_MAPS: dict[tuple[TensorMapSpec, int], Any] = {}


def tensor_map_argument(spec: TensorMapSpec, address: int) -> np.ndarray:
    """The CUtensorMap of `spec` over device memory at `address`, from the driver's
    cuTensorMapEncodeTiled (cuda-bindings), cached per pointer and spec, as the one-element
    array CuPy passes by value. Tile mode, no interleave, 128-byte L2 promotion, zero
    out-of-bounds fill, unit element strides."""
    key = (spec, address)
    found = _TENSOR_MAPS.get(key)
    if found is not None:
        return found
    problem = tensor_map_problem(spec, address)
    if problem:
        raise NcdcError(f"tensor map of {spec.tensor}: {problem}")
    try:
        from cuda.bindings import driver
    except ImportError:
        raise NoGpuError(
            "cuda-bindings is not installed, so tensor maps cannot be encoded",
            hint="pip install cuda-bindings, or use --backend cpu",
        ) from None
    rank = len(spec.dims)
    try:
        err, tmap = _encode_tiled(driver, spec, rank, address)
        version = _driver_version(driver)
    except Exception as e:  # no driver library: cuda-bindings raises its own loader errors
        raise NoGpuError(f"cannot encode tensor maps: {e}", hint="use --backend cpu") from None
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NcdcError(f"cuTensorMapEncodeTiled refused the map of {spec.tensor}: {err}")
    words = [int(w) for w in tmap.opaque]
    if len(words) * 8 != TENSOR_MAP_BYTES:
        raise NcdcError(f"cuTensorMapEncodeTiled gave {len(words) * 8} bytes, not 128")
    words = mend_tensor_map(words, spec, version)
    value = np.array([tuple(words)], dtype=TENSOR_MAP_DTYPE)
    value.flags.writeable = False  # cached: every launch over this pointer passes these bytes
    _TENSOR_MAPS[key] = value
    return value


def _driver_version(driver: Any) -> int:
    """The driver's CUDA version, 1000 major + 10 minor (cuDriverGetVersion)."""
    err, version = driver.cuDriverGetVersion()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NoGpuError(f"cuDriverGetVersion failed: {err}", hint="use --backend cpu")
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
    raw = load_module(cupy, module, device_arch(cupy))
    device = {name: cupy.asarray(array) for name, array in buffers.items()}
    for spec in module.launches:
        launch(cupy, raw, spec, device)
    cupy.cuda.Device().synchronize()
    for name, array in device.items():
        buffers[name][...] = cupy.asnumpy(array)


def prepare_launches(
    cupy: Any, raw: Any, module: RenderedModule, device: Mapping[str, Any]
) -> Callable[[], None]:
    """A callable that runs every launch of `module` in order on `device` buffers.

    Functions and argument tuples are built once, so a timed call costs the launches and
    little Python: what `ncdc bench` and `ncdc tune` time between CUDA events.
    """
    calls = []
    for spec in module.launches:
        fn, args = _prepared(raw, spec, device)
        calls.append((fn, spec.grid, spec.block, args, spec.dynamic_smem))

    def run() -> None:
        for fn, grid, block, args, smem in calls:
            fn(grid, block, args, shared_mem=smem)

    return run


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
