"""Reading files so that none can hang ncdc or fill its memory, and writing them so that no
reader ever sees half of one and an interrupt leaves nothing.

Every file ncdc reads (specs, profiles, baselines, keys, tuning records, compiled `.json`
and `.cu`, cache entries) goes through `read_regular`: a regular file only (a FIFO would
hang the read, `/dev/zero` never ends), its size checked before a byte is read. Files get
the mode a plain `open()` would give them (0666 less the umask), not the 0600 of a
temporary file.

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
    >>> write_together({folder / "a.cu": b"1", folder / "a.json": b"2"})
    >>> sorted(p.name for p in folder.iterdir())
    ['a.cu', 'a.json']
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from ncdc.errors import FileError, NcdcError, UsageError

LOCK_WAIT_S = 60.0  # how long a writer waits for another ncdc writing into the same folder

_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)  # fmt: skip


def read_regular(
    path: Path,
    limit: int,
    *,
    what: str = "a file",
    noun: str | None = None,
    hint: str | None = None,
    error: type[NcdcError] = FileError,
) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes.

    The open does not block (a FIFO's would), the kind and the size are read from the open
    file before anything else, and at most `limit + 1` bytes are read (a file that grows
    meanwhile is refused too). Anything but a regular file is `error` "expected {what},
    found a named pipe"; a larger one "file is N bytes; expected {noun} under {limit}
    bytes". OSError (missing, unreadable) is left to the caller, who knows what to say.

        >>> read_regular(Path("/dev/null"), 10)
        Traceback (most recent call last):
        ...
        ncdc.errors.FileError: /dev/null: expected a file, found a character device
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    too_big = f"expected {noun or what} under {limit} bytes"
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)  # a directory's descriptor cannot become a file object
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
            raise error(f"expected {what}, found {kind}", where=str(path), hint=hint)
        raise error(f"file is {st.st_size} bytes; {too_big}", where=str(path))
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while we read
        raise error(f"file is over {limit} bytes; {too_big}", where=str(path))
    return data


def read_prefix(path: Path, size: int) -> bytes | None:
    """The first `size` bytes of `path` if it is a regular file, else None (missing, a
    FIFO, a device): enough to tell whether ncdc wrote it, without hanging on it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(size)


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


@contextlib.contextmanager
def folder_lock(folder: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold the folder's writer lock: one ncdc writes into an output folder at a time, so
    the check that a file is ncdc's own and the write that replaces it cannot interleave
    with another's (two `compile -o out` never leave one's .cu beside the other's .json).

    The lock is an advisory `flock` on the folder itself, so no file is left behind; a
    second writer waits up to `wait_s` seconds (LOCK_WAIT_S), then gets a UsageError.
    Where the platform has no flock the lock is a no-op. Not reentrant: a writer takes it
    once, around everything it checks and writes.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks to take
        yield
        return
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_DIRECTORY", 0))
    try:
        deadline = time.monotonic() + (LOCK_WAIT_S if wait_s is None else wait_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UsageError(
                        "another ncdc is writing into this folder", where=str(folder),
                        hint="wait for it to finish, or choose another folder with -o",
                    ) from None  # fmt: skip
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
