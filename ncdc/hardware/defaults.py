"""The profile a command plans for when its line names none: the environment
(`NCDC_HARDWARE`, `NCDC_ARCH`), then `[tool.ncdc]` in the nearest pyproject.toml (found
walking up from the current folder), then the built-in default. The command line beats
them all; every value says where it came from, so `ncdc -v` and `ncdc env` can tell.

    >>> d = profile_defaults(environ={"NCDC_HARDWARE": "a100"}, cwd=Path("/"))
    >>> d["hardware"].value, d["hardware"].source
    ('a100', 'NCDC_HARDWARE')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncdc.errors import UsageError
from ncdc.files import read_regular

# The keys `[tool.ncdc]` may hold, each with the environment variable that beats it.
KEYS = {"hardware": "NCDC_HARDWARE", "arch": "NCDC_ARCH"}
BUILTIN = "built-in"
MAX_PYPROJECT_BYTES = 1 << 20


@dataclass(frozen=True)
class Default:
    """One default and where it came from: `NCDC_HARDWARE`, `/repo/pyproject.toml
    [tool.ncdc]` or `built-in` (value None: the command's own choice)."""

    key: str
    value: str | None
    source: str

    def describe(self) -> str:
        """`hardware a100 (from NCDC_HARDWARE)`, for `-v`."""
        return f"{self.key} {self.value or 'unset'} (from {self.source})"


def profile_defaults(
    environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> dict[str, Default]:
    """Each key of `KEYS` with its value and source, environment first (see the module)."""
    env = os.environ if environ is None else environ
    found = find_pyproject(Path.cwd() if cwd is None else cwd)
    table = read_tool_table(found) if found is not None else {}
    defaults = {}
    for key, var in KEYS.items():
        if env.get(var):
            defaults[key] = Default(key, env[var], var)
        elif key in table:
            defaults[key] = Default(key, _value(table[key], key, found), f"{found} [tool.ncdc]")
        else:
            defaults[key] = Default(key, None, BUILTIN)
    return defaults


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml in `start` or a folder above it, or None."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_tool_table(path: Path) -> dict[str, Any]:
    """`[tool.ncdc]` of a pyproject.toml ({} when it has none); unknown keys and a file
    TOML cannot read are errors naming the file."""
    parse = _toml_loads()
    if parse is None:  # Python 3.10 without tomli: no project defaults
        return {}
    try:
        data = parse(read_regular(path, MAX_PYPROJECT_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"cannot read it: {e}", where=str(path)) from None
    table = data.get("tool", {}).get("ncdc", {})
    if not isinstance(table, dict):
        raise UsageError("[tool.ncdc] is not a table", where=str(path))
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise UsageError(
            f"unknown key {unknown[0]!r} in [tool.ncdc]",
            where=str(path),
            hint=f"the keys are {', '.join(KEYS)}",
        )
    return table


def _value(value: Any, key: str, path: Path | None) -> str:
    """A `[tool.ncdc]` value: a string; a relative profile path is read from the file's folder."""
    if not isinstance(value, str) or not value:
        raise UsageError(
            f"expected a string for {key}, found {value!r}", where=f"{path} [tool.ncdc]"
        )
    if key == "hardware" and path is not None and value.endswith((".yaml", ".yml")):
        return str(path.parent / value)
    return value


def _toml_loads() -> Any:
    try:
        import tomllib

        return tomllib.loads
    except ImportError:  # Python 3.10
        try:
            import tomli  # type: ignore[import-not-found]

            return tomli.loads
        except ImportError:
            return None
