"""The arrays a kernel from `ncdc.load` takes and gives back, seen through one `ArrayView`.

Three families of arrays are told apart by their type, without importing a library the
program has not imported itself: NumPy arrays (and anything else on the host that speaks
`__dlpack__`) run on the `cpu` backend; torch tensors run on the backend of their device;
CuPy arrays (and anything with `__cuda_array_interface__`, or `__dlpack__` on a CUDA
device) run on the `cuda` backend. An array's element type is checked against the
diagram's: NumPy and CuPy arrays of bf16 and fp8 come as their `ml_dtypes` types or as the
raw bits (uint16 for bf16, uint8 for fp8; CuPy has no bf16), torch tensors as torch's own.

    >>> import ml_dtypes
    >>> v = view(np.zeros((2, 3), dtype=ml_dtypes.bfloat16))
    >>> v.family, v.device, v.shape, accepts(v, "bf16"), accepts(v, "fp16")
    ('numpy', -1, (2, 3), True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

import numpy as np

from ncdc.errors import ArrayError
from ncdc.language.dtypes import DTYPES

HOST = -1  # ArrayView.device of an array in host memory
DLPACK_CPU, DLPACK_CUDA = 1, 2  # DLDeviceType codes of __dlpack_device__ (dlpack.h)
GPU_ALIGNMENT = 16  # bytes: vector loads and TMA need 16-byte aligned global addresses


class ArrayView(NamedTuple):
    """What a kernel needs to know of one array: where it lives and how it is laid out.
    (A named tuple: one is made per array per call, and a tuple is the cheapest to make.)"""

    array: Any  # the array itself (a NumPy, torch or CuPy array)
    family: str  # "numpy", "torch" or "cupy": the library results are returned in
    device: int  # HOST, or the CUDA device ordinal
    shape: tuple[int, ...]
    dtype: Any  # the library's own dtype object (np.dtype or torch.dtype)
    contiguous: bool  # C-contiguous (row-major, no gaps)
    address: int  # the first element's address (0 for host arrays: they are copied)


def view(array: Any) -> ArrayView:
    """The `ArrayView` of `array`, or an ArrayError saying what was passed instead."""
    make = _VIEWERS.get(type(array))
    if make is None:
        make = _viewer(type(array), array)
        _VIEWERS[type(array)] = make
    return make(array)


def _numpy(a: np.ndarray) -> ArrayView:
    return ArrayView(a, "numpy", HOST, a.shape, a.dtype, a.flags.c_contiguous, 0)


def _torch(t: Any) -> ArrayView:
    device = t.get_device()  # -1 on the CPU, the ordinal on a GPU
    address = t.data_ptr() if device >= 0 else 0
    return ArrayView(t, "torch", device, tuple(t.shape), t.dtype, t.is_contiguous(), address)


def _cupy(a: Any) -> ArrayView:
    return ArrayView(
        a, "cupy", a.device.id, a.shape, a.dtype, a.flags.c_contiguous, int(a.data.ptr)
    )


def _foreign(a: Any) -> ArrayView:
    """An array of another library: through CuPy (no copy) when it lives on a GPU, through
    NumPy (no copy) on the host."""
    if hasattr(a, "__cuda_array_interface__"):
        return _cupy(_cupy_module().asarray(a))
    kind, _ = a.__dlpack_device__()
    if kind == DLPACK_CUDA:
        return _cupy(_cupy_module().from_dlpack(a))
    if kind == DLPACK_CPU:
        return _numpy(np.from_dlpack(a))
    raise ArrayError(
        f"a {type(a).__name__} on DLPack device type {kind} is neither on the host nor on a "
        "CUDA GPU", hint="pass NumPy arrays, or torch or CuPy arrays on a CUDA device"
    )  # fmt: skip


def _viewer(kind: type, example: Any) -> Callable[[Any], ArrayView]:
    """The viewer for arrays of type `kind`, found once per type."""
    module = kind.__module__.split(".")[0]
    if issubclass(kind, np.ndarray):
        return _numpy
    if module == "torch" and hasattr(example, "data_ptr"):
        return _torch
    if module == "cupy" and hasattr(example, "data"):
        return _cupy
    if hasattr(example, "__cuda_array_interface__") or hasattr(example, "__dlpack_device__"):
        return _foreign
    return _refuse


def _refuse(a: Any) -> ArrayView:
    raise ArrayError(
        f"expected an array, found a {type(a).__name__}",
        hint="pass NumPy, torch or CuPy arrays (anything with __dlpack__ or "
        "__cuda_array_interface__)",
    )


_VIEWERS: dict[type, Callable[[Any], ArrayView]] = {np.ndarray: _numpy}


def _cupy_module() -> Any:
    from ncdc.backends.cuda import require_gpu

    return require_gpu()


# ---- element types -------------------------------------------------------------------


@cache
def numpy_dtypes(dtype: str) -> frozenset[np.dtype]:
    """The NumPy (and CuPy) dtypes an array of ncdc `dtype` may have: its values' type and
    the raw bits kernels read (one and the same for fp32, fp16 and the integers)."""
    from ncdc.verify.reference import value_dtype

    return frozenset({value_dtype(dtype), np.dtype(DTYPES[dtype].bits)})


@cache
def torch_dtype(dtype: str) -> Any:
    """torch's dtype for ncdc `dtype` (torch.bfloat16 for bf16)."""
    import torch

    return getattr(torch, DTYPES[dtype].torch)


def accepts(v: ArrayView, dtype: str) -> bool:
    """Whether `v` holds elements of ncdc `dtype`."""
    if v.family == "torch":
        return bool(v.dtype == torch_dtype(dtype))
    return v.dtype in numpy_dtypes(dtype)


def dtype_problem(v: ArrayView, dtype: str) -> str:
    """What an array of the wrong element type should have been, for its error line."""
    if v.family == "torch":
        return f"expected torch.{DTYPES[dtype].torch} for {dtype}, found {v.dtype}"
    spellings = " or ".join(sorted(str(d) for d in numpy_dtypes(dtype)))
    return f"expected {spellings} for {dtype}, found {v.dtype}"


def host_bits(v: ArrayView, dtype: str) -> np.ndarray:
    """A host array's elements as the raw bits a kernel reads (a view where it can be)."""
    bits = np.dtype(DTYPES[dtype].bits)
    if v.family == "torch":
        import torch

        flat = v.array.detach().reshape(-1).view(torch.uint8).numpy()
        return flat.view(bits).reshape(v.shape)
    return np.asarray(v.array).view(bits)


def from_host_bits(bits: np.ndarray, dtype: str, family: str) -> Any:
    """A kernel's output, read back on the host, as the library its inputs came from:
    NumPy arrays of the values' dtype (ml_dtypes for bf16 and fp8), or torch tensors."""
    if family == "torch":
        import torch

        flat = torch.from_numpy(np.ascontiguousarray(bits).reshape(-1).view(np.uint8))
        return flat.view(torch_dtype(dtype)).reshape(bits.shape)
    from ncdc.verify.reference import value_dtype

    return bits.view(value_dtype(dtype))
