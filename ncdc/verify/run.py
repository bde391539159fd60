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

import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ncdc.backends.arguments import (
    encode_emulated_tensor_map,
    launch_arguments,
)
from ncdc.backends.outputs import load_compiled
from ncdc.errors import IndexRangeError, UsageError
from ncdc.families.codegen import STATUS
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram, Op
from ncdc.language.dtypes import DTYPES
from ncdc.language.load import load_diagram
from ncdc.language.validate import offsets_problem
from ncdc.output import phase, progress
from ncdc.render import Launch, RenderedModule
from ncdc.system import available_memory, default_jobs
from ncdc.verify.reference import (
    evaluate,
    from_storage,
    make_inputs,
    read_index,
    to_storage,
)

if TYPE_CHECKING:
    from ncdc.backends.cpu import EmulatedModule
    from ncdc.backends.traffic import Counters, Traffic

BACKENDS = ("cpu", "cuda")


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
    # elements where the reference is NaN or an infinity and this is not the same (a finite
    # value where the reference is NaN), or this is an infinity where the reference is finite
    nonfinite_mismatch: int = 0
    reference_nonfinite: int = 0  # NaN or inf in the reference: compared by kind only

    @property
    def ok(self) -> bool:
        return (
            self.unexpected_nan == 0
            and self.nonfinite_mismatch == 0
            and self.max_rel_error <= self.tolerance
        )


@dataclass(frozen=True)
class RunResult:
    """The outcome of `run_diagram`."""

    backend: str
    checks: tuple[OutputCheck, ...]
    bytes_read: int  # global-memory traffic the kernels issued (CPU backend; 0 on CUDA)
    bytes_written: int
    seconds: float  # wall time of building (or loading) and running the kernels
    counters: Counters | None = None  # CPU backend with counters: sectors and wavefronts
    # each output's values (float64), for `ncdc run --save`
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def compare(name: str, dtype: str, got: np.ndarray, want: np.ndarray) -> OutputCheck:
    """Compare a kernel's output (float64 values) with the reference, every element: where
    both are finite by the error relative to the largest finite |reference|; elsewhere by
    kind, NaN matching NaN and an infinity the same infinity. A NaN here where the
    reference has none is `unexpected_nan` (an unwritten element: outputs are poisoned with
    NaN); any other disagreement of kind is `nonfinite_mismatch`."""
    got_nan, want_nan = np.isnan(got), np.isnan(want)
    both_finite = np.isfinite(got) & np.isfinite(want)
    same_kind = (got_nan & want_nan) | (np.isinf(got) & (got == want))  # == keeps the sign
    unexpected = int(np.count_nonzero(got_nan & ~want_nan))
    mismatch = int(np.count_nonzero(~both_finite & ~same_kind & ~(got_nan & ~want_nan)))
    diff = np.abs(got[both_finite] - want[both_finite])
    finite_ref = np.abs(want[np.isfinite(want)])
    scale = float(finite_ref.max()) if finite_ref.size else 0.0
    scale = scale if scale > 0 else 1.0
    max_abs = float(diff.max()) if diff.size else 0.0
    tolerance = DTYPES[dtype].tolerance
    special = int(np.count_nonzero(~np.isfinite(want)))
    return OutputCheck(
        name, dtype, max_abs, max_abs / scale, scale, tolerance, unexpected, mismatch, special
    )


def allocate(module: RenderedModule, diagram: Diagram, inputs: Mapping[str, np.ndarray]) -> dict:
    """Device buffers for every tensor a launch names: inputs (float64 values) filled, the
    rest NaN."""
    bits = {name: to_storage(x, diagram.tensor(name).dtype) for name, x in inputs.items()}
    return allocate_storage(module, diagram, bits)


