"""One way to report: data on stdout as a rich table or as JSON, messages on stderr.

>>> emit({"format": "ncdc.demo/1", "x": 1}, "json", table=lambda: "x = 1")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console, RenderableType

from ncdc.errors import UsageError

FORMATS = ("table", "json")

# Data goes to stdout, diagnostics to stderr; both fall back to plain text when piped.
# Piped output gets a fixed, wide layout so tables do not fold at 80 columns in CI logs.
stdout = Console(soft_wrap=False, highlight=False)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=False, highlight=False, width=160)
stderr = Console(stderr=True, highlight=False)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(
            f"unknown format '{fmt}'; expected one of {', '.join(FORMATS)}",
            where="--format",
            hint="--format json for scripts, table for people",
        )
    return fmt


def emit(data: Any, fmt: str, table: Callable[[], RenderableType]) -> None:
    """Print `data` as JSON, or the rich renderable that `table()` builds."""
    if check_format(fmt) == "json":
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")
    else:
        stdout.print(table())


def note(message: str) -> None:
    """A message for the person at the terminal (stderr)."""
    stderr.print(message, markup=False)


def json_number(x: float | None) -> float | None:
    """JSON has no NaN or infinity: a figure that does not exist is null."""
    return None if x is None or not math.isfinite(x) else float(x)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
