"""Tuned tiles are visible state: cost, compile and run say when the tiles come from the
tuning cache and from which file, and --no-tuned ignores it."""

from __future__ import annotations

import json
import os

import pytest

from ncdc import paths
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan import choose
from ncdc.plan.search import rank_tiles
from tests.support import MATMUL, ncdc

SIZES = {"m": 128, "n": 128, "k": 64}
SETS = [arg for axis, size in SIZES.items() for arg in ("--set", f"{axis}={size}")]


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A tuning entry holding the model's runner-up for the small matmul; its file."""
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path / "cache"))
    paths._key_for.cache_clear()
    d = load_diagram(MATMUL, SIZES)
    hw = load_hardware("h200")
    plans = rank_tiles(d, hw, 8)
    modelled = choose.plan_config(plans[0])
    runner_up = next(choose.plan_config(p) for p in plans if choose.plan_config(p) != modelled)
    path = choose.write_tuned(d, "h200", "sm_90a", "NVIDIA H200", runner_up, {"gpu": "test"})
    return path, dict(runner_up.tiles), dict(modelled.tiles)


def env() -> dict[str, str]:
    return {"NCDC_CACHE": os.environ["NCDC_CACHE"]}


def test_cost_says_the_tiles_came_from_the_tuning_cache(tuned):
    path, tuned_tiles, modelled_tiles = tuned
    result = ncdc("cost", MATMUL, *SETS, "--format", "json", env=env())
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["tiles"] == tuned_tiles
    assert data["tiles_from"] == {"kind": "tuned", "file": str(path)}
    assert str(path) in result.stderr and "--no-tuned" in result.stderr
    plain = ncdc("cost", MATMUL, *SETS, "--format", "json", "--no-tuned", env=env())
    data = json.loads(plain.stdout)
    assert data["tiles"] == modelled_tiles and data["tiles_from"]["kind"] == "model"
    assert "tuning cache" not in plain.stderr


def test_explicit_tiles_beat_the_cache_and_say_so(tuned):
    result = ncdc("cost", MATMUL, *SETS, "--tile", "m=64", "--format", "json", env=env())
    assert json.loads(result.stdout)["tiles_from"]["kind"] == "explicit"


def test_run_says_so_too(tuned):
    path, _, _ = tuned
    result = ncdc("run", MATMUL, *SETS, "--format", "json", env=env())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tiles_from"] == {"kind": "tuned", "file": str(path)}
    assert str(path) in result.stderr
    plain = ncdc("run", MATMUL, *SETS, "--format", "json", "--no-tuned", env=env())
    assert json.loads(plain.stdout)["tiles_from"]["kind"] == "model"


def test_compile_says_so_in_its_json(tuned, tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    path, tuned_tiles, _ = tuned
    out = tmp_path / "out"
    result = ncdc("compile", MATMUL, *SETS, "-o", str(out), "--format", "json", env=env())
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "matmul.json").read_text())
    assert meta["tiles_from"] == {"kind": "tuned", "file": str(path)}
    assert meta["cost"]["tiles"] == tuned_tiles
    assert str(path) in result.stderr


def test_plan_source_interface(tuned):
    d = load_diagram(MATMUL, SIZES)
    hw = load_hardware("h200")
    plan, source = choose.choose_plan_source(d, hw)
    assert source.kind == "tuned" and source.path == str(tuned[0])
    plan, source = choose.choose_plan_source(d, hw, use_tuned=False)
    assert source == choose.PlanSource("model") and plan.tiles == tuned[2]
    assert choose.choose_plan(d, hw, use_tuned=False).tiles == tuned[2]


def test_a_tuning_record_under_a_folder_others_can_write_is_not_used(tuned):
    # Issue 31: a root inside a world-writable folder fed `cost` a planted tuning record.
    path, _, _ = tuned
    shared = path.parents[2]  # the folder holding the cache root
    shared.chmod(0o777)
    try:
        result = ncdc("cost", MATMUL, *SETS, "--format", "json", env=env())
    finally:
        shared.chmod(0o755)
    assert result.returncode == 2, result.stdout
    assert "writable by others" in result.stderr and str(path) not in result.stderr
    assert result.stdout == ""


def test_a_tuning_record_that_is_a_fifo_is_skipped(tuned):
    path, _, modelled_tiles = tuned
    path.unlink()
    os.mkfifo(path, 0o600)
    result = ncdc("cost", MATMUL, *SETS, "--format", "json", env=env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tiles"] == modelled_tiles
