"""The CI cost gate: a baseline of predicted time and HBM bytes per diagram."""

from __future__ import annotations

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from ncdc.verify.gate import baseline_from_plans, compare_to_baseline, parse_tolerance
from tests import support


def _baseline():
    hw = load_hardware("h100")
    plans = [plan_diagram(load_diagram(f"diagrams/{n}.yaml"), hw) for n in ("matmul", "softmax")]
    return baseline_from_plans(plans)


def test_baseline_has_one_entry_per_diagram():
    base = _baseline()
    assert set(base["diagrams"]) == {"matmul", "softmax"}
    assert base["diagrams"]["softmax"]["hbm_bytes"] > 0


def test_unchanged_passes_and_growth_is_named():
    base = _baseline()
    assert compare_to_baseline(base, base, 0.05) == []
    grown = {"diagrams": {k: dict(v) for k, v in base["diagrams"].items()}}
    grown["diagrams"]["matmul"]["predicted_time_s"] *= 1.10
    messages = compare_to_baseline(grown, base, 0.05)
    assert len(messages) == 1
    assert messages[0].startswith("matmul: predicted_time_s grew from ")
    assert "+10.0%" in messages[0]
    assert compare_to_baseline(grown, base, 0.2) == []


def test_shrinking_and_new_diagrams_pass():
    base = _baseline()
    cur = {"diagrams": {"matmul": {"predicted_time_s": 0.0, "hbm_bytes": 0}, "new": {}}}
    assert compare_to_baseline(cur, base, 0.0) == []


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.1", 0.1), (" 12.5% ", 0.125)])
def test_parse_tolerance(text, value):
    assert parse_tolerance(text) == pytest.approx(value)


def test_check_refuses_two_specs_of_one_diagram_name_as_compile_does(tmp_path):
    """`compile` and `cost` refuse two specs with one diagram name (their outputs would
    overwrite each other): `check` says so too, for the second, exit 2."""
    text = (support.DIAGRAMS / "softmax.yaml").read_text()
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(text)
    result = support.ncdc("check", str(tmp_path))
    assert result.returncode == 2
    out = result.stdout + result.stderr
    assert (f"two specs name their diagram 'softmax': {tmp_path / 'a.yaml'} and "
            f"{tmp_path / 'b.yaml'}") in out  # fmt: skip
    assert "1 of 2 specs valid" in out
