"""What `ncdc env` reports: the versions a bug report needs and the defaults in force.

Every probe is guarded: a missing or broken piece is reported ("not installed", or the
error's first line), never raised, since the report is most wanted when something is
broken. Packages are asked for their version through their metadata, not imported, where
an import would be slow (torch, CuPy); the driver is asked through cuda-bindings.

    >>> describe_env()["format"]
    'ncdc.env/1'
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from ncdc.errors import excerpt
from ncdc.version import __version__

MISSING = "not installed"


def describe_env() -> dict[str, Any]:
    """ncdc's version and its surroundings, JSON-ready (see the module)."""
    return {
        "format": "ncdc.env/1",
        "ncdc": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "numpy": _package("numpy"),
        "nvrtc": _probe(_nvrtc_version),
        "cupy": _cupy_version(),
        "driver": _probe(_driver_version),
        "torch": _package("torch"),
        "cache_root": _probe(_cache_root),
        "defaults": _probe(_defaults),
    }


def env_text(found: dict[str, Any]) -> str:
    """`key: value` lines for people; the defaults one per line with their sources."""
    lines = []
    for key, value in found.items():
        if key == "format":
            continue
        if key == "defaults" and isinstance(value, dict):
            for name, d in value.items():
                shown = d["value"] or _built_in(name)
                lines.append(f"default {name}: {shown} (from {d['source']})")
            continue
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _built_in(key: str) -> str:
    """What a command uses when nothing sets the default `key`."""
    from ncdc.backends.targets import DEFAULT_PROFILE
    from ncdc.hardware.load import load_hardware

    if key == "hardware":
        return DEFAULT_PROFILE
    return f"the profile's own ({load_hardware(DEFAULT_PROFILE).arch} on {DEFAULT_PROFILE})"


def _probe(fn: Callable[[], Any]) -> Any:
    """`fn()`, or what stopped it as a short string."""
    try:
        return fn()
    except Exception as e:  # the report must come out whatever is broken
        message = getattr(e, "line", None)
        text = message() if callable(message) else f"{type(e).__name__}: {e}"
        return f"unavailable: {excerpt(str(text), 120)}"


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return MISSING


def _cupy_version() -> str:
    """CuPy ships under one distribution name per CUDA major version."""
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        if (version := _package(dist)) != MISSING:
            return f"{version} ({dist})"
    return MISSING


def _nvrtc_version() -> str:
    from ncdc.backends.nvrtc import available, nvrtc_version

    return nvrtc_version() if available() else MISSING


def _driver_version() -> str:
    """The CUDA version the installed driver supports, or why there is none."""
    try:
        from cuda.bindings import driver  # type: ignore[import-not-found]
    except ImportError:
        return "unknown (cuda-bindings " + MISSING + ")"
    try:
        err, version = driver.cuDriverGetVersion()
    except Exception as e:  # no libcuda: cuda-bindings cannot load the driver
        return f"none found ({type(e).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"none found ({err})"
    return f"CUDA {version // 1000}.{version % 1000 // 10}"


def _cache_root() -> str:
    from ncdc.paths import cache_root

    return str(cache_root())


def _defaults() -> dict[str, dict[str, Any]]:
    from ncdc.hardware.defaults import profile_defaults

    return {key: {"value": d.value, "source": d.source} for key, d in profile_defaults().items()}
