"""What the commands share: the typer app, the options declared once, and the profile
and graph every command loads (`ncdc.cli.main` registers the commands on the app)."""

# No `from __future__ import annotations` here: typer reads every command's annotations at
# start-up, and strings would have to be evaluated first (a tenth of `ncdc cost`'s time).
from pathlib import Path
from typing import Annotated, Any

import typer

from ncdc.errors import UsageError
from ncdc.hardware.defaults import BUILTIN, profile_defaults
from ncdc.hardware.load import load_hardware
from ncdc.hardware.machine import Hardware
from ncdc.hardware.overrides import apply_overrides
from ncdc.language.load import load_diagram, parse_assignments
from ncdc.model.graph import MemoryGraph, build_graph

app = typer.Typer(
    name="ncdc",
    help="Neural circuit diagram compiler: IO-aware cost models and CUDA kernels from diagrams.",
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _configured(key: str, ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> Any:
    """The value a command runs with: the line's, else the environment's or
    `[tool.ncdc]`'s (ncdc.hardware.defaults), else the built-in; `-v` says which."""
    from ncdc.output import detail

    name = param.name or key
    source = ctx.get_parameter_source(name)
    if source is not None and source.name != "DEFAULT":
        detail(f"{key} {value} (from {param.opts[-1]})")
        return value
    default = profile_defaults()[key]
    if default.source == BUILTIN:
        if value is not None:
            detail(f"{key} {value} (built-in default)")
        return value
    check_default(key, default.value or "", default.source)
    detail(default.describe())
    return default.value


def check_default(key: str, value: str, source: str) -> None:
    """A configured profile name or arch that does not exist is one error naming its source."""
    from ncdc.hardware.load import list_profiles

    if key == "hardware":
        choices = list_profiles()
        if value in choices or value.endswith((".yaml", ".yml")) or "/" in value:
            return
    else:
        from ncdc.backends.nvrtc import ARCHES

        choices = list(ARCHES)
        if value in choices:
            return
    raise UsageError(
        f"unknown {key} {value!r}",
        where=source,
        hint=f"choose one of {', '.join(choices)}, or unset it to use the built-in default",
    )


def hardware_default(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> Any:
    return _configured("hardware", ctx, param, value)


def arch_default(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> Any:
    return _configured("arch", ctx, param, value)


# Options shared by the commands, declared once.
SpecArg = Annotated[
    Path, typer.Argument(help="A diagram spec (YAML).", show_default=False, metavar="SPEC")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="Override an axis size, AXIS=SIZE (repeatable).", metavar="AXIS=SIZE"
    ),
]
HardwareOpt = Annotated[
    str,
    typer.Option(
        "--hardware",
        help="GPU profile name or YAML file (default: NCDC_HARDWARE, [tool.ncdc] hardware).",
        metavar="NAME|FILE",
        callback=hardware_default,
    ),
]
HwOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--hw",
        help="Override one profile number, LEVEL.capacity=BYTES or LEVEL.bandwidth=BYTES_PER_S.",
        metavar="LEVEL.FIELD=VALUE",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", help="table or json.", metavar="table|json")]
TileOpt = Annotated[
    list[str] | None,
    typer.Option("--tile", help="Fix a tile size, AXIS=SIZE (repeatable).", metavar="AXIS=SIZE"),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "-j", "--jobs", min=1, metavar="N",
        help="Worker processes (default: the CPUs allowed by affinity and cgroup quota).",
    ),
]  # fmt: skip
NoTunedOpt = Annotated[
    bool, typer.Option("--no-tuned", help="Ignore tiles kept by `ncdc tune` (the model picks).")
]
ArchOpt = Annotated[
    str | None,
    typer.Option(
        "--arch",
        help="sm_80, sm_89, sm_90 or sm_90a (default: NCDC_ARCH, [tool.ncdc] arch, else the "
        "profile's).",
        metavar="ARCH",
        callback=arch_default,
    ),
]


def load_machine(hardware: str, hw: list[str] | None) -> Hardware:
    """The hardware profile named on the command line, with `--hw` overrides applied."""
    return apply_overrides(load_hardware(hardware), hw or [])


def load_graph(
    spec: Path, sizes: list[str] | None, hardware: str, hw: list[str] | None
) -> MemoryGraph:
    """Spec + `--set` + profile + `--hw` -> the memory graph."""
    diagram = load_diagram(spec, parse_assignments(sizes or []))
    return build_graph(diagram, load_machine(hardware, hw))
