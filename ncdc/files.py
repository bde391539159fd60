"""Writing files so that no reader ever sees half of one, and an interrupt leaves nothing."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    The rename is atomic on POSIX file systems, so `path` holds either its old content or
    all of `data`; the temporary file is removed if anything (Ctrl-C included) interrupts.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
