"""The cache root and its trust: one folder only its user can write, one key that signs every
entry, and the locks that make concurrent processes build an entry once.

Entries run as code (a shared object is loaded into the process, a cubin onto the GPU), so
whoever can write the cache can run code as its user. Hence: the root must be a folder the
user owns that nobody else can write (else one line, exit 2); every entry carries an
HMAC-SHA256 under a key in `<root>/key` that only the owner can read, and an entry whose
HMAC does not verify is rebuilt, never used. A root that cannot be written (read-only,
full disk) degrades to no cache, with one warning. The compile cache
(ncdc.backends.cache), the emulator's objects (ncdc.backends.cpu) and the tuning records
(ncdc.plan.choose) all live here.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from ncdc.errors import UsageError

KEY_FILE = "key"


_KEY_BYTES = 32


class CacheError(UsageError):
    """A cache root that is not safe to use: someone else could plant entries in it."""


def cache_root() -> Path:
    """`$NCDC_CACHE`, else `$XDG_CACHE_HOME/ncdc`, else `~/.cache/ncdc`."""
    if env := os.environ.get("NCDC_CACHE"):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "ncdc"
    return Path.home() / ".cache" / "ncdc"


def check_private(folder: Path) -> None:
    """Raise CacheError unless `folder` is a directory this user owns that no one else can
    write. A symbolic link is followed: what matters is the folder entries land in."""
    st = os.stat(folder)
    where = str(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError("the cache root is not a directory", where=where,
                         hint="point NCDC_CACHE at a directory of your own")  # fmt: skip
    if st.st_uid != os.getuid():
        raise CacheError(
            f"the cache is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); its "
            "entries could run someone else's code", where=where,
            hint="set NCDC_CACHE to a directory of your own, e.g. ~/.cache/ncdc",
        )  # fmt: skip
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(
            f"the cache is writable by others (mode {stat.S_IMODE(st.st_mode):o}); anyone "
            "could plant code in it", where=where, hint=f"chmod go-w {folder}",
        )  # fmt: skip


def private_root() -> Path:
    """The cache root, created (mode 0700) when missing and checked by `check_private`.

    OSError when it cannot be created; CacheError when it is not safe.
    """
    root = cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(root)
    return root


def private_dir(*parts: str) -> Path:
    """A folder under the checked root (`private_dir("emu")`), created 0700 when missing."""
    folder = private_root().joinpath(*parts)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@functools.cache
def _warn_once(root: str, reason: str) -> None:
    from ncdc.output import warn

    warn(f"cache {root} cannot be written ({reason}); continuing without a cache")


def usable_dir(*parts: str) -> Path | None:
    """`private_dir(*parts)`, or None (after one warning) when the cache cannot be written.

    An unsafe root is not degraded: that is an error the user must fix (CacheError).
    """
    try:
        folder = private_dir(*parts)
        secret_key()
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "permission denied")
        return folder
    except CacheError:
        raise
    except OSError as e:
        _warn_once(str(cache_root()), e.strerror or str(e))
        return None


def cache_write_failed(error: OSError) -> None:
    """A write into the cache failed (a full disk): the result stands, the entry does not."""
    _warn_once(str(cache_root()), error.strerror or str(error))


def secret_key() -> bytes:
    """The HMAC key of this cache root, created on first use (mode 0600, written whole)."""
    return _key_for(str(private_root()))


@functools.cache
def _key_for(root: str) -> bytes:
    path = Path(root) / KEY_FILE
    if not path.exists():
        _create_key(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
            raise CacheError(
                "the cache key is readable or owned by someone else", where=str(path),
                hint=f"remove it (rm {path}); ncdc makes a new one and rebuilds the entries",
            )  # fmt: skip
        key = handle.read(_KEY_BYTES + 1)
    if len(key) != _KEY_BYTES:
        raise CacheError("the cache key is damaged", where=str(path), hint=f"rm {path}")
    return key


def _create_key(path: Path) -> None:
    """Write a fresh key under a temporary name and link it in: readers see all of it or
    none, and of two processes racing to create it, the first one's key wins."""
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(_KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sign(data: bytes) -> str:
    """HMAC-SHA256 of `data` under this cache's key, as hex."""
    return hmac.new(secret_key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, mac: object) -> bool:
    """Whether `mac` is `sign(data)`; compared in constant time."""
    return isinstance(mac, str) and hmac.compare_digest(sign(data), mac)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path`; the kernel drops it if the process dies."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
