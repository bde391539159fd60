"""Failures with their documented codes: a baseline made for something else, empty or
malformed is exit 2; tolerances are strict; two specs with one name are refused; a folder
compile goes past a refused diagram and exits with the worst code; one spec's outputs are
written together or not at all; -o at a file is exit 2 in one line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ncdc.errors import UsageError
from ncdc.verify.gate import check_made_for, parse_tolerance, read_baseline
from tests.support import MATMUL, SOFTMAX, assert_error, ncdc, ncdc_version


@pytest.mark.parametrize(
    ("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("0", 0.0), ("0%", 0.0), ("150%", 1.5)]
)
def test_tolerance_accepts_percent_or_fraction(text, value):
    assert parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "1", "abc", "nan", "nan%", "inf", "-1%", "-0.1", "", "%"])
def test_tolerance_refuses_the_ambiguous_and_the_meaningless(text):
    with pytest.raises(UsageError) as e:
        parse_tolerance(text)
    assert e.value.exit_code == 2 and "--tolerance" in e.value.line()


def write_baseline(path: Path, **fields) -> Path:
    data = {
        "format": "ncdc.baseline/1",
        "ncdc_version": ncdc_version(),
        "hardware": ["h200"],
        "arch": ["sm_90a"],
        "diagrams": {"matmul": {"predicted_time_s": 1.0, "hbm_bytes": 10**12}},
    }
    data.update(fields)
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return path


@pytest.mark.parametrize(
    ("fields", "contains"),
    [
        ({"diagrams": {}}, "no diagrams"),
        ({"diagrams": []}, "no diagrams"),
        ({"diagrams": {"matmul": {"predicted_time_s": "fast"}}}, "as numbers"),
        ({"diagrams": {"matmul": None}}, "as numbers"),
    ],
    ids=["empty", "list", "string-figure", "null-entry"],
)
def test_empty_or_malformed_baseline_is_refused(tmp_path, fields, contains):
    path = write_baseline(tmp_path / "b.json", **fields)
    with pytest.raises(UsageError, match=contains):
        read_baseline(path)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"hardware": ["h100"]}, "hardware"),
        ({"arch": ["sm_80"]}, "arch"),
        ({"ncdc_version": "0.0.1"}, "ncdc_version"),
        ({"ncdc_version": None}, "ncdc_version"),
    ],
    ids=["profile", "arch", "version", "unrecorded-version"],
)
def test_baseline_made_for_something_else_exits_2(tmp_path, fields, field):
    path = write_baseline(tmp_path / "b.json", **fields)
    result = ncdc("check", MATMUL, "--baseline", str(path))
    line = assert_error(result, 2, contains=field)
    assert "regenerate" in line
    current = {"ncdc_version": ncdc_version(), "hardware": ["h200"], "arch": ["sm_90a"]}
    with pytest.raises(UsageError):
        check_made_for(current, json.loads(path.read_text()), path)


def test_a_matching_baseline_passes(tmp_path):
    path = write_baseline(tmp_path / "b.json")
    result = ncdc("check", MATMUL, "--baseline", str(path))
    assert result.returncode == 0, result.stderr


def twin_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    shutil.copy(SOFTMAX, folder / "a.yaml")
    shutil.copy(SOFTMAX, folder / "b.yaml")  # same `name: softmax`
    return folder


@pytest.mark.parametrize("command", ["cost", "compile"])
def test_two_specs_with_one_name_are_refused(tmp_path, command):
    folder = twin_folder(tmp_path)
    args = [command, str(folder)]
    if command == "compile":
        args += ["--arch", "sm_90a", "-o", str(tmp_path / "out")]
    line = assert_error(ncdc(*args), 2, contains="softmax")
    assert "a.yaml" in line and "b.yaml" in line
    assert not (tmp_path / "out").exists()


def test_baseline_of_a_folder_with_twins_is_refused(tmp_path):
    folder = twin_folder(tmp_path)
    assert_error(ncdc("check", str(folder), "--baseline", "x.json"), 2, contains="x.json")
    path = write_baseline(tmp_path / "b.json")
    result = ncdc("check", str(folder), "--baseline", str(path))
    assert result.returncode == 2 and not result.stdout and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()  # the twin named, then the count, as check prints it
    assert lines[0].startswith("error: two specs name their diagram 'softmax': ")
    assert lines[1:] == ["1 of 2 specs valid"]


# Issue 31: the safe reading of turn two covered specs only. A baseline that is a FIFO
# hung `ncdc check`; /dev/zero, a 200,000-deep JSON or a 10**400 ended in a traceback
# (exit 70); a figure of 1e308 let the gate pass anything.


def _hostile_baseline(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "b.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    else:
        figure = {"huge-int": "1" + "0" * 400, "huge-time": "1e308", "inf": "1e999"}[kind]
        entry = {"matmul": {"predicted_time_s": 12345.5, "hbm_bytes": 10**12}}
        text = write_baseline(path, diagrams=entry).read_text()
        path.write_text(text.replace("12345.5", figure))
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "huge-int", "huge-time", "inf"])
def test_a_hostile_baseline_is_one_line_and_exit_2(tmp_path, kind):
    path = _hostile_baseline(tmp_path, kind)
    result = ncdc("check", MATMUL, "--baseline", str(path), timeout=60)
    assert_error(result, 2, contains=str(path))
