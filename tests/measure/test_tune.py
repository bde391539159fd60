"""`ncdc tune` (ncdc.measure.tune): the model's top candidates timed, the best kept."""

from __future__ import annotations

import json
import math
import sys

from ncdc.language.load import load_diagram
from ncdc.measure import bench, tune
from tests.measure.fakes import DIAGRAMS, H200, FakeCupy, kernel


def test_spearman():
    assert tune.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == 0.8
    assert tune.spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert tune.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == 1.0  # ties take mean ranks
    # Failed candidates (inf) are left out; one pair left is no correlation.
    assert math.isnan(tune.spearman([1, 2], [5.0, math.inf]))


def test_check_sizes_keep_two_tiles():
    d = load_diagram(DIAGRAMS / "matmul.yaml")
    configs = [tune.Config({"m": 256, "n": 128, "k": 64}, ((8, 2, 1),))]
    assert tune.check_sizes(d, configs) == {"m": 512, "n": 256, "k": 256}
    small = load_diagram(DIAGRAMS / "matmul.yaml", {"m": 100})
    assert tune.check_sizes(small, configs)["m"] == 100  # never grown


def test_tune_result_record():
    c = tune.Config({"m": 128}, ((8, 2, 1),))
    r = tune.TuneResult(
        "matmul", "h200", "NVIDIA H200", "sm_90a", {"m": 4096}, {"m": 256},
        (
            tune.Candidate(0, c, 1.0e-4, 0.30),
            tune.Candidate(1, c, 1.1e-4, 0.25),
            tune.Candidate(2, c, 1.2e-4, math.inf, "compile: error"),
            tune.Candidate(3, c, 1.3e-4, 0.40),
        ),
    )  # fmt: skip
    assert r.best.rank == 1
    assert math.isclose(r.model_pick_gap, 0.30 / 0.25 - 1)
    assert r.spearman == 0.5  # ranks (1, 2, 3) against (2, 1, 3)
    d = tune.tune_to_dict(r)
    json.dumps(d, allow_nan=False)
    assert d["format"] == "ncdc.tune/1" and d["best_rank"] == 1
    assert d["candidates"][2]["measured_ms"] is None and d["candidates"][2]["error"]


def test_a_candidate_cupy_refuses_to_launch_scores_infinity(monkeypatch):
    """Control flow only: a launch error that is not an NcdcError (CuPy's CUDADriverError for
    too much shared memory, say) fails that candidate, not the whole tuning run."""
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(
        tune, "compile_candidates", lambda spec, hw, arch, sizes, configs: [""] * len(configs)
    )

    def check(diagram, hardware, config, seed):
        if seed == 0:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE: invalid argument")
        return ""

    monkeypatch.setattr(tune, "check_candidate", check)
    monkeypatch.setattr(bench, "module_runner", lambda *a, **k: kernel(cupy, 0.2)[0])
    sizes = {"m": 256, "n": 256, "k": 256}
    r = tune.tune_spec(DIAGRAMS / "matmul.yaml", H200, sizes=sizes, top_k=3, warmup_ms=1,
                       rep_ms=2, write=False)  # fmt: skip
    first, *rest = r.candidates
    assert not first.ok and first.error.startswith("RuntimeError: CUDA_ERROR_INVALID_VALUE")
    assert rest and all(c.ok for c in rest) and r.best is not None
