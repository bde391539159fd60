"""`ncdc calibrate`'s arithmetic and file (ncdc.measure.calibrate): raw samples become the
profile's figures (numbers checkable by hand), the written profile loads, every entry it
replaced says where and when it was measured, and `ncdc cost --hardware FILE` prices with
it. The microbenchmarks themselves need a GPU (ncdc.measure.microbench)."""

from __future__ import annotations

import math

import pytest
import yaml

from ncdc.errors import NcdcError
from ncdc.hardware.load import load_hardware
from ncdc.measure.calibrate import (
    builtin_tree,
    calibrated_figures,
    calibrated_profile,
    write_profile,
)
from ncdc.measure.microbench import Sample
from tests import support

H200 = load_hardware("h200")

# What an H200 might measure: 8 GiB copied (read + written) in 2.2 ms, an L2 sweep, ...
SAMPLES = {
    "hbm_copy": Sample(8 * 2**30, 2.2e-3, "copy of 8 x L2"),
    "l2_sweep_0.125": Sample(6e9, 1e-3, "reads of 0.125 x L2"),
    "l2_sweep_0.5": Sample(9.7e9, 1e-3, "reads of 0.5 x L2"),
    "l2_sweep_1": Sample(2e10, 1e-3, "reads of 1 x L2"),  # more than half the L2: not L2's rate
    "l2_size": Sample(60 * 2**20, 1.0, "cudaDevAttrL2CacheSize"),
    "smem": Sample(30e12, 1.0, "ld.shared"),
    "sfu_exp": Sample(4e12, 1.0, "ex2"),
    "launch": Sample(1000, 2.5e-3, "1000 empty launches"),
    "clock": Sample(1.755e9, 1.0, "clock64 over globaltimer"),
    "mma_sync_bf16": Sample(610e12, 1.0, "mma.sync bf16"),
    "library_bf16": Sample(800e12, 1.0, "torch.matmul"),
}


def test_figures_from_samples():
    f = calibrated_figures(SAMPLES, sms=132)
    assert f["achievable.bandwidth.hbm"].value == round(8 * 2**30 / 2.2e-3 / 1e12, 4)  # 3.9045
    assert f["achievable.bandwidth.l2"].value == 9.7  # the best of the sweep up to half the L2
    assert f["levels.l2.capacity"].value == 60.0 and f["levels.l2.capacity"].unit == "MiB"
    assert f["achievable.launch"].value == 2.5  # us per launch
    assert f["achievable.clock"].value == 1755.0
    # 610 TFLOP/s over 132 SMs at 1755 MHz: 2633 FLOPs a clock an SM; an HMMA.16816 is 4096
    # FLOPs on one of 4 sub-partitions: 4 x 4096 / 2633 = 6.22 cycles each
    assert math.isclose(f["hmma_cycles"].value, 4 * 4096 / (610e12 / (132 * 1.755e9)), abs_tol=0.01)
    assert f["rates.tensor.bf16"].value == 800.0
    assert "rates.tensor.fp8_e4m3" not in f  # not measured: not written


def test_the_profile_loads_and_says_what_was_measured(tmp_path):
    figures = calibrated_figures(SAMPLES, sms=132)
    tree = calibrated_profile(builtin_tree(H200), figures, "NVIDIA H200", "2026-12-01")
    path = tmp_path / "h200-measured.yaml"
    write_profile(path, tree, "h200")
    hw = load_hardware(path)
    assert hw.name == "h200-measured" and hw.level("l2").capacity_bytes == 60 * 2**20
    assert math.isclose(hw.achievable.clock_hz, 1.755e9)
    written = yaml.safe_load(path.read_text())
    measured = "measured on NVIDIA H200 at 2026-12-01 by ncdc calibrate"
    assert written["achievable"]["bandwidth"]["hbm"]["source"].startswith(measured)
    assert written["rates"]["tensor"]["bf16"]["kind"] == "measured"
    assert "per_sm_per_clock" not in written["rates"]["tensor"]["bf16"]  # no longer a quoted peak
    # entries not measured keep their sources
    assert written["rates"]["tensor"]["fp8_e4m3"]["kind"] == "datasheet"
    sources = [s for s in _sources(written) if "ncdc calibrate" in s]
    assert len(sources) == len(figures)
    proc = support.ncdc("cost", "diagrams/matmul.yaml", "--hardware", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "h200-measured" in proc.stdout


def _sources(node):
    if isinstance(node, dict):
        if "source" in node:
            yield node["source"]
        for v in node.values():
            yield from _sources(v)
    elif isinstance(node, list):
        for v in node:
            yield from _sources(v)


def test_calibrate_needs_a_gpu_and_keeps_other_files(tmp_path):
    from ncdc.measure.calibrate import calibrate

    mine = tmp_path / "notes.yaml"
    mine.write_text("my own file\n")
    with pytest.raises(NcdcError, match="is not a profile ncdc calibrate wrote"):
        calibrate(H200, mine)
    assert mine.read_text() == "my own file\n"
    proc = support.ncdc("calibrate", "-o", str(tmp_path / "x.yaml"))
    assert proc.returncode == 4 and "Traceback" not in proc.stderr  # no GPU here
    assert not (tmp_path / "x.yaml").exists()
