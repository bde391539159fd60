"""One value per element type (ncdc.language.dtypes): every layer reads the same facts."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from ncdc.backends import nvrtc
from ncdc.language.dtypes import DTYPES, wider
from ncdc.verify.reference import from_storage, round_to, to_storage, value_dtype

HEADERS = "\n".join(p.read_text() for p in nvrtc.ncdc_include_dir().glob("*.cuh"))


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_each_dtype_is_one_consistent_value(name: str) -> None:
    d = DTYPES[name]
    assert d.name == name
    # its values and its bits are NumPy types of its size
    assert value_dtype(name).itemsize == d.bytes == np.dtype(d.bits).itemsize
    # the range its values hold is the NumPy type's (ml_dtypes for bf16 and fp8)
    info = np.iinfo(d.values) if d.integer else ml_dtypes.finfo(value_dtype(name))
    assert (float(info.max), float(info.min)) == (d.max_value, d.min_value)
    assert d.tolerance >= 0 and d.rank > 0
    assert (d.tensor_map is None) == (name == "int32")


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_the_device_headers_know_the_cpp_type(name: str) -> None:
    cpp = DTYPES[name].cpp
    assert cpp in ("float", "int", "signed char") or re.search(rf"\b{re.escape(cpp)}\b", HEADERS)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_storage_round_trips_every_representable_value(name: str) -> None:
    d = DTYPES[name]
    x = np.array([0.0, 1.0, -2.5, d.max_value, d.min_value, 3.0e38, -7.0e8, 0.1])
    held = round_to(x, name)
    assert np.array_equal(from_storage(to_storage(held, name), name), held)
    if d.integer or d.is_fp8:  # saturating conversions (cvt .sat / .satfinite)
        assert held.max() <= d.max_value and held.min() >= d.min_value
    else:  # round to nearest: past the largest finite value is an infinity
        assert held[5] == (np.inf if d.max_value < 3.0e38 else held[5])


def test_mixed_operands_take_the_higher_rank() -> None:
    assert wider("bf16", "fp8_e4m3") == "bf16" and wider("fp8_e4m3", "fp32") == "fp32"
    assert wider("fp16", "bf16") == "fp16"  # a tie keeps the first, as the inference does
    assert wider("int8", "int32") == "int32"


def test_fp8_saturates_and_keeps_nan_as_the_hardware_does() -> None:
    x = np.array([1e6, -1e6, np.inf, np.nan])
    assert round_to(x, "fp8_e4m3")[:3].tolist() == [448.0, -448.0, 448.0]
    assert np.isnan(round_to(x, "fp8_e4m3")[3])
    # bf16 rounds the fp32 value, as a kernel converting its fp32 result does
    assert round_to(np.array([1.00390625 + 1e-9]), "bf16")[0] == 1.0
