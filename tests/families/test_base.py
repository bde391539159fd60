"""The family protocol's helpers (ncdc.families.base): every registered family follows the
protocol, and the search helpers clamp and round as documented."""

from __future__ import annotations

import pytest

from ncdc.families import FAMILIES
from ncdc.families.base import options, permille, pow2, rounded_options


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_follows_the_protocol(name: str) -> None:
    f = FAMILIES[name]
    assert f.name == name and f.baseline in ("gemm", "attention", "rowwise", "")
    for method in ("classify", "candidates", "render", "tile_axes", "arch_problem",
                   "loop_mix", "masked_share"):  # fmt: skip
        assert callable(getattr(f, method)), f"{name} lacks {method}"


def test_search_helpers() -> None:
    assert [pow2(x) for x in (0, 1, 3, 64, 65)] == [1, 1, 4, 64, 128]
    assert options("m", (64, 128), 100, {}) == [64, 100]
    assert options("m", (64, 128), 100, {"m": 32}) == [32]
    assert rounded_options("m", (64, 128), 40, {}, 16) == [64]  # 40 rounds up to 64
    assert permille(0.3336) == 0.334 and permille(0) == 0.001
