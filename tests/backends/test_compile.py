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


def _wgmma_module():
    from ncdc.language.load import load_diagram
    from ncdc.plan.search import plan_diagram
    from ncdc.render import render_plan

    diagram = load_diagram(support.ROOT / "diagrams" / "matmul.yaml")
    module = render_plan(plan_diagram(diagram, load_hardware("h200")))
    assert module.launches[0].entry_registers == 168  # 65536 / 384 threads, down to 8
    return module


def _compiled(module, registers: int, log: str = ""):
    from ncdc.backends.nvrtc import CompiledModule, KernelResources

    name = module.launches[0].kernel
    res = KernelResources(name, registers, 0, 0, 128, 0, 1, 0)
    return CompiledModule(b"", "sm_90a", log, {name: res}, "13.0")


def test_setmaxnreg_kernels_need_the_registers_their_budgets_assume():
    """The GEMM's 40 + 2 x 232 registers a thread fill 3 x 168: a ptxas that gives the
    kernel fewer (an NVRTC other than the one behind the budgets) would leave the last
    setmaxnreg.inc waiting forever, so the compile is refused; as is a cubin whose
    setmaxnreg ptxas dropped (warning C7508)."""
    from ncdc.backends.compile import check_entry_registers
    from ncdc.errors import CompileError

    module = _wgmma_module()
    check_entry_registers(module, _compiled(module, 168))
    with pytest.raises(
        CompileError, match="ptxas gave 160 registers a thread, its setmaxnreg budgets assume 168"
    ):
        check_entry_registers(module, _compiled(module, 160))
    warning = "ptxas warning : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry"
    with pytest.raises(CompileError, match="ignored its setmaxnreg"):
        check_entry_registers(module, _compiled(module, 168, warning))
