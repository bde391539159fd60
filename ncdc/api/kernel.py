"""`ncdc.load`: a diagram as a function of arrays.

    >>> import numpy as np, ml_dtypes, ncdc
    >>> softmax = ncdc.load("diagrams/softmax.yaml")
    >>> x = np.random.default_rng(0).standard_normal((3, 65)).astype(ml_dtypes.bfloat16)
    >>> y = softmax(x)  # emulated on the CPU: the kernel ncdc compile builds, at m=3 n=65
    >>> y.shape, y.dtype, bool(abs(y.astype(float).sum(axis=1) - 1).max() < 0.02)
    ((3, 65), dtype(bfloat16), True)

A call binds the diagram's axis sizes from its arrays' shapes. Each distinct set of sizes
is planned, rendered and compiled once per target (in memory here, and through the disk
caches of `ncdc compile`); a call whose sizes were seen before goes straight to the launch.
What runs is what `ncdc compile` builds for those sizes: the plan settled with ptxas's
report (where NVRTC is installed; from the compile cache otherwise), one launch decided
once, so `Kernel.cost()` prices exactly what a call runs.

Host arrays (NumPy, torch CPU tensors) run on the `cpu` backend: the generated source
emulated, inputs copied into GPU-aligned buffers and outputs copied back. GPU arrays
(torch CUDA tensors, CuPy arrays) run on the `cuda` backend with no copy: every kernel of
the diagram enqueued in order on the caller's stream (torch's current stream for torch
tensors), its outputs and scratch memory allocated by the caller's library (torch's
caching allocator for torch tensors), so a call can be captured in a CUDA graph.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ncdc.api import arrays as arr
from ncdc.api.arrays import HOST, ArrayView
from ncdc.api.commands import HardwareLike, SpecLike, diagram_of, machine
from ncdc.errors import ArrayError
from ncdc.hardware.machine import Hardware
from ncdc.language.bind import bind_sizes
from ncdc.language.diagram import Diagram
from ncdc.language.load import with_sizes
from ncdc.language.text import did_you_mean, listing
from ncdc.model.values import Plan
from ncdc.plan.choose import PlanSource
from ncdc.render import RenderedModule

BACKENDS = (None, "cpu", "cuda")


def load(
    spec: SpecLike, *, hardware: HardwareLike | None = None, arch: str | None = None,
    backend: str | None = None, tiles: Mapping[str, int] | None = None,
    sizes: Mapping[str, int] | None = None, use_tuned: bool = True,
) -> Kernel:  # fmt: skip
    """The diagram `spec` (a path, YAML text or a Diagram) as a callable `Kernel`.

    `hardware`: the profile to plan for (a name, a YAML file or a Hardware); default: the
    profile of the GPU the arrays are on (a100 for sm_80, h200 for sm_90, ...), h200 for
    host arrays. `arch`: the architecture to compile for (default: the GPU's, or the
    profile's on the host). `backend`: None picks by where the arrays are; "cpu" refuses
    GPU arrays; "cuda" also runs host arrays on the GPU (copied there and back). `tiles`
    fixes tile sizes (`--tile`), `sizes` the sizes of axes no input gives (`--set`), and
    `use_tuned=False` ignores tiles kept by `ncdc tune`.
    """
    if backend not in BACKENDS:
        raise ArrayError(f"unknown backend {backend!r}", hint="pass backend='cpu' or 'cuda'")
    diagram = diagram_of(spec, sizes)
    options = _Options(hardware, arch, backend, dict(tiles or {}), use_tuned)
    return Kernel(diagram, options, _Shared())


@dataclass(frozen=True)
class _Options:
    hardware: HardwareLike | None
    arch: str | None
    backend: str | None
    tiles: Mapping[str, int]
    use_tuned: bool


@dataclass(frozen=True)
class Target:
    """What a set of sizes is built for: the profile planned with, the architecture
    compiled for, and where it runs (HOST, or a GPU's ordinal)."""

    hardware: Hardware
    arch: str
    device: int


@dataclass(frozen=True)
class Build:
    """One set of sizes planned, rendered and compiled for one target."""

    diagram: Diagram  # at these sizes
    plan: Plan  # as `ncdc compile` settles it
    module: RenderedModule
    source: PlanSource  # where its tiles came from
    notes: tuple[str, ...]  # what compiling replaced, and why
    cubin: bytes | None  # None where NVRTC is not installed (the cpu backend runs anyway)


class _Shared:
    """The caches every Kernel of one `load` shares (`Kernel.at` gives others)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.targets: dict[int, Target] = {}
        self.builds: dict[tuple[tuple[int, ...], int], Build] = {}
        self.runs: dict[tuple[tuple[int, ...], int], Any] = {}


class Kernel:
    """A diagram that runs on arrays: `kernel(*inputs, out=None, stream=None, **named)`.

    Inputs come in the diagram's `inputs:` order or by name. The result is the output
    array when the diagram has one output, else a tuple in `outputs:` order; `out=` (an
    array, a sequence in `outputs:` order, or a mapping by name) writes into given arrays
    and returns them. A wrong array (a shape that disagrees with the diagram or another
    input on an axis, a wrong dtype, a non-contiguous or misaligned array, arrays on two
    devices) is an `ArrayError` naming the input, the axis, what was expected and found.
    """

    def __init__(self, diagram: Diagram, options: _Options, shared: _Shared):
        self.diagram = diagram
        self._options = options
        self._shared = shared
        self._inputs = tuple((t.name, t.axes, t.dtype) for t in diagram.inputs)
        self._axes = tuple(diagram.axes)
        self._outputs = tuple(
            (n, diagram.tensor(n).axes, diagram.tensor(n).dtype) for n in diagram.outputs
        )
        self._sizes = tuple(diagram.axes.values())  # for plan, source and cost()
        # (shape, dtype, device, contiguous) of each input -> (run, sizes): the calls of
        # this Kernel that passed their checks (an axis no input carries is its own size)
        self._calls: dict[tuple, tuple[Any, tuple[int, ...]]] = {}
        self._outs: set[tuple] = set()  # (inputs', out= arrays' signatures) that passed

    # ---- what a user reads -----------------------------------------------------------

    @property
    def name(self) -> str:
        return self.diagram.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self._inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.diagram.outputs

    @property
    def sizes(self) -> dict[str, int]:
        """The axis sizes `plan`, `source` and `cost()` describe."""
        return dict(self.diagram.axes)

    def at(self, **sizes: int) -> Kernel:
        """This kernel at other axis sizes (sharing its caches), for `plan`, `source`
        and `cost()` at those sizes; a call binds its sizes from its arrays anyway."""
        return Kernel(with_sizes(self.diagram, sizes), self._options, self._shared)

    @property
    def plan(self) -> Plan:
        """The plan a call at `sizes` runs (what `ncdc show` and `ncdc cost` describe)."""
        return self._build(self._sizes, self._default_device()).plan

    @property
    def source(self) -> str:
        """The CUDA source a call at `sizes` runs (what `ncdc compile` writes)."""
        return self._build(self._sizes, self._default_device()).module.source

    def cost(self, *, top_k: int = 1) -> dict[str, Any]:
        """What `ncdc cost --format json` prints for this diagram at `sizes`, on the
        profile and architecture a call runs."""
        from ncdc.api.commands import cost

        target = self._target(self._default_device())
        return cost(
            self.diagram, tiles=self._options.tiles, hardware=target.hardware,
            arch=target.arch, top_k=top_k, use_tuned=self._options.use_tuned,
        )  # fmt: skip

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}[{','.join(a)}] {d}" for n, a, d in self._inputs)
        return f"<ncdc.Kernel {self.name}({ins}) -> {', '.join(self.outputs)}>"

    # ---- a call ----------------------------------------------------------------------

    def __call__(self, *inputs: Any, out: Any = None, stream: Any = None, **named: Any) -> Any:
        given = inputs if not named and len(inputs) == len(self._inputs) else None
        views = [arr.view(a) for a in (given or self._arrange(inputs, named))]
        # Arrays of a signature seen before passed every check but alignment: the hot path
        # of a program that calls one kernel many times does no planning and no checking.
        signature = _signature(views)
        found = self._calls.get(signature)
        if found is None or _misaligned(views):
            found = self._admit(views, signature)
        run, sizes = found
        if out is None:
            return run(views, None, stream)
        outs = [arr.view(a) for a in self._out_arrays(out)]
        key = (signature, _signature(outs))  # the inputs' signature implies sizes and place
        if key not in self._outs or _misaligned(outs):
            self._check_outs(outs, sizes, views, key)
        return run(views, outs, stream)

    def _admit(self, views: Sequence[ArrayView], signature: tuple) -> tuple[Any, tuple[int, ...]]:
        """Check a call's arrays (placement, sizes, dtypes, layout: an ArrayError when
        wrong) and find its run, building it the first time; the signature is then known."""
        device = self._placement(views)
        sizes = self._bind(views)
        run = self._shared.runs.get((sizes, device))
        if run is None:
            run = self._prepare_run(sizes, device)
        self._calls[signature] = (run, sizes)
        return run, sizes

    def _arrange(self, given: Sequence[Any], named: Mapping[str, Any]) -> list[Any]:
        """The inputs in `inputs:` order, from positions and names."""
        names = self.inputs
        if len(given) > len(names):
            raise ArrayError(
                f"{self.name} takes {len(names)} inputs ({', '.join(names)}), found {len(given)}"
            )
        if not named and len(given) == len(names):
            return list(given)
        ordered = dict(zip(names, given, strict=False))
        for name, value in named.items():
            if name not in names:
                hint = did_you_mean(name, names) or f"the inputs are {listing(names)}"
                raise ArrayError(f"{self.name} has no input '{name}'", hint=hint)
            if name in ordered:
                raise ArrayError(f"input {name} given twice, by position and by name")
            ordered[name] = value
        missing = [n for n in names if n not in ordered]
        if missing:
            raise ArrayError(f"{self.name} is missing input {', '.join(missing)}",
                             hint=f"pass {', '.join(names)} in this order, or by name")  # fmt: skip
        return [ordered[n] for n in names]

    def _placement(self, views: Sequence[ArrayView]) -> int:
        """Where the call runs: HOST or a GPU's ordinal; every array on one of them."""
        device = views[0].device if views else HOST
        for (name, _, _), v in zip(self._inputs, views, strict=True):
            if v.device != device:
                raise ArrayError(
                    f"input {name} is on {_where(v.device)}, but {self._inputs[0][0]} is on "
                    f"{_where(device)}", hint="move every input to one device",
                )  # fmt: skip
        backend = self._options.backend
        if backend == "cpu" and device != HOST:
            raise ArrayError(
                f"backend 'cpu' runs on host arrays; the inputs are on {_where(device)}",
                hint="pass host arrays, or load with backend='cuda' or None",
            )
        return device

    def _bind(self, views: Sequence[ArrayView]) -> tuple[int, ...]:
        """The axis sizes the arrays give (the kernel's own where none does), each array
        checked against its input: rank, sizes agreeing across inputs, dtype, layout."""
        sizes = bind_sizes(self.diagram, [v.shape for v in views])
        for (name, _, dtype), v in zip(self._inputs, views, strict=True):
            _check_layout(name, dtype, v)
        return tuple(sizes.values())

    def _out_arrays(self, out: Any) -> list[Any]:
        """The `out=` arrays in `outputs:` order (one array, a sequence, or a mapping)."""
        names = self.outputs
        if len(names) == 1 and not isinstance(out, (list, tuple, dict, Mapping)):
            return [out]
        if isinstance(out, Mapping):
            unknown = [n for n in out if n not in names]
            if unknown or len(out) != len(names):
                raise ArrayError(f"out= names {listing(list(out))}; the outputs are "
                                 f"{listing(names)}")  # fmt: skip
            return [out[n] for n in names]
        given = list(out)
        if len(given) != len(names):
            raise ArrayError(f"out= has {len(given)} arrays; {self.name} has "
                             f"{len(names)} outputs ({', '.join(names)})")  # fmt: skip
        return given

    def _check_outs(self, views: Sequence[ArrayView], sizes: tuple[int, ...],
                    inputs: Sequence[ArrayView], key: tuple) -> None:  # fmt: skip
        """The `out=` arrays checked like inputs and against them: the same library and
        the same device (a host array given as the output of a GPU call would have the
        kernel write through a host pointer), writeable; `key` is then known (GPU arrays
        only: a NumPy array's writeable flag is not in its signature)."""
        first = inputs[0] if inputs else None
        where = (first.family, first.device) if first else None
        axes = dict(zip(self._axes, sizes, strict=True))
        for (name, out_axes, dtype), v in zip(self._outputs, views, strict=True):
            if first is not None and (v.family, v.device) != where:
                raise ArrayError(
                    f"output {name} is a {v.family} array on {_where(v.device)}, but the inputs "
                    f"are {first.family} arrays on {_where(first.device)}",
                    hint="pass out= arrays of the inputs' library, on their device",
                )  # fmt: skip
            if v.family == "numpy" and not v.array.flags.writeable:
                raise ArrayError(f"output {name} is a read-only array",
                                 hint="pass a writeable array, or drop out=")  # fmt: skip
            want = tuple(axes[x] for x in out_axes)
            if tuple(v.shape) != want:
                raise ArrayError(
                    f"output {name}: expected shape {want} [{', '.join(out_axes)}], found "
                    f"{tuple(v.shape)}"
                )
            _check_layout(f"output {name}", dtype, v, prefix=False)
        if all(v.device != HOST for v in views):
            self._outs.add(key)

    # ---- building and running --------------------------------------------------------

    def _default_device(self) -> int:
        """Where `plan`, `source` and `cost()` look: the GPU for backend='cuda', else the
        host."""
        if self._options.backend != "cuda":
            return HOST
        from ncdc.backends.cuda import require_gpu

        return int(require_gpu().cuda.runtime.getDevice())

    def _target(self, device: int) -> Target:
        found = self._shared.targets.get(device)
        if found is None:
            found = _target_for(self._options, device)
            self._shared.targets[device] = found
        return found

    def _build(self, sizes: tuple[int, ...], device: int) -> Build:
        key = (sizes, device)
        found = self._shared.builds.get(key)
        if found is None:
            with self._shared.lock:
                found = self._shared.builds.get(key)
                if found is None:
                    diagram = with_sizes(self.diagram, dict(zip(self._axes, sizes, strict=True)))
                    found = build(diagram, self._target(device), self._options)
                    self._shared.builds[key] = found
        return found

    def _prepare_run(self, sizes: tuple[int, ...], device: int) -> Any:
        from ncdc.api import runs

        on_gpu = device == HOST and self._options.backend == "cuda"  # host arrays, GPU run
        built = self._build(sizes, _current_gpu() if on_gpu else device)  # takes the lock
        with self._shared.lock:
            run = self._shared.runs.get((sizes, device))
            if run is None:
                if on_gpu:
                    run = runs.HostOnDevice(built, self._inputs)
                elif device == HOST:
                    run = runs.HostRun(built, self._inputs)
                else:
                    run = runs.DeviceRun(built, self._inputs, device)
                self._shared.runs[(sizes, device)] = run
        return run


def _check_layout(name: str, dtype: str, v: ArrayView, prefix: bool = True) -> None:
    """An array's dtype, contiguity and (on a GPU) alignment, or an ArrayError."""
    label = f"input {name}" if prefix else name
    if not arr.accepts(v, dtype):
        raise ArrayError(f"{label}: {arr.dtype_problem(v, dtype)}")
    if not v.contiguous:
        raise ArrayError(
            f"{label} is not contiguous (a transposed or strided view)",
            hint="pass a contiguous copy: numpy.ascontiguousarray(x), x.contiguous() in torch",
        )
    if v.device != HOST and v.address % arr.GPU_ALIGNMENT:
        raise ArrayError(
            f"{label} starts at {v.address:#x}, not on a {arr.GPU_ALIGNMENT}-byte boundary "
            "(a view into a larger buffer?)", hint="pass a fresh copy: x.clone() or x.copy()",
        )  # fmt: skip


def _signature(views: Sequence[ArrayView]) -> tuple:
    """What a call's checks depend on, array by array: all but the address."""
    return tuple([(v.shape, v.dtype, v.device, v.contiguous) for v in views])


def _misaligned(views: Sequence[ArrayView]) -> bool:
    """Whether any array starts off the GPU's alignment (host arrays: address 0)."""
    return any([v.address % arr.GPU_ALIGNMENT for v in views])


def _where(device: int) -> str:
    return "the host" if device == HOST else f"cuda:{device}"


def _current_gpu() -> int:
    from ncdc.backends.cuda import require_gpu

    return int(require_gpu().cuda.runtime.getDevice())


def _target_for(options: _Options, device: int) -> Target:
    """The profile and architecture a call on `device` builds for (see `load`)."""
    from ncdc.backends.targets import DEFAULT_PROFILE, default_arch, profile_for_arch

    if device == HOST:
        hardware = machine(options.hardware if options.hardware is not None else DEFAULT_PROFILE)
        return Target(hardware, options.arch or default_arch(hardware), HOST)
    from ncdc.backends.cuda import device_arch, require_gpu

    cupy = require_gpu()
    with cupy.cuda.Device(device):
        arch = options.arch or device_arch(cupy)
    if options.hardware is None:
        name, _ = profile_for_arch(None, arch)
        return Target(machine(name), arch, device)
    return Target(machine(options.hardware), arch, device)


def build(diagram: Diagram, target: Target, options: _Options) -> Build:
    """Plan `diagram` for `target` as `ncdc compile` does and settle it with ptxas's report
    (compiled now where NVRTC is installed, priced on its SASS where the tools are; else
    from the compile cache where it holds the kernels: a GPU needs the cubin, the cpu
    backend runs the source)."""
    from ncdc.backends import nvrtc
    from ncdc.backends.compile import (
        compile_plan,
        priced_from_sass,
        replace_plan,
        settle_from_cache,
    )
    from ncdc.backends.targets import check_arch_supports, plan_for_arch
    from ncdc.render import render_plan

    plan, source, notes = plan_for_arch(
        diagram, target.hardware, options.tiles, target.arch, use_tuned=options.use_tuned
    )
    if target.device != HOST or nvrtc.available():
        report = priced_from_sass(compile_plan(plan, target.arch, source=source))
        settled = replace_plan(report.plan, plan)
        return Build(diagram, settled, report.module, source, notes + report.notes, report.cubin)
    check_arch_supports(plan, target.arch)
    settled = settle_from_cache(plan, target.arch)
    return Build(diagram, settled, render_plan(settled), source, notes + settled.notes, None)
