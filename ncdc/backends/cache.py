"""The caches: one root, one header digest, one key that signs every entry.

Three caches live under one root (`cache_root()`): compiled cubins (this module), the CPU
backend's shared objects (`emulate`, under `emu/`) and tuned tiles (`tune`, under `tune/`).
The layout of the compile cache, one folder per ncdc version and architecture:

    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.cubin
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.json
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.lock

Entries run as code (a shared object is loaded into the process, a cubin onto the GPU), so
whoever can write the cache can run code as its user. Hence: the root must be a folder the
user owns that nobody else can write (else one line, exit 2); every entry carries an
HMAC-SHA256 under a key in `<root>/key` that only the owner can read, and an entry whose
HMAC does not verify is rebuilt, never used. A root that cannot be written (read-only,
full disk) degrades to no cache, with one warning.

The compile key is the sha256 of everything that changes the cubin: the rendered source,
the arch, the NVRTC version, the ncdc version, the full option list and the contents of
ncdc's own device headers. Files are written to a temporary name and `os.replace`d, cubin
first and json last, so a json that parses names a complete cubin (its HMAC is checked
anyway). A per-entry `flock` makes concurrent processes compile a kernel once.

    >>> mod = cached_compile(source, "sm_90a", name="gemm_bf16_m128_n128_k64")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ncdc
from ncdc.backends import nvrtc
from ncdc.errors import NcdcError, UsageError
from ncdc.files import write_atomic

FORMAT = 2  # bump when the json layout changes (2: an HMAC instead of a sha256)
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
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


def clear_cache(*, all_versions: bool = False) -> Path:
    """Remove this ncdc version's entries (or every version's); returns the folder removed.

    The emulator's objects and the tuned tiles go with `all_versions`; the key stays.
    """
    root = cache_root()
    if not all_versions:
        shutil.rmtree(root / ncdc.__version__, ignore_errors=True)
        return root / ncdc.__version__
    if root.is_dir():
        for child in root.iterdir():
            if child.name == KEY_FILE:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    return root


def headers_digest(folder: Path | None = None) -> str:
    """sha256 over every file under ncdc's device headers (`nvrtc.ncdc_include_dir()`):
    a source that includes them depends on them. The compile and emulator caches both key
    on it.

        >>> len(headers_digest())
        64
    """
    folder = nvrtc.ncdc_include_dir() if folder is None else folder
    h = hashlib.sha256()
    for path in sorted(
        p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


# ------------------------------------------------------------------ a root nobody else writes


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


# ------------------------------------------------------------------------ the signing key


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


# ------------------------------------------------------------------------ the compile cache


def key_parts(source: str, arch: str, options: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything the cache key covers, as stored in the entry's json."""
    return {
        "format": FORMAT,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "arch": arch,
        "nvrtc": nvrtc.nvrtc_version(),
        "ncdc": ncdc.__version__,
        "options": _portable_options(nvrtc.compile_options(arch, options)),
        "headers_sha256": headers_digest(),
    }


def _portable_options(options: list[str]) -> list[str]:
    """The options with each `-I` folder named by what it holds, not where it is: ncdc's
    headers by `headers_sha256`, another folder (the CUDA headers) by its files' digest.
    So a fresh clone or a new virtual environment of the same ncdc and CUDA headers finds
    the cubins an old one built."""
    ncdc_dir = str(nvrtc.ncdc_include_dir())
    out = []
    for option in options:
        if option.startswith("-I"):
            folder = option[2:]
            held = "ncdc headers" if folder == ncdc_dir else _folder_digest(folder)[:16]
            option = f"-I<{held}>"
        out.append(option)
    return out


@functools.lru_cache(maxsize=8)
def _folder_digest(folder: str) -> str:
    """`headers_digest` of a folder that does not change while ncdc runs (an installed
    wheel's or toolkit's headers), computed once per process."""
    return headers_digest(Path(folder))


def cache_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def entry_stem(name: str, arch: str, key: str) -> Path:
    """`<root>/<ncdc version>/<arch>/<name>-<first 16 hex of key>`; add a suffix for a file."""
    return cache_root() / ncdc.__version__ / arch / f"{name}-{key[:16]}"


