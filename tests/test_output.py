"""One way to report: data on stdout, messages on stderr (ncdc.output)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ncdc import errors, output


def test_json_output_is_strict(capsys) -> None:
    output.emit({"x": np.float64(1.5), "s": {1}}, "json", table=lambda: "unused")
    assert json.loads(capsys.readouterr().out) == {"x": 1.5, "s": [1]}
    assert output.json_number(float("nan")) is None and output.json_number(2) == 2.0
    with pytest.raises(errors.UsageError):
        output.check_format("yaml")


def _render(renderable, width: int) -> str:
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(output.fit_width(renderable, console))
    return console.file.getvalue()


def test_narrow_columns_get_all_they_want_first() -> None:
    from rich.measure import Measurement

    # three columns of 4..4, 5..9 and 10..40 characters with 10 to spare: the first needs
    # nothing, the second takes its 4, the widest the remaining 6
    ranges = [Measurement(4, 4), Measurement(5, 9), Measurement(10, 40)]
    assert output._share(ranges, 10) == [4, 9, 16]


def test_a_table_wraps_between_words_or_becomes_records() -> None:
    from rich.table import Table

    table = Table(title="t")
    table.add_column("label")
    table.add_column("value")
    table.add_row("predicted time", "843.83 µs (no overlap: 2.001 ms)")
    wraps = _render(table, 30)
    assert "843.83" in wraps and "2.001" in wraps and "…" not in wraps
    records = _render(table, 18)
    assert "label:" in records and "value:" in records and "…" not in records


def test_a_caption_wraps_between_phrases_so_counts_keep_their_units() -> None:
    from rich.table import Table

    units = ("tensor", "integer", "barrier", "control", "memory")
    mix = ", ".join(f"{n} {unit}" for n, unit in enumerate(units, 40))
    for width in (30, 50, 80):
        table = Table(title="t")
        table.add_column("kernel")
        table.add_row("k")
        table.caption = (
            f"some_long_kernel_name main loop: {mix}; tensor-bound, tensor pipe 97% busy"
        )
        lines = _render(table, width).splitlines()
        assert all(len(line) <= width for line in lines)
        text = "\n".join(line.strip() for line in lines)
        for n, unit in enumerate(units, 40):  # never "42" at a line's end and "barrier" below
            assert f"{n} {unit}" in text, (width, text)
        assert "tensor pipe 97% busy" in text


def test_a_pipe_honours_columns(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    output.stdout.cache_clear()
    try:
        assert output.stdout().width == 80
    finally:
        output.stdout.cache_clear()


@pytest.fixture
def phases(monkeypatch):
    """A fresh set of phases, shown at once, on a terminal console that records."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    monkeypatch.setattr(output, "PHASES", output._Phases())
    monkeypatch.setattr(output, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(output, "stderr", lambda: console)
    return console


def test_a_busy_command_names_its_phase_on_a_terminal(phases) -> None:
    with output.phase("computing the reference"):
        output.PHASES.timer.join()  # the status line's timer has fired
        output.progress("running kernel 2 of 3")
        assert output.PHASES.bar is not None
    assert output.PHASES.bar is None and output.PHASES.timer is None
    assert "computing the reference" in phases.file.getvalue()


def test_no_status_line_in_a_pipe_or_with_quiet(phases, monkeypatch) -> None:
    import io

    from rich.console import Console

    piped = Console(file=io.StringIO(), force_terminal=False)
    monkeypatch.setattr(output, "stderr", lambda: piped)
    with output.phase("running"):
        assert output.PHASES.timer is None
    assert piped.file.getvalue() == ""
    monkeypatch.setattr(output, "stderr", lambda: phases)
    output.set_verbosity(-1)
    try:
        with output.phase("running"):
            assert output.PHASES.timer is None
    finally:
        output.set_verbosity(0)


def test_phase_times_add_up_to_the_whole(phases) -> None:
    with output.phase("compiling"), output.phase("reading the SASS"):
        pass
    with output.phase("compiling"):
        pass
    assert list(output.PHASES.times) == ["compiling", "reading the SASS"]
    assert list(output.PHASES.outer) == ["compiling"]  # a nested phase is not counted twice
    summary = output.phase_summary(output.PHASES.outer["compiling"] + 1.0)
    assert summary is not None and summary.startswith("time: compiling ")
    assert "start-up and output 1.00 s" in summary
