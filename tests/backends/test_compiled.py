"""What a run trusts of a compiled kernel's `.json` (ncdc.backends.compiled): sizes, grids,
blocks, shared memory and workspace within the limits of a launch and of the diagram. The
command-line attacks (an edited grid of 2^61 blocks) are in tests/verify/test_run.py."""

from __future__ import annotations

import pytest

from ncdc.backends.compiled import check_launches, checked_sizes
from ncdc.errors import UsageError
from ncdc.language.load import load_diagram
from ncdc.render import Launch, Workspace
from tests.support import SOFTMAX

DIAGRAM = load_diagram(SOFTMAX, {"m": 4, "n": 64})  # 256 values


def _launch(grid=(4, 1, 1), block=(128, 1, 1), smem=0) -> Launch:
    return Launch("k", grid, block, smem, ())


def test_a_launch_within_the_limits_passes():
    check_launches(DIAGRAM, [_launch()], [Workspace("w", "fp32", 256)], "k.json")


@pytest.mark.parametrize(
    ("launch", "contains"),
    [
        (_launch(grid=(2**31, 1, 1)), "outside CUDA's limits"),
        (_launch(grid=(1, 65536, 1)), "outside CUDA's limits"),
        (_launch(grid=(257, 1, 1)), "257 blocks for a diagram of 256 values"),
        (_launch(grid=(1.5, 1, 1)), "grid"),
        (_launch(grid=(1, 1)), "grid"),
        (_launch(block=(1025, 1, 1)), "block"),
        (_launch(block=(32, 32, 2)), "2048 threads"),
        (_launch(smem=1 << 20), "dynamic shared memory"),
    ],
)
def test_a_launch_outside_the_limits_is_refused(launch, contains):
    with pytest.raises(UsageError, match=contains) as e:
        check_launches(DIAGRAM, [launch], [], "k.json")
    assert "compile the spec again" in e.value.line()


def test_a_workspace_no_split_needs_is_refused():
    with pytest.raises(UsageError, match="workspace w"):
        check_launches(DIAGRAM, [_launch()], [Workspace("w", "fp32", 2**60)], "k.json")


@pytest.mark.parametrize("axes", [None, [], {"m": 0}, {"m": 2**31}, {"m": True}, {"m": 1.0}])
def test_sizes_are_whole_numbers_in_range(axes):
    with pytest.raises(UsageError, match="axes"):
        checked_sizes(axes, "k.json")
