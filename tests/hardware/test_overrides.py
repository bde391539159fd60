"""What-if overrides of a profile (ncdc.hardware.overrides): a level's capacity or bandwidth
replaced, the limit it states following it, a bad override one line.
"""

from __future__ import annotations

import pytest

from ncdc.errors import HardwareError
from ncdc.hardware.load import (
    load_hardware,
)
from ncdc.hardware.overrides import apply_overrides


def test_overrides_replace_levels_and_keep_the_original():
    hw = load_hardware("h100")
    new = apply_overrides(hw, ["smem.capacity=233472", "hbm.bandwidth=4.8e12"])
    assert new.level("smem").capacity_bytes == 233472
    assert new.limits.smem_per_block_bytes == 233472  # the limit the level states follows
    assert new.bandwidth("hbm") == 4.8e12
    assert new.sources["levels.hbm.bandwidth"].kind == "override"
    assert hw.level("smem").capacity_bytes == 227 * 1024
    assert hw.sources["levels.hbm.bandwidth"].kind == "datasheet"


def test_napkin_l1_override():
    hw = apply_overrides(load_hardware("napkin"), ["l1.capacity=65536"])
    assert hw.level("l1").capacity_bytes == 65536
    assert isinstance(hw.level("l1").capacity_bytes, int)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("smem.capacity", "cannot read hardware override 'smem.capacity'"),
        ("smem=5", "cannot read hardware override"),
        ("l3.capacity=5", "unknown level 'l3' in hardware override 'l3.capacity=5'"),
        ("smem.size=5", "unknown field 'size' in hardware override"),
        ("smem.capacity=-5", "expected a positive whole number of bytes"),
        ("smem.capacity=1.5", "expected a positive whole number of bytes"),
        ("hbm.bandwidth=0", "expected a positive number"),
        ("hbm.bandwidth=fast", "expected a positive number"),
        ("hbm.bandwidth=inf", "expected a positive number"),
    ],
)
def test_bad_overrides_are_one_line_with_a_hint(override, expected):
    with pytest.raises(HardwareError) as info:
        apply_overrides(load_hardware("h100"), [override])
    line = info.value.line()
    assert expected in line
    assert "hint: write LEVEL.FIELD=NUMBER with LEVEL one of hbm, l2, smem, rf" in line
    assert "FIELD capacity|bandwidth" in line
    assert "\n" not in line


def test_a_bandwidth_override_replaces_the_measured_copy_bandwidth_too() -> None:
    # a100's hbm has a measured copy bandwidth the model prices before the datasheet's
    from ncdc.hardware.load import load_hardware

    hw = load_hardware("a100")
    assert "hbm" in hw.achievable.bandwidth
    faster = apply_overrides(hw, ["hbm.bandwidth=4e12"])
    assert faster.achieved_bandwidth("hbm") == 4e12
    assert faster.achievable.bandwidth.keys() == hw.achievable.bandwidth.keys() - {"hbm"}
    assert apply_overrides(hw, ["hbm.capacity=1000000"]).achievable == hw.achievable
