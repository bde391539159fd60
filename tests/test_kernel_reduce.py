"""The reduction family on the CPU emulator against float64 NumPy: row ops over an axis
that is not last in memory, and reductions of a whole tensor (to a scalar or a vector),
each built at one size and run at odd sizes (sizes are runtime parameters)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ncdc.emulate import build
from ncdc.hardware import load_hardware
from ncdc.reference import evaluate, from_storage, make_inputs, to_storage
from ncdc.render import render_plan
from ncdc.spec import load_diagram, load_diagram_text
from ncdc.tiling import plan_diagram

H200 = load_hardware("h200")
TOL = {"bf16": 2e-2, "fp32": 1e-4}
SIZE_PREFIX = "ncdc_size_"


def run_at(text: str, plan_sizes: dict, runs: list[dict]) -> list[tuple[dict, dict]]:
    """Render `text` at `plan_sizes` and run that one build at each of `runs`, outputs and
    workspace poisoned with NaN. Returns (outputs, float64 reference) per run."""
    plan = plan_diagram(load_diagram_text(text, sizes=plan_sizes), H200)
    module = render_plan(plan)
    assert {kp.family.name for kp in plan.kernels} == {"reduce"}
    lib = build(module.source)
    out = []
    for sizes in runs:
        d = load_diagram_text(text, sizes=sizes)
        values = make_inputs(d, seed=sum(sizes.values()))
        buffers = {
            t.name: np.ascontiguousarray(to_storage(values[t.name], t.dtype)) for t in d.inputs
        }
        for name in d.outputs:
            shape = tuple(d.axes[a] for a in d.tensor(name).axes)
            buffers[name] = to_storage(np.full(shape, np.nan), d.tensor(name).dtype)
        for w in module.workspace:
            buffers[w.name] = np.full(w.values, np.nan, dtype=np.float32)
        for launch in module.launches:
            args = [
                buffers[p.name]
                if p.kind in ("tensor", "workspace")
                else np.int64(d.axes[p.name[len(SIZE_PREFIX) :]])
                for p in launch.params
            ]
            lib.launch(launch.kernel, launch.grid, launch.block, args, launch.dynamic_smem)
        got = {n: from_storage(buffers[n], d.tensor(n).dtype) for n in d.outputs}
        out.append((got, evaluate(d, values)))
    return out


def close(got: dict, want: dict, dtype: str) -> None:
    for name, g in got.items():
        w = want[name]
        assert not np.isnan(g).any(), f"{name}: NaN left in the output"
        err = np.abs(g - w) / (np.abs(w) + 1e-2)
        assert float(np.max(err)) < TOL[dtype], (name, float(np.max(err)))


COLUMN_OPS = [
    "softmax(X, over=m)",
    "log_softmax(X, over=m)",
    "layernorm(X, over=m, weight=W, bias=B, eps=1e-5)",
    "rmsnorm(X, over=m, weight=W, eps=1e-6)",
    "sum(X, over=m)",
    "max(X, over=m)",
    "mean(X, over=m)",
    "logsumexp(X, over=m)",
]
ODD = [{"m": 37, "n": 45}, {"m": 3, "n": 130}, {"m": 301, "n": 7}, {"m": 1, "n": 33}]


def column_spec(dtype: str) -> str:
    """Every row op over m of X[m, n], one kernel each, in one module (one build)."""
    ops = ", ".join(f'"Y{i} = {op}"' for i, op in enumerate(COLUMN_OPS))
    outputs = ", ".join(f"Y{i}" for i in range(len(COLUMN_OPS)))
    return f"""
ncdc: 1
name: col
axes: {{m: 8, n: 8}}
inputs: {{X: {{axes: [m, n], dtype: {dtype}}}, W: {{axes: [m], dtype: {dtype}}},
  B: {{axes: [m], dtype: {dtype}}}}}
ops: [{ops}]
outputs: [{outputs}]
"""


@pytest.mark.parametrize("dtype, plan_m", [("bf16", 64), ("fp32", 4096)])
def test_column_ops_match_numpy(dtype: str, plan_m: int) -> None:
    # Over m of X[m, n]: built for columns of 64 (held in registers: one pass) and of 4096
    # (read again for the output: two passes; the reductions split over blocks); each
    # build runs columns shorter and longer than a thread's share, and column counts that
    # leave a block's last warp partial. (A split reduction's partials are sized for the
    # planned columns: the runs take no more.)
    for got, want in run_at(column_spec(dtype), {"m": plan_m, "n": 130}, ODD):
        close(got, want, dtype)


WHOLE = """
ncdc: 1
name: whole
axes: {m: 8, n: 8}
inputs: {X: {axes: [m, n], dtype: bf16}}
ops: ["A = abs(X)", "r0 = max(A, over=[m, n], dtype=fp32)", "r1 = sum(X, over=[m, n], dtype=fp32)",
  "r2 = mean(X, over=[m, n], dtype=fp32)", "r3 = logsumexp(X, over=[m, n], dtype=fp32)"]
outputs: [r0, r1, r2, r3]
"""


def test_whole_tensor_reductions_to_a_scalar() -> None:
    # Built at 4096 x 4096, where each reduction splits over blocks and a second kernel
    # merges the fp32 partials in order; run where most splits get nothing. The same
    # inputs twice give the same bits: the merge order is fixed.
    plan = plan_diagram(load_diagram_text(WHOLE, sizes={"m": 4096, "n": 4096}), H200)
    assert all(kp.candidate.splits > 1 for kp in plan.kernels)
    runs = run_at(WHOLE, {"m": 4096, "n": 4096}, [*ODD[:3], ODD[0]])
    for got, want in runs:
        close(got, want, "fp32")
    assert all(runs[0][0][r].tobytes() == runs[-1][0][r].tobytes() for r in runs[0][0])


VECTOR = """
ncdc: 1
name: vec
axes: {b: 3, m: 8, n: 8}
inputs: {X: {axes: [b, m, n], dtype: bf16}, c: {axes: [n], dtype: bf16}}
ops: ["s = sum(X, over=[b, m], dtype=fp32)", "t = mul(s, c)", "u = max(X, over=[m, n])",
  "Y = softmax(X, over=m)"]
outputs: [t, u, Y]
"""


def test_vectors_and_a_middle_axis() -> None:
    # sum over the leading axes (kept n contiguous: coalesced) then a per-column map; max
    # over the trailing axes, one value per b; softmax over the middle axis m.
    for got, want in run_at(VECTOR, {"b": 3, "m": 64, "n": 64}, [{"b": 3, "m": 37, "n": 45}]):
        close(got, want, "bf16")


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("name", ["column_softmax", "amax", "add_rmsnorm"])
def test_new_library_diagrams_compile_without_spills(name: str) -> None:
    from ncdc.nvrtc import compile_cuda

    module = render_plan(plan_diagram(load_diagram(f"diagrams/{name}.yaml"), H200))
    for arch in ("sm_80", "sm_90a"):
        compiled = compile_cuda(module.source, arch, name=f"{name}.cu", line_origin=module.origin)
        for launch in module.launches:
            assert compiled.resources[launch.kernel].spill_stores_bytes == 0, (launch.kernel, arch)
