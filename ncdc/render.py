"""From a plan to CUDA C++: pick each kernel's family renderer and fill its template.

Templates (one per family, `templates/<family>.cu.j2`) only substitute types, sizes and
short unrolled lists; device logic lives in the headers under `templates/include/`. A
family renderer turns a `KernelPlan` into a `KernelSource`: the template, its context, and
how to launch what it defines. This module joins the kernels of a diagram into one source
with a header comment and remembers which template each line came from, so a compile error
can name it.

    >>> from ncdc.spec import load_diagram
    >>> from ncdc.hardware import load_hardware
    >>> from ncdc.tiling import plan_diagram  # doctest: +SKIP
    >>> module = render_plan(plan_diagram(load_diagram("diagrams/softmax.yaml"),
    ...                                   load_hardware("h200")))  # doctest: +SKIP
    >>> module.launches[0].kernel  # doctest: +SKIP
    'softmax_rowwise_bf16_r1_v8'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jinja2

from ncdc import __version__
from ncdc.cost import KernelPlan, Plan
from ncdc.errors import PlanError

# C++ spelling of each dtype, the same on the GPU and in the CPU emulation.
CPP_TYPES: dict[str, str] = {
    "fp32": "float",
    "fp16": "__half",
    "bf16": "__nv_bfloat16",
    "fp8_e4m3": "__nv_fp8_e4m3",
    "fp8_e5m2": "__nv_fp8_e5m2",
    "int8": "signed char",
}
SCALAR_KINDS = ("int32", "int64", "float32")
MAX_CACHE_NAME = 100  # characters of a module's name used for its cache files


@dataclass(frozen=True)
class Param:
    """One kernel parameter, in order: a buffer (by pointer) or a scalar (by value)."""

    name: str  # the C++ parameter name: a validated spec identifier or a fixed name
    kind: str  # "tensor" (a diagram tensor), "workspace" (scratch), or a SCALAR_KINDS entry
    dtype: str = ""  # ncdc dtype of a buffer
    value: int | float | None = None  # the value passed for a scalar
    writes: bool = False  # the kernel writes this buffer


@dataclass(frozen=True)
class Workspace:
    """Scratch memory a kernel needs besides the diagram's tensors (split-k partials)."""

    name: str
    dtype: str
    values: int


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its extern "C" name, shape, dynamic shared memory, parameters."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    params: tuple[Param, ...]


@dataclass(frozen=True)
class KernelSource:
    """What a family renderer returns for one kernel of the graph."""

    template: str  # file name under templates/, e.g. "gemm.cu.j2"
    context: Mapping[str, Any]  # the values the template substitutes
    launches: tuple[Launch, ...]  # in the order they run
    workspace: tuple[Workspace, ...] = ()


@dataclass(frozen=True)
class RenderedModule:
    """One CUDA source for a whole diagram, and how to run it."""

    name: str  # readable variant name, e.g. "attention_bf16_q128_x64_d128"
    source: str
    launches: tuple[Launch, ...]
    workspace: tuple[Workspace, ...]
    line_origin: tuple[str, ...] = field(repr=False)  # per source line: where it came from

    @property
    def cache_name(self) -> str:
        """The name its compiled cubin goes by in the cache: the joined kernel names, cut
        short for modules of many kernels (the cache key tells entries apart anyway)."""
        return self.name[:MAX_CACHE_NAME]

    def origin(self, line: int) -> str:
        """The template (and its output line) that produced `line` (1-based) of the source."""
        if 1 <= line <= len(self.line_origin):
            return self.line_origin[line - 1]
        return "generated source"


Renderer = Callable[[KernelPlan, Plan], KernelSource]
FAMILY_MODULES = {
    "gemm": "ncdc.kernels.gemm",
    "attention": "ncdc.kernels.attention",
    "decode_attention": "ncdc.kernels.attention",
    "rowwise": "ncdc.kernels.rowwise",
    "elementwise": "ncdc.kernels.elementwise",
}


def get_renderer(family: str) -> Renderer:
    """The `render_<family>` function of a kernel family; the error lists the families."""
    module = FAMILY_MODULES.get(family)
    if module is None:
        raise PlanError(
            f"no code generator for kernel family '{family}'",
            hint=f"families with code: {', '.join(sorted(FAMILY_MODULES))}",
        )
    return getattr(importlib.import_module(module), f"render_{family}")  # type: ignore[no-any-return]


@cache
def template_env() -> jinja2.Environment:
    return jinja2.Environment(
        # ncdc/templates, in the tree and in a wheel (found without ncdc.emulate and NumPy)
        loader=jinja2.PackageLoader("ncdc", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_plan(plan: Plan) -> RenderedModule:
    """Render every kernel of `plan` into one source (see the module docstring)."""
    parts: list[tuple[str, str]] = [("header", _header(plan))]
    launches: list[Launch] = []
    workspace: list[Workspace] = []
    for kp in plan.kernels:
        ks = get_renderer(kp.family.name)(kp, plan)
        text = template_env().get_template(ks.template).render(**ks.context)
        parts.append((ks.template, text))
        for launch in ks.launches:
            parts.append(("export", f"NCDC_EXPORT_KERNEL({launch.kernel});\n"))
        launches += ks.launches
        workspace += ks.workspace
    source = ""
    origin: list[str] = []
    for where, text in parts:
        lines = text.splitlines(keepends=True)
        origin += [f"{where} (its output line {i + 1})" for i in range(len(lines))]
        source += text if text.endswith("\n") else text + "\n"
    name = "__".join(dict.fromkeys(launch.kernel for launch in launches))
    return RenderedModule(name, source, tuple(launches), tuple(workspace), tuple(origin))


def _header(plan: Plan) -> str:
    """The comment at the top of every generated file: diagram, shapes, tiles, cost."""
    d = plan.graph.diagram
    hw = plan.graph.hardware
    lines = [
        f"// Generated by ncdc {__version__} from {_comment(d.source)}: do not edit; edit the "
        "diagram.",
        f"// {d.name}: {_comment(d.doc)}" if d.doc else f"// {d.name}",
        "//",
        "// axes:   " + "  ".join(f"{a}={n}" for a, n in d.axes.items()),
    ]
    for t in d.inputs:
        lines.append(f"// input   {t.name}[{', '.join(t.axes)}] {t.dtype}")
    for op in d.ops:
        lines.append(f"// op      {_comment(op.text)}")
    lines.append(f"// outputs {', '.join(d.outputs)}")
    for kp in plan.kernels:
        tiles = "  ".join(f"{a}={n}" for a, n in kp.block_tile.items())
        lines.append(
            f"// kernel  {kp.kernel.name}: {kp.family.name}, tiles {tiles}, {kp.warps} warps, "
            f"{kp.stages} stages, grid {kp.grid}"
        )
    lines.append(
        f"// predicted on {hw.name}: {plan.predicted_time_s * 1e6:.1f} us ({plan.bound}-bound), "
        f"{plan.flops:.3g} FLOP"
    )
    return "\n".join(lines) + '\n\n#include "ncdc_runtime.cuh"\n\n'


def _comment(text: str) -> str:
    """Spec text folded onto one `//` line: no line break and no closing backslash (a line
    splice) may end the comment and let the rest of the text through as live C++."""
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split()).rstrip("\\ ")


def cpp_type(dtype: str) -> str:
    """The C++ type of an ncdc dtype: 'bf16' -> '__nv_bfloat16'."""
    return CPP_TYPES[dtype]
