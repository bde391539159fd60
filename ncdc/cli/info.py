"""The commands that describe this installation: `hardware` (the profiles), `includes`
(the header folders), `cache info|clear`, and `env` (versions and defaults, for a bug
report)."""

# No `from __future__ import annotations` here: typer reads every command's annotations at
# start-up, and strings would have to be evaluated first.
from typing import Annotated

import typer

from ncdc.cli.options import FormatOpt, HwOpt, app, load_machine
from ncdc.hardware.load import hardware_to_dict, list_profiles, load_hardware
from ncdc.output import emit, note, plain


@app.command("hardware")
def hardware_cmd(
    name: Annotated[
        str | None, typer.Argument(help="A profile name or YAML file.", metavar="NAME")
    ] = None,
    hw: HwOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """List the GPU profiles, or show one with every number's source."""
    from ncdc.cli.views import hardware_list_table, hardware_table

    if name is None:
        profiles = [load_hardware(n) for n in list_profiles()]
        emit([hardware_to_dict(p) for p in profiles], fmt, lambda: hardware_list_table(profiles))
        return
    machine = load_machine(name, hw)
    emit(hardware_to_dict(machine), fmt, lambda: hardware_table(machine))


@app.command("includes")
def includes_cmd(
    flags: Annotated[
        bool, typer.Option("--flags", help="One line of -I options, for nvcc or a C compiler.")
    ] = False,
    fmt: FormatOpt = "table",
) -> None:
    """The header folders a compiled .cu (ncdc's device headers, the CUDA headers) and the
    C export (the CUDA headers) are built with: `nvcc $(ncdc includes --flags) -cubin x.cu`."""
    from ncdc.backends.nvrtc import cuda_include_dir, ncdc_include_dir

    cuda = cuda_include_dir()
    folders = {"ncdc": str(ncdc_include_dir()), "cuda": None if cuda is None else str(cuda)}
    found = [f for f in folders.values() if f is not None]
    if cuda is None:
        note("no CUDA headers found: pip install 'ncdc[nvrtc]', or set CUDA_HOME to a toolkit")
    if flags:
        print(" ".join(f"-I{f}" for f in found))
        return
    emit(folders, fmt, lambda: plain("\n".join(found)))


cache_app = typer.Typer(
    help="Show or clear the caches (compiled kernels, CPU objects, tuned tiles).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cache_app, name="cache")


@cache_app.command("info")
def cache_info_cmd(fmt: FormatOpt = "table") -> None:
    """Where the caches are, whether the root is safe to use, entries and bytes of each."""
    from ncdc.backends.cache import cache_info
    from ncdc.cli.views import cache_table

    info = cache_info()
    emit(info, fmt, lambda: cache_table(info))


@cache_app.command("clear")
def cache_clear_cmd(
    all_versions: Annotated[
        bool,
        typer.Option("--all", help="Every ncdc version's kernels, CPU objects and tuned tiles."),
    ] = False,
) -> None:
    """Remove this ncdc version's compiled kernels (with --all: all ncdc put there but the key)."""
    from ncdc.backends.cache import clear_cache

    note(f"removed {clear_cache(all_versions=all_versions)}")


@app.command("env")
def env_cmd(fmt: FormatOpt = "table") -> None:
    """Versions of ncdc and what it runs on (Python, NumPy, NVRTC, CuPy, the driver, torch),
    the cache root, and the profile defaults with where each came from: for a bug report.
    Never fails: a missing piece is reported as such."""
    from ncdc.cli.environment import describe_env, env_text

    found = describe_env()
    emit(found, fmt, lambda: plain(env_text(found)))
