"""ncdc.cli.gpu: bench, tune and calibrate on the command line; without a GPU each says so
in one line with exit 4 (their runs are tested in tests/measure/)."""

from __future__ import annotations

import importlib.util

import pytest

from tests import support


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
@pytest.mark.parametrize("command", [["bench", support.SOFTMAX], ["calibrate", "-o", "x.yaml"]])
def test_without_a_gpu_the_gpu_commands_are_one_line(tmp_path, command) -> None:
    result = support.ncdc(*command, cwd=tmp_path)
    support.assert_error(result, 4)
