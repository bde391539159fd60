"""Published kernels' tiles beside the model's (ncdc.plan.published): `ncdc cost` notes a
preference the model's own measured error cannot back, `ncdc tune` times the published
tiling too, and each entry's error is no smaller than the model's worst on its set now."""

from __future__ import annotations

import importlib.util
import statistics
import sys

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.measure.tune import tuning_plans
from ncdc.plan.published import PUBLISHED, doubted_notes
from ncdc.plan.search import plan_diagram
from ncdc.verify.buildable import cost_note
from tests import support

ATTENTION = support.DIAGRAMS / "attention.yaml"


def test_a_preference_beyond_the_measured_error_is_noted_and_nothing_else() -> None:
    a100 = load_hardware("a100")
    plan = plan_diagram(load_diagram(ATTENTION), a100)
    (note,) = doubted_notes(plan)
    assert "FlashAttention-2's q=128 x=64" in note and "ncdc tune" in note
    assert note in (cost_note([plan], abstract=False) or "")
    # the user's tiles, the published ones, another head size, another GPU: no note
    assert doubted_notes(plan_diagram(load_diagram(ATTENTION), a100, {"q": 64})) == []
    assert doubted_notes(plan_diagram(load_diagram(ATTENTION), a100, {"q": 128, "x": 64})) == []
    assert doubted_notes(plan_diagram(load_diagram(ATTENTION, {"d": 64}), a100)) == []
    assert doubted_notes(plan_diagram(load_diagram(ATTENTION), load_hardware("h200"))) == []


def test_tune_times_the_published_tiling_beside_the_models_best() -> None:
    plans = tuning_plans(load_diagram(ATTENTION), load_hardware("a100"), 2)
    assert len(plans) == 3 and plans[0].tiles["q"] == 64
    assert (plans[-1].tiles["q"], plans[-1].tiles["x"]) == (128, 64)


def test_each_entry_states_at_least_the_models_error_on_its_set() -> None:
    path = support.ROOT / "benchmarks" / "model_accuracy.py"
    spec = importlib.util.spec_from_file_location("model_accuracy", path)
    assert spec is not None and spec.loader is not None
    accuracy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = accuracy  # its dataclasses look their module up
    spec.loader.exec_module(accuracy)
    sets = {data["name"]: (data, points) for data, points in accuracy.load_sets()}
    for pub in PUBLISHED:
        name = pub.source.split()[0].rsplit("/", 1)[-1].removesuffix(".yaml")
        data, points = sets[name]
        assert data["tiles"] == dict(pub.tiles) and data["gpu"] == pub.hardware
        errors = [accuracy.error(p.ncdc_s, p.measured_s) for p in accuracy.scored(points)]
        assert max(errors) <= pub.error, (name, max(errors))
        assert f"{statistics.median(errors):.0%} off in the median" in pub.source
