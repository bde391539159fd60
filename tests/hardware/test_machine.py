"""Hardware profiles: every built-in loads and checks, peaks agree with their per-clock
figures, bad profiles and bad overrides fail with one clear line naming the file and path."""

from __future__ import annotations

import json
import time
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
from ncdc.hardware.overrides import apply_overrides

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


# ---------------------------------------------------------------------------- built-ins


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


def test_h100_numbers_from_the_whitepaper():
    hw = load_hardware("h100")
    # 132 SMs x 4096 FLOP/clock/SM x 1830 MHz = 989.43 TFLOP/s (dense bf16, whitepaper table 3)
    peak = 132 * 4096 * 1830e6
    assert peak == pytest.approx(989.43e12, rel=1e-5)
    assert hw.rate("tensor", "bf16") == pytest.approx(peak, rel=1e-3)
    # 128 B/clock/SM x 132 SMs x 1980 MHz = 33.45 TB/s of shared memory bandwidth
    assert hw.bandwidth("smem") == pytest.approx(128 * 132 * 1980e6, rel=1e-3)
    # 227 KiB opt-in shared memory per block; 50 MiB L2
    assert hw.level("smem").capacity_bytes == 227 * 1024
    assert hw.limits.l2_bytes == 50 * 2**20
    assert hw.clock_hz == 1980e6


def test_a100_peak_is_at_boost_clock():
    # 108 SMs x 2048 FLOP/clock/SM x 1410 MHz = 311.9 TFLOP/s
    assert load_hardware("a100").rate("tensor", "bf16") == pytest.approx(108 * 2048 * 1410e6, 3e-3)


def test_h200_sfu_rate():
    # 16 exponentials/clock/SM x 132 SMs x 1980 MHz = 4.18e12 exp/s
    assert load_hardware("h200").rate("sfu", "exp") == pytest.approx(4.18e12, rel=1e-3)


def test_ridge_point_by_hand():
    hw = load_hardware("h100")
    # 989.4e12 FLOP/s / 3.35e12 B/s = 295.3 FLOP/B: a bf16 kernel must do ~295 FLOPs per byte
    # it reads from HBM to be compute-bound.
    assert hw.ridge_point("tensor", "bf16", "hbm") == pytest.approx(295.34, rel=1e-3)
    # napkin: 100e12 FLOP/s / 1e12 B/s = 100 FLOP/B at l0, 10 at l1.
    napkin = load_hardware("napkin")
    assert napkin.ridge_point("tensor", "bf16", "l0") == pytest.approx(100)
    assert napkin.ridge_point("tensor", "bf16", "l1") == pytest.approx(10)


def test_napkin_is_the_abstract_two_level_machine():
    hw = load_hardware("napkin")
    assert hw.arch == "none"
    assert hw.level_names() == ["l0", "l1"]
    assert hw.level("l1").capacity_bytes == 100 * 1024
    assert hw.level("l1").per == "sm" and hw.level("l0").per == "device"
    assert {source.kind for source in hw.sources.values()} == {"abstract"}


def test_loading_is_cached_and_cheap():
    # All seven parse in about 30 ms cold; the bound leaves room for a slow CI machine. CPU
    # time, not wall time: on a shared machine under load the wall time was seen at 0.73 s.
    _load_builtin.cache_clear()
    start = time.process_time()
    for name in BUILTINS:
        load_hardware(name)
    assert time.process_time() - start < 0.25
    assert load_hardware("h100") is load_hardware("h100")


def test_hardware_is_hashable():
    assert hash(load_hardware("h100")) != hash(load_hardware("a100"))


def test_hardware_to_dict_is_json_ready():
    data = hardware_to_dict(load_hardware("h200"))
    text = json.dumps(data)
    assert data["ncdc_hardware"] == 1
    assert data["levels"][0]["name"] == "hbm"
    assert data["sources"]["levels.l2.bandwidth"]["kind"] == "measured"
    assert data["limits"]["sms"] == 132
    assert "rates" in json.loads(text)


# ---------------------------------------------------------------------------- lookups


def test_unknown_profile_name_lists_the_choices():
    with pytest.raises(HardwareError) as info:
        load_hardware("h1000")
    line = info.value.line()
    assert "unknown hardware profile 'h1000'" in line
    assert "a100, b200, h100, h200, l40s, napkin, rtx4090" in line


def test_missing_file_is_a_hardware_error(tmp_path):
    with pytest.raises(HardwareError, match="cannot read hardware profile"):
        load_hardware(tmp_path / "nope.yaml")


