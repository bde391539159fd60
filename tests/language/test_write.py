"""ncdc.language.write: a diagram written out as spec text loads back to the same diagram,
for every library diagram and every spec under tests/specs (their schedules, expected
values, docs with quotes and colons, ops that need quoting)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.language.write import diagram_yaml
from tests.support import DIAGRAMS, ROOT

SPECS = sorted(DIAGRAMS.glob("*.yaml")) + sorted((ROOT / "tests" / "specs").glob("*.yaml"))


def _same(a, b) -> None:
    assert a.name == b.name and a.doc == b.doc and dict(a.axes) == dict(b.axes)
    assert a.inputs == b.inputs and a.outputs == b.outputs and a.schedule == b.schedule
    assert [replace(op, line=0) for op in a.ops] == [replace(op, line=0) for op in b.ops]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_a_written_diagram_loads_back_the_same(path) -> None:
    d = load_diagram(path)  # every one loads at its own sizes
    text = diagram_yaml(d)
    _same(load_diagram_text(text, "written.yaml"), d)
    assert diagram_yaml(load_diagram_text(text)) == text  # written once, the same ever after


def test_a_schedule_the_plan_set_is_written_too() -> None:
    d = load_diagram(DIAGRAMS / "mlp.yaml")
    chosen = replace(d, schedule=replace(d.schedule, materialize=("H",), breaks_given=True,
                                         deterministic=True))  # fmt: skip
    back = load_diagram_text(diagram_yaml(chosen))
    assert back.schedule.materialize == ("H",) and back.schedule.breaks_given
    assert back.schedule.deterministic
