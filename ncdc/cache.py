"""The compile cache: a cubin and its resource report per (source, arch, compiler, ncdc).

Layout, one folder per ncdc version and architecture, names readable at a glance:

    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.cubin
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.json
    <cache_root>/0.1.0/sm_90a/attention_bf16_q128_x64_d128_causal-3f2a9c0d1e4b5a69.lock

The key is the sha256 of everything that changes the cubin: the rendered source, the arch,
the NVRTC version, the ncdc version, the full option list and the contents of ncdc's own
device headers. Files are written to a temporary name and `os.replace`d, cubin first and
json last, so a json that parses names a complete cubin (its size and sha256 are checked
anyway). A per-entry `flock` makes concurrent processes compile a kernel once.

    >>> mod = cached_compile(source, "sm_90a", name="gemm_bf16_m128_n128_k64")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ncdc
from ncdc import nvrtc
from ncdc.files import write_atomic

FORMAT = 1  # bump when the json layout changes
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def cache_root() -> Path:
    """`$NCDC_CACHE`, else `$XDG_CACHE_HOME/ncdc`, else `~/.cache/ncdc`."""
    if env := os.environ.get("NCDC_CACHE"):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "ncdc"
    return Path.home() / ".cache" / "ncdc"


def clear_cache(*, all_versions: bool = False) -> Path:
    """Remove this ncdc version's entries (or every version's); returns the folder removed."""
    folder = cache_root() if all_versions else cache_root() / ncdc.__version__
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def _headers_digest() -> str:
    """sha256 over ncdc's device headers: a source that includes them depends on them."""
    h = hashlib.sha256()
    folder = nvrtc.ncdc_include_dir()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def key_parts(source: str, arch: str, options: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything the cache key covers, as stored in the entry's json."""
    return {
        "format": FORMAT,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "arch": arch,
        "nvrtc": nvrtc.nvrtc_version(),
        "ncdc": ncdc.__version__,
        "options": nvrtc.compile_options(arch, options),
        "headers_sha256": _headers_digest(),
    }


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
    nor writes the cache. A corrupt entry is removed and rebuilt.

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
    if (hit := _read_entry(stem, parts)) is not None:
        return hit
    stem.parent.mkdir(parents=True, exist_ok=True)
    with _locked(stem.with_suffix(".lock")):
        # Another process may have built it while we waited for the lock.
        if (hit := _read_entry(stem, parts)) is not None:
            return hit
        for suffix in (".json", ".cubin"):
            stem.with_suffix(suffix).unlink(missing_ok=True)
        module = nvrtc.compile_cuda(source, arch, **compile_kwargs)
        _write_entry(stem, parts, module)
    return module


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path`; the kernel drops it if the process dies."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_entry(stem: Path, parts: dict[str, Any]) -> nvrtc.CompiledModule | None:
    """The cached module, or None when missing, unreadable or inconsistent."""
    try:
        meta = json.loads(stem.with_suffix(".json").read_text())
        cubin = stem.with_suffix(".cubin").read_bytes()
        if meta["key_parts"] != parts:
            return None
        if len(cubin) != meta["cubin_bytes"] or _sha256(cubin) != meta["cubin_sha256"]:
            return None
        resources = {k: nvrtc.KernelResources(**fields) for k, fields in meta["resources"].items()}
        return nvrtc.CompiledModule(
            cubin=cubin,
            arch=meta["arch"],
            log=meta["log"],
            resources=resources,
            nvrtc_version=meta["nvrtc_version"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_entry(stem: Path, parts: dict[str, Any], module: nvrtc.CompiledModule) -> None:
    meta = {
        "arch": module.arch,
        "nvrtc_version": module.nvrtc_version,
        "cubin_bytes": len(module.cubin),
        "cubin_sha256": _sha256(module.cubin),
        "resources": {k: dataclasses.asdict(r) for k, r in module.resources.items()},
        "log": module.log,
        "key_parts": parts,
    }
    # Cubin first, json last: the json is what makes an entry visible.
    write_atomic(stem.with_suffix(".cubin"), module.cubin)
    write_atomic(stem.with_suffix(".json"), json.dumps(meta, indent=2).encode())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
