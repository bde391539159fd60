"""Loading a spec (ncdc.language.load): files and text, `--set` sizes, names unique."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ncdc.errors import SpecError
from ncdc.language.load import find_specs, load_diagram, parse_assignments
from tests import support

ROOT = support.ROOT


@pytest.mark.parametrize("path", sorted((ROOT / "diagrams").glob("*.yaml")), ids=lambda p: p.stem)
def test_library_diagrams_load(path):
    d = load_diagram(path)
    assert d.name == path.stem
    assert d.doc


def test_set_overrides_sizes():
    d = load_diagram(ROOT / "diagrams/matmul.yaml", parse_assignments(["m=7", "k=65"]))
    assert d.axes == {"m": 7, "n": 4096, "k": 65}


@pytest.mark.parametrize(
    "item, message",
    [
        ("m", "--set: expected AXIS=SIZE, found 'm' (hint: --set q=128)"),
        ("m=x", "--set: expected a whole number for 'm', found 'x'"),
        ("m=0", "--set: expected a size from 1 to 2147483647 for 'm', found 0"),
    ],
)
def test_bad_assignments(item, message):
    with pytest.raises(SpecError) as info:
        parse_assignments([item])
    assert info.value.line() == message


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ncdc", *args], capture_output=True, text=True, cwd=cwd
    )


def test_unknown_set_axis_and_version():
    result = run_cli("show", "diagrams/matmul.yaml", "--set", "z=3")
    assert result.returncode == 2
    assert "unknown axis 'z'" in result.stderr
    assert run_cli("--version").stdout.startswith("ncdc ")


def test_find_specs_lists_a_folders_yaml_files_sorted(tmp_path) -> None:
    (tmp_path / "b.yaml").write_text("x")
    (tmp_path / "a.yaml").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    assert [p.name for p in find_specs([tmp_path])] == ["a.yaml", "b.yaml"]
    assert len(find_specs([support.DIAGRAMS])) == len(list(support.DIAGRAMS.glob("*.yaml")))
