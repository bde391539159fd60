"""Run a rendered diagram and check it against the float64 reference.

Fresh random inputs (rounded to each input's dtype), every output and intermediate buffer
poisoned with NaN before the launches so an element the kernel never writes shows up, the
kernels launched in order, each output compared with `reference.evaluate` within the
tolerance of its dtype. The CPU backend also counts the bytes the kernels read and write
in global memory, for comparison with the model's on-chip boundary traffic.

    >>> result = run_diagram(load_diagram("diagrams/softmax.yaml", {"m": 3, "n": 65}),
    ...                      load_hardware("h200"), backend="cpu")  # doctest: +SKIP
    >>> result.ok  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ncdc.arguments import scalar_argument
from ncdc.errors import UsageError
from ncdc.hardware import Hardware
from ncdc.reference import evaluate, from_storage, make_inputs, to_storage
from ncdc.render import Launch, Param, RenderedModule, Workspace
from ncdc.spec import Diagram, load_diagram, load_diagram_text

BACKENDS = ("cpu", "cuda")

# Allowed error, relative to the largest magnitude of the reference output, per output
# dtype. fp32 kernels differ from float64 by accumulation order; 16-bit outputs by one
# rounding (2^-8 for bf16) plus their inputs' products; e4m3 keeps 3 mantissa bits (one
# rounding is up to 2^-4 of the value), e5m2 keeps 2 (2^-3).
TOLERANCE = {
    "fp32": 1e-5,
    "fp16": 1e-2,
    "bf16": 2e-2,
    "fp8_e4m3": 7e-2,
    "fp8_e5m2": 1.3e-1,
    "int8": 1.0 / 64,
}


@dataclass(frozen=True)
class OutputCheck:
    """How one output compared with the reference."""

    name: str
    dtype: str
    max_abs_error: float
    max_rel_error: float  # max |error| / max |reference|: what the tolerance bounds
    scale: float  # largest |reference|: the tolerance is relative to it
    tolerance: float
    unexpected_nan: int  # elements that are NaN here but not in the reference (e.g. unwritten)

    @property
    def ok(self) -> bool:
        return self.unexpected_nan == 0 and self.max_rel_error <= self.tolerance


@dataclass(frozen=True)
class RunResult:
    """The outcome of `run_diagram`."""

    backend: str
    checks: tuple[OutputCheck, ...]
    bytes_read: int  # global-memory traffic the kernels issued (CPU backend; 0 on CUDA)
    bytes_written: int
    seconds: float  # wall time of building (or loading) and running the kernels

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def compare(name: str, dtype: str, got: np.ndarray, want: np.ndarray) -> OutputCheck:
    """Compare a kernel's output (float64 values) with the reference."""
    both_nan = np.isnan(got) & np.isnan(want)
    unexpected = int(np.count_nonzero(np.isnan(got) & ~np.isnan(want)))
    finite = ~np.isnan(want) & ~np.isnan(got)
    diff = np.where(finite, np.abs(got - want), 0.0)
    diff = np.where(both_nan, 0.0, diff)
    # Infinities that agree are no error; one that does not is an infinite error.
    same_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    diff = np.where(same_inf, 0.0, diff)
    finite_ref = np.abs(np.where(np.isfinite(want), want, 0.0))
    scale = float(finite_ref.max()) if finite_ref.size else 0.0
    scale = scale if scale > 0 else 1.0
    max_abs = float(diff.max()) if diff.size else 0.0
    return OutputCheck(name, dtype, max_abs, max_abs / scale, scale, TOLERANCE[dtype], unexpected)


def allocate(module: RenderedModule, diagram: Diagram, inputs: Mapping[str, np.ndarray]) -> dict:
    """Device buffers for every tensor a launch names: inputs filled, the rest NaN."""
    named = {p.name for launch in module.launches for p in launch.params}
    buffers: dict[str, np.ndarray] = {}
    for t in diagram.tensors:
        if t.name not in named and t.name not in diagram.outputs:
            continue  # a fused intermediate never exists in global memory
        shape = tuple(diagram.axes[a] for a in t.axes)
        if t.name in inputs:
            buffers[t.name] = np.ascontiguousarray(to_storage(inputs[t.name], t.dtype))
        else:
            buffers[t.name] = to_storage(np.full(shape, np.nan), t.dtype)
    for w in module.workspace:
        buffers[w.name] = to_storage(np.full(w.values, np.nan), w.dtype)
    return buffers


def launch_args(launch: Launch, buffers: Mapping[str, np.ndarray]) -> list:
    """The argument list of one launch, in its parameter order."""
    return [_arg(p, buffers) for p in launch.params]


def _arg(p: Param, buffers: Mapping[str, np.ndarray]) -> object:
    if p.kind in ("tensor", "workspace"):
        return buffers[p.name]
    return scalar_argument(p)


