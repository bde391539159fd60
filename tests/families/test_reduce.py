"""The reduction family on the CPU emulator against float64 NumPy: row ops over an axis
that is not last in memory, and reductions of a whole tensor (to a scalar or a vector),
each built at one size and run at odd sizes (sizes are runtime parameters)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ncdc.backends.cpu import build
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import evaluate, from_storage, make_inputs, to_storage

H200 = load_hardware("h200")
TOL = {"bf16": 2e-2, "fp32": 1e-4}
SIZE_PREFIX = "ncdc_size_"


def run_at(
    text: str, plan_sizes: dict, runs: list[dict], plant: tuple[str, str] | None = None
) -> list[tuple[dict, dict]]:
    """Render `text` at `plan_sizes` and run that one build at each of `runs`, outputs and
    workspace poisoned with NaN. Returns (outputs, float64 reference) per run. `plant`: a
    fault, (text of the source, what replaces it)."""
    plan = plan_diagram(load_diagram_text(text, sizes=plan_sizes), H200)
    module = render_plan(plan)
    assert {kp.family.name for kp in plan.kernels} == {"reduce"}
    source = module.source
    if plant is not None:
        assert plant[0] in source
        source = source.replace(plant[0], plant[1])
    lib = build(source)
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


@pytest.mark.parametrize("dtype, plan_m, stage", [("fp32", 4096, True), ("bf16", 65536, False)])
def test_column_ops_match_numpy(dtype: str, plan_m: int, stage: bool) -> None:
    # Over m of X[m, n]: built for columns of 4096 (held in shared memory between the
    # statistics and the output) and of 65536 (too long for shared memory: read again for
    # the output; the reductions split; test_vectors_... holds a column in registers); each
    # build runs columns shorter and longer than a thread's share, and column counts that
    # leave a block's last warp partial. (A split reduction's partials are sized for the
    # planned columns: the runs take no more.)
    plan = plan_diagram(load_diagram_text(column_spec(dtype), sizes={"m": plan_m, "n": 130}), H200)
    softmax = plan.kernels[0].candidate
    assert (softmax.param("stage") > 0) == stage and softmax.rereads == (
        () if stage else (("X", 1),)
    )
    for got, want in run_at(column_spec(dtype), {"m": plan_m, "n": 130}, ODD):
        close(got, want, dtype)


# Column counts a multiple of the vector (8 bf16 or 4 fp32 a thread): the vector path at odd
# column lengths, a block's last warp partial (72, 136 columns), one vector of columns (8).
VECTOR_ODD = [{"m": 37, "n": 72}, {"m": 301, "n": 136}, {"m": 3, "n": 8}, {"m": 1, "n": 16}]


@pytest.mark.parametrize("dtype, plan_m, stage", [("fp32", 4096, True), ("bf16", 65536, False)])
def test_column_ops_in_vectors_match_numpy(dtype: str, plan_m: int, stage: bool) -> None:
    # Built for 16384 columns: each thread takes 16 bytes of consecutive columns (one vector
    # load a row), staged in shared memory as vectors or read again; the runs keep column
    # counts a multiple of the vector, and one at 45 columns takes the scalar path of the
    # same build.
    plan_sizes = {"m": plan_m, "n": 16384}
    plan = plan_diagram(load_diagram_text(column_spec(dtype), sizes=plan_sizes), H200)
    vec = {"fp32": 4, "bf16": 8}[dtype]
    assert {kp.candidate.param("vec") for kp in plan.kernels} == {vec}
    assert (plan.kernels[0].candidate.param("stage") > 0) == stage
    for got, want in run_at(column_spec(dtype), plan_sizes, [*VECTOR_ODD, {"m": 37, "n": 45}]):
        close(got, want, dtype)
    if dtype != "bf16":
        return  # the planted fault once (a build of its own)
    # the vector path runs: its elements rotated by one, the vector runs fail and the
    # scalar one (45 columns) does not
    rotated = f"ncdc_out[(ncdc_v + 1) % {vec}] = "
    runs = run_at(column_spec(dtype), plan_sizes, [VECTOR_ODD[0], {"m": 37, "n": 45}],
                  ("ncdc_out[ncdc_v] = ", rotated))  # fmt: skip
    with pytest.raises(AssertionError):
        close(*runs[0], dtype)
    close(*runs[1], dtype)


MIXED = """
ncdc: 1
name: mixed
axes: {b: 3, m: 8, n: 8}
inputs: {X: {axes: [b, m, n], dtype: bf16}, c: {axes: [n], dtype: bf16},
  Bt: {axes: [b, n, m], dtype: bf16}}
ops: ["s = sum(X, over=[b, m], dtype=fp32)", "t = mul(s, c)", "u = max(X, over=[m, n])",
  "Y = softmax(X, over=m)", "Z = add(X, Bt)", "Y2 = softmax(Z, over=n)", "A = abs(X)", "r0 = max(A, over=[b, m, n], dtype=fp32)",
  "r1 = sum(X, over=[b, m, n], dtype=fp32)", "r2 = mean(X, over=[b, m, n], dtype=fp32)",
  "r3 = logsumexp(X, over=[b, m, n], dtype=fp32)"]
outputs: [t, u, Y, Y2, r0, r1, r2, r3]
"""
BUILT = {"b": 3, "m": 64, "n": 4096}


def test_vectors_scalars_and_a_middle_axis() -> None:
    # sum over the leading axes (kept n contiguous: coalesced) then a per-column map; max
    # over the trailing axes, one value per b; softmax over the middle axis m (a column
    # held in registers); softmax over n, last in X but not in Bt, read strided; and
    # whole-tensor reductions to a scalar, split over blocks whose
    # fp32 partials a second kernel merges in order, run where most splits get nothing.
    # The same inputs twice give the same bits: the merge order is fixed.
    plan = plan_diagram(load_diagram_text(MIXED, sizes=BUILT), H200)
    splits = {kp.kernel.outputs[0]: kp.candidate.splits for kp in plan.kernels}
    assert all(splits[r] > 1 for r in ("r0", "r1", "r2", "r3")), splits
    odd = {"b": 3, "m": 37, "n": 45}
    runs = run_at(MIXED, BUILT, [odd, {"b": 1, "m": 3, "n": 1001}, odd])
    for got, want in runs:
        close(got, want, "bf16")
    assert all(runs[0][0][r].tobytes() == runs[-1][0][r].tobytes() for r in ("r1", "r3"))


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("name", ["column_softmax", "amax", "add_rmsnorm"])
def test_new_library_diagrams_compile_without_spills(name: str) -> None:
    from ncdc.backends.nvrtc import compile_cuda

    module = render_plan(plan_diagram(load_diagram(f"diagrams/{name}.yaml"), H200))
    for arch in ("sm_80", "sm_90a"):
        compiled = compile_cuda(module.source, arch, name=f"{name}.cu", line_origin=module.origin)
        for launch in module.launches:
            assert compiled.resources[launch.kernel].spill_stores_bytes == 0, (launch.kernel, arch)
