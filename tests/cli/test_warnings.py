"""Warnings on the command line: `ncdc check` and `ncdc cost` name a broadcast that makes
an axis nothing asked for (ncdc.language.broadcast) on stderr, `-q` keeps them, JSON and
GitHub annotations carry them, and `cost --abstract` warns of a tensor HBM cannot hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncdc import output
from ncdc.cli.main import main
from tests import support

TRAP = """ncdc: 1
name: trap
axes: {m: 64, n: 32, k: 16}
inputs:
  C: {axes: [m, n], dtype: bf16}
  A: {axes: [m, k], dtype: bf16}
ops:
  - D = add(C, A)
outputs: [D]
"""
WARNING = "add(C, A) broadcasts to [m, n, k]: k comes from A only"


@pytest.fixture
def trap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(output.VERBOSITY, "level", 0)  # -q below is undone after the test
    path = tmp_path / "trap.yaml"
    path.write_text(TRAP)
    return path


def test_cost_warns_of_the_broadcast_even_when_quiet(trap: Path, capsys) -> None:
    main(["-q", "cost", str(trap), "--format", "json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["bound"]  # the spec is priced: a warning, not an error
    (line,) = captured.err.splitlines()
    assert line.startswith(f"warning: {trap}:8: {WARNING}")


def test_cost_refusing_the_grown_tensor_still_names_the_broadcast_first(tmp_path: Path) -> None:
    """At sizes where the broadcast's result cannot fit in HBM, plain `cost` refuses it; the
    warning that says why comes before the error (it came only with --abstract)."""
    path = tmp_path / "trap.yaml"
    path.write_text(TRAP.replace("{m: 64, n: 32, k: 16}", "{m: 8192, n: 8192, k: 4096}"))
    result = support.ncdc("cost", str(path), "-q")
    assert result.returncode == 2 and not result.stdout
    warning, error = result.stderr.splitlines()
    assert warning.startswith(f"warning: {path}:8: {WARNING}")
    assert error.startswith(f"error: {path}: D (bf16 [m, n, k] = 8192 x 8192 x 4096) is 512.00")


def test_check_warns_in_every_format(trap: Path, capsys) -> None:
    main(["check", str(trap)])
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: {trap}:8: {WARNING}") and err[-1] == "1 of 1 specs valid"
    main(["check", str(trap), "--format", "json"])
    (spec,) = json.loads(capsys.readouterr().out)["specs"]
    assert spec["ok"] and spec["warnings"][0].startswith(f"{trap}:8: {WARNING}")
    main(["check", str(trap), "--format", "github"])
    out = capsys.readouterr().out
    assert out.startswith(f"::warning file={trap},line=8::{trap}:8: {WARNING}")


def test_cost_abstract_prices_a_tensor_hbm_cannot_hold_and_says_so(capsys) -> None:
    spec = support.UNBUILDABLE / "outer_product_over_hbm.yaml"
    main(["cost", str(spec), "--abstract", "--format", "json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["abstract"] is True
    (line,) = captured.err.splitlines()
    assert line == (
        f"warning: {spec}: D (bf16 [m, n, k] = 8192 x 8192 x 4096) is 512.00 GiB, more than "
        "the 131.32 GiB of hbm on h200: no kernel on this GPU can run it"
    )
