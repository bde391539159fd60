"""Every table is readable at 80 and 120 columns: no line wider than the terminal, no
number cut short (`9.54e-…`), no word split across lines (each word at 80 columns is a
word the 120-column layout shows whole). Each command runs in a subprocess at that width
(COLUMNS, which ncdc honours in a pipe too); bench, which needs a GPU, is drawn from the
test fakes' result through the same layout."""

from __future__ import annotations

import io
import re
import shutil

import pytest

from ncdc.output import fit_width
from tests.support import DIAGRAMS, SOFTMAX, ncdc

WIDTHS = (80, 120)

# A number followed by the ellipsis rich puts where it cut a cell: "9.54e-…", "1,02…"
CUT_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d.,]*(?:e[-+]?\d*)?…")
BOX = re.compile(r"[\u2500-\u257f]")  # box-drawing characters
WORD = re.compile(r"[^\W\d_]{2,}")  # letters only: numbers vary (timings), words must not


def _nvrtc() -> bool:
    from ncdc.backends import nvrtc

    return nvrtc.available()


def _commands(tmp: str) -> dict[str, list[str]]:
    small = ["--set", "m=4", "--set", "n=64"]
    return {
        "cost": ["cost", str(DIAGRAMS / "attention.yaml"), "--top-k", "3"],
        "cost-folder": ["cost", str(DIAGRAMS)],
        "compile": ["compile", str(DIAGRAMS / "attention.yaml"), "-o", f"{tmp}/out"],
        "run": ["run", SOFTMAX, *small, "--counters"],
        "show": ["show", SOFTMAX],
        "check": ["check", "--format", "json", SOFTMAX],
        "hardware": ["hardware"],
        "hardware-h200": ["hardware", "h200"],
        "cache-info": ["cache", "info"],
        "env": ["env"],
        "grad": ["grad", str(DIAGRAMS / "rmsnorm.yaml"), "--cost", "--set", "m=64"],
        "tune-cpu": ["tune", SOFTMAX, "--backend", "cpu", *small, "--top-k", "2"],
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, int], str]:
    """Each command's stdout at each width (one cache for all: the emulator builds once)."""
    tmp = str(tmp_path_factory.mktemp("widths"))
    env = {"NCDC_CACHE": f"{tmp}/cache"}
    found = {}
    for name, args in _commands(tmp).items():
        if name == "compile" and not _nvrtc():
            continue
        for width in WIDTHS:
            shutil.rmtree(f"{tmp}/out", ignore_errors=True)
            result = ncdc(*args, env={**env, "COLUMNS": str(width)})
            assert result.returncode == 0, (name, result.stderr)
            found[name, width] = result.stdout
    return found


def check_layout(text: str, width: int) -> None:
    """No line past `width`, and no number the layout cut short."""
    for line in text.splitlines():
        assert len(line) <= width, f"{len(line)} columns: {line!r}"
        assert not CUT_NUMBER.search(line), f"a number cut short: {line!r}"


def words(text: str) -> set[str]:
    return set(WORD.findall(BOX.sub(" ", text)))


@pytest.mark.parametrize("name", list(_commands("")))
def test_every_command_fits_80_and_120_columns(outputs, name):
    if (name, 80) not in outputs:
        pytest.skip("NVRTC is not installed")
    for width in WIDTHS:
        assert outputs[name, width].strip(), name
        check_layout(outputs[name, width], width)
    split = words(outputs[name, 80]) - words(outputs[name, 120])
    assert not split, f"words split across lines at 80 columns: {sorted(split)}"


def test_compile_shortens_long_kernel_names_but_json_keeps_them(outputs, tmp_path):
    if ("compile", 80) not in outputs:
        pytest.skip("NVRTC is not installed")
    import json

    args = ["compile", str(DIAGRAMS / "attention.yaml"), "-o", str(tmp_path)]
    full = json.loads(ncdc(*args, "--format", "json").stdout)["kernels"][0]["name"]
    assert len(full) > 40 and full not in outputs["compile", 120]
    assert "…" in outputs["compile", 80]
    verbose = ncdc(*args, "-v", env={"COLUMNS": "200"})
    assert full in verbose.stdout


def _render(renderable, width: int) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(fit_width(renderable, console))
    return console.file.getvalue()


def test_bench_table_fits_80_and_120_columns():
    from ncdc.measure.bench import bench_table
    from tests.measure.test_bench import a_result

    texts = {w: _render(bench_table([a_result(), a_result(name="softmax")]), w) for w in WIDTHS}
    for width, text in texts.items():
        check_layout(text, width)
    assert "softmax" in texts[80] and not words(texts[80]) - words(texts[120])


def test_a_table_too_wide_for_the_terminal_becomes_records():
    from rich.table import Table

    table = Table(title="t")
    for col in ("name", "err", "tol"):
        table.add_column(col)
    table.add_row("Y", "9.536743164062512345678901e-07", "0.02")
    narrow = _render(table, 40)  # the table needs 48 columns at its narrowest
    check_layout(narrow, 40)
    assert "9.536743164062512345678901e-07" in narrow and "tol: 0.02" in " ".join(narrow.split())
    wide = _render(table, 80)
    assert "┃ name" in wide  # it fits: still a table
