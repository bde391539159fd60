"""Run a kernel rendered at one size at other sizes: problem sizes are runtime parameters
(`ncdc_size_<axis>`), so one emulator build serves every size. For the row-wise and
elementwise families, whose grid-stride loops cover any size with the planned grid."""

from __future__ import annotations

import numpy as np

from ncdc.backends.cpu import build
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import evaluate, from_storage, make_inputs, to_storage

H200 = load_hardware("h200")
SIZE_PREFIX = "ncdc_size_"


def run_at_sizes(
    text: str, plan_sizes: dict, sizes: dict, inputs: dict | None = None,
    tiles: dict | None = None,
) -> tuple[dict, dict, object]:  # fmt: skip
    """Render `text` at `plan_sizes`, run it at `sizes` with NaN-poisoned outputs.

    Returns (outputs as float64, and the workspaces' final values by name; the float64
    reference; the rendered module)."""
    module = render_plan(plan_diagram(load_diagram_text(text, sizes=plan_sizes), H200, tiles=tiles))
    d = load_diagram_text(text, sizes=sizes)
    values = inputs if inputs is not None else make_inputs(d, seed=sum(sizes.values()))
    expected = evaluate(d, values)
    buffers = {t.name: np.ascontiguousarray(to_storage(values[t.name], t.dtype)) for t in d.inputs}
    for name in d.outputs:
        shape = tuple(d.axes[a] for a in d.tensor(name).axes)
        buffers[name] = to_storage(np.full(shape, np.nan), d.tensor(name).dtype)
    for w in module.workspace:  # zeroed as its record asks (the index status word), else NaN
        buffers[w.name] = to_storage(np.full(w.values, 0.0 if w.zeroed else np.nan), w.dtype)
    lib = build(module.source)
    for launch in module.launches:
        args = [
            buffers[p.name]
            if p.kind in ("tensor", "workspace")
            else np.int64(d.axes[p.name[len(SIZE_PREFIX) :]])
            for p in launch.params
        ]
        lib.launch(launch.kernel, launch.grid, launch.block, args, launch.dynamic_smem)
    got = {n: from_storage(buffers[n], d.tensor(n).dtype) for n in d.outputs}
    got.update({w.name: from_storage(buffers[w.name], w.dtype) for w in module.workspace})
    return got, expected, module
