"""The `ncdc` command line: parse, call one library function, report.

Data goes to stdout (a table, or JSON with `--format json`); messages go to stderr. Every
error known to ncdc is one line with a hint and the exit code of the contract in
DESIGN.md (0 ok, 1 check failed, 2 bad input, 3 compile error, 4 no GPU); `--debug`
prints the traceback before that line.
"""

# No `from __future__ import annotations` here: typer reads every command's annotations at
# start-up, and strings would have to be evaluated first (a tenth of `ncdc cost`'s time).
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

import typer

# Only what every command needs is imported here: a command imports its own views and
# library (rich tables, NumPy, Jinja) so that `ncdc cost` starts fast.
from ncdc.cli import STARTED
from ncdc.cli.options import (  # noqa: E402
    ArchOpt,
    FormatOpt,
    HardwareOpt,
    HwOpt,
    JobsOpt,
    NoTunedOpt,
    SetOpt,
    SpecArg,
    TileOpt,
    app,
    hardware_default,
    load_graph,
    load_machine,
)
from ncdc.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    NcdcError,
    UsageError,
    file_error,
    inert,
)
from ncdc.language.load import load_diagram, parse_assignments
from ncdc.model.graph import graph_to_dict
from ncdc.output import detail, emit, error_line, note, phase, phase_summary, stderr, warn
from ncdc.version import __version__


