"""Errors that ncdc reports to a user as one line, with the exit code of the command-line contract.

Every stage raises a subclass of `NcdcError`; the command line prints `error.line()` on stderr
and exits with `error.exit_code`. A traceback is shown only with `--debug`.

    >>> e = SpecError("unknown axis 'z'", where="mm.yaml:4: inputs.A.axes[1]", hint="declare it")
    >>> e.line()
    "mm.yaml:4: inputs.A.axes[1]: unknown axis 'z' (hint: declare it)"
"""

from __future__ import annotations

import errno
import re

# Exit codes (DESIGN.md, "Command line"): 0 ok, 1 a check failed, 2 bad input or usage,
# 3 compile error, 4 no GPU where one is needed.
EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_COMPILE_ERROR = 3
EXIT_NO_GPU = 4


EXCERPT_CHARS = 60


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most the first line of `text`, cut to `limit` characters: an error quotes a value
    from a file, never the file (a spec may be a symbolic link to a secret).

        >>> excerpt("root:x:0:0\\nbin:x:1:1"), excerpt("a" * 80, 8)
        ('root:x:0:0 ...', 'aaaaaaaa...')
    """
    first = text.splitlines()[0] if text else ""
    cut = first[:limit] + ("..." if len(first) > limit else "")
    return cut + (" ..." if len(text.splitlines()) > 1 else "")


# What a terminal or an XML parser must never receive from a user's text: C0 and C1 control
# characters (ESC starts a terminal's escape sequences; XML 1.0 forbids most C0 characters,
# even escaped), lone surrogates (no UTF-8 encoder writes them), the noncharacters U+FFFE
# and U+FFFF, line separators and the bidirectional overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff"
                      "\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # fmt: skip


def inert(text: str) -> str:
    r"""`text` with every control character shown as an escape (`\x1b`, `\u202e`): safe
    on a terminal, in an error line and in an SVG. Tabs and line breaks are kept.

        >>> inert("red \x1b[31m text"), inert("ok")
        ('red \\x1b[31m text', 'ok')
    """
    return _CONTROL.sub(_escaped, text)


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class NcdcError(Exception):
    """An error meant for the user: what went wrong, where, and what to try."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint
        # what the command would have warned about had it gone on: the command line prints
        # these `warning:` lines before the error (a broadcast that made the tensor too big)
        self.warnings: tuple[str, ...] = ()

    def line(self) -> str:
        """The whole error as one line (line breaks anywhere in it are folded)."""
        text = self.message
        if self.where:
            text = f"{self.where}: {text}"
        if self.hint:
            text = f"{text} (hint: {self.hint})"
        return inert(" ".join(text.splitlines()))

    def __str__(self) -> str:
        return self.line()


class SpecError(NcdcError):
    """A diagram spec that cannot be read or is not valid."""


class UsageError(NcdcError):
    """A bad command-line argument or option value."""


class ArrayError(NcdcError, ValueError):
    """An array handed to a kernel that does not fit its diagram: a shape, dtype, layout or
    device the kernel cannot take (also a ValueError, for programs that catch those)."""


class HardwareError(NcdcError):
    """A hardware profile that is missing, malformed or inconsistent."""


class PlanError(NcdcError):
    """A schedule or tile that cannot work: illegal stream, tile over a capacity limit."""


class IndexRangeError(NcdcError):
    """An index tensor with a value outside the axis it selects along: the kernels read
    nothing there and report it, and the run is refused (bad input, exit 2)."""


class CheckFailed(NcdcError):
    """A check that ran and failed: a wrong result, a cost over its baseline."""

    exit_code = EXIT_CHECK_FAILED


class CompileError(NcdcError):
    """The generated source did not compile, or no compiler is available."""

    exit_code = EXIT_COMPILE_ERROR


class NoGpuError(NcdcError):
    """A GPU (or CuPy) is needed and there is none."""

    exit_code = EXIT_NO_GPU


class FileError(NcdcError):
    """A path that cannot be read or written: missing, read-only, full, not a folder."""


_FILE_HINTS = {
    errno.ENOSPC: "free some space, or write elsewhere with -o",
    errno.EDQUOT: "free some space, or write elsewhere with -o",
    errno.EROFS: "write elsewhere with -o",
    errno.EACCES: "check the permissions, or write elsewhere with -o",
    errno.EPERM: "check the permissions, or write elsewhere with -o",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "choose another path",
    errno.EISDIR: "expected a file, found a folder",
}


def file_error(error: OSError) -> FileError:
    """One line (exit 2) for a filesystem error, naming the path and what to try.

    >>> file_error(FileNotFoundError(2, "No such file or directory", "x.yaml")).line()
    'x.yaml: No such file or directory (hint: check the path)'
    """
    where = error.filename if error.filename is not None else None
    reason = error.strerror or str(error)
    hint = _FILE_HINTS.get(error.errno or 0)
    return FileError(reason, where=str(where) if where is not None else None, hint=hint)
