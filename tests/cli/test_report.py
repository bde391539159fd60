"""The cost report a person reads (ncdc.cli.report): the plan's figures, its transfers per
boundary, the breaks weighed and the runners-up, as rich tables."""

from __future__ import annotations

from rich.console import Console

from ncdc.cli.report import cost_table, with_note
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import rank_tiles
from ncdc.units import format_time


def _text(renderable) -> str:
    console = Console(width=140, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_table_shows_the_plans_own_figures() -> None:
    plans = rank_tiles(load_diagram("diagrams/add_rmsnorm.yaml"), load_hardware("h200"), 3)
    text = _text(cost_table(plans[0], plans[1:]))
    best = plans[0]
    assert format_time(best.predicted_time_s) in text
    assert best.bound in text and "hbm -> l2" in text
    assert "kernel breaks" in text and "chosen" in text  # the breaks it weighed
    for kp in best.kernels:
        assert kp.kernel.name in text


def test_a_note_goes_under_the_table() -> None:
    assert _text(with_note("table", "a note")).splitlines()[-1].strip() == "a note"
    assert with_note("table", None) == "table"