@app.command()
def show(
    spec: SpecArg,
    set_: SetOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Print the hierarchical memory graph of a diagram as a tree."""
    from ncdc.cli.views import graph_tree

    graph = load_graph(spec, set_, hardware, hw)
    emit(graph_to_dict(graph), fmt, lambda: graph_tree(graph))


@app.command()
def check(
    paths: Annotated[
        list[Path], typer.Argument(help="Spec files or folders to validate.", metavar="PATHS...")
    ],
    hardware: HardwareOpt = "h200",
    arch: ArchOpt = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="Cost baseline JSON (from `ncdc cost DIR --format json`).",
            metavar="FILE",
        ),
    ] = None,
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance", help="Growth allowed over the baseline: 5% or 0.05.", metavar="PCT"
        ),
    ] = "5%",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table, json, or github (workflow annotations).",
            metavar="table|json|github",
        ),
    ] = "table",
) -> None:
    """Validate, plan and render (no NVRTC) every spec under PATHS; exit 2 naming each one
    that cannot be built. With --baseline, exit 1 naming every predicted time or HBM
    traffic that grew past the tolerance."""
    from ncdc.api.commands import check_report
    from ncdc.verify.gate import CHECK_FORMATS

    if fmt not in CHECK_FORMATS:
        raise UsageError(f"unknown format '{fmt}'; expected one of {', '.join(CHECK_FORMATS)}",
                         where="--format")  # fmt: skip
    with phase("checking"):
        report = check_report(
            paths, hardware=hardware, arch=arch, baseline=baseline, tolerance=tolerance
        )
    _report_check(list(report.checks), list(report.regressions), fmt)
    if not all(c.ok for c in report.checks):
        raise typer.Exit(EXIT_BAD_INPUT)
    if report.regressions:
        raise typer.Exit(EXIT_CHECK_FAILED)


def _report_check(checks: list, regressions: list[str], fmt: str) -> None:
    """Errors on stderr (table), one JSON object or GitHub annotations on stdout."""
    from ncdc.verify.gate import check_to_dict, github_annotations

    if fmt == "json":
        emit(check_to_dict(checks, regressions), "json", lambda: "")
    elif fmt == "github":
        if text := github_annotations(checks, regressions):
            print(text)
    else:
        for c in checks:
            for line in c.warnings:
                warn(line)
            if not c.ok:
                error_line(c.error)
        for line in regressions:
            stderr().print(f"regression: {inert(line)}", markup=False, soft_wrap=True)
    note(f"{sum(c.ok for c in checks)} of {len(checks)} specs valid")


@app.command()
def cost(
    spec: Annotated[
        Path, typer.Argument(help="A spec, or a folder of specs (one baseline).", metavar="SPEC")
    ],
    set_: SetOpt = None,
    tile: TileOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    arch: ArchOpt = None,
    top_k: Annotated[
        int, typer.Option("--top-k", help="Also list the runners-up.", metavar="K")
    ] = 1,
    abstract: Annotated[
        bool,
        typer.Option(
            "--abstract", help="The model alone: price a spec no kernel template can build."
        ),
    ] = False,
    no_tuned: NoTunedOpt = False,
    compile_now: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Compile the kernels first (NVRTC), so the plan is the one compile builds.",
        ),
    ] = False,
    fmt: FormatOpt = "table",
) -> None:
    """Predicted cost per memory level, FLOPs, time, bound and the chosen tiles. On a GPU
    profile the plan is rendered first: exit 2 for a spec that cannot be built. The launch
    is the one `ncdc compile` settles on when the compile cache holds it (or `--compile`)."""
    from ncdc.api.commands import cost_report
    from ncdc.cli.report import cost_table, cost_tables, with_note

    with phase("planning"):
        report = cost_report(
            spec, sizes=parse_assignments(set_ or []),
            tiles=parse_assignments(tile or [], "--tile"), hardware=hardware, hw=hw, arch=arch,
            top_k=top_k, abstract=abstract, use_tuned=not no_tuned, compile=compile_now,
        )  # fmt: skip
    for line in report.warnings:
        warn(line)
    if report.folder:
        emit(report.data, fmt, lambda: with_note(cost_tables(list(report.plans)), report.footer))
        return
    (note if report.tuned else detail)(report.detail)
    for line in report.notes:
        note(line)
    best, *others = report.plans
    emit(report.data, fmt, lambda: with_note(cost_table(best, others), report.footer))


def c_build_note(name: str, out: Path) -> str:
    """How to build the C export: its headers (cuda.h from the NVRTC wheels or a toolkit)
    and the libraries it links (none of CUDA's: the driver is opened at run time)."""
    from ncdc.backends.nvrtc import cuda_include_dir

    include = cuda_include_dir()
    flag = f"-I {include}" if include is not None else "-I <CUDA toolkit>/include"
    return f"build the C export with: cc -c {out / name}.c {flag}; link with -ldl -lpthread"


@app.command("compile")
def compile_cmd(
    spec: Annotated[Path, typer.Argument(help="A spec, or a folder of specs.", metavar="SPEC")],
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            metavar="DIR",
            help="Folder to write into (default: the current one, if it holds only ncdc's "
            "outputs).",
        ),
    ] = None,
    arch: ArchOpt = None,
    set_: SetOpt = None,
    tile: TileOpt = None,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            help="GPU profile name or YAML file (default: NCDC_HARDWARE, [tool.ncdc] hardware, "
            "else the --arch's profile, else h200).",
            metavar="NAME|FILE",
            callback=hardware_default,
        ),
    ] = None,
    hw: HwOpt = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the compile cache.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 3) on any spill.")] = False,
    jobs: JobsOpt = None,
    no_tuned: NoTunedOpt = False,
    fmt: FormatOpt = "table",
    sass_file: Annotated[
        Path | None,
        typer.Option("--sass", help="Write the cubin's SASS listing here.", metavar="FILE"),
    ] = None,
    emits: Annotated[
        list[str] | None,
        typer.Option(
            "--emit",
            metavar="c|torch",
            help="Also write an export that runs without ncdc: c (<name>.h and .c, one launch "
            "function over the CUDA driver) or torch (<name>.py, a torch custom op). Repeatable.",
        ),
    ] = None,
) -> None:
    """Render and compile kernels: write <name>.cu, .cubin and .json into the --out folder."""
    from ncdc.api.commands import compile_batch, compile_target
    from ncdc.backends.outputs import default_out_dir, report_to_dict, write_sass
    from ncdc.cli.views import compile_table

    if out is None:
        out = default_out_dir()
    profile, why = compile_target(hardware, hw, arch)
    if why:
        note(why)
    batch = compile_batch(
        spec, out=out, arch=arch, sizes=parse_assignments(set_ or []),
        tiles=parse_assignments(tile or [], "--tile"), hardware=profile,
        use_cache=not no_cache, strict=strict, jobs=jobs, use_tuned=not no_tuned,
        emit=emits or (),
    )  # fmt: skip
    reports = list(batch.reports)
    for r in reports:
        (note if r.source.kind == "tuned" else detail)(f"{r.diagram.name}: {r.source.describe()}")
        for line in r.notes:
            note(f"{r.diagram.name}: {line}")
    for failure in batch.failures:
        error_line(failure.error.line())
    if reports:
        data = [report_to_dict(r) for r in reports]
        if sass_file is not None:
            write_sass(reports, sass_file)
        if any(d["sass"] is None for d in data):
            note("no SASS instruction mix: pip install 'ncdc[nvrtc]' for cuobjdump and nvdisasm")
        if "c" in (emits or ()):
            note(c_build_note(reports[0].diagram.name, out))
        emit(data if len(data) > 1 else data[0], fmt, lambda: compile_table(reports, out))
    if batch.failures:
        note(f"{len(reports)} of {len(reports) + len(batch.failures)} specs compiled")
        raise typer.Exit(batch.exit_code)


