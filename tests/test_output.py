"""One way to report: data on stdout, messages on stderr (ncdc.output)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ncdc import errors, output


def test_json_output_is_strict(capsys) -> None:
    output.emit({"x": np.float64(1.5), "s": {1}}, "json", table=lambda: "unused")
    assert json.loads(capsys.readouterr().out) == {"x": 1.5, "s": [1]}
    assert output.json_number(float("nan")) is None and output.json_number(2) == 2.0
    with pytest.raises(errors.UsageError):
        output.check_format("yaml")
