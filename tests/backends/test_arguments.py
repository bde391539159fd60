"""Launch arguments for either backend (ncdc.backends.arguments): scalars in their C type,
tensor maps checked against the driver's limits and encoded, in parameter order."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc.backends.arguments import (
    encode_emulated_tensor_map,
    launch_arguments,
    scalar_argument,
    tensor_map_problem,
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
    import dataclasses

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
