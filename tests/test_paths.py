"""The cache root and its trust (ncdc.paths): a root only its user can write, a key only its
user can read, created private.
"""

from __future__ import annotations

import os

import pytest

from ncdc import paths
from ncdc.backends import cache

NAME = "copy_f32_n256"


SOURCE = 'extern "C" __global__ void copy(const float* x, float* y) { y[0] = x[0]; }\n'


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("NCDC_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "ncdc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "ncdc"
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path / "mine"))
    assert paths.cache_root() == tmp_path / "mine"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_root_others_can_write_is_refused(root, mode):
    root.mkdir(parents=True)
    root.chmod(mode)
    with pytest.raises(paths.CacheError) as e:
        cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert e.value.exit_code == 2 and "writable by others" in e.value.line()
    assert "chmod go-w" in e.value.line()
    assert list(root.iterdir()) == []


def test_a_root_owned_by_someone_else_is_refused(root, monkeypatch):
    root.mkdir(parents=True, mode=0o700)
    monkeypatch.setattr(paths.os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.raises(paths.CacheError, match="owned by uid"):
        cache.cached_compile(SOURCE, "sm_80", name=NAME)


def test_a_key_others_can_read_is_refused(root, compiles):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    (root / paths.KEY_FILE).chmod(0o644)
    paths._key_for.cache_clear()
    with pytest.raises(paths.CacheError, match="cache key"):
        cache.cached_compile(SOURCE, "sm_80", name=NAME)


def test_new_root_and_key_are_private(root, compiles):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert root.stat().st_mode & 0o077 == 0
    assert (root / paths.KEY_FILE).stat().st_mode & 0o777 == 0o600
