"""The commands that time kernels on a GPU: `bench`, `tune` and `calibrate`."""

# No `from __future__ import annotations` here: typer reads every command's annotations at
# start-up, and strings would have to be evaluated first (a tenth of `ncdc cost`'s time).
from pathlib import Path
from typing import Annotated, Any

import typer

from ncdc.cli.options import (
    ArchOpt,
    FormatOpt,
    HardwareOpt,
    HwOpt,
    SetOpt,
    TileOpt,
    app,
    load_machine,
)
from ncdc.hardware.load import load_hardware
from ncdc.language.load import parse_assignments
from ncdc.output import detail, emit, note


@app.command()
def bench(
    spec: Annotated[Path, typer.Argument(help="A spec, or a folder of specs.", metavar="SPEC")],
    set_: SetOpt = None,
    tile: TileOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    warmup_ms: Annotated[
        float, typer.Option("--warmup-ms", help="Warm-up, in ms.", metavar="MS")
    ] = 25.0,
    rep_ms: Annotated[
        float, typer.Option("--rep-ms", help="Timed repetitions, in ms.", metavar="MS")
    ] = 100.0,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Skip the library baselines.")
    ] = False,
    fmt: FormatOpt = "table",
) -> None:
    """Time kernels on the GPU beside cuBLAS, SDPA or PyTorch and a device copy."""
    from ncdc.language.load import find_specs
    from ncdc.measure.bench import bench_specs, bench_table, bench_to_dict

    results = bench_specs(
        find_specs([spec]), load_machine(hardware, hw), sizes=parse_assignments(set_ or []),
        tiles=parse_assignments(tile or [], "--tile"), warmup_ms=warmup_ms, rep_ms=rep_ms,
        baseline=not no_baseline,
    )  # fmt: skip
    data = [bench_to_dict(r) for r in results]
    emit(data if len(data) > 1 else data[0], fmt, lambda: bench_table(results))


@app.command()
def tune(
    spec: Annotated[Path, typer.Argument(help="A spec, or a folder of specs.", metavar="SPEC")],
    set_: SetOpt = None,
    hardware: HardwareOpt = "h200",
    hw: HwOpt = None,
    arch: ArchOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", help="Tilings to time.", metavar="K")] = 4,
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", min=1, metavar="N", help="Spread over N GPUs (default: all)."),
    ] = None,
    ray: Annotated[
        str | None, typer.Option("--ray", metavar="ADDRESS", help="Spread over a Ray cluster.")
    ] = None,
    backend: Annotated[
        str, typer.Option("--backend", metavar="cuda|cpu", help="cpu: correctness only.")
    ] = "cuda",
    fmt: FormatOpt = "table",
) -> None:
    """Time the model's best tilings on the GPU and keep the fastest for later commands."""
    from ncdc.measure.tune import tune_spec, tune_table, tune_to_dict

    sizes = parse_assignments(set_ or [])
    machine = load_machine(hardware, hw)
    if spec.is_file() and gpus is None and ray is None and backend == "cuda":
        result = tune_spec(spec, machine, sizes=sizes, top_k=top_k)
        emit(tune_to_dict(result), fmt, lambda: tune_table(result))
        return
    from ncdc.language.load import find_specs
    from ncdc.measure.distribute import tune_specs

    results = tune_specs(find_specs([spec]), machine, top_k=top_k, backend=backend, gpus=gpus,
                         ray=ray, sizes=sizes)  # fmt: skip
    emit([tune_to_dict(r) for r in results], fmt, lambda: _tables([tune_table(r) for r in results]))


def _tables(tables: list) -> Any:
    from rich.console import Group

    return Group(*tables)


@app.command()
def calibrate(
    out: Annotated[
        Path, typer.Option("-o", "--out", help="The profile YAML to write.", metavar="FILE")
    ] = Path("calibrated.yaml"),
    hardware: HardwareOpt = "h200",
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sizes and repetitions.")] = False,
    fmt: FormatOpt = "table",
) -> None:
    """Measure this GPU and write a profile (from a built-in one) with what it measured."""
    from ncdc.cli.views import calibration_table
    from ncdc.measure.calibrate import calibrate as measure_gpu

    found = measure_gpu(load_hardware(hardware), out, quick=quick, on_stage=detail)
    note(f"wrote {out}: ncdc cost SPEC --hardware {out} prices with it")
    emit(found, fmt, lambda: calibration_table(found))
