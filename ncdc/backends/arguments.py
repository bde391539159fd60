"""Kernel launch arguments: a parameter's value as the C ABI takes it, for either backend.

>>> from ncdc.families.base import Param
>>> scalar_argument(Param("ncdc_size_m", "int64", value=4096))
np.int64(4096)

A tensor map (a `CUtensorMap`, 128 bytes passed by value) is encoded per launch from the
same arguments as the driver's `cuTensorMapEncodeTiled`: on a GPU by the driver
(`ncdc.backends.cuda`), on the CPU by `encode_emulated_tensor_map`, whose layout the emulator reads
(`ncdc_emu_hopper.h`, `EmuTensorMap`). Both check the same documented limits first.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ncdc.families.base import Param, TensorMapSpec
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.render import RenderedModule

SCALAR_TYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32}

SWIZZLE_MODES = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle
TENSOR_MAP_MAGIC = 0x50414D54434443  # EmuTensorMap::magic
ADDRESS_IS_ARGUMENT = 1 << 63

# A driver workaround CUTLASS applies to every map it encodes (CUTLASS 4.3.4,
# include/cute/atom/copy_traits_sm90_tma.hpp, right after cuTensorMapEncodeTiled; CHANGELOG:
# "a driver TMA descriptor related bug" that causes occasional errors when the tensor's
# memory is under 128 KiB): with a driver of CUDA 13.1 or older (cudaDriverGetVersion <= 13010)
# and a tensor spanning fewer than 128 KiB, clear bit 21 of the encoded map's second 64-bit
# word. The bit's meaning is not documented (CUtensorMap is opaque).
DRIVER_BUG_LAST_VERSION = 13010
DRIVER_BUG_SPAN_BYTES = 128 * 1024
DRIVER_BUG_WORD, DRIVER_BUG_BIT = 1, 21


def scratch_buffers(diagram: Diagram, module: RenderedModule) -> list[tuple[str, int]]:
    """Buffers a call needs besides the diagram's inputs and outputs, in bytes: the
    intermediates saved between kernels and the workspaces (split-k partials)."""
    named = dict.fromkeys(p.name for launch in module.launches for p in launch.params
                          if p.kind == "tensor")  # fmt: skip
    given = {t.name for t in diagram.inputs} | set(diagram.outputs)
    out = []
    for name in named:
        if name not in given:
            t = diagram.tensor(name)
            out.append((name, max(1, diagram.size(t) * DTYPES[t.dtype].bytes)))
    out += [(w.name, max(1, w.values * DTYPES[w.dtype].bytes)) for w in module.workspace]
    return out


def scalar_argument(p: Param) -> np.generic:
    """The value of a scalar parameter in its C type."""
    return SCALAR_TYPES[p.kind](p.value)  # type: ignore[arg-type, no-any-return]


def tensor_map_problem(spec: TensorMapSpec, address: int | None = None) -> str:
    """Why cuTensorMapEncodeTiled would refuse `spec` (at `address`), or "" (CUDA driver API,
    cuTensorMapEncodeTiled: rank 1-5, 16-byte aligned address and strides, box 1-256 per
    dimension, inner box a multiple of 16 bytes and within the swizzle span)."""
    rank = len(spec.dims)
    dtype = DTYPES.get(spec.dtype)
    if dtype is None or dtype.tensor_map is None:
        return f"no tensor-map element type for {spec.dtype}"
    esize = dtype.bytes
    if not 1 <= rank <= 5 or len(spec.box) != rank or len(spec.strides) != rank - 1:
        return f"rank {rank} with {len(spec.box)} box sizes and {len(spec.strides)} strides"
    if address is not None and address % 16:
        return f"global address {address:#x} is not 16-byte aligned"
    if any(not 0 < d <= 2**32 for d in spec.dims):
        return f"dimensions {spec.dims} must be 1 to 2^32"
    if any(s % 16 or not 0 < s < 2**40 for s in spec.strides):
        return f"strides {spec.strides} must be multiples of 16 bytes below 2^40"
    if any(not 1 <= b <= 256 for b in spec.box):
        return f"box {spec.box} must be 1 to 256 per dimension"
    inner = spec.box[0] * esize
    if inner % 16:
        return f"inner box of {inner} bytes is not a multiple of 16"
    if spec.swizzle not in SWIZZLE_MODES:
        return f"swizzle {spec.swizzle} is not 0, 32, 64 or 128 bytes"
    if spec.swizzle and inner > spec.swizzle:
        return f"inner box of {inner} bytes exceeds the {spec.swizzle}-byte swizzle span"
    return ""


def tensor_span_bytes(spec: TensorMapSpec) -> int:
    """Bytes from the map's first element to one past its last (the cosize of its layout):
    what CUTLASS compares with 128 KiB, which is not the allocation's size.

    >>> tensor_span_bytes(TensorMapSpec("A", "bf16", (64, 32), (256,), (64, 32), 128))
    8064
    """
    esize = DTYPES[spec.dtype].bytes
    last = (spec.dims[0] - 1) * esize
    last += sum((d - 1) * s for d, s in zip(spec.dims[1:], spec.strides, strict=True))
    return last + esize


def mend_tensor_map(words: Sequence[int], spec: TensorMapSpec, driver_version: int) -> list[int]:
    """The driver's encoded map (16 little-endian 64-bit words) with CUTLASS's driver
    workaround applied (DRIVER_BUG_*): bit 21 of word 1 cleared when the driver is CUDA 13.1
    or older and the tensor spans under 128 KiB; every other bit as the driver gave it."""
    out = [int(w) for w in words]
    if (
        driver_version <= DRIVER_BUG_LAST_VERSION
        and tensor_span_bytes(spec) < DRIVER_BUG_SPAN_BYTES
    ):
        out[DRIVER_BUG_WORD] &= ~(1 << DRIVER_BUG_BIT) & (2**64 - 1)
    return out


def encode_emulated_tensor_map(
    spec: TensorMapSpec, address: int | None = None, argument: int | None = None
) -> np.ndarray:
    """The 128 bytes the CPU emulator reads as a tensor map (a 0-d void array, passed by
    value). The global address is `address`, or, for a map that must follow its buffer into
    a sanitizer's subprocess, the pointer passed as kernel parameter number `argument`."""
    problem = tensor_map_problem(spec, address)
    if problem:
        raise ValueError(f"tensor map of {spec.tensor}: {problem}")
    where = address if address is not None else ADDRESS_IS_ARGUMENT | int(argument or 0)
    rank = len(spec.dims)

    def padded(values: Sequence[int], n: int) -> list[int]:
        return list(values) + [0] * (n - len(values))

    data = struct.pack(
        "<QQ7I5I4Q5H5B",
        TENSOR_MAP_MAGIC, where,
        DTYPES[spec.dtype].tensor_map, rank, 0, SWIZZLE_MODES[spec.swizzle], 0, 0,
        DTYPES[spec.dtype].bytes,
        *padded(spec.dims, 5), *padded(spec.strides, 4), *padded(spec.box, 5),
        *padded([1] * rank, 5),
    )  # fmt: skip
    return np.array(np.void(data.ljust(128, b"\0")))


def tensor_map_arguments(params: Sequence[Param]) -> dict[str, int]:
    """The parameter index of each buffer a tensor map of `params` names."""
    index = {p.name: i for i, p in enumerate(params) if p.kind == "tensor"}
    missing = [
        p.tensor_map.tensor for p in params if p.tensor_map and p.tensor_map.tensor not in index
    ]
    if missing:
        raise ValueError(f"tensor maps name buffers the launch does not pass: {', '.join(missing)}")
    return index


def launch_arguments(
    params: Sequence[Param],
    buffers: Mapping[str, Any],
    encode_map: Callable[[TensorMapSpec, int], Any],
) -> list[Any]:
    """One launch's arguments in its parameter order, for either backend: a buffer by its
    name in `buffers`, a scalar by value, a tensor map as `encode_map(spec, index)` makes
    it (index: the parameter number of the buffer it maps)."""
    index = tensor_map_arguments(params)
    out: list[Any] = []
    for p in params:
        if p.kind in ("tensor", "workspace"):
            out.append(buffers[p.name])
        elif p.tensor_map is not None:
            out.append(encode_map(p.tensor_map, index[p.tensor_map.tensor]))
        else:
            out.append(scalar_argument(p))
    return out
