"""ncdc.cost, ncdc.check and ncdc.compile: the commands as functions, returning exactly what
the command line prints with --format json (the command line calls them)."""

from __future__ import annotations

import json

import pytest

import ncdc
from ncdc.backends import nvrtc
from ncdc.errors import SpecError
from tests import support

SOFTMAX = support.SOFTMAX


def test_cost_is_what_ncdc_cost_prints() -> None:
    cli = support.ncdc("cost", SOFTMAX, "--set", "m=512", "--set", "n=1000", "--format", "json")
    assert cli.returncode == 0, cli.stderr
    assert ncdc.cost(SOFTMAX, sizes={"m": 512, "n": 1000}) == json.loads(cli.stdout)


def test_cost_takes_yaml_text_a_diagram_and_overrides() -> None:
    text = (support.DIAGRAMS / "softmax.yaml").read_text()
    by_path = ncdc.cost(SOFTMAX, sizes={"m": 64}, hardware="a100")
    by_text = ncdc.cost(text, sizes={"m": 64}, hardware="a100")
    assert by_text["source"] == "<string>"
    assert {**by_text, "source": by_path["source"]} == by_path
    diagram = ncdc.load(SOFTMAX).diagram
    assert ncdc.cost(diagram, sizes={"m": 64}, hardware="a100") == by_path
    plain = ncdc.cost(SOFTMAX, hardware="a100")  # at its own sizes: bound by HBM
    faster = ncdc.cost(SOFTMAX, hardware="a100", hw=["hbm.bandwidth=4e12"])
    assert faster["predicted_time_s"] < plain["predicted_time_s"]


def test_check_is_what_ncdc_check_prints(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (support.DIAGRAMS / "softmax.yaml").read_text().replace("axes: [m, n]", "axes: [m, q]", 1)
    )
    cli = support.ncdc("check", SOFTMAX, str(bad), "--format", "json")
    assert cli.returncode != 0
    got = ncdc.check([SOFTMAX, bad])
    assert got == json.loads(cli.stdout)
    assert [c["ok"] for c in got["specs"]] == [True, False]


def test_bad_specs_raise_the_error_the_command_prints(tmp_path) -> None:
    with pytest.raises(SpecError, match="unknown axis"):
        ncdc.cost("ncdc: 1\nname: x\naxes: {m: 4}\ninputs: {X: {axes: [q], dtype: fp32}}\n"
                  "ops: ['Y = exp(X)']\noutputs: [Y]\n")  # fmt: skip


@pytest.mark.skipif(not nvrtc.available(), reason="compiling needs NVRTC")
def test_compile_writes_what_ncdc_compile_writes(tmp_path) -> None:
    report = ncdc.compile(SOFTMAX, out=tmp_path / "api", sizes={"m": 33}, arch="sm_80")
    cli = support.ncdc("compile", SOFTMAX, "-o", str(tmp_path / "cli"), "--set", "m=33",
                       "--arch", "sm_80", "--format", "json")  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert _without_paths(report) == _without_paths(json.loads(cli.stdout))
    for suffix in (".cu", ".json"):
        api, made = (tmp_path / d / f"softmax{suffix}" for d in ("api", "cli"))
        assert api.read_bytes() == made.read_bytes(), suffix


def _without_paths(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("files", "cached", "compile_s")}
