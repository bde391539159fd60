"""Reading a spec into a `Diagram`: the YAML file or text validated (ncdc.language.validate),
sizes overridden (`--set`), names checked unique across specs.

    >>> d = load_diagram_text('''
    ... ncdc: 1
    ... name: mm
    ... axes: {m: 64, n: 32, k: 16}
    ... inputs: {A: {axes: [m, k], dtype: bf16}, B: {axes: [k, n], dtype: bf16}}
    ... ops: ["C = contract(A, B, over=k)"]
    ... outputs: [C]
    ... ''')
    >>> d.tensor("C").axes, d.tensor("C").dtype
    (('m', 'n'), 'bf16')

Every problem is a `SpecError` whose one line names the file, the line, the YAML path,
what was expected and what was found, with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from ncdc.errors import SpecError, UsageError
from ncdc.language.diagram import MAX_AXIS_SIZE, Diagram
from ncdc.language.names import IDENTIFIER
from ncdc.language.text import did_you_mean, listing
from ncdc.language.validate import Validator, expected_problem
from ncdc.language.yamlsrc import read_yaml_file, read_yaml_text


def load_diagram(path: str | Path, sizes: Mapping[str, int] | None = None) -> Diagram:
    """Read and validate the spec at `path`; `sizes` overrides axis sizes (`--set`)."""
    doc = read_yaml_file(Path(path))
    return with_sizes(Validator(doc).diagram(), sizes)


SPEC_SUFFIXES = (".yaml", ".yml")


def find_specs(paths: Iterable[Path]) -> list[Path]:
    """Every spec file named, or found under a named folder, sorted within each folder."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES)
        elif path.exists():
            found.append(path)
        else:
            raise UsageError("no such file or folder", where=str(path), hint="check the path")
    if not found:
        raise UsageError(
            "no spec files found", where=" ".join(map(str, paths)), hint="specs end in .yaml"
        )
    return found


def spec_names(paths: Iterable[str | Path]) -> dict[Path, str]:
    """The diagram name each spec declares, for the specs whose YAML reads (no validation).

    Two specs with one name would overwrite each other's outputs and baseline entries;
    callers refuse that before doing any work.
    """
    names: dict[Path, str] = {}
    for path in map(Path, paths):
        try:
            data = read_yaml_file(path).data
        except SpecError:
            continue  # reported when the spec itself is loaded
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            names[path] = data["name"]
    return names


def check_unique_names(paths: Iterable[str | Path]) -> None:
    """Refuse, in one line, two specs whose diagrams have one name: their outputs (and
    their baseline entries) would overwrite each other. A spec that does not load is left
    for its own load to report.

        >>> check_unique_names(["diagrams/matmul.yaml", "diagrams/softmax.yaml"])
    """
    seen: dict[str, Path] = {}
    for path, name in spec_names(paths).items():
        if name in seen:
            raise SpecError(
                f"two specs name their diagram '{name}': {seen[name]} and {path}",
                hint="give each diagram its own `name:`",
            )
        seen[name] = path


def load_diagram_text(
    text: str, source: str = "<string>", sizes: Mapping[str, int] | None = None
) -> Diagram:
    """Like `load_diagram`, from YAML text."""
    return with_sizes(Validator(read_yaml_text(text, source)).diagram(), sizes)


def parse_assignments(items: Iterable[str], option: str = "--set") -> dict[str, int]:
    """['q=128', 'x=256'] -> {'q': 128, 'x': 256}; for `--set` and `--tile`."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not IDENTIFIER.match(name):
            raise SpecError(
                f"expected AXIS=SIZE, found '{item}'", where=option, hint=f"{option} q=128"
            )
        try:
            number = int(value.replace("_", ""))
        except ValueError:
            raise SpecError(
                f"expected a whole number for '{name}', found '{value}'", where=option
            ) from None
        if not 1 <= number <= MAX_AXIS_SIZE:
            raise SpecError(
                f"expected a size from 1 to {MAX_AXIS_SIZE} for '{name}', found {number}",
                where=option,
            )
        out[name] = number
    return out


def with_sizes(diagram: Diagram, sizes: Mapping[str, int] | None) -> Diagram:
    """`diagram` with the axis `sizes` given (`--set`), checked as a spec's own sizes are."""
    if not sizes:
        return diagram
    for axis in sizes:
        if axis not in diagram.axes:
            raise SpecError(
                f"unknown axis '{axis}'; the diagram has {listing(diagram.axes)}",
                where=f"--set {axis}",
                hint=did_you_mean(axis, diagram.axes) or "set one of the diagram's axes",
            )
    diagram = replace(diagram, axes={**diagram.axes, **sizes})
    problem = expected_problem(diagram)
    if problem:
        raise SpecError(
            problem[1], where=f"inputs.{problem[0]}.expected (with --set)", hint=problem[2]
        )
    return diagram