@app.command()
def run(
    spec: Annotated[
        Path, typer.Argument(help="A spec, or a .cu written by ncdc compile.", metavar="SPEC")
    ],
    backend: Annotated[
        str, typer.Option("--backend", help="cpu or cuda.", metavar="cpu|cuda")
    ] = "cpu",
    seed: Annotated[
        int,
        typer.Option("--seed", min=0, help="Seed of the random inputs (0 or more).", metavar="N"),
    ] = 0,
    sanitize: Annotated[
        str | None,
        typer.Option(
            "--sanitize",
            help="cpu backend: address (ASan) or race (TSan).",
            metavar="address|race",
        ),
    ] = None,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory",
            metavar="SIZE",
            help="cpu backend: refuse runs estimated over SIZE (8G, 512M, 50%; default 50%"
            " of the available memory).",
        ),
    ] = None,
    set_: SetOpt = None,
    tile: TileOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    no_tuned: NoTunedOpt = False,
    fmt: FormatOpt = "table",
    counters: Annotated[
        bool,
        typer.Option(
            "--counters",
            help="cpu backend: count global sectors and shared-memory bank conflicts per "
            "warp-wide access, beside the ideal.",
        ),
    ] = False,
    inputs: Annotated[
        Path | None,
        typer.Option(
            "--inputs",
            metavar="FILE.npz",
            help="Run on these arrays (one per input, by name) instead of random inputs.",
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option("--save", metavar="FILE.npz", help="Write the outputs here (by name)."),
    ] = None,
) -> None:
    """Run a diagram's kernels, compare with a float64 reference; exit 1 on a mismatch."""
    from ncdc.cli.views import run_table
    from ncdc.verify.run import memory_limit, run_spec

    outcome = run_spec(
        spec, load_machine(hardware, hw), backend=backend, seed=seed, sanitize=sanitize,
        sizes=parse_assignments(set_ or []), tiles=parse_assignments(tile or [], "--tile"),
        max_memory=memory_limit(max_memory) if max_memory is not None else None,
        use_tuned=not no_tuned, counters=counters, inputs=inputs, save=save,
    )  # fmt: skip
    if save is not None:
        note(f"wrote {save}")
    emit(outcome.to_dict(), fmt, lambda: run_table(outcome))
    for c in outcome.result.checks:
        if c.reference_nonfinite:  # an all-inf output compares equal and says little
            warn(f"{c.name}: {c.reference_nonfinite} reference values are NaN or inf; "
                 "there only NaN or the same inf matches, no error is measured")  # fmt: skip
    if not outcome.result.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
def grad(
    spec: SpecArg,
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            help="Folder to write <name>_fwd.yaml and <name>_bwd.yaml.",
            metavar="DIR",
        ),
    ] = None,
    wrt: Annotated[
        list[str] | None,
        typer.Option(
            "--wrt",
            help="An input to differentiate (repeatable; default: every floating-point input).",
            metavar="NAME",
        ),
    ] = None,
    save: Annotated[
        list[str] | None,
        typer.Option(
            "--save", help="An intermediate the forward must save (repeatable).", metavar="NAME"
        ),
    ] = None,
    recompute: Annotated[
        list[str] | None,
        typer.Option(
            "--recompute",
            help="An intermediate the backward must recompute (repeatable).",
            metavar="NAME",
        ),
    ] = None,
    show_cost: Annotated[
        bool, typer.Option("--cost", help="Also both passes' costs and the unfused step.")
    ] = False,
    deterministic: Annotated[
        bool,
        typer.Option(
            "--deterministic",
            help="A backward that sums in one order, the same bits every run (no atomics; "
            "as schedule: {deterministic: true} in the spec).",
        ),
    ] = False,
    set_: SetOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Derive the training pair: a forward that saves what the backward needs, and the
    backward, with save or recompute chosen by the model's price."""
    from dataclasses import replace

    from ncdc.cli.views import grad_table
    from ncdc.grad.choose import choose_pair
    from ncdc.grad.report import grad_to_dict, pair_paths, write_pair

    if out is None and not show_cost:
        raise UsageError("nothing to do", where="ncdc grad", hint="give -o DIR, or --cost")
    diagram = load_diagram(spec, parse_assignments(set_ or []))
    if deterministic:
        diagram = replace(diagram, schedule=replace(diagram.schedule, deterministic=True))
    if out is not None:
        pair_paths(diagram.name, out)  # refuse files that are there before pricing
    choice = choose_pair(
        diagram, load_machine(hardware, hw), wrt=wrt, save=save or (), recompute=recompute or ()
    )
    paths = write_pair(choice, out) if out is not None else None
    for path in paths or ():
        note(f"wrote {path}")
    data = grad_to_dict(choice, hardware, paths, cost=show_cost)
    emit(data, fmt, lambda: grad_table(choice, data, show_cost))


