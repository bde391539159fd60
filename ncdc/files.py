"""Writing files so that no reader ever sees half of one, and an interrupt leaves nothing.

Files get the mode a plain `open()` would give them (0666 less the umask), not the 0600 of
a temporary file.

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
    >>> write_together({folder / "a.cu": b"1", folder / "a.json": b"2"})
    >>> sorted(p.name for p in folder.iterdir())
    ['a.cu', 'a.json']
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path


@functools.cache
def file_mode() -> int:
    """0666 less the process umask (read once; the umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _stage(path: Path, data: bytes) -> str:
    """`data` in a temporary file beside `path`, flushed; its name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), file_mode())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    The rename is atomic on POSIX file systems, so `path` holds either its old content or
    all of `data`; the temporary file is removed if anything (Ctrl-C included) interrupts.
    """
    write_together({path: data})


def write_together(files: Mapping[Path, bytes]) -> None:
    """Write several files so that either all of them change or none does on an error.

    Every file is staged first (a full disk or a read-only folder fails here, before any
    file is touched); only then are they renamed into place, which does not need space.
    """
    staged: dict[Path, str] = {}
    try:
        for path, data in files.items():
            staged[path] = _stage(path, data)
        for path, tmp in staged.items():
            os.replace(tmp, path)
    finally:
        for tmp in staged.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
