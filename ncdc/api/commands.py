"""`ncdc.cost`, `ncdc.compile` and `ncdc.check`: the commands of the same names as functions.

Each returns what its command prints with `--format json`, and the command line calls them
(`ncdc.cli.main`), so a program and a terminal cannot disagree. A spec is a path, YAML text
or a loaded `Diagram`; `sizes` is `--set`, `tiles` is `--tile`, `hw` is `--hw`.

    >>> import ncdc
    >>> ncdc.cost("diagrams/softmax.yaml", sizes={"m": 1024})["bound"]
    'hbm'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, Union

from ncdc.errors import NcdcError, UsageError
from ncdc.hardware.load import load_hardware
from ncdc.hardware.machine import Hardware
from ncdc.hardware.overrides import apply_overrides
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram, load_diagram_text, with_sizes

if TYPE_CHECKING:
    from ncdc.backends.batch import CompileBatch
    from ncdc.model.values import Plan
    from ncdc.verify.gate import SpecCheck

SpecLike = Union[str, "os.PathLike[str]", Diagram]
PathsLike = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]
HardwareLike = Union[str, "os.PathLike[str]", Hardware]


def diagram_of(spec: SpecLike, sizes: Mapping[str, int] | None = None) -> Diagram:
    """The diagram `spec` names: a loaded Diagram (resized), YAML text (`is_text`) or the
    path of a spec file."""
    if isinstance(spec, Diagram):
        return with_sizes(spec, sizes)
    if is_text(spec):
        return load_diagram_text(spec, "<string>", sizes)
    return load_diagram(Path(spec), sizes)


def is_text(spec: SpecLike) -> TypeGuard[str]:
    """Whether `spec` is a spec's YAML text rather than a path: a string with a line break,
    or a one-line YAML flow mapping (`{ncdc: 1, name: ...}`)."""
    return isinstance(spec, str) and ("\n" in spec or spec.lstrip().startswith("{"))


def machine(hardware: HardwareLike, hw: Sequence[str] | None = None) -> Hardware:
    """A profile (its name, its YAML file, or a Hardware) with `--hw` overrides applied."""
    profile = hardware if isinstance(hardware, Hardware) else load_hardware(str(hardware))
    return apply_overrides(profile, list(hw or []))


def _is_folder(spec: SpecLike) -> bool:
    return not isinstance(spec, Diagram) and not is_text(spec) and (Path(spec).is_dir())


# ---- cost ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostReport:
    """What `ncdc cost` found: the JSON it prints, the plans behind its table, the notes
    it prints on stderr."""

    data: dict[str, Any]
    plans: tuple[Plan, ...]  # ranked (one spec) or one per spec (a folder)
    notes: tuple[str, ...]  # lines for stderr
    warnings: tuple[str, ...]  # lines for stderr that -q keeps (buildable.spec_warnings)
    detail: str  # where the tiles came from (a folder: "")
    tuned: bool  # the tiles came from `ncdc tune`: the detail is a note, not a detail
    footer: str | None  # the lines under the table
    folder: bool


def cost_report(
    spec: SpecLike, *, sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None, hardware: HardwareLike = "h200",
    hw: Sequence[str] | None = None, arch: str | None = None, top_k: int = 1,
    abstract: bool = False, use_tuned: bool = True, compile: bool = False,
) -> CostReport:  # fmt: skip
    """`ncdc cost` (see `cost`), with what its table and notes show."""
    from ncdc.backends.targets import arch_notes, target_hardware
    from ncdc.model.records import plan_to_dict
    from ncdc.verify.buildable import (
        cost_note,
        is_model_only,
        rank_buildable,
        spec_warnings,
        with_abstract,
    )

    profile = machine(hardware, hw)
    target = target_hardware(profile, arch)
    model_only = is_model_only(target, abstract)
    if _is_folder(spec):
        return _folder_cost(Path(spec), target, sizes, tiles, abstract, model_only)  # type: ignore[arg-type]
    diagram = diagram_of(spec, sizes)
    warnings = spec_warnings(diagram, target, abstract)
    notes = list(arch_notes(diagram, profile, tiles, arch))
    try:
        ranked, source = rank_buildable(
            diagram, target, top_k, tiles, abstract=abstract, use_tuned=use_tuned, arch=arch,
            compile=compile,
        )  # fmt: skip
    except NcdcError as e:  # the warnings often say why (a broadcast that grew a tensor)
        e.warnings = (*e.warnings, *warnings)
        raise
    notes += ranked[0].notes
    data = {**with_abstract(plan_to_dict(ranked[0]), model_only), "tiles_from": source.to_dict()}
    return CostReport(
        data, tuple(ranked), tuple(notes), warnings, source.describe(), source.kind == "tuned",
        cost_note(ranked[:1], abstract), folder=False,
    )  # fmt: skip


def _folder_cost(
    folder: Path, target: Hardware, sizes: Mapping[str, int] | None,
    tiles: Mapping[str, int] | None, abstract: bool, model_only: bool,
) -> CostReport:  # fmt: skip
    from ncdc.language.load import find_specs
    from ncdc.verify.buildable import (
        cost_note,
        plan_buildable_specs,
        spec_warnings,
        with_abstract,
    )
    from ncdc.verify.gate import baseline_from_plans

    plans = plan_buildable_specs(find_specs([folder]), target, sizes, tiles, abstract=abstract)
    data = with_abstract(baseline_from_plans(plans), model_only)
    warnings = tuple(w for p in plans for w in spec_warnings(p.graph.diagram, target, abstract))
    return CostReport(data, tuple(plans), (), warnings, "", False, cost_note(plans, abstract), True)


def cost(spec: SpecLike, **options: Any) -> dict[str, Any]:
    """What `ncdc cost SPEC --format json` prints: predicted cost per memory level, FLOPs,
    time, bound and tiles (a folder of specs: its baseline). Options as `cost_report`:
    sizes, tiles, hardware, hw, arch, top_k, abstract, use_tuned, compile."""
    return cost_report(spec, **options).data


# ---- compile ---------------------------------------------------------------------------


def compile_target(
    hardware: HardwareLike | None, hw: Sequence[str] | None, arch: str | None
) -> tuple[Hardware, str]:
    """The profile `ncdc compile` plans with (`--arch` alone: that architecture's; the
    named one; else h200) and a note saying why when it is not the one named."""
    from ncdc.backends.targets import profile_for_arch

    if isinstance(hardware, Hardware):
        return machine(hardware, hw), ""
    name, why = profile_for_arch(None if hardware is None else str(hardware), arch)
    return machine(name, hw), why


def compile_batch(
    spec: SpecLike, *, out: str | os.PathLike[str] = ".", arch: str | None = None,
    sizes: Mapping[str, int] | None = None, tiles: Mapping[str, int] | None = None,
    hardware: HardwareLike | None = None, hw: Sequence[str] | None = None,
    use_cache: bool = True, strict: bool = False, jobs: int | None = None,
    use_tuned: bool = True, emit: Sequence[str] = (),
) -> CompileBatch:  # fmt: skip
    """`ncdc compile`: every spec compiled for `arch` (default: the profile's) and its
    files written into `out`, planned for `compile_target`'s profile; `emit` adds the
    exports ("c": `<name>.h` and `.c`; "torch": `<name>.py`)."""
    from ncdc.backends.batch import compile_diagram, compile_specs
    from ncdc.backends.exports import EMITS
    from ncdc.language.load import find_specs

    unknown = [e for e in emit if e not in EMITS]
    if unknown:
        raise UsageError(f"unknown export {unknown[0]!r}", hint=f"emit one of {', '.join(EMITS)}")
    profile, _ = compile_target(hardware, hw, arch)
    options: dict[str, Any] = dict(
        arch=arch,
        tiles=tiles,
        use_cache=use_cache,
        strict=strict,
        use_tuned=use_tuned,
        emit=tuple(emit),
    )
    if isinstance(spec, Diagram) or is_text(spec):
        return compile_diagram(diagram_of(spec, sizes), profile, out_dir=Path(out), **options)
    specs = find_specs([Path(spec)])
    return compile_specs(specs, profile, out_dir=Path(out), sizes=sizes, jobs=jobs, **options)


def compile(spec: SpecLike, **options: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """What `ncdc compile SPEC --format json` prints (one spec: an object; a folder: a
    list), after writing each diagram's .cu, .cubin and .json into `out` (default: the
    current folder). Options as `compile_batch`. A spec that fails raises its error (the
    others of a folder are written first)."""
    from ncdc.backends.outputs import report_to_dict

    batch = compile_batch(spec, **options)
    if batch.failures:
        raise batch.failures[0].error
    data = [report_to_dict(r) for r in batch.reports]
    return data if len(data) > 1 or _is_folder(spec) else data[0]


# ---- check -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckReport:
    """What `ncdc check` found: each spec's outcome, and the costs that grew."""

    checks: tuple[SpecCheck, ...]
    regressions: tuple[str, ...]

    @property
    def data(self) -> dict[str, Any]:
        from ncdc.verify.gate import check_to_dict

        return check_to_dict(self.checks, self.regressions)