def test_unknown_level_and_rate_list_the_choices():
    hw = load_hardware("h100")
    with pytest.raises(HardwareError, match="levels are hbm, l2, smem, rf"):
        hw.level("l3")
    with pytest.raises(HardwareError, match="units are cuda, sfu, tensor"):
        hw.rate("vector", "fp32")
    with pytest.raises(HardwareError, match="tensor kinds are bf16, fp16, fp8_e4m3"):
        hw.rate("tensor", "fp4")
    with pytest.raises(HardwareError, match="no tensor rate for 'fp8_e4m3'"):
        load_hardware("a100").rate("tensor", "fp8_e4m3")  # Ampere has no fp8 tensor path


# ---------------------------------------------------------------------------- user files


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


# ---------------------------------------------------------------------------- overrides


def test_overrides_replace_levels_and_keep_the_original():
    hw = load_hardware("h100")
    new = apply_overrides(hw, ["smem.capacity=233472", "hbm.bandwidth=4.8e12"])
    assert new.level("smem").capacity_bytes == 233472
    assert new.limits.smem_per_block_bytes == 233472  # the limit the level states follows
    assert new.bandwidth("hbm") == 4.8e12
    assert new.sources["levels.hbm.bandwidth"].kind == "override"
    assert hw.level("smem").capacity_bytes == 227 * 1024
    assert hw.sources["levels.hbm.bandwidth"].kind == "datasheet"


def test_napkin_l1_override():
    hw = apply_overrides(load_hardware("napkin"), ["l1.capacity=65536"])
    assert hw.level("l1").capacity_bytes == 65536
    assert isinstance(hw.level("l1").capacity_bytes, int)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("smem.capacity", "cannot read hardware override 'smem.capacity'"),
        ("smem=5", "cannot read hardware override"),
        ("l3.capacity=5", "unknown level 'l3' in hardware override 'l3.capacity=5'"),
        ("smem.size=5", "unknown field 'size' in hardware override"),
        ("smem.capacity=-5", "expected a positive whole number of bytes"),
        ("smem.capacity=1.5", "expected a positive whole number of bytes"),
        ("hbm.bandwidth=0", "expected a positive number"),
        ("hbm.bandwidth=fast", "expected a positive number"),
        ("hbm.bandwidth=inf", "expected a positive number"),
    ],
)
def test_bad_overrides_are_one_line_with_a_hint(override, expected):
    with pytest.raises(HardwareError) as info:
        apply_overrides(load_hardware("h100"), [override])
    line = info.value.line()
    assert expected in line
    assert "hint: write LEVEL.FIELD=NUMBER with LEVEL one of hbm, l2, smem, rf" in line
    assert "FIELD capacity|bandwidth" in line
    assert "\n" not in line


def test_every_gpu_profile_has_achievable_figures_with_sources():
    # Sustained clock, measured copy bandwidth of HBM, launch latency: each below its
    # datasheet figure and with a source; the cost model prices with them.
    for name in list_profiles():
        hw = load_hardware(name)
        if not hw.is_gpu:
            assert hw.launch_s == 0 and hw.achieved_bandwidth(hw.levels[0].name) == (
                hw.levels[0].bandwidth_bytes_per_s
            )
            continue
        top = hw.levels[0].name
        for path in ("achievable.clock", f"achievable.bandwidth.{top}", "achievable.launch"):
            assert hw.sources[path].source, (name, path)
        assert 0 < hw.achieved_bandwidth(top) <= hw.levels[0].bandwidth_bytes_per_s
        assert 0 < hw.launch_s < 1e-5
    # A100: 1200 of 1410 MHz under load (0.851), so 312 -> 265.5 TFLOP/s; HBM 1.8 TB/s.
    a100 = load_hardware("a100")
    assert a100.achieved_rate("tensor", "bf16") == pytest.approx(312e12 * 1200 / 1410)
    assert a100.achieved_bandwidth("hbm") == 1.8e12
    # H100: tensor peaks are quoted at 1830 MHz, the sustained clock: they stand; SMEM's
    # 128 B/clock/SM scales from the 1980 MHz boost to 1830.
    h100 = load_hardware("h100")
    assert h100.achieved_rate("tensor", "bf16") == h100.rate("tensor", "bf16")
    assert h100.achieved_bandwidth("smem") == pytest.approx(h100.bandwidth("smem") * 1830 / 1980)


def test_achievable_above_the_datasheet_is_refused(tmp_path):
    data = yaml.safe_load((PROFILES_DIR / "a100.yaml").read_text())
    data["achievable"]["bandwidth"]["hbm"]["value"] = 3.0
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(HardwareError, match="achievable.bandwidth.hbm"):
        load_hardware(tmp_path / "my.yaml")
