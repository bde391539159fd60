"""GPU tests run only where CuPy sees a CUDA device; elsewhere they are skipped."""

from __future__ import annotations

import pytest


def _gpu_reason() -> str | None:
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
    except Exception:  # no driver
        pass
    return "no CUDA GPU"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private compile and tuning cache."""
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
