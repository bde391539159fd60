"""Launch arguments for either backend (ncdc.backends.arguments): scalars in their C type,
tensor maps checked against the driver's limits and encoded, in parameter order."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ncdc.backends.arguments import (
    encode_emulated_tensor_map,
    launch_arguments,
    mend_tensor_map,
    scalar_argument,
    tensor_map_problem,
    tensor_span_bytes,
)
from ncdc.families.base import Param, TensorMapSpec

MAP = TensorMapSpec("A", "bf16", (256, 128), (512,), (64, 64), 128)


def test_a_legal_map_has_no_problem_and_encodes_to_128_bytes() -> None:
    assert tensor_map_problem(MAP, 0x1000) == ""
    assert encode_emulated_tensor_map(MAP, 0x1000).nbytes == 128


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"dtype": "int32"}, "no tensor-map element type"),
        ({"strides": (500,)}, "multiples of 16 bytes"),
        ({"box": (64, 300)}, "1 to 256"),
        ({"box": (4, 64)}, "not a multiple of 16"),
        ({"swizzle": 48}, "swizzle 48"),
        ({"box": (128, 64)}, "exceeds the 128-byte swizzle span"),
    ],
)
def test_what_the_driver_refuses_is_named(change: dict, problem: str) -> None:
    assert problem in tensor_map_problem(dataclasses.replace(MAP, **change), 0x1000)
    assert "16-byte aligned" in tensor_map_problem(MAP, 0x1008)


def test_arguments_follow_the_parameter_order() -> None:
    params = (
        Param("ncdc_size_m", "int64", value=7),
        Param("A", "tensor", "bf16"),
        Param("ncdc_map_A", "tensormap", "bf16", tensor_map=MAP),
        Param("ncdc_scale", "float32", value=0.5),
    )
    buffers = {"A": np.zeros(4)}
    args = launch_arguments(params, buffers, lambda spec, index: ("map", spec.tensor, index))
    assert args[0] == np.int64(7) and args[1] is buffers["A"]
    assert args[2] == ("map", "A", 1)  # the map names its buffer by parameter number
    assert isinstance(args[3], np.float32) and scalar_argument(params[3]) == 0.5
    with pytest.raises(ValueError, match="does not pass"):
        launch_arguments(params[2:], buffers, lambda spec, index: None)


# A 64 x 32 bf16 tensor (row pitch 256 bytes: 4 KiB) and a 1024 x 256 one (512 KiB).
SMALL = TensorMapSpec("A", "bf16", (64, 32), (256,), (64, 32), 128)
LARGE = TensorMapSpec("A", "bf16", (256, 1024), (512,), (64, 64), 128)


def test_span_is_the_cosize_of_the_layout_not_the_allocation():
    # last element at (63, 31): 63 * 2 + 31 * 256 bytes, plus its own 2 bytes
    assert tensor_span_bytes(SMALL) == 63 * 2 + 31 * 256 + 2
    # a padded pitch counts the padding between rows, not after the last one
    padded = dataclasses.replace(SMALL, strides=(512,))
    assert tensor_span_bytes(padded) == 63 * 2 + 31 * 512 + 2


def test_driver_workaround_clears_only_bit_21_of_word_1():
    words = [0xFFFF_FFFF_FFFF_FFFF] * 16
    mended = mend_tensor_map(words, SMALL, 13010)
    assert mended[1] == 0xFFFF_FFFF_FFFF_FFFF ^ (1 << 21)
    assert mended[:1] + mended[2:] == words[:1] + words[2:]
    assert mend_tensor_map([0] * 16, SMALL, 13010) == [0] * 16  # a clear bit stays clear


@pytest.mark.parametrize(
    "spec, driver, cleared",
    [
        (SMALL, 12080, True),  # an older driver
        (SMALL, 13010, True),  # CUDA 13.1: the last version CUTLASS patches
        (SMALL, 13020, False),  # a fixed driver
        (LARGE, 13000, False),  # 512 KiB: over the 128 KiB limit
        # just under and at the limit: 128 rows of 1 KiB, the last row 2 bytes short or whole
        (TensorMapSpec("A", "bf16", (511, 128), (1024,), (64, 64), 128), 13000, True),
        (TensorMapSpec("A", "bf16", (512, 128), (1024,), (64, 64), 128), 13000, False),
    ],
)
def test_driver_workaround_condition(spec, driver, cleared):
    mended = mend_tensor_map([1 << 21] * 16, spec, driver)
    assert mended[1] == (0 if cleared else 1 << 21)
