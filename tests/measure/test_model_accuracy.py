"""benchmarks/model_accuracy.py: every data set in benchmarks/external/ loads, names its
source and structure, and each of its points prices on its GPU profile (a profile or a
diagram that drifts from the schema is found here, not when someone next runs the script)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from tests.support import ROOT

SCRIPT = ROOT / "benchmarks" / "model_accuracy.py"
SETS = sorted((ROOT / "benchmarks" / "external").glob("*.yaml"))


@pytest.fixture(scope="module")
def accuracy():
    spec = importlib.util.spec_from_file_location("model_accuracy", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_accuracy"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_every_set_prices_its_first_and_last_points(accuracy, path) -> None:
    data = yaml.safe_load(path.read_text())
    if "points" not in data:  # a GPU profile or a diagram the sets use: it loads
        if "levels" in data:
            accuracy.hardware_for(path.stem)
        return
    assert {"name", "source", "structure"} <= set(data), path.name
    assert all("gpu" in p or "gpu" in data for p in data["points"]), path.name
    for point in {id(p): p for p in (data["points"][0], data["points"][-1])}.values():
        priced = accuracy.price(data, point)
        assert priced.measured_s > 0 and priced.ncdc_s > 0 and priced.naive_s > 0, priced


def test_the_ncdc_h200_set_is_the_recorded_gpu_run() -> None:
    """ncdc's own kernels as the H200 ran them: each point is a bench row of the record."""
    import json

    record = json.loads((ROOT / "benchmarks" / "results" / "h200-2026-12-04.json").read_text())
    benches = {r["name"]: r["result"]["bench"] for r in record["rows"]
               if r["step"] == "diagrams" and (r.get("result") or {}).get("bench")}  # fmt: skip
    data = yaml.safe_load((ROOT / "benchmarks" / "external" / "ncdc_h200.yaml").read_text())
    assert len(data["points"]) == len(benches)
    for point in data["points"]:
        bench = benches[point["diagram"]]
        assert point["axes"] == bench["axes"]
        assert point["time_ms"] == pytest.approx(bench["timing"]["median_ms"], rel=1e-4)
