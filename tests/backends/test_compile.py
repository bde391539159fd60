"""`ncdc compile` and `ncdc run` end to end: outputs, their metadata, foreign files left
alone, compiled sources run back, and the emulator's traffic against the model."""

from __future__ import annotations

import pytest

from ncdc.hardware.load import load_hardware
from tests import support

ROOT = support.ROOT
H200 = load_hardware("h200")
SMALL_SOFTMAX = {"m": 5, "n": 70}

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")


def test_compile_error_names_the_generated_line_and_its_template():
    from dataclasses import replace

    from ncdc.backends.cache import cached_compile
    from ncdc.errors import CompileError
    from ncdc.language.load import load_diagram
    from ncdc.plan.search import plan_diagram
    from ncdc.render import render_plan

    plan = plan_diagram(load_diagram(ROOT / "diagrams/softmax.yaml", SMALL_SOFTMAX), H200)
    module = render_plan(plan)
    lines = module.source.splitlines()
    broken = next(i for i, line in enumerate(lines) if "__global__" in line)
    lines.insert(broken, "this is not C++;")
    module = replace(module, source="\n".join(lines) + "\n")
    with pytest.raises(CompileError) as info:
        cached_compile(module.source, "sm_80", name="broken", use_cache=False,
                       line_origin=module.origin)  # fmt: skip
    message = info.value.line()
    assert f"({broken + 1})" in message and "from rowwise.cu.j2 (its output line" in message
