"""`ncdc grad`'s files and record (ncdc.grad.report): both specs or neither, never over a
file that is there; the JSON names the ways, the alternatives and the times."""

from __future__ import annotations

import pytest

from ncdc.errors import UsageError
from ncdc.grad.choose import choose_pair
from ncdc.grad.report import FORMAT, grad_to_dict, write_pair
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from tests.support import DIAGRAMS


def _choice():
    return choose_pair(load_diagram(DIAGRAMS / "softmax.yaml"), load_hardware("h200"))


def test_the_pair_is_written_once_and_never_over_a_file(tmp_path) -> None:
    c = _choice()
    fwd, bwd = write_pair(c, tmp_path / "pair")
    assert fwd.name == "softmax_fwd.yaml" and bwd.read_text() == c.pair.backward_text
    bwd.write_text("mine")
    with pytest.raises(UsageError, match="does not overwrite"):
        write_pair(c, tmp_path / "pair")
    assert bwd.read_text() == "mine"


def test_the_record_names_ways_times_and_the_unfused_step() -> None:
    data = grad_to_dict(_choice(), "h200", cost=True)
    assert data["format"] == FORMAT and data["wrt"] == ["X"]
    assert data["total_s"] == pytest.approx(data["forward_s"] + data["backward_s"])
    assert data["unfused_s"] >= data["total_s"] * 0.99
    assert data["backward"]["spec"] == "softmax_bwd"
    assert [a["chosen"] for a in data["alternatives"]] == [True]
