"""ncdc.api.arrays: arrays told apart by type, element types by the diagram's dtype, and
host arrays carried as the raw bits a kernel reads."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ncdc.api import arrays
from ncdc.api.arrays import HOST, accepts, dtype_problem, from_host_bits, host_bits, view
from ncdc.errors import ArrayError


def test_numpy_arrays_are_host_arrays_with_their_layout() -> None:
    a = np.zeros((4, 6), np.float32)
    v = view(a)
    assert (v.family, v.device, v.shape, v.contiguous, v.address) == (
        "numpy",
        HOST,
        (4, 6),
        True,
        0,
    )
    assert not view(a[:, ::2]).contiguous and not view(a.T).contiguous


@pytest.mark.parametrize(
    "dtype, good, bad",
    [
        ("bf16", [ml_dtypes.bfloat16, np.uint16], [np.float16, np.float32, np.int16]),
        ("fp8_e4m3", [ml_dtypes.float8_e4m3fn, np.uint8], [ml_dtypes.float8_e5m2, np.int8]),
        ("fp16", [np.float16], [np.uint16, ml_dtypes.bfloat16]),
        ("fp32", [np.float32], [np.float64, np.uint32]),
        ("int32", [np.int32], [np.int64, np.float32]),
    ],
)
def test_element_types_are_the_values_type_or_the_raw_bits(dtype, good, bad) -> None:
    for t in good:
        assert accepts(view(np.zeros(3, t)), dtype), t
    for t in bad:
        v = view(np.zeros(3, t))
        assert not accepts(v, dtype), t
        assert dtype_problem(v, dtype).startswith("expected ") and str(
            np.dtype(t)
        ) in dtype_problem(v, dtype)


def test_host_bits_round_trip_bf16_values_exactly() -> None:
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    bits = host_bits(view(x), "bf16")
    assert bits.dtype == np.uint16 and np.shares_memory(bits, x)  # a view, not a copy
    back = from_host_bits(bits, "bf16", "numpy")
    assert back.dtype == ml_dtypes.bfloat16 and np.array_equal(
        back.view(np.uint16), x.view(np.uint16)
    )
    assert np.array_equal(host_bits(view(x.view(np.uint16)), "bf16"), bits)  # bits in, bits out


class _HostDlpack:
    """Another library's host array, seen only through DLPack."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class _OtherDevice(_HostDlpack):
    def __dlpack_device__(self):
        return (14, 0)  # kDLOneAPI: neither the host nor CUDA


def test_foreign_host_arrays_come_through_dlpack_without_a_copy() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = view(_HostDlpack(a))
    assert v.family == "numpy" and v.shape == (3, 4) and np.shares_memory(v.array, a)


def test_arrays_of_no_known_kind_are_refused_with_a_hint() -> None:
    with pytest.raises(ArrayError, match="expected an array, found a list") as e:
        view([[1.0, 2.0]])
    assert "NumPy, torch or CuPy" in (e.value.hint or "")
    with pytest.raises(ArrayError, match="DLPack device type 14"):
        view(_OtherDevice(np.zeros(2)))


def test_a_viewer_is_found_once_per_type(monkeypatch) -> None:
    found: list[type] = []
    real = arrays._viewer
    monkeypatch.setattr(arrays, "_VIEWERS", {np.ndarray: arrays._numpy})
    monkeypatch.setattr(arrays, "_viewer", lambda kind, a: found.append(kind) or real(kind, a))
    for _ in range(3):
        view(_HostDlpack(np.zeros(2)))
    assert found == [_HostDlpack]
