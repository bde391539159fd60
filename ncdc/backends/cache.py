"""The caches: one root, one header digest, one key that signs every entry.

Three caches live under one root (`cache_root()`): compiled cubins (this module), the CPU
backend's shared objects (`emulate`, under `emu/`) and tuned tiles (`tune`, under `tune/`).
The layout of the compile cache, one folder per ncdc version and architecture:

    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.cubin
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.json
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.lock

Entries run as code, so the root and every entry are checked and signed (ncdc.paths).

The compile key is the sha256 of everything that changes the cubin: the rendered source,
the arch, the NVRTC version, the ncdc version, the full option list and the contents of
ncdc's own device headers. Files are written to a temporary name and `os.replace`d, cubin
first and json last, so a json that parses names a complete cubin (its HMAC is checked
anyway). A per-entry `flock` makes concurrent processes compile a kernel once.

    >>> mod = cached_compile(source, "sm_90a", name="gemm_bf16_m128_n128_k64")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from ncdc.backends import nvrtc
from ncdc.bounded import read_json
from ncdc.errors import NcdcError
from ncdc.files import read_regular, write_atomic
from ncdc.paths import (
    KEY_FILE,
    MARKER_FILE,
    CacheError,
    cache_root,
    cache_write_failed,
    check_private,
    is_marked,
    locked,
    ncdc_entries,
    sign,
    usable_dir,
    verify,
)
from ncdc.version import __version__

FORMAT = 2  # bump when the json layout changes (2: an HMAC instead of a sha256)


_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_ENTRY_BYTES = 64 << 20  # a cubin of the largest kernels is a few MiB


def clear_cache(*, all_versions: bool = False) -> Path:
    """Remove this ncdc version's entries (or, with `all_versions`, every entry of ncdc's
    manifest: each version's, the emulator's objects, the tuned tiles); returns the folder
    removed. The key and anything ncdc did not make stay; a folder without ncdc's marker
    (`NCDC_CACHE=$HOME`, say) is refused, and nothing in it is touched.
    """
    root = cache_root()
    if not root.exists():
        return root / __version__ if not all_versions else root
    if not is_marked(root):
        raise CacheError(
            f"not a cache ncdc made (no {MARKER_FILE}); refusing to delete anything in it",
            where=str(root),
            hint="check NCDC_CACHE; ncdc clears only a folder it made (remove ncdc's entries "
            "by hand: version folders such as 0.1.0/, emu/, tune/)",
        )
    doomed = ncdc_entries(root) if all_versions else [root / __version__]
    for child in doomed:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    return root if all_versions else root / __version__


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


def key_parts(source: str, arch: str, options: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything the cache key covers, as stored in the entry's json."""
    return {
        "format": FORMAT,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "arch": arch,
        "nvrtc": nvrtc.nvrtc_version(),
        "ncdc": __version__,
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
    return cache_root() / __version__ / arch / f"{name}-{key[:16]}"


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
        meta = read_json(stem.with_suffix(".json"), MAX_ENTRY_BYTES)
        cubin = read_regular(stem.with_suffix(".cubin"), MAX_ENTRY_BYTES)
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
    except (OSError, NcdcError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, planted as a FIFO, damaged: rebuilt


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
        folder = root / (sub or __version__)
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
