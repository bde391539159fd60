"""Running the attention diagrams on the CPU emulator, shared by the attention family's tests.

One library is built per kernel configuration and reused across sizes (sizes are runtime
parameters): `run_attention` runs a diagram's rendered kernels on NaN-poisoned outputs and
compares its O with the float64 reference.
"""

from __future__ import annotations

import numpy as np

from ncdc.backends.cpu import EmulatedModule, build
from ncdc.backends.traffic import Traffic
from ncdc.hardware.load import load_hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.feedback import kernel_alternatives, with_kernel
from ncdc.plan.search import plan_diagram
from ncdc.render import RenderedModule, render_plan
from ncdc.verify.reference import evaluate, from_storage, make_inputs
from ncdc.verify.run import OutputCheck, allocate, compare, launch_args
from tests import support

DIAGRAMS = support.DIAGRAMS
SPECS = support.SPECS
HW = load_hardware("h200")
SMALL = {"q": 64, "x": 32}  # forward tiles for the emulator: 4 warps, 32-key chunks
LIBS: dict[tuple[str, ...], EmulatedModule] = {}


def attention_module(name: str, sizes: dict[str, int], tiles: dict[str, int],
            splits: int | None = None, arrangement: tuple[int, int] | None = None,
            text: str | None = None) -> tuple[Diagram, RenderedModule]:  # fmt: skip
    path = DIAGRAMS / f"{name}.yaml"
    if text is not None:
        diagram = load_diagram_text(text, sizes=sizes)
    else:
        diagram = load_diagram(path if path.exists() else SPECS / f"{name}.yaml", sizes)
    plan = plan_diagram(diagram, HW, tiles=tiles)
    if splits is not None:  # the decode candidate with that split of the keys
        kp = next(k for k in kernel_alternatives(plan, 0, 1000) if k.splits == splits)
        plan = with_kernel(plan, 0, kp)
    if arrangement is not None:  # the forward candidate with (queries per warp, stages)
        kp = next(
            k for k in kernel_alternatives(plan, 0, 1000)
            if k.candidate is not None
            and (k.candidate.param("warp_q"), k.candidate.stages) == arrangement
        )  # fmt: skip
        plan = with_kernel(plan, 0, kp)
    return diagram, render_plan(plan)


def run_attention(name: str, sizes: dict[str, int], tiles: dict[str, int] = SMALL, *,
         splits: int | None = None, inputs: dict[str, np.ndarray] | None = None,
         seed: int = 0, arrangement: tuple[int, int] | None = None,
         text: str | None = None) -> tuple[OutputCheck, np.ndarray, RenderedModule, Traffic]:  # fmt: skip
    """Run the rendered kernels on NaN-poisoned outputs and workspace; compare with the
    float64 reference of the diagram."""
    diagram, module = attention_module(name, sizes, tiles, splits, arrangement, text)
    key = tuple(launch.kernel for launch in module.launches)
    if key not in LIBS:
        LIBS[key] = build(module.source)
    inputs = inputs if inputs is not None else make_inputs(diagram, seed)
    want = evaluate(diagram, inputs, sums=dict(module.sums))["O"]  # fp8 S as QGMMA sums it
    buffers = allocate(module, diagram, inputs)
    traffic = Traffic(0, 0)
    for launch in module.launches:
        traffic += LIBS[key].launch(launch.kernel, launch.grid, launch.block,
                          launch_args(launch, buffers), dynamic_smem=launch.dynamic_smem)  # fmt: skip
    dtype = diagram.tensor("O").dtype
    got = from_storage(buffers["O"], dtype)
    return compare("O", dtype, got, want), got, module, traffic


def assert_ok(check: OutputCheck) -> None:
    assert check.unexpected_nan == 0, check
    assert check.max_abs_error <= 2e-2 * check.scale, check
