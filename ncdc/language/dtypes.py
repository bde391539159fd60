"""The element types a tensor may have: one frozen `DType` each, read by every layer.

A dtype's facts live here once: its size, its C++ spelling (the same on the GPU and in the
CPU emulation), the NumPy types of its values and of the bits kernels read, its torch name,
its tensor-map code, its range, the rank that decides mixed elementwise operations and the
tolerance a kernel's output is checked to. Adding a type (fp4, say) is one entry here and
its arithmetic in the device headers.

    >>> DTYPES["bf16"].bytes, DTYPES["bf16"].cpp, DTYPES["bf16"].torch
    (2, '__nv_bfloat16', 'bfloat16')
    >>> wider("bf16", "fp8_e4m3"), DTYPES["int8"].max_value
    ('bf16', 127.0)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """One element type.

    `bits` is the NumPy dtype of the array a kernel reads (raw bits for bf16 and fp8, which
    CuPy and the emulator take as 16- and 8-bit integers); `values` is the NumPy dtype that
    holds its values (ml_dtypes for bf16 and fp8). `tensor_map` is the driver's
    CUtensorMapDataType (None: no TMA copies of it). `rank` decides which type an
    elementwise operation of mixed operands gives. `tolerance` is the error allowed in a
    kernel's output, relative to the largest magnitude of the float64 reference: fp32 differs
    from float64 by accumulation order; 16-bit types by one rounding (2^-8 for bf16) plus
    their inputs' products; e4m3 keeps 3 mantissa bits (a rounding is up to 2^-4 of the
    value), e5m2 keeps 2 (2^-3); int8 by one step in 64; int32 (int8 x int8 accumulated
    exactly) by none. `max_value` is the largest finite value (an integer type's top),
    `min_value` the most negative.
    """

    name: str
    bytes: int
    cpp: str
    bits: str
    values: str
    torch: str
    tensor_map: int | None
    integer: bool
    rank: int
    tolerance: float
    max_value: float
    min_value: float

    @property
    def is_fp8(self) -> bool:
        return self.name.startswith("fp8")


# CUtensorMapDataType codes (cuda.h): UINT8 0, FLOAT16 6, FLOAT32 7, BFLOAT16 9. TMA copies
# bytes: fp8 and int8 travel as UINT8.
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", 4, "float", "float32", "float32", "float32", 7, False, 5, 1e-5,
              3.4028234663852886e38, -3.4028234663852886e38),
        DType("fp16", 2, "__half", "float16", "float16", "float16", 6, False, 4, 1e-2,
              65504.0, -65504.0),
        DType("bf16", 2, "__nv_bfloat16", "uint16", "bfloat16", "bfloat16", 9, False, 4, 2e-2,
              3.3895313892515355e38, -3.3895313892515355e38),
        DType("fp8_e4m3", 1, "__nv_fp8_e4m3", "uint8", "float8_e4m3fn", "float8_e4m3fn", 0,
              False, 2, 7e-2, 448.0, -448.0),
        DType("fp8_e5m2", 1, "__nv_fp8_e5m2", "uint8", "float8_e5m2", "float8_e5m2", 0,
              False, 2, 1.3e-1, 57344.0, -57344.0),
        # Integers: a value stored as one is rounded to the nearest integer (ties to even)
        # and saturated to the type's range, as cvt.rni.sat does; int8 x int8 contractions
        # accumulate exactly in int32 on tensor cores (wrapping past 2^31, as mma.sync .s32
        # does without .satfinite); every other operation computes in fp32.
        DType("int8", 1, "signed char", "int8", "int8", "int8", 0, True, 1, 1.0 / 64,
              127.0, -128.0),
        DType("int32", 4, "int", "int32", "int32", "int32", None, True, 3, 0.0,
              2.0**31 - 1, -(2.0**31)),
    )
}  # fmt: skip
COMPUTE_DTYPE = "fp32"  # what kernels compute in, and the C++ type of a spec's constants


def wider(a: str, b: str) -> str:
    """Of two dtypes, the one an elementwise operation of both gives (the higher rank; the
    first of two equal)."""
    return a if DTYPES[a].rank >= DTYPES[b].rank else b