def allocate_storage(
    module: RenderedModule, diagram: Diagram, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`allocate` with the inputs given as the bits kernels read (`to_storage`): every
    buffer aligned as a GPU's, every one but the inputs poisoned with NaN."""
    named = {p.name for launch in module.launches for p in launch.params}
    buffers: dict[str, np.ndarray] = {}
    for t in diagram.tensors:
        if t.name not in named and t.name not in diagram.outputs:
            continue  # a fused intermediate never exists in global memory
        if t.name in inputs:
            buffers[t.name] = device_aligned(inputs[t.name])
        else:
            shape = tuple(diagram.axes[a] for a in t.axes)
            buffers[t.name] = device_aligned(to_storage(np.full(shape, np.nan), t.dtype))
    for w in module.workspace:
        fill = 0.0 if w.zeroed else np.nan
        buffers[w.name] = device_aligned(to_storage(np.full(w.values, fill), w.dtype))
    return buffers


def check_indices(diagram: Diagram, buffers: Mapping[str, np.ndarray], env: Mapping) -> None:
    """Refuse a run whose kernels found an index out of range (they set the status word and
    read nothing there), naming the first such value of the index tensor, where it is and
    the range it must be in; `env` holds the index tensors' values (the reference's)."""
    status = buffers.get(STATUS)
    if status is None or not np.asarray(status).any():
        return
    for op in diagram.ops:
        if op.grouped:
            _check_offsets(op, env, diagram)
        if op.kind not in ("gather", "scatter"):
            continue
        name, axis = str(op.operands[1]), op.params["axis"]
        values = read_index(op, np.asarray(env[name], dtype=np.float64),
                            diagram.tensor(name).axes, diagram)  # fmt: skip
        k = np.rint(values)
        bad = ~((k >= 0) & (k < diagram.axes[axis]))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            where = f"{name}[{', '.join(map(str, at))}]" if at else name
            raise IndexRangeError(
                f"index {where} = {values[at]:g} is out of range: {op.out} = {op.fn}("
                f"{op.operands[0]}, {name}, axis={axis}{_paging(op)}) selects among 0 .. "
                f"{diagram.axes[axis] - 1} (the size of {axis}); the kernels "
                + ("read nothing there" if op.kind == "gather" else "add nothing there"),
                hint=f"keep every value of {name} from 0 to {diagram.axes[axis] - 1}",
            )
    raise IndexRangeError("a kernel found an index out of range", hint="check the index tensors")


def _check_offsets(op: Op, env: Mapping, diagram: Diagram) -> None:
    """Refuse a grouped contraction's offsets out of order or past its rows, naming the
    first bad entry (the kernel took it as an empty group, or as ending at the last row)."""
    name = op.params["offsets"]
    ends = np.asarray(env[name], dtype=np.float64).reshape(-1)
    problem = offsets_problem(list(ends), op.params["rows"], diagram)
    if problem:
        _, what, hint = problem
        a, b = op.operands
        raise IndexRangeError(
            f"offsets {name} {what}: {op.out} = contract({a}, {b}, over={op.over[0]}, "
            f"offsets={name}) splits the {diagram.axes[op.params['rows']]} rows of "
            f"{op.params['rows']} into runs in order",
            hint=hint,
        )


def _paging(op: Op) -> str:
    """A paged gather's own keywords, as the spec writes them."""
    return "".join(f", {k}={op.params[k]}" for k in ("within", "into") if k in op.params)


DEVICE_ALIGNMENT = 256  # bytes: what cudaMalloc returns (CUDA C++ Programming Guide)


def device_aligned(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `a` starting on a DEVICE_ALIGNMENT boundary, as a GPU buffer
    does, so that the CPU backend's sector counts are those of the GPU."""
    raw = np.empty(a.nbytes + DEVICE_ALIGNMENT, dtype=np.uint8)
    skip = -raw.ctypes.data % DEVICE_ALIGNMENT
    out = raw[skip : skip + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def launch_args(launch: Launch, buffers: Mapping[str, np.ndarray]) -> list:
    """The argument list of one launch on the CPU backend: a tensor map names its buffer
    by parameter index, so it follows the buffer anywhere (a sanitizer's subprocess)."""
    return launch_arguments(
        launch.params, buffers, lambda spec, i: encode_emulated_tensor_map(spec, argument=i)
    )


# ---- the CPU backend's guard: memory and time estimated before a run -------------------

DEFAULT_MEMORY_SHARE = 0.5  # of the memory available when the run starts (--max-memory)
BASE_BYTES = 144 << 20  # Python, NumPy, the emulator library and its fiber stacks
# Emulated throughput per core, measured on the CPU backend (BENCHMARKS.md): mma.sync and
# shared-memory traffic dominate; a conservative figure, shown on the status line.
EMU_FLOPS_PER_CORE_S = 5e7
EMU_BYTES_PER_CORE_S = 1e8


@dataclass(frozen=True)
class EmulationEstimate:
    """What a CPU-emulated run will take: peak resident memory and wall time."""

    memory_bytes: int
    seconds: float


def estimate_emulation(
    diagram: Diagram, module: RenderedModule, cost: Mapping[str, Any] | None = None
) -> EmulationEstimate:
    """Peak memory and time of `run_diagram` on the cpu backend, before running it.

    Memory: the float64 reference keeps every tensor (8 bytes a value); the device buffers
    hold the tensors the kernels name, at their dtype; the peak adds the larger of the
    reference's temporaries (about 3 float64 copies of the largest tensor) and the
    comparison's (about 4.5 of the largest output). Checked against measured peaks in
    BENCHMARKS.md. Time: the model's FLOPs and on-chip bytes at the emulator's rate.

        >>> from ncdc.language.load import load_diagram
        >>> d = load_diagram("diagrams/softmax.yaml", {"m": 2048, "n": 8192})
        >>> round(estimate_emulation(d, _no_module()).memory_bytes / 2**30, 1)  # GiB
        1.0
    """

    sizes = {t.name: diagram.size(t) for t in diagram.tensors}
    named = {p.name for launch in module.launches for p in launch.params}
    stored = sum(
        sizes[t.name] * DTYPES[t.dtype].bytes
        for t in diagram.tensors
        if t.name in named or t.name in diagram.outputs
    ) + sum(int(w.values) * DTYPES[w.dtype].bytes for w in module.workspace)
    largest = max(sizes.values())
    largest_out = max(sizes[name] for name in diagram.outputs)
    memory = BASE_BYTES + 8 * sum(sizes.values()) + stored + max(24 * largest, 36 * largest_out)
    return EmulationEstimate(int(memory), _emulation_seconds(cost))


def _no_module() -> RenderedModule:
    """A module with no launches (for the docstring: buffers are outputs only)."""
    return RenderedModule("none", "", (), (), ())


def _emulation_seconds(cost: Mapping[str, Any] | None) -> float:
    if not cost:
        return 0.0
    flops = float(cost.get("flops", 0))
    moved = float(sum(t["bytes"] for t in cost.get("transfers", ())[1:2]))  # on-chip boundary
    cores = max(1, default_jobs())
    return (flops / EMU_FLOPS_PER_CORE_S + moved / EMU_BYTES_PER_CORE_S) / cores


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def memory_limit(text: str | None) -> int:
    """`--max-memory`: bytes with an optional K/M/G/T suffix (binary: 8G is 8 GiB), or a
    share of the available memory as a percentage; None is the default share.

        >>> memory_limit("8G"), memory_limit("512MiB"), memory_limit("1024")
        (8589934592, 536870912, 1024)
    """
    if text is None:
        return int(DEFAULT_MEMORY_SHARE * available_memory())
    raw = text.strip()
    if raw.endswith("%"):
        try:
            share = float(raw[:-1]) / 100
        except ValueError:
            share = -1.0
        if 0 < share <= 1:
            return int(share * available_memory())
    elif m := _MEMORY.match(raw):
        value = float(m[1]) * _UNITS[m[2].upper()]
        if value >= 1:
            return int(value)
    raise UsageError(
        f"expected a memory size such as 8G, 512M or 50%, found '{text}'",
        where="--max-memory",
        hint="bytes with K, M, G or T (powers of 1024), or a percentage of the free memory",
    )


def check_emulation_fits(
    estimate: EmulationEstimate, limit: int, *, compiled: bool = False
) -> None:
    """Refuse (exit 2) an emulation whose estimated peak memory is over `limit`."""
    if estimate.memory_bytes <= limit:
        return
    from ncdc.units import format_bytes

    hint = (
        "compile the spec again with smaller sizes (ncdc compile SPEC --set AXIS=SIZE), "
        "or raise --max-memory"
        if compiled
        else "run it at smaller sizes with --set AXIS=SIZE (e.g. --set q=256), or raise "
        "--max-memory"
    )
    raise UsageError(
        f"the cpu emulation needs about {format_bytes(estimate.memory_bytes)} of memory, "
        f"over the limit of {format_bytes(limit)}",
        where="--backend cpu",
        hint=hint,
    )


def run_diagram(
    diagram: Diagram, module: RenderedModule, *, backend: str = "cpu", seed: int = 0,
    sanitize: str | None = None, estimate: EmulationEstimate | None = None,
    counters: bool = False, inputs: Mapping[str, np.ndarray] | None = None,
) -> RunResult:  # fmt: skip
    """Run `module` (rendered from `diagram`) on `backend` and check every output;
    `counters` (cpu backend): also count global sectors and shared-memory wavefronts.
    `inputs` (float64 values, rounded to their dtypes): the data; fresh random inputs from
    `seed` otherwise."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}", where="--backend",
                         hint=f"choose {' or '.join(BACKENDS)}")  # fmt: skip
    if counters and backend != "cpu":
        raise UsageError(
            "access counters come from the CPU emulator", where="--counters",
            hint="run with --backend cpu, or drop --counters",
        )  # fmt: skip
    with phase("making the inputs"):
        if inputs is None:
            inputs = make_inputs(diagram, seed)
    stored = {p.name for launch in module.launches for p in launch.params if p.kind == "tensor"}
    with phase("computing the reference"):
        expected = evaluate(diagram, inputs, stored - set(inputs), sums=dict(module.sums),
                            softmaxes=dict(module.softmaxes))  # fmt: skip
    with phase("making the inputs"):
        buffers = allocate(module, diagram, inputs)
    start = time.perf_counter()
    counted = None
    if backend == "cpu":
        traffic = _run_cpu(module, buffers, sanitize, counters, estimate)
        read, written = traffic.bytes_read, traffic.bytes_written
        counted = traffic.counters if counters else None
    else:
        from ncdc.backends.cuda import run_cuda

        with phase("running"):
            run_cuda(module, buffers)
        read = written = 0
    seconds = time.perf_counter() - start
    with phase("comparing"):
        check_indices(diagram, buffers, expected)
        checks, values = [], {}
        for name in diagram.outputs:
            dtype = diagram.tensor(name).dtype
            values[name] = from_storage(buffers[name], dtype)
            checks.append(compare(name, dtype, values[name], expected[name]))
    return RunResult(backend, tuple(checks), read, written, seconds, counted, values)


def _run_cpu(
    module: RenderedModule, buffers: dict, sanitize: str | None, counters: bool = False,
    estimate: EmulationEstimate | None = None,
) -> Traffic:  # fmt: skip
    from ncdc.backends.cpu import build

    with phase("building the emulator"):
        lib = build(module.source, sanitize=sanitize)
    with phase("running"):
        if estimate is not None:
            progress(f"running on the CPU emulator (estimated {estimate.seconds:.0f} s)")
        return run_emulated(lib, module, buffers, counters)


def run_emulated(
    lib: EmulatedModule, module: RenderedModule, buffers: Mapping[str, np.ndarray],
    counters: bool = False,
) -> Traffic:  # fmt: skip
    """Every launch of `module`, in order, on the CPU emulator `lib` (built from its source)
    over `buffers` (`allocate`); the global-memory traffic they issued."""
    from ncdc.backends.traffic import Traffic

    total = Traffic(0, 0)
    for i, launch in enumerate(module.launches):
        if len(module.launches) > 1:
            progress(f"running kernel {i + 1} of {len(module.launches)}: {launch.kernel}")
        total += lib.launch(
            launch.kernel, launch.grid, launch.block, launch_args(launch, buffers),
            dynamic_smem=launch.dynamic_smem, counters=counters,
            entry_registers=launch.entry_registers,
        )  # fmt: skip
    return total


@dataclass(frozen=True)
class RunOutcome:
    """A run and what the model predicted for the traffic it measured."""

    diagram: Diagram
    module: RenderedModule
    result: RunResult
    boundary: str  # the level boundary the kernels' own global traffic crosses, "l2->smem"
    predicted_bytes: int  # the model's bytes across that boundary
    tiles_from: dict[str, Any] | None = None  # PlanSource.to_dict(); None for a compiled .cu
    seconds: float = 0.0  # wall time of the whole run: planning, inputs, build, run, reference

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
            "seconds": self.seconds,
            "kernel_seconds": r.seconds,
            "tiles_from": self.tiles_from,
            "counters": counters_to_dict(r.counters) if r.counters else None,
            "tensor_core_sums": [{"tensor": name, **asdict(how)} for name, how in self.module.sums],
            "tiled_softmaxes": [
                {"tensor": name, **asdict(how)} for name, how in self.module.softmaxes
            ],
        }


def counters_to_dict(c: Counters) -> dict[str, Any]:
    """The access counters beside their ideal, JSON-ready."""
    return {**asdict(c), "excess_sectors": c.excess_sectors, "bank_conflicts": c.bank_conflicts}


def run_spec(
    spec: Path, hardware: Hardware, *, backend: str = "cpu", seed: int = 0,
    sanitize: str | None = None, sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None, max_memory: int | None = None,
    use_tuned: bool = True, counters: bool = False, inputs: Path | None = None,
    save: Path | None = None,
) -> RunOutcome:  # fmt: skip
    """Plan, render and run a spec, or run a `.cu` that `ncdc compile` wrote.

    `inputs`: an .npz of the user's data (ncdc.verify.data), which also sizes a spec's
    axes; `save`: an .npz the outputs are written to. On the cpu backend the run's memory
    is estimated first and a run over `max_memory` bytes (default: DEFAULT_MEMORY_SHARE of
    the available memory) is refused (exit 2).
    """
    from ncdc.verify import data

    start = time.perf_counter()
    if seed < 0:
        raise UsageError(f"expected a seed of 0 or more, found {seed}", where="--seed")
    from ncdc.backends.cpu import check_sanitizer

    check_sanitizer(sanitize)  # before anything is planned or built
    if spec.suffix == ".cu":
        if sizes or tiles:
            raise UsageError(
                "--set and --tile do not apply to a compiled .cu", where=str(spec),
                hint="run the spec instead, or compile again with the sizes",
            )  # fmt: skip
        diagram, module, cost = load_compiled(spec)
        arrays = data.read_arrays(inputs, diagram) if inputs else None
        tiles_from = None
    else:
        diagram = load_diagram(spec, sizes)
        arrays = data.read_arrays(inputs, diagram) if inputs else None
        if arrays is not None and inputs is not None:
            diagram = _sized_by(diagram, arrays, sizes or {}, inputs)
        module, cost, tiles_from = _planned(diagram, hardware, tiles, use_tuned)
    values = data.input_values(inputs, diagram, arrays) if arrays and inputs else None
    estimate = None
    if backend == "cpu":
        estimate = estimate_emulation(diagram, module, cost)
        limit = memory_limit(None) if max_memory is None else max_memory
        check_emulation_fits(estimate, limit, compiled=spec.suffix == ".cu")
    result = run_diagram(
        diagram, module, backend=backend, seed=seed, sanitize=sanitize, estimate=estimate,
        counters=counters, inputs=values,
    )  # fmt: skip
    if save is not None:
        data.save_outputs(save, diagram, result.outputs)
    boundary, predicted = on_chip_boundary(cost, hardware)
    seconds = time.perf_counter() - start
    return RunOutcome(diagram, module, result, boundary, predicted, tiles_from, seconds)


def _planned(
    diagram: Diagram, hardware: Hardware, tiles: Mapping[str, int] | None, use_tuned: bool
) -> tuple[RenderedModule, dict[str, Any], dict[str, Any]]:
    """The module `ncdc compile` builds for `diagram` (explicit beats tuned beats modelled,
    settled as the compile cache knows it), its cost, and where its tiles came from."""
    from ncdc.backends.compile import settle_from_cache
    from ncdc.model.records import plan_to_dict
    from ncdc.output import detail, note
    from ncdc.plan.choose import choose_plan_source
    from ncdc.render import render_plan

    with phase("planning"):
        plan, source = choose_plan_source(diagram, hardware, tiles, use_tuned=use_tuned)
        (note if source.kind == "tuned" else detail)(source.describe())
        if hardware.is_gpu:
            plan = settle_from_cache(plan, hardware.arch)
        return render_plan(plan), plan_to_dict(plan), source.to_dict()


def _sized_by(
    diagram: Diagram, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int], path: Path
) -> Diagram:
    """`diagram` at the sizes its input arrays give; an axis `--set` to another size than
    an array gives is an error."""
    from ncdc.language.bind import bind_sizes
    from ncdc.language.load import with_sizes

    bound = bind_sizes(diagram, [arrays[t.name].shape for t in diagram.inputs])
    for axis, n in sizes.items():
        if bound[axis] != n:
            raise UsageError(
                f"--set {axis}={n}, but the arrays give {axis}={bound[axis]}", where=str(path),
                hint=f"drop --set {axis}: the arrays size the run",
            )  # fmt: skip
    return with_sizes(diagram, bound)


def on_chip_boundary(cost: Mapping[str, Any], hardware: Hardware) -> tuple[str, int]:
    """The model's traffic into the first per-SM level: what a kernel itself loads and
    stores in global memory, before any cache (L2 sits above this boundary)."""
    per_sm = {lv.name for lv in hardware.levels if lv.per == "sm"}
    for t in cost["transfers"]:
        if t["lower"] in per_sm:
            return f"{t['upper']}->{t['lower']}", int(t["bytes"])
    first = cost["transfers"][0]
    return f"{first['upper']}->{first['lower']}", int(first["bytes"])
