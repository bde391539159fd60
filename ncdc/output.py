"""One way to report: data on stdout as a rich table or as JSON, messages on stderr.

>>> emit({"format": "ncdc.demo/1", "x": 1}, "json", table=lambda: "x = 1")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import multiprocessing
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console  # rich reads COLUMNS: a width the user set holds in a pipe too
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


PROGRESS_AFTER_S = 2.0  # a command still busy after this long says what it is doing


class _Phases:
    """The phases of this command (planning, compiling, running ...), each timed, and the
    one transient status line on stderr that names the current one. The line appears only
    on a terminal, only in the main process, not with `-q`, and only once the command has
    been busy for PROGRESS_AFTER_S: a pipe or a CI log never gets it."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.outer: dict[str, float] = {}  # the outermost phases' times: they do not overlap
        self.stack: list[str] = []
        self.text = ""
        self.lock = threading.RLock()
        self.bar: Any = None
        self.task: Any = None
        self.timer: threading.Timer | None = None

    def enter(self, what: str) -> None:
        with self.lock:
            self.stack.append(what)
            self.times.setdefault(what, 0.0)  # listed in the order the phases began
            self.say(what)
            if len(self.stack) == 1 and self.timer is None and _may_show():
                self.timer = threading.Timer(PROGRESS_AFTER_S, self._show)
                self.timer.daemon = True
                self.timer.start()

    def leave(self, what: str, seconds: float) -> None:
        with self.lock:
            self.stack.pop()
            self.times[what] = self.times.get(what, 0.0) + seconds
            if not self.stack:
                self.outer[what] = self.outer.get(what, 0.0) + seconds
            if self.stack:
                self.say(self.stack[-1])
                return
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.bar is not None:
                self.bar.stop()
                self.bar = None

    def say(self, text: str) -> None:
        with self.lock:
            self.text = text
            if self.bar is not None:
                self.bar.update(self.task, description=text)

    def _show(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if not self.stack or self.bar is not None:
                return
            columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
            self.bar = Progress(*columns, console=stderr(), transient=True)
            self.task = self.bar.add_task(self.text, total=None)
            self.bar.start()


def _may_show() -> bool:
    return (
        VERBOSITY.level >= 0 and multiprocessing.parent_process() is None and stderr().is_terminal
    )


PHASES = _Phases()


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """Time one phase of the command and name it on the status line (see `_Phases`).

    >>> with phase("planning"):
    ...     pass
    >>> "planning" in PHASES.times
    True
    """
    start = time.perf_counter()
    PHASES.enter(what)
    try:
        yield
    finally:
        PHASES.leave(what, time.perf_counter() - start)


def progress(text: str) -> None:
    """How far the current phase has come, for the status line: `compiling 3/12`."""
    PHASES.say(text)


def phase_summary(total_s: float) -> str | None:
    """`time: planning 0.12 s, running 3.40 s, start-up and output 0.30 s; 3.82 s in all`
    (the phases in the order they began; nested ones count in their own line only), or
    None when the command had no phase."""
    if not PHASES.times:
        return None
    parts = [f"{name} {s:.2f} s" for name, s in PHASES.times.items()]
    rest = total_s - sum(PHASES.outer.values())
    parts.append(f"start-up and output {max(rest, 0.0):.2f} s")
    return f"time: {', '.join(parts)}; {total_s:.2f} s in all"


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
        console = stdout()
        console.print(fit_width(table(), console))


def fit_width(renderable: Any, console: Console) -> Any:
    """`renderable` laid out for `console.width` columns without cutting a word or a
    number: a table (alone or in a group) whose columns fit at their narrowest gets widths
    that wrap only between words; one that cannot fit is shown as records, a block of
    `column: value` lines per row. A caption goes below, left-aligned, wrapped between
    phrases at the terminal's width (`wrap_phrases`)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if isinstance(renderable, Group):
        return Group(*(fit_width(r, console) for r in renderable.renderables))
    if not isinstance(renderable, Table):
        return renderable
    if isinstance(renderable.caption, str):
        renderable.caption = wrap_phrases(renderable.caption, console.width)
    widths = _column_widths(renderable, console)
    if widths is None:
        return as_records(renderable)
    for column, width in zip(renderable.columns, widths, strict=True):
        column.width = width
    if not renderable.caption:
        return renderable
    caption = Text(str(renderable.caption), style="table.caption")
    renderable.caption = None  # below the table at the terminal's width, not the table's
    return Group(renderable, caption)


def wrap_phrases(text: str, width: int, indent: str = "  ") -> str:
    """`text` wrapped `width` wide between phrases (after a comma, semicolon or colon), so
    a count stays beside its unit; a phrase wider than a line wraps between words. Lines
    after the first of each paragraph are indented.

        >>> print(wrap_phrases("main loop: 4 tensor, 45 integer, 5 barrier", 28))
        main loop: 4 tensor,
          45 integer, 5 barrier
    """
    out: list[str] = []
    for paragraph in text.splitlines():
        line = ""
        for phrase in re.split(r"(?<=[,;:]) ", paragraph):
            pieces = [phrase] if len(indent) + len(phrase) <= width else phrase.split(" ")
            for piece in pieces:
                if line and len(line) + 1 + len(piece) > width:
                    out.append(line)
                    line = indent + piece
                else:
                    line = f"{line} {piece}" if line else piece
        out.append(line)
    return "\n".join(out)


def _column_widths(table: Any, console: Console) -> list[int] | None:
    """Content widths that fit `table` in the console without breaking a word (None when
    even the narrowest do not fit): each column gets its longest word, and what is left is
    shared in proportion to how much wider each would like to be. This reads rich's own
    column measure (a private method), so the layout agrees with what rich draws."""
    options = console.options
    ranges = [table._measure_column(console, options, c) for c in table.columns]
    pads = [table._get_padding_width(i) for i in range(len(table.columns))]
    room = options.max_width - table._extra_width
    least = sum(r.minimum for r in ranges)
    most = sum(r.maximum for r in ranges)
    if least > room:
        return None
    if most <= room:
        return [r.maximum - pad for r, pad in zip(ranges, pads, strict=True)]
    return [w - pad for w, pad in zip(_share(ranges, room - least), pads, strict=True)]


def _share(ranges: list[Any], spare: int) -> list[int]:
    """Column widths from their narrowest: the columns that want least more get all they
    want first (labels and numbers then never wrap), the widest share what is left."""
    widths = [r.minimum for r in ranges]
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].maximum - ranges[i].minimum)
    for n, i in enumerate(order):
        want = ranges[i].maximum - ranges[i].minimum
        rest = len(order) - n
        give = min(want, spare // rest) if want * rest > spare else want
        widths[i] += give
        spare -= give
    return widths


def as_records(table: Any) -> Any:
    """A table too wide for the terminal, one record per row: the first column's value as
    a heading, then `column: value` for the others, so no value is cut or split mid-word."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    headers = [str(c.header) for c in table.columns]
    rows = list(zip(*(list(c.cells) for c in table.columns), strict=True))
    for i, row in enumerate(rows):
        if i:
            grid.add_row("", "")
        grid.add_row(f"{headers[0]}:", row[0])
        for header, cell in zip(headers[1:], row[1:], strict=True):
            grid.add_row(f"  {header}:" if header else "  ", cell)
    parts: list[Any] = []
    if table.title:
        parts.append(Text(str(table.title), style="italic"))
    parts.append(grid)
    if table.caption:
        parts.append(Text(str(table.caption)))
    return Group(*parts)


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


def plain(text: str) -> Any:
    """`text` for `emit` as it is: no markup read in it (`[tool.ncdc]` stays), control
    characters made visible."""
    from rich.text import Text

    return Text(inert(text))


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
