"""Kernel launches through the CUDA driver's `cuLaunchKernel`, called with ctypes.

A program that calls a kernel many times passes the same buffers again and again, so each
launch's parameter array (a `void*` per parameter, pointing at its bytes: a device address,
a scalar in its C type, a 128-byte tensor map) is packed once per set of buffer addresses
(`pack`), and a call is one foreign call per kernel. CuPy's own launch rebuilds its argument
wrappers on every call (a NumPy array passed by value among them, as tensor maps are),
which is what `NCDC_LAUNCH=cupy` selects instead, and what runs where no driver library
loads (a stand-in GPU in the tests).

    >>> packed = pack(function, (132, 1, 1), (384, 1, 1), 214016, args)  # doctest: +SKIP
    >>> driver().launch(packed, stream=0)  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ncdc.errors import NcdcError

LAUNCH_ENV = "NCDC_LAUNCH"  # "cupy": launch through CuPy's call; unset or "driver": this
DRIVER_LIBRARY = "libcuda.so.1"
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT (cuda.h): no context current on the thread
# A parameter's bytes are copied from where its pointer points: a tensor map's from a
# 64-byte-aligned place (CUtensorMap is alignas(64) in cuda.h), anything else 8-aligned.
MAP_ALIGNMENT, ALIGNMENT = 64, 8


class LaunchError(NcdcError):
    """The driver refused a launch (a grid over its limits, too much shared memory)."""


@dataclass(frozen=True)
class Packed:
    """One launch with its parameter array packed: what `Driver.launch` passes on."""

    kernel: str
    device: int  # the GPU's ordinal: its primary context is the one the function lives in
    function: int  # the CUfunction handle
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    params: Any  # ctypes array of void*, one per parameter
    storage: tuple[Any, ...]  # the buffers the pointers point into, kept alive with them
    # cuLaunchKernel's arguments before the stream, and the parameter array after it, as
    # ctypes values made once: a call passes them as they are, with nothing to convert
    head: tuple[Any, ...] = ()
    tail: tuple[Any, ...] = ()


def pack(
    kernel: str, device: int, function: int, grid: Sequence[int], block: Sequence[int],
    smem: int, args: Sequence[Any],
) -> Packed:  # fmt: skip
    """`args` (NumPy scalars in each parameter's C type, a one-element array for a tensor
    map: what CuPy's launch takes) as a kernel parameter array."""
    pointers = (ctypes.c_void_p * len(args))()
    storage = []
    for i, arg in enumerate(args):
        raw = np.asarray(arg).tobytes()
        align = MAP_ALIGNMENT if len(raw) > ALIGNMENT else ALIGNMENT
        buffer = ctypes.create_string_buffer(len(raw) + align)
        at = ctypes.addressof(buffer)
        at += -at % align
        ctypes.memmove(at, raw, len(raw))
        pointers[i] = at
        storage.append(buffer)
    g, b = (int(grid[0]), int(grid[1]), int(grid[2])), (int(block[0]), int(block[1]), int(block[2]))
    uint = ctypes.c_uint
    head = (ctypes.c_void_p(int(function)), *map(uint, g), *map(uint, b), uint(int(smem)))
    tail = (ctypes.cast(pointers, ctypes.c_void_p), None)
    return Packed(
        kernel, int(device), int(function), g, b, int(smem), pointers, tuple(storage), head, tail
    )


class Driver:
    """`cuLaunchKernel` and `cuGetErrorName` of the driver library, typed for ctypes."""

    def __init__(self, library: Any):
        # no argtypes: every argument comes as a ctypes value already (Packed.head, .tail),
        # which halves the cost of a call (0.5 us against 1 us with argtypes converting)
        self._library = library
        self._launch = library.cuLaunchKernel
        self._launch.restype = ctypes.c_int
        self._streams: dict[int, Any] = {}  # stream handle -> its c_void_p
        self._name = getattr(library, "cuGetErrorName", None)
        if self._name is not None:
            self._name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            self._name.restype = ctypes.c_int

    def launch(self, p: Packed, stream: int) -> None:
        """Enqueue `p` on the stream whose handle is `stream` (0: the legacy default)."""
        handle = self._streams.get(stream)
        if handle is None:
            if len(self._streams) > 64:
                self._streams.clear()
            handle = self._streams[stream] = ctypes.c_void_p(stream)
        code = self._launch(*p.head, handle, *p.tail)
        if code == INVALID_CONTEXT and self._make_current(p.device):
            code = self._launch(*p.head, handle, *p.tail)  # a thread that had none current
        if code:
            raise LaunchError(
                f"cuLaunchKernel refused {p.kernel} (grid {p.grid}, block {p.block}, "
                f"{p.smem} B of shared memory): {self.error_name(code)}",
                hint=f"report it with the output of `ncdc env`; {LAUNCH_ENV}=cupy launches "
                "through CuPy instead",
            )  # fmt: skip

    def _make_current(self, device: int) -> bool:
        """Make `device`'s primary context current on this thread, as the CUDA runtime does
        at a thread's first call (CuPy and torch load modules into it); whether it could."""
        context, ordinal = ctypes.c_void_p(), ctypes.c_int()
        if self._library.cuDeviceGet(ctypes.byref(ordinal), device):
            return False
        if self._library.cuDevicePrimaryCtxRetain(ctypes.byref(context), ordinal):
            return False
        return self._library.cuCtxSetCurrent(context) == 0

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self._name is None or self._name(code, ctypes.byref(name)) or not name.value:
            return f"CUresult {code}"
        return f"{name.value.decode()} ({code})"


@functools.lru_cache(maxsize=1)
def driver() -> Driver | None:
    """The driver library's launch, or None where it does not load or `NCDC_LAUNCH=cupy`
    asks for CuPy's (read once a process)."""
    choice = os.environ.get(LAUNCH_ENV, "driver").strip().lower()
    if choice not in ("driver", "cupy", ""):
        raise NcdcError(
            f"{LAUNCH_ENV}={choice!r} is not a way to launch kernels",
            hint=f"set {LAUNCH_ENV} to driver (the default) or cupy, or unset it",
        )
    if choice == "cupy":
        return None
    try:
        library = ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return None
    return Driver(library) if hasattr(library, "cuLaunchKernel") else None