def cached_compile(
    source: str, arch: str, *, name: str, use_cache: bool = True, **compile_kwargs: Any
) -> nvrtc.CompiledModule:
    """`nvrtc.compile_cuda`, reusing a cubin compiled before from the same key.

    `name` is the kernel's readable name (`attention_bf16_q128_x64_d128_causal`); it names
    the cache files and the source file in compile errors. `use_cache=False` neither reads
    nor writes the cache. An entry that is corrupt or whose HMAC does not verify is
    rebuilt; a cache that cannot be written is skipped with a warning.

        >>> cached_compile(src, "sm_80", name="gemm_bf16_m64")  # doctest: +SKIP
    """
    if not _NAME.match(name):
        raise ValueError(f"kernel name {name!r} must use only letters, digits, _ and -")
    compile_kwargs.setdefault("name", f"{name}.cu")
    if not use_cache:
        return nvrtc.compile_cuda(source, arch, **compile_kwargs)
    nvrtc.check_arch(arch)
    parts = key_parts(source, arch, tuple(compile_kwargs.get("options", ())))
    stem = entry_stem(name, arch, cache_key(parts))
    if usable_dir(*stem.parent.relative_to(cache_root()).parts) is None:
        return nvrtc.compile_cuda(source, arch, **compile_kwargs)
    if (hit := _read_entry(stem, parts)) is not None:
        return hit
    try:
        with locked(stem.with_suffix(".lock")):
            # Another process may have built it while we waited for the lock.
            if (hit := _read_entry(stem, parts)) is not None:
                return hit
            for suffix in (".json", ".cubin"):
                stem.with_suffix(suffix).unlink(missing_ok=True)
            module = nvrtc.compile_cuda(source, arch, **compile_kwargs)
            _write_entry(stem, parts, module)
    except OSError as e:  # the lock or the entry could not be written: compile uncached
        cache_write_failed(e)
        return nvrtc.compile_cuda(source, arch, **compile_kwargs)
    return module


def find_cached(
    source: str, arch: str, name: str, options: tuple[str, ...] = ()
) -> nvrtc.CompiledModule | None:
    """The module `cached_compile` would return from the cache for these arguments, or
    None when it holds none (nothing is compiled; an unsigned entry is not returned)."""
    try:
        parts = key_parts(source, arch, options)
        return _read_entry(entry_stem(name, arch, cache_key(parts)), parts)
    except (OSError, ValueError, ImportError, NcdcError):  # no NVRTC, no cache: no entry
        return None


def _read_entry(stem: Path, parts: dict[str, Any]) -> nvrtc.CompiledModule | None:
    """The cached module, or None when missing, unreadable, inconsistent or unsigned."""
    try:
        meta = json.loads(stem.with_suffix(".json").read_text())
        cubin = stem.with_suffix(".cubin").read_bytes()
        if meta["key_parts"] != parts or not verify(_signed_bytes(meta, cubin), meta["hmac"]):
            return None
        resources = {k: nvrtc.KernelResources(**fields) for k, fields in meta["resources"].items()}
        return nvrtc.CompiledModule(
            cubin=cubin,
            arch=meta["arch"],
            log=meta["log"],
            resources=resources,
            nvrtc_version=meta["nvrtc_version"],
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _signed_bytes(meta: dict[str, Any], cubin: bytes) -> bytes:
    """What the entry's HMAC covers: the cubin and every other field of its json."""
    fields = {k: v for k, v in meta.items() if k != "hmac"}
    return cubin + b"\0" + json.dumps(fields, sort_keys=True).encode()


def _write_entry(stem: Path, parts: dict[str, Any], module: nvrtc.CompiledModule) -> None:
    meta: dict[str, Any] = {
        "arch": module.arch,
        "nvrtc_version": module.nvrtc_version,
        "cubin_bytes": len(module.cubin),
        "resources": {k: dataclasses.asdict(r) for k, r in module.resources.items()},
        "log": module.log,
        "key_parts": parts,
    }
    meta["hmac"] = sign(_signed_bytes(meta, module.cubin))
    # Cubin first, json last: the json is what makes an entry visible.
    write_atomic(stem.with_suffix(".cubin"), module.cubin)
    write_atomic(stem.with_suffix(".json"), json.dumps(meta, indent=2).encode())


# ------------------------------------------------------------------------ `ncdc cache`

SECTIONS = {"compile": None, "emu": "emu", "tune": "tune"}  # name -> folder under the root


def cache_info() -> dict[str, Any]:
    """`ncdc cache info`: where the caches are, whether the root is safe, and their sizes.

    Schema: ncdc/schemas/cache.schema.json.
    """
    root = cache_root()
    problem = None
    if root.exists():
        try:
            check_private(root)
        except CacheError as e:
            problem = e.line()
    sections = {}
    for name, sub in SECTIONS.items():
        folder = root / (sub or ncdc.__version__)
        found = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        # a cubin's kept main loops (ncdc.backends.sass.main_loops, `sass/`) are not entries of it
        entries = [p for p in found if p.suffix in (".json", ".so") and p.parent.name != "sass"]
        sections[name] = {
            "path": str(folder),
            "entries": len(entries),
            "bytes": sum(p.stat().st_size for p in found),
        }
    return {
        "format": "ncdc.cache/1",
        "root": str(root),
        "exists": root.is_dir(),
        "safe": problem is None,
        "problem": problem,
        "key": (root / KEY_FILE).is_file(),
        "sections": sections,
    }