@app.command()
def draw(
    spec: SpecArg,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="FILE.svg, or FILE.png.", metavar="FILE")
    ],
    plan: Annotated[
        bool, typer.Option("--plan/--plain", help="With the plan's levels and tiles, or bare.")
    ] = True,
    roofline: Annotated[bool, typer.Option("--roofline", help="A roofline.")] = False,
    tiles: Annotated[bool, typer.Option("--tiles", help="Time over tile sizes.")] = False,
    measured: Annotated[
        Path | None,
        typer.Option("--measured", help="Bench JSON of measured points.", metavar="FILE"),
    ] = None,
    set_: SetOpt = None,
    tile: TileOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
) -> None:
    """Draw a diagram (levels in colour), its roofline or its tile heat map as SVG or PNG."""
    from ncdc.draw import draw_to_file, pick_mode

    diagram = load_diagram(spec, parse_assignments(set_ or []))
    mode = pick_mode(not plan, roofline, tiles)
    draw_to_file(
        diagram, load_machine(hardware, hw), out, mode,
        tiles=parse_assignments(tile or [], "--tile"), measured=measured,
    )  # fmt: skip
    note(f"wrote {out}")


# bench, tune and calibrate; then hardware, includes, cache and env (in this order)
from ncdc.cli import gpu, info  # noqa: E402, F401


def _version(value: bool) -> None:
    if value:
        print(f"ncdc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "-V", "--version", callback=_version, is_eager=True, help="Print the version."
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("-q", "--quiet", help="Only data, warnings and errors.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="More detail on stderr.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """ncdc: diagrams in, cost models and kernels out."""
    from ncdc.output import set_verbosity

    set_verbosity(-1 if quiet else 1 if verbose else 0)


class Terminated(Exception):
    """SIGTERM, raised in the main thread so that every `finally` cleans up as on Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


VERBOSITY_FLAGS = ("-q", "--quiet", "-v", "--verbose")


def hoist_verbosity(args: list[str]) -> list[str]:
    """`-q` and `-v` moved to the front, where the root takes them: they are accepted
    anywhere on the line, as `--debug` is (not after `--`, which ends the options).

    >>> hoist_verbosity(["cost", "x.yaml", "-q"])
    ['-q', 'cost', 'x.yaml']
    """
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in VERBOSITY_FLAGS]
    rest = [a for a in args[:end] if a not in VERBOSITY_FLAGS]
    return flags + rest + args[end:]


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning ncdc's errors into one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args  # accepted anywhere on the line, not only before the command
    if debug:
        args = [a for a in args if a != "--debug"]
    args = hoist_verbosity(args)
    signal.signal(signal.SIGTERM, _on_sigterm)
    if not args:  # usage is data the user asked for: stdout, exit 0
        args = ["--help"]
    try:
        code = app(args, prog_name="ncdc", standalone_mode=False)
        if summary := phase_summary(time.perf_counter() - STARTED):
            detail(summary)
    except OSError as e:  # a path that cannot be read or written: bad input, one line
        if debug:
            traceback.print_exc()
        error = file_error(e)
        stderr().print(f"error: {error.line()}", markup=False, soft_wrap=True)
        sys.exit(error.exit_code)
    except Terminated:
        stderr().print("terminated", markup=False)
        sys.exit(143)
    except NcdcError as e:
        if debug:
            traceback.print_exc()
        for line in e.warnings:
            warn(line)
        stderr().print(f"error: {e.line()}", markup=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        stderr().print("interrupted", markup=False)
        sys.exit(130)
    except Exception as e:  # click's usage errors, and anything unexpected
        usage = getattr(e, "format_message", None)
        if usage is not None and not debug:
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "ncdc"
            stderr().print(f"error: {usage()} (hint: {where} --help)", markup=False,
                           soft_wrap=True)  # fmt: skip
            sys.exit(getattr(e, "exit_code", EXIT_BAD_INPUT))
        if debug:
            raise
        stderr().print(
            f"error: internal error: {type(e).__name__}: {e} (hint: rerun with --debug and "
            "report it)",
            markup=False,
            soft_wrap=True,
        )
        sys.exit(70)
    if isinstance(code, int) and code:
        sys.exit(code)
