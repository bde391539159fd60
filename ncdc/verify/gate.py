"""The CI cost gate: predicted time and top-level bytes per diagram, kept in one JSON file,
and a comparison that names every figure that grew past a tolerance.

A baseline records what it was made for (hardware profile, arch, ncdc version); a baseline
made for something else, an empty one or a malformed one is refused (exit 2), never
silently passed. Tolerances are a percentage (`5%`) or a fraction below 1 (`0.05`).

    >>> base = {"format": "ncdc.baseline/1", "diagrams": {"mm": {"predicted_time_s": 1.0,
    ...         "hbm_bytes": 100}}}
    >>> cur = {"format": "ncdc.baseline/1", "diagrams": {"mm": {"predicted_time_s": 1.2,
    ...        "hbm_bytes": 100}}}
    >>> compare_to_baseline(cur, base, 0.05)
    ['mm: predicted_time_s grew from 1 to 1.2 (+20.0%, tolerance 5.0%)']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncdc.bounded import read_json
from ncdc.errors import NcdcError, SpecError, UsageError, inert
from ncdc.hardware.machine import Hardware
from ncdc.language.load import check_unique_names, load_diagram, spec_names
from ncdc.model.values import Plan
from ncdc.plan.search import plan_diagram
from ncdc.version import __version__

FORMAT = "ncdc.baseline/1"
FIGURES = ("predicted_time_s", "hbm_bytes")
# Beyond these a figure is no kernel's (a day on one GPU; 2**64 bytes, 16 EiB, through its
# memory), and a baseline holding one would let every regression pass.
FIGURE_LIMITS = {"predicted_time_s": 86400.0, "hbm_bytes": float(2**64)}
MAX_BASELINE_BYTES = 64 << 20  # about 300 bytes a diagram
MADE_FOR = ("hardware", "arch", "ncdc_version")  # what must match between two baselines
_WRITE_HINT = "write one with `ncdc cost FOLDER --format json > FILE`"


def baseline_from_plans(plans: Iterable[Plan]) -> dict[str, Any]:
    """One object for a folder of diagrams: per diagram, its predicted time and top bytes."""
    diagrams: dict[str, Any] = {}
    hardware, arch = set(), set()
    for plan in plans:
        hardware.add(plan.graph.hardware.name)
        arch.add(plan.graph.hardware.arch)
        diagrams[plan.graph.diagram.name] = {
            "predicted_time_s": plan.predicted_time_s,
            "hbm_bytes": plan.top_bytes,
            "bound": plan.bound,
        }
    return {
        "format": FORMAT,
        "ncdc_version": __version__,
        "hardware": sorted(hardware),
        "arch": sorted(arch),
        "diagrams": diagrams,
    }


def compare_to_baseline(
    current: dict[str, Any], baseline: dict[str, Any], tolerance: float
) -> list[str]:
    """One message per diagram and figure that grew by more than `tolerance` (0.05 = 5%).

    Diagrams only in one of the two are not compared; figures that shrank pass.
    """
    messages = []
    old = baseline.get("diagrams", {})
    for name, figures in sorted(current.get("diagrams", {}).items()):
        if name not in old:
            continue
        for figure in FIGURES:
            before, after = old[name].get(figure), figures.get(figure)
            if before is None or after is None:
                continue
            if after > before * (1 + tolerance):
                growth = (after / before - 1) * 100 if before else float("inf")
                messages.append(
                    f"{name}: {figure} grew from {before:.6g} to {after:.6g} "
                    f"(+{growth:.1f}%, tolerance {tolerance * 100:.1f}%)"
                )
    return messages


def parse_tolerance(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05; a bare number of 1 or more (is `5` 5% or 500%?), NaN,
    infinity, a negative or anything else is a UsageError.

        >>> parse_tolerance("5%"), parse_tolerance("0.05"), parse_tolerance("0")
        (0.05, 0.05, 0.0)
    """
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1] if percent else raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (not percent and value >= 1):
        raise UsageError(
            f"expected a tolerance such as 5% or 0.05, found '{text}'",
            where="--tolerance",
            hint="a percentage with %, or a fraction below 1; not negative, not NaN",
        )
    return value / 100 if percent else value


def plan_specs(
    paths: Iterable[Path],
    hardware: Hardware,
    sizes: Mapping[str, int] | None = None,
    tiles: Mapping[str, int] | None = None,
) -> list[Plan]:
    """The best plan of every spec file in `paths`, in order (for a folder of diagrams).
    Two specs with one diagram name are refused (their baseline entries would collide)."""
    paths = list(paths)
    check_unique_names(paths)
    return [plan_diagram(load_diagram(path, sizes), hardware, tiles) for path in paths]


