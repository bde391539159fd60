"""Golden copies of the rendered kernel sources.

Every diagram in diagrams/ is planned on the h200 profile at its own sizes and rendered;
the source must equal tests/golden/<diagram>.cu. When a template, a renderer or the planner
changes what is generated, the test fails with the diff: if the change is intended, run
`make golden` (which runs this file as a script) and commit the new copies.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT
GOLDEN = ROOT / "tests" / "golden"
SPECS = sorted((ROOT / "diagrams").glob("*.yaml"))
MAX_DIFF_LINES = 80


def render(spec: Path) -> str:
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram_text
    from ncdc.plan.search import plan_diagram
    from ncdc.render import render_plan

    # The spec is named relative to the repository so the header is the same everywhere.
    diagram = load_diagram_text(spec.read_text(encoding="utf-8"), f"diagrams/{spec.name}")
    return render_plan(plan_diagram(diagram, load_hardware("h200"))).source


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_rendered_source_matches_golden(spec):
    golden = GOLDEN / f"{spec.stem}.cu"
    assert golden.exists(), f"no golden copy for {spec.name}: run `make golden`"
    want = golden.read_text(encoding="utf-8")
    got = render(spec)
    if got != want:
        diff = difflib.unified_diff(
            want.splitlines(), got.splitlines(), f"golden/{golden.name}", "rendered", lineterm=""
        )
        lines = list(diff)
        shown = "\n".join(lines[:MAX_DIFF_LINES])
        more = (
            f"\n... {len(lines) - MAX_DIFF_LINES} more diff lines"
            if len(lines) > MAX_DIFF_LINES
            else ""
        )
        pytest.fail(f"{spec.name} renders differently from its golden copy "
                    f"(run `make golden` if intended):\n{shown}{more}")  # fmt: skip


def test_every_golden_copy_has_a_diagram():
    stale = {p.stem for p in GOLDEN.glob("*.cu")} - {s.stem for s in SPECS}
    assert not stale, f"golden copies without a diagram: {sorted(stale)}"


if __name__ == "__main__":  # `make golden`: python -m tests.test_render
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.cu"):
        old.unlink()
    for spec in SPECS:
        (GOLDEN / f"{spec.stem}.cu").write_text(render(spec), encoding="utf-8")
        print(f"wrote tests/golden/{spec.stem}.cu")
