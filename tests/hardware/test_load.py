"""Hardware profiles read and checked (ncdc.hardware.load): every built-in loads, peaks agree
with their per-clock figures, a capacity is stated once, and a bad profile is one line.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from ncdc.errors import HardwareError
from ncdc.hardware.load import (
    PROFILES_DIR,
    _load_builtin,
    hardware_to_dict,
    list_profiles,
    load_hardware,
)
from ncdc.hardware.machine import Hardware
from tests import support

BUILTINS = ["a100", "b200", "h100", "h200", "l40s", "napkin", "rtx4090"]


GPUS = [name for name in BUILTINS if name != "napkin"]


def write_profile(tmp_path: Path, data: dict, name: str = "my.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def h100_data() -> dict:
    return yaml.safe_load((PROFILES_DIR / "h100.yaml").read_text())


def load_error(tmp_path: Path, data: dict) -> str:
    path = write_profile(tmp_path, data)
    with pytest.raises(HardwareError) as info:
        load_hardware(path)
    line = info.value.line()
    assert "\n" not in line
    assert str(path) in line
    return line


def test_list_profiles_is_sorted_and_complete():
    assert list_profiles() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_profile_loads_and_is_complete(name):
    hw = load_hardware(name)
    assert isinstance(hw, Hardware)
    assert hw.name == name
    assert hw.rate("cuda", "fp32") > 0 and hw.rate("sfu", "exp") > 0
    assert hw.limits.sms > 0
    # Every number in the file has a source; sources name the same paths the docs use.
    assert "clock" in hw.sources
    for level in hw.levels:
        assert f"levels.{level.name}.capacity" in hw.sources
        assert f"levels.{level.name}.bandwidth" in hw.sources
    for unit, kinds in hw.rates.items():
        for kind in kinds:
            assert f"rates.{unit}.{kind}" in hw.sources
    assert all(source.kind in ("datasheet", "measured", "derived", "abstract")
               for source in hw.sources.values())  # fmt: skip


@pytest.mark.parametrize("name", GPUS)
def test_gpu_profiles_share_level_names_and_take_limits_from_levels(name):
    hw = load_hardware(name)
    assert hw.level_names() == ["hbm", "l2", "smem", "rf"]
    assert hw.level("smem").capacity_bytes == hw.limits.smem_per_block_bytes
    assert hw.level("smem").capacity_bytes <= hw.limits.smem_per_sm_bytes
    assert hw.level("l2").capacity_bytes == hw.limits.l2_bytes
    assert hw.level("rf").capacity_bytes == 65536 * 4
    assert hw.arch.startswith("sm_")


def test_loading_is_cached():
    # Each built-in profile is parsed once a process (about 5 ms each, cold), then shared.
    _load_builtin.cache_clear()
    for _ in range(3):
        for name in BUILTINS:
            load_hardware(name)
    assert _load_builtin.cache_info().misses == len(BUILTINS)
    assert load_hardware("h100") is load_hardware("h100")


def test_hardware_to_dict_is_json_ready():
    data = hardware_to_dict(load_hardware("h200"))
    text = json.dumps(data)
    assert data["ncdc_hardware"] == 1
    assert data["levels"][0]["name"] == "hbm"
    assert data["sources"]["levels.l2.bandwidth"]["kind"] == "measured"
    assert data["limits"]["sms"] == 132
    assert "rates" in json.loads(text)


def test_unknown_profile_name_lists_the_choices():
    with pytest.raises(HardwareError) as info:
        load_hardware("h1000")
    line = info.value.line()
    assert "unknown hardware profile 'h1000'" in line
    assert "a100, b200, h100, h200, l40s, napkin, rtx4090" in line


def test_missing_file_is_a_hardware_error(tmp_path):
    with pytest.raises(HardwareError, match="cannot read hardware profile"):
        load_hardware(tmp_path / "nope.yaml")


def test_user_file_loads_by_path_and_by_string(tmp_path):
    data = h100_data()
    data["name"] = "my-h100"
    path = write_profile(tmp_path, data)
    assert load_hardware(path).name == "my-h100"
    assert load_hardware(str(path)).rate("tensor", "bf16") == load_hardware("h100").rate(
        "tensor", "bf16"
    )


def test_sparse_rate_quoted_as_dense_is_rejected(tmp_path):
    data = h100_data()
    data["rates"]["tensor"]["bf16"]["value"] = 1978.9  # the datasheet's 2:4-sparse figure
    line = load_error(tmp_path, data)
    assert "rates.tensor.bf16" in line
    assert "is 2.00x the 989.4 TFLOP/s of" in line
    assert "132 SMs x 4096 per SM per clock x 1830 MHz" in line
    assert "sparse" in line


def test_hmma_cycles_are_optional_and_positive(tmp_path):
    # Hopper's tensor peak (1024 FLOPs per clock per sub-partition: an HMMA.16816 of 4096
    # FLOPs every 4 cycles) needs wgmma; under mma.sync the profile's 6 cycles an HMMA give
    # 4 / 6 of it. Ampere's mma.sync is its full-rate path: no key, share 1.
    h100 = load_hardware("h100")
    assert h100.hmma_cycles == 6
    assert h100.mma_sync_share == pytest.approx(4 / 6, rel=1e-3)
    assert load_hardware("a100").mma_sync_share == 1.0
    data = h100_data()
    del data["hmma_cycles"]
    write_profile(tmp_path, data)
    assert load_hardware(tmp_path / "my.yaml").mma_sync_share == 1.0
    data["hmma_cycles"] = {"value": 0, "unit": "cycle", "source": "x", "kind": "measured"}
    assert "hmma_cycles.value: expected a positive number, found 0" in load_error(tmp_path, data)


def test_peak_within_three_percent_passes_and_beyond_fails(tmp_path):
    data = h100_data()
    data["rates"]["cuda"]["fp32"]["value"] = 66.9 * 1.02
    write_profile(tmp_path, data)
    load_hardware(tmp_path / "my.yaml")
    data["rates"]["cuda"]["fp32"]["value"] = 66.9 * 1.05
    assert "rates.cuda.fp32" in load_error(tmp_path, data)


def test_peak_at_boost_clock_needs_quoted_at(tmp_path):
    data = h100_data()
    del data["rates"]["tensor"]["bf16"]["quoted_at_mhz"]  # 989.4 is 0.92x of 1980 MHz peak
    assert "quoted_at_mhz" in load_error(tmp_path, data)


def test_missing_field_names_the_yaml_path(tmp_path):
    data = h100_data()
    del data["levels"][2]["bandwidth"]
    line = load_error(tmp_path, data)
    assert "levels[2]: missing field 'bandwidth'" in line


def test_unknown_key_names_the_yaml_path(tmp_path):
    data = h100_data()
    data["limits"]["sms"]["note"] = "x"
    line = load_error(tmp_path, data)
    assert "limits.sms.note: unknown key 'note'" in line
    assert "allowed keys are value, unit, source, kind" in line


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(ncdc_hardware=2), "ncdc_hardware: expected format version 1"),
        (lambda d: d.update(arch="hopper"), "arch: expected 'sm_NN'"),
        (lambda d: d["clock"].update(unit="MHZ"), "clock.unit: expected a unit of Hz"),
        (lambda d: d["clock"].update(value=-1), "clock.value: expected a positive number"),
        (lambda d: d["clock"].update(value="fast"), "clock.value: expected a number"),
        (lambda d: d["clock"].update(kind="guess"), "clock.kind: expected a source kind"),
        (lambda d: d["clock"].update(source=""), "clock.source: expected a non-empty string"),
        (lambda d: d["limits"]["sms"].update(value=132.5), "expected a whole number of SM"),
        (lambda d: d["levels"][1]["bandwidth"].update(unit="TFLOP/s"), "expected a unit of B/s"),
        (lambda d: d["levels"][0].update(per="gpc"), "levels.hbm.per: expected one of device"),
        (lambda d: d["levels"].reverse(), "no faster than"),
        # a capacity is stated once: the smem level's is the per-block limit
        (
            lambda d: d["limits"].update(smem_per_block=d["limits"]["smem_per_sm"]),
            "limits.smem_per_block: unknown key",
        ),
        (lambda d: d["limits"].update(l2=d["limits"]["smem_per_sm"]), "limits.l2: unknown key"),
        (lambda d: d["levels"][2]["capacity"].update(value=229), "exceeds that per SM"),
        (lambda d: d["rates"].update(tensor={}), "rates.tensor: expected at least one rate"),
        (lambda d: d["rates"]["tensor"].update(fp4=d["rates"]["tensor"]["bf16"]), "'fp4'"),
        (lambda d: d.update(levels=[]), "levels: expected a non-empty list"),
        (lambda d: d["levels"][1].update(name="hbm"), "level 'hbm' appears twice"),
        (lambda d: d["levels"][1].update(name="tensor"), "has the name of a compute unit"),
        (lambda d: d["levels"][1].update(name="power"), "has the name of a compute unit"),
        (lambda d: d["levels"][1].update(name="issue"), "has the name of a compute unit"),
        (lambda d: d.update(limits=[1]), "limits: expected a mapping, found a list"),
    ],
)
def test_bad_profiles_are_rejected(tmp_path, change, expected):
    data = h100_data()
    change(data)
    assert expected in load_error(tmp_path, data)


def test_malformed_yaml_is_a_hardware_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(HardwareError, match="not valid YAML"):
        load_hardware(path)


def test_numbers_written_without_a_dot_are_read(tmp_path):
    # PyYAML reads 141e9 as a string (YAML 1.1); profiles may still write it.
    path = tmp_path / "h.yaml"
    text = (PROFILES_DIR / "h200.yaml").read_text()
    path.write_text(text.replace("{value: 141, unit: GB,", "{value: 141e9, unit: B,"))
    assert load_hardware(path).level("hbm").capacity_bytes == 141_000_000_000


def test_achievable_above_the_datasheet_is_refused(tmp_path):
    data = yaml.safe_load((PROFILES_DIR / "a100.yaml").read_text())
    data["achievable"]["bandwidth"]["hbm"]["value"] = 3.0
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(HardwareError, match="achievable.bandwidth.hbm"):
        load_hardware(tmp_path / "my.yaml")


# Issue 31: a `--hardware` file that is a FIFO hung; /dev/zero and 10**400 ended in a
# traceback (exit 70).
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge-int", "deep"])
def test_a_hostile_profile_is_one_line_and_exit_2(tmp_path, kind):
    path = tmp_path / "gpu.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge-int":
        text = (PROFILES_DIR / "h100.yaml").read_text()
        path.write_text(re.sub(r"value: [0-9.e]+", "value: 1" + "0" * 400, text, count=1))
    else:
        path.write_text("name: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = support.ncdc("cost", support.MATMUL, "--hardware", str(path), timeout=60)
    support.assert_error(result, 2, contains=str(path))


@pytest.mark.parametrize("duty", [0.0, 1.2, -0.5])
def test_a_power_duty_outside_0_1_is_refused(tmp_path, duty):
    data = yaml.safe_load((PROFILES_DIR / "h200.yaml").read_text())
    data["achievable"]["power_duty"]["value"] = duty
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(HardwareError, match="achievable.power_duty"):
        load_hardware(tmp_path / "my.yaml")
