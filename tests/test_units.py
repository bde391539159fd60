"""Units for people, and the one ceiling division (ncdc.units)."""

from __future__ import annotations

import numpy as np
import pytest

from ncdc import units


@pytest.mark.parametrize(
    "a, b, tiles", [(0, 128, 0), (1, 128, 1), (128, 128, 1), (129, 128, 2), (4097, 64, 65)]
)
def test_ceil_div_counts_the_tiles_that_cover(a: int, b: int, tiles: int) -> None:
    assert units.ceil_div(a, b) == tiles


def test_ceil_div_broadcasts_over_arrays() -> None:
    assert units.ceil_div(np.array([1, 64, 65]), 64).tolist() == [1, 1, 2]


def test_units_for_people() -> None:
    assert units.format_bytes(3 * 2**30) == "3.00 GiB"
    assert units.format_time(843.83e-6) == "843.83 µs"
    assert units.format_time(1.5e-3) == "1.500 ms"
    assert units.format_rate(989.4e12, "FLOP/s") == "989.40 TFLOP/s"
    assert units.format_count(137) == "137" and units.format_count(1.37e11) == "1.370e+11"