def check_report(
    paths: PathsLike, *, hardware: HardwareLike = "h200",
    arch: str | None = None, baseline: str | os.PathLike[str] | None = None,
    tolerance: str | float = "5%",
) -> CheckReport:  # fmt: skip
    """`ncdc check` (see `check`)."""
    from ncdc.backends.targets import target_hardware
    from ncdc.language.load import find_specs
    from ncdc.verify.gate import check_spec, gate, parse_tolerance, read_baseline, refuse_twins

    limit = tolerance if isinstance(tolerance, float) else parse_tolerance(str(tolerance))
    base = read_baseline(Path(baseline)) if baseline is not None else None
    listed = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    specs = find_specs([Path(p) for p in listed])
    target = target_hardware(machine(hardware), arch)
    checks = refuse_twins([check_spec(path, target) for path in specs])
    regressions: list[str] = []
    if all(c.ok for c in checks) and base is not None and baseline is not None:
        regressions = gate(specs, target, base, Path(baseline), limit)
    return CheckReport(checks, tuple(regressions))


def check(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], **options: Any
) -> dict[str, Any]:
    """What `ncdc check PATHS --format json` prints: each spec valid (planned and rendered,
    as `compile` would build it) or the error naming its file and line, and with
    `baseline` every predicted time or HBM traffic that grew past `tolerance`. Options:
    hardware, arch, baseline, tolerance."""
    return check_report(paths, **options).data
