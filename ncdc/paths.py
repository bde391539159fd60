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
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from ncdc.errors import UsageError

KEY_FILE = "key"
# The marker of a root ncdc made, in the format backup tools skip (bford.info/cachedir):
# `ncdc cache clear` deletes nothing in a folder without it.
MARKER_FILE = "CACHEDIR.TAG"
MARKER = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This folder is a cache made by ncdc; `ncdc cache clear` removes what ncdc put here.\n"
)
# The manifest: the names ncdc gives what it puts in a root. The compile cache of a version
# (`0.1.0/`), the emulator's objects (`emu/`), the tuned tiles (`tune/`), the key, a key
# being written, and the marker; `clear` touches nothing else.
ENTRY_NAMES = re.compile(
    r"\d+\.\d+\.\d+[0-9A-Za-z.+-]*|emu|tune|key|\.key\.\d+\.[0-9a-f]+\.tmp|CACHEDIR\.TAG"
)


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
    write, and no one but this user and root can replace it or a folder above it
    (`check_chain`). A symbolic link is followed: what matters is the folder entries land
    in, and that no one else can point the link elsewhere."""
    check_chain(folder)
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


def _trusted(uid: int) -> bool:
    return uid in (os.getuid(), 0)


def _private_group(st: os.stat_result) -> bool:
    """Whether a folder's group is this user's own (user private groups, umask 002): the
    user's primary group, with no other member listed."""
    import grp
    import pwd

    try:
        me = pwd.getpwuid(os.getuid())
        members = set(grp.getgrgid(st.st_gid).gr_mem)
    except KeyError:
        return False
    return st.st_gid == me.pw_gid and members <= {me.pw_name}


def check_chain(folder: Path) -> None:
    """Raise CacheError unless no one but this user and root can replace `folder`: every
    entry from `/` down to it (folders and symbolic links, on the path as written and on
    the path it resolves to) is owned by this user or root, and every folder holding the
    next one is writable by no one else, unless it is sticky (`/tmp`: there only an
    entry's owner may rename it) or group-writable by this user's private group only.

        >>> check_chain(Path("/"))
    """
    absolute = Path(os.path.abspath(folder))
    real = Path(os.path.realpath(absolute))
    for path in dict.fromkeys((absolute, real)):
        steps = [Path(*path.parts[: i + 1]) for i in range(len(path.parts))]
        for entry in steps[:-1]:
            _check_owner(entry, os.lstat(entry), folder)
            _check_holder(entry, folder)  # it holds the next step: who else can write it?
        last = os.lstat(steps[-1])
        if stat.S_ISLNK(last.st_mode):  # the folder itself is check_private's to judge
            _check_owner(steps[-1], last, folder)


def _check_owner(entry: Path, st: os.stat_result, folder: Path) -> None:
    if not _trusted(st.st_uid):
        kind = "symbolic link" if stat.S_ISLNK(st.st_mode) else "folder"
        raise CacheError(
            f"the {kind} {entry} on the way to the cache is owned by uid {st.st_uid}, "
            "who could replace the cache with their own code",
            where=str(folder), hint=_ELSEWHERE,
        )  # fmt: skip


_ELSEWHERE = "set NCDC_CACHE to a folder of your own, e.g. ~/.cache/ncdc"


def _check_holder(entry: Path, folder: Path) -> None:
    st = os.stat(entry)  # a link's target folder is what holds the next step
    if not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_mode & stat.S_ISVTX:
        return
    if not st.st_mode & stat.S_IWOTH and _private_group(st):
        return
    raise CacheError(
        f"the folder {entry} above the cache is writable by others (mode "
        f"{stat.S_IMODE(st.st_mode):o}); anyone could replace the cache with their own code",
        where=str(folder), hint=f"chmod go-w {entry}, or {_ELSEWHERE}",
    )  # fmt: skip


def private_root() -> Path:
    """The cache root, created (mode 0700) when missing and checked by `check_private`.

    OSError when it cannot be created; CacheError when it is not safe.
    """
    root = cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(root)
    _mark(str(root))
    return root


def is_marked(root: Path) -> bool:
    """Whether `root` holds ncdc's marker (a regular file, not a link to one)."""
    try:
        fd = os.open(root / MARKER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        return stat.S_ISREG(os.fstat(fd).st_mode) and handle.read(len(MARKER)) == MARKER


@functools.cache
def _mark(root: str) -> None:
    """Mark `root` as ncdc's when all it holds is ncdc's (a new root, or one an older ncdc
    made): a folder that holds anything else (`NCDC_CACHE=$HOME`) is used, never marked,
    so `ncdc cache clear` refuses it."""
    folder = Path(root)
    if is_marked(folder):
        return
    if all(ENTRY_NAMES.fullmatch(name) for name in os.listdir(folder)):
        from ncdc.files import write_atomic

        write_atomic(folder / MARKER_FILE, MARKER)


def ncdc_entries(root: Path) -> list[Path]:
    """What ncdc put in `root` and `clear --all` removes: the manifest's entries but the
    key and the marker (the key signs what is built next; keeping it keeps it private)."""
    keep = {KEY_FILE, MARKER_FILE}
    return sorted(
        root / name for name in os.listdir(root) if ENTRY_NAMES.fullmatch(name) and name not in keep
    )


def private_dir(*parts: str) -> Path:
    """A folder under the checked root (`private_dir("emu")`), created 0700 when missing."""
    folder = private_root().joinpath(*parts)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def readable_dir(*parts: str) -> Path | None:
    """A folder under the root to read entries from, created nowhere: None when the root
    does not exist yet (nothing to read), CacheError when it is not safe. Whatever is read
    from the cache is checked so, tuning records included (they choose what runs)."""
    root = cache_root()
    if not root.exists():
        return None
    check_private(root)
    return root.joinpath(*parts)


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
    # not blocking: a FIFO planted as the key would hang the open
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
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