def read_baseline(path: Path) -> dict[str, Any]:
    """A baseline written by `ncdc cost FOLDER --format json`, checked for shape."""
    try:
        data = read_json(path, MAX_BASELINE_BYTES, what="a baseline (JSON)", error=UsageError)
    except OSError as error:
        raise UsageError(
            f"cannot read baseline: {error.strerror or error}", where=str(path), hint=_WRITE_HINT
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(
            f"expected a baseline with format {FORMAT!r}", where=str(path), hint=_WRITE_HINT
        )
    diagrams = data.get("diagrams")
    if not isinstance(diagrams, dict) or not diagrams:
        raise UsageError(
            "the baseline lists no diagrams, so it would pass anything",
            where=str(path),
            hint=_WRITE_HINT,
        )
    for name, figures in diagrams.items():
        _check_figures(path, name, figures)
    return data


def _check_figures(path: Path, name: str, figures: Any) -> None:
    ok = isinstance(figures, dict) and all(
        isinstance(figures.get(f), (int, float))
        and not isinstance(figures.get(f), bool)
        and math.isfinite(figures[f])
        and figures[f] >= 0
        for f in FIGURES
    )
    if not ok:
        raise UsageError(
            f"baseline entry '{name}' needs {' and '.join(FIGURES)} as numbers",
            where=str(path),
            hint=_WRITE_HINT,
        )
    for figure, most in FIGURE_LIMITS.items():
        if figures[figure] > most:  # a baseline of 1e308 s would pass any regression
            raise UsageError(
                f"baseline entry '{name}' has {figure} {figures[figure]:.6g}, beyond any "
                f"kernel's ({most:.3g})", where=str(path), hint=_WRITE_HINT,
            )  # fmt: skip


def check_made_for(current: dict[str, Any], baseline: dict[str, Any], path: Path) -> None:
    """Refuse a baseline made for another profile, arch or ncdc version: its figures are
    not comparable, and comparing them would pass or fail for the wrong reason."""
    for field in MADE_FOR:
        here, there = current.get(field), baseline.get(field)
        if here != there:
            raise UsageError(
                f"the baseline was made for {field} {_show(there)}, this run is for {_show(here)}",
                where=str(path),
                hint="regenerate it with `ncdc cost FOLDER --format json > FILE` here",
            )


def gate(
    specs: Iterable[Path], hardware: Hardware, base: dict[str, Any], path: Path, tolerance: float
) -> list[str]:
    """`ncdc check --baseline`: plan every spec, refuse a baseline made for something else,
    and name every figure that grew past `tolerance`."""
    current = baseline_from_plans(plan_specs(specs, hardware))
    check_made_for(current, base, path)
    return compare_to_baseline(current, base, tolerance)


def _show(value: Any) -> str:
    if value is None:
        return "(not recorded)"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


# ------------------------------------------------------------------ `ncdc check` reporting

CHECK_FORMAT = "ncdc.check/1"
CHECK_FORMATS = ("table", "json", "github")


@dataclass(frozen=True)
class SpecCheck:
    """One spec's validation: ok, or the error with the file and line it names."""

    path: str
    error: str = ""  # the error's one line, empty when valid
    line: int | None = None
    warnings: tuple[str, ...] = ()  # ncdc.verify.buildable.spec_warnings, for a spec that loads

    @property
    def ok(self) -> bool:
        return not self.error


def check_spec(path: Path, hardware: Hardware) -> SpecCheck:
    """Load `path`, plan it and render its kernels (`buildable.check_buildable`, no NVRTC);
    the first error, if any, as a SpecCheck."""
    from ncdc.verify.buildable import check_buildable, spec_warnings

    warnings: tuple[str, ...] = ()
    try:
        diagram = load_diagram(path)
        warnings = spec_warnings(diagram, hardware)
        check_buildable(diagram, hardware)
    except NcdcError as e:
        return SpecCheck(str(path), e.line(), _line_of(e.where, str(path)), warnings)
    return SpecCheck(str(path), warnings=warnings)


def refuse_twins(checks: Sequence[SpecCheck]) -> tuple[SpecCheck, ...]:
    """`checks` with every valid spec whose diagram name an earlier valid one already has
    marked bad, as `compile` and `cost` refuse the pair (their outputs and baseline
    entries would overwrite each other)."""
    names = spec_names([c.path for c in checks if c.ok])
    first: dict[str, str] = {}
    out = []
    for c in checks:
        name = names.get(Path(c.path)) if c.ok else None
        if name is not None and name in first:
            error = SpecError(
                f"two specs name their diagram '{name}': {first[name]} and {c.path}",
                hint="give each diagram its own `name:`",
            )  # fmt: skip
            c = SpecCheck(c.path, error.line(), None, c.warnings)
        elif name is not None:
            first[name] = c.path
        out.append(c)
    return tuple(out)


def _line_of(where: str | None, path: str) -> int | None:
    """The line in `where` ("file.yaml:4: inputs.A") when it names `path`."""
    if where and where.startswith(path + ":"):
        head = where[len(path) + 1 :].split(":", 1)[0]
        return int(head) if head.isdigit() else None
    return None


def check_to_dict(checks: Iterable[SpecCheck], regressions: Iterable[str] = ()) -> dict:
    """`ncdc check --format json` (schema: ncdc/schemas/check.schema.json)."""
    checks = list(checks)
    return {
        "format": CHECK_FORMAT,
        "ok": all(c.ok for c in checks) and not list(regressions),
        "valid": sum(c.ok for c in checks),
        "total": len(checks),
        "specs": [
            {
                "path": c.path,
                "ok": c.ok,
                "error": c.error or None,
                "line": c.line,
                "warnings": list(c.warnings),
            }
            for c in checks
        ],  # fmt: skip
        "regressions": list(regressions),
    }


def github_annotations(checks: Iterable[SpecCheck], regressions: Iterable[str] = ()) -> str:
    """GitHub Actions workflow commands: one `::error` per bad spec and per regression,
    one `::warning` per warning.

    >>> print(github_annotations([SpecCheck("a.yaml", "a.yaml:3: x: bad", 3)]))
    ::error file=a.yaml,line=3::a.yaml:3: x: bad
    """
    lines = []
    for c in checks:
        for w in c.warnings:
            line = _line_of(w.split(": ", 1)[0], c.path)
            at = f",line={line}" if line is not None else ""
            lines.append(f"::warning file={_escape_property(c.path)}{at}::{_escape_data(w)}")
        if not c.ok:
            where = f"file={_escape_property(c.path)}"
            if c.line is not None:
                where += f",line={c.line}"
            lines.append(f"::error {where}::{_escape_data(c.error)}")
    lines += [f"::error title=cost regression::{_escape_data(r)}" for r in regressions]
    return "\n".join(lines)


def _escape_data(text: str) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return inert(text)  # a terminal shows a CI log too


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
