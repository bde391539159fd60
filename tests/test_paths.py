"""The cache root and its trust (ncdc.paths): a root only its user can write, a key only its
user can read, created private.
"""

from __future__ import annotations

import os
import threading

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


NOBODY = 65534  # another user's uid, for a test run as root to hand a folder to


def _as_another_user(path):
    """Give `path` to another user: needs root (otherwise the test is skipped)."""
    if os.getuid() != 0:
        pytest.skip("handing a folder to another user needs root")
    os.lchown(path, NOBODY, NOBODY)


@pytest.mark.parametrize("mode", [0o777, 0o773, 0o757])
def test_a_root_below_a_folder_others_can_write_is_refused(tmp_path, monkeypatch, mode):
    # Issue 31: only the root's own mode was checked; anyone who can write a folder above
    # it can rename the root away and put their own (with their code) in its place.
    shared = tmp_path / "shared"
    (shared / "cache").mkdir(parents=True, mode=0o700)
    shared.chmod(mode)
    monkeypatch.setenv("NCDC_CACHE", str(shared / "cache"))
    with pytest.raises(paths.CacheError, match="above the cache is writable by others") as e:
        paths.private_root()
    assert e.value.exit_code == 2 and f"chmod go-w {shared}" in e.value.line()


def test_a_root_in_a_sticky_folder_is_accepted(tmp_path, monkeypatch):
    sticky = tmp_path / "tmp"
    (sticky / "cache").mkdir(parents=True, mode=0o700)
    sticky.chmod(0o1777)  # like /tmp: only an entry's owner may rename it
    monkeypatch.setenv("NCDC_CACHE", str(sticky / "cache"))
    assert paths.private_root() == sticky / "cache"


def test_a_root_reached_through_another_users_link_is_refused(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    _as_another_user(link)
    monkeypatch.setenv("NCDC_CACHE", str(link))
    with pytest.raises(paths.CacheError, match="symbolic link .* owned by uid 65534"):
        paths.private_root()


def test_a_root_inside_another_users_folder_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    (theirs / "cache").mkdir(parents=True, mode=0o700)
    _as_another_user(theirs)
    monkeypatch.setenv("NCDC_CACHE", str(theirs / "cache"))
    with pytest.raises(paths.CacheError, match="folder .*theirs on the way to the cache"):
        paths.private_root()


def test_a_key_that_is_a_fifo_is_refused_without_hanging(root, tmp_path):
    root.mkdir(mode=0o700)
    os.mkfifo(root / paths.KEY_FILE, 0o600)
    paths._key_for.cache_clear()
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _catch(paths.secret_key, outcome), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        with open(root / paths.KEY_FILE, "wb"):  # let the blocked reader go
            pass
        pytest.fail("reading a FIFO as the cache key hung")
    assert isinstance(outcome[0], paths.CacheError), outcome


def _catch(call, into: list) -> None:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - handed to the test thread
        into.append(e)
