"""Fixtures the cache tests share: a private cache root in a temporary folder, ncdc's device
headers held still, and a count of the compiles that reach NVRTC."""

from __future__ import annotations

import pytest

from ncdc.backends import nvrtc


@pytest.fixture
def headers(tmp_path, monkeypatch):
    """ncdc's device headers, held still while the tests run."""
    folder = tmp_path / "include"
    folder.mkdir()
    (folder / "ncdc_mma.cuh").write_text("#pragma once\n")
    monkeypatch.setattr(nvrtc, "ncdc_include_dir", lambda: folder)
    return folder


@pytest.fixture
def root(tmp_path, monkeypatch, headers):
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def compiles(monkeypatch):
    """Counts the compiles that really reach NVRTC."""
    calls: list[str] = []
    real = nvrtc.compile_cuda

    def counting(source, arch, **kwargs):
        calls.append(arch)
        return real(source, arch, **kwargs)

    monkeypatch.setattr(nvrtc, "compile_cuda", counting)
    return calls
