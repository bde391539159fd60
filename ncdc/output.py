"""One way to report: data on stdout as a rich table or as JSON, messages on stderr.

>>> emit({"format": "ncdc.demo/1", "x": 1}, "json", table=lambda: "x = 1")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ncdc.errors import UsageError, inert

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

FORMATS = ("table", "json")


# rich is imported when something is printed through it, not for JSON on stdout: it is a
# good part of a short command's start-up time.
@functools.cache
def stdout() -> Console:
    """Data: a table when it goes to a terminal; piped output gets a fixed, wide layout so
    tables do not fold at 80 columns in CI logs."""
    from rich.console import Console

    # emoji=False: a user's ":x:" in a name or doc stays ":x:" (markup is escaped by views).
    console = Console(soft_wrap=False, highlight=False, emoji=False)
    if console.is_terminal:
        return console
    return Console(soft_wrap=False, highlight=False, emoji=False, width=160)


@functools.cache
def stderr() -> Console:
    """Diagnostics; plain text when piped."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)


@dataclass
class _Verbosity:
    level: int = 0  # -1 quiet (-q), 0 normal, 1 verbose (-v)


VERBOSITY = _Verbosity()


def set_verbosity(level: int) -> None:
    """-q (-1) hides notes; -v (1) shows details; warnings and errors always show."""
    VERBOSITY.level = level


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
        stdout().print(table())


def note(message: str) -> None:
    """A message for the person at the terminal (stderr); `-q` hides it."""
    if VERBOSITY.level >= 0:
        stderr().print(inert(message), markup=False, soft_wrap=True)


def detail(message: str) -> None:
    """A message shown only with `-v`."""
    if VERBOSITY.level > 0:
        stderr().print(inert(message), markup=False, soft_wrap=True)


def warn(message: str) -> None:
    """`warning: message` on stderr, one line, shown even with `-q`."""
    stderr().print(f"warning: {inert(message)}", markup=False, soft_wrap=True)


def error_line(message: str) -> None:
    """`error: message` on stderr, one line."""
    stderr().print(f"error: {inert(message)}", markup=False, soft_wrap=True)


def safe_markup(text: str) -> str:
    r"""A user's text (a doc, a path, a profile's title) for a rich renderable: read as
    plain text, never as markup, with control characters made visible (ncdc.errors.inert).

        >>> print(safe_markup("[red]x\x1b"))
        \[red]x\x1b
    """
    from rich.markup import escape

    return escape(inert(text))


def json_number(x: float | None) -> float | None:
    """JSON has no NaN or infinity: a figure that does not exist is null."""
    return None if x is None or not math.isfinite(x) else float(x)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