def run_diagram(
    diagram: Diagram, module: RenderedModule, *, backend: str = "cpu", seed: int = 0,
    sanitize: str | None = None,
) -> RunResult:  # fmt: skip
    """Run `module` (rendered from `diagram`) on `backend` and check every output."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend '{backend}'; expected one of {', '.join(BACKENDS)}")
    inputs = make_inputs(diagram, seed)
    stored = {p.name for launch in module.launches for p in launch.params if p.kind == "tensor"}
    expected = evaluate(diagram, inputs, stored - set(inputs))
    buffers = allocate(module, diagram, inputs)
    start = time.perf_counter()
    if backend == "cpu":
        read, written = _run_cpu(module, buffers, sanitize)
    else:
        from ncdc.gpu import run_cuda

        run_cuda(module, buffers)
        read = written = 0
    seconds = time.perf_counter() - start
    checks = []
    for name in diagram.outputs:
        dtype = diagram.tensor(name).dtype
        got = from_storage(buffers[name], dtype)
        checks.append(compare(name, dtype, got, expected[name]))
    return RunResult(backend, tuple(checks), read, written, seconds)


def _run_cpu(module: RenderedModule, buffers: dict, sanitize: str | None) -> tuple[int, int]:
    from ncdc.emulate import build

    lib = build(module.source, sanitize=sanitize)
    read = written = 0
    for launch in module.launches:
        traffic = lib.launch(
            launch.kernel, launch.grid, launch.block, launch_args(launch, buffers),
            dynamic_smem=launch.dynamic_smem,
        )  # fmt: skip
        read += traffic.bytes_read
        written += traffic.bytes_written
    return read, written


@dataclass(frozen=True)
class RunOutcome:
    """A run and what the model predicted for the traffic it measured."""

    diagram: Diagram
    module: RenderedModule
    result: RunResult
    boundary: str  # the level boundary the kernels' own global traffic crosses, "l2->smem"
    predicted_bytes: int  # the model's bytes across that boundary

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "format": "ncdc.run/1",
            "name": self.diagram.name,
            "axes": dict(self.diagram.axes),
            "backend": r.backend,
            "ok": r.ok,
            "outputs": [{**asdict(c), "ok": c.ok} for c in r.checks],
            "traffic": {
                "bytes_read": r.bytes_read,
                "bytes_written": r.bytes_written,
                "boundary": self.boundary,
                "predicted_bytes": self.predicted_bytes,
            },
            "seconds": r.seconds,
        }


def run_spec(
    spec: Path, hardware: Hardware, *, backend: str = "cpu", seed: int = 0,
    sanitize: str | None = None, sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None,
) -> RunOutcome:  # fmt: skip
    """Plan, render and run a spec, or run a `.cu` that `ncdc compile` wrote."""
    if spec.suffix == ".cu":
        if sizes or tiles:
            raise UsageError(
                "--set and --tile do not apply to a compiled .cu", where=str(spec),
                hint="run the spec instead, or compile again with the sizes",
            )  # fmt: skip
        diagram, module, cost = load_compiled(spec)
    else:
        from ncdc.choose import choose_plan
        from ncdc.cost import plan_to_dict
        from ncdc.render import render_plan

        diagram = load_diagram(spec, sizes)
        plan = choose_plan(diagram, hardware, tiles)  # explicit beats tuned beats modelled
        module = render_plan(plan)
        cost = plan_to_dict(plan)
    result = run_diagram(diagram, module, backend=backend, seed=seed, sanitize=sanitize)
    boundary, predicted = on_chip_boundary(cost, hardware)
    return RunOutcome(diagram, module, result, boundary, predicted)


def on_chip_boundary(cost: Mapping[str, Any], hardware: Hardware) -> tuple[str, int]:
    """The model's traffic into the first per-SM level: what a kernel itself loads and
    stores in global memory, before any cache (L2 sits above this boundary)."""
    per_sm = {lv.name for lv in hardware.levels if lv.per == "sm"}
    for t in cost["transfers"]:
        if t["lower"] in per_sm:
            return f"{t['upper']}->{t['lower']}", int(t["bytes"])
    first = cost["transfers"][0]
    return f"{first['upper']}->{first['lower']}", int(first["bytes"])


def load_compiled(cu: Path) -> tuple[Diagram, RenderedModule, dict[str, Any]]:
    """The diagram, module and predicted cost of a `.cu` written by `ncdc compile`."""
    meta_path = cu.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        source = cu.read_text(encoding="utf-8")
        spec_text = meta["spec_text"]
        launches = tuple(
            Launch(k["name"], tuple(k["grid"]), tuple(k["block"]), k["dynamic_smem_bytes"],
                   tuple(Param(**p) for p in k["params"]))
            for k in meta["kernels"]
        )  # fmt: skip
        workspace = tuple(Workspace(**w) for w in meta["workspace"])
    except FileNotFoundError as e:
        raise UsageError(
            f"cannot read {e.filename}", where=str(cu),
            hint="a .cu runs with the .json that ncdc compile wrote beside it",
        ) from None  # fmt: skip
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(
            f"{meta_path.name} is not a kernel description written by ncdc ({e})", where=str(cu),
            hint="compile the spec again with ncdc compile",
        ) from None  # fmt: skip
    if not spec_text:
        raise UsageError("the .json carries no spec text", where=str(meta_path))
    diagram = load_diagram_text(spec_text, meta.get("spec", str(cu)), meta["axes"])
    name = "__".join(launch.kernel for launch in launches)
    return diagram, RenderedModule(name, source, launches, workspace, ()), meta["cost"]
