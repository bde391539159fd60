"""The compile cache: hits skip NVRTC, keys cover what changes the cubin, entries are
readable, corrupt or forged entries are rebuilt, an unsafe root is refused, a cache that
cannot be written is skipped, concurrent processes compile once, nothing partial is left.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ncdc
from ncdc import files, paths
from ncdc.backends import cache, nvrtc
from tests import support

NAME = "copy_f32_n256"
SOURCE = 'extern "C" __global__ void copy(const float* x, float* y) { y[0] = x[0]; }\n'
REPO = support.ROOT


def entry_files(root: Path) -> list[str]:
    """The cache's files but its key and its marker."""
    kept = {paths.KEY_FILE, paths.MARKER_FILE}
    return sorted(p.name for p in root.rglob("*") if p.is_file() and p.name not in kept)


def only_stem(root: Path) -> Path:
    (json_file,) = root.rglob("*.json")
    return json_file.with_suffix("")


def test_second_call_is_a_hit(root, compiles):
    first = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    second = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert compiles == ["sm_80"]
    assert second == first
    assert second.resources["copy"].registers > 0


def test_readable_names_under_version_and_arch(root, compiles):
    cache.cached_compile(SOURCE, "sm_90a", name=NAME)
    stem = only_stem(root)
    assert stem.parent == root / ncdc.__version__ / "sm_90a"
    assert stem.name.startswith(f"{NAME}-") and len(stem.name) == len(NAME) + 1 + 16
    assert entry_files(root) == sorted(f"{stem.name}{s}" for s in (".cubin", ".json", ".lock"))
    meta = json.loads(stem.with_suffix(".json").read_text())
    assert meta["key_parts"]["arch"] == "sm_90a"
    assert meta["key_parts"]["ncdc"] == ncdc.__version__
    assert meta["key_parts"]["nvrtc"] == nvrtc.nvrtc_version()
    assert "--ptxas-options=-v" in meta["key_parts"]["options"]
    assert meta["resources"]["copy"]["registers"] > 0


def test_key_changes_with_everything_that_changes_the_cubin(root, compiles, monkeypatch, headers):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    (headers / "ncdc_mma.cuh").write_text("#pragma once\n// changed\n")  # an included header
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    cache.cached_compile(SOURCE, "sm_89", name=NAME)  # arch
    cache.cached_compile(SOURCE.replace("x[0]", "2.f * x[0]"), "sm_80", name=NAME)  # source
    cache.cached_compile(SOURCE, "sm_80", name=NAME, options=["--use_fast_math"])  # options
    monkeypatch.setattr(cache, "__version__", "9.9.9")  # ncdc version
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: "99.0")  # compiler version
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert len(compiles) == 7
    assert len(list(root.rglob("*.cubin"))) == 7


def test_key_names_the_header_folders_by_content_not_place(root, compiles, monkeypatch, tmp_path):
    """A fresh clone or virtual environment (the same headers elsewhere) hits; a changed
    CUDA header misses."""
    cuda = nvrtc.cuda_include_dir()
    if cuda is None:
        pytest.skip("no CUDA headers")
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    ncdc_copy, cuda_copy = tmp_path / "clone" / "include", tmp_path / "venv" / "include"
    shutil.copytree(nvrtc.ncdc_include_dir(), ncdc_copy)
    shutil.copytree(cuda, cuda_copy)
    monkeypatch.setattr(nvrtc, "ncdc_include_dir", lambda: ncdc_copy)
    monkeypatch.setattr(nvrtc, "cuda_include_dir", lambda: cuda_copy)
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert len(compiles) == 1
    with (cuda_copy / "cuda_fp16.h").open("a") as f:
        f.write("// changed\n")
    cache._folder_digest.cache_clear()
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert len(compiles) == 2


def test_use_cache_false_neither_reads_nor_writes(root, compiles):
    cache.cached_compile(SOURCE, "sm_80", name=NAME, use_cache=False)
    assert not root.exists()
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    cache.cached_compile(SOURCE, "sm_80", name=NAME, use_cache=False)
    assert len(compiles) == 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda stem: stem.with_suffix(".json").write_text("{ not json"),
        lambda stem: stem.with_suffix(".json").write_text("{}"),
        lambda stem: stem.with_suffix(".cubin").write_bytes(
            stem.with_suffix(".cubin").read_bytes()[:100]
        ),
        lambda stem: stem.with_suffix(".cubin").write_bytes(
            bytes(len(stem.with_suffix(".cubin").read_bytes()))
        ),
        lambda stem: stem.with_suffix(".cubin").unlink(),
    ],
    ids=["bad-json", "empty-json", "truncated-cubin", "zeroed-cubin", "missing-cubin"],
)
def test_corrupt_entry_is_rebuilt(root, compiles, damage):
    good = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    damage(only_stem(root))
    rebuilt = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert len(compiles) == 2
    assert rebuilt.cubin == good.cubin
    assert cache.cached_compile(SOURCE, "sm_80", name=NAME) == rebuilt
    assert len(compiles) == 2


def test_interrupted_compile_leaves_nothing(root, monkeypatch):
    def interrupted(source, arch, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nvrtc, "compile_cuda", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert [Path(p).suffix for p in entry_files(root)] == [".lock"]
    assert_unlocked(next(root.rglob("*.lock")))


def test_interrupted_write_leaves_no_temp_file(root, monkeypatch):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    paths.private_root()  # the root and its marker exist; the entry's write is interrupted
    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert [Path(p).suffix for p in entry_files(root)] == [".lock"]
    assert_unlocked(next(root.rglob("*.lock")))


def assert_unlocked(lock: Path) -> None:
    with open(lock, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_bad_kernel_name(root):
    with pytest.raises(ValueError, match="kernel name"):
        cache.cached_compile(SOURCE, "sm_80", name="../escape")


def test_clear_cache(root):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert cache.clear_cache() == root / ncdc.__version__
    assert not (root / ncdc.__version__).exists()


# Each process waits for a common start time, then compiles; a compile that reaches NVRTC
# appends to the marker file and holds on for a moment so the others pile up on the lock.
WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ncdc.backends import cache
    from ncdc.backends import nvrtc
    source, marker, start, headers = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    nvrtc.ncdc_include_dir = lambda: Path(headers)
    real = nvrtc.compile_cuda
    def marked(*args, **kwargs):
        with open(marker, "a") as f:
            f.write("compile\\n")
        time.sleep(0.5)
        return real(*args, **kwargs)
    nvrtc.compile_cuda = marked
    time.sleep(max(0.0, start - time.time()))
    module = cache.cached_compile(source, "sm_80", name="copy_f32_n256")
    sys.stdout.buffer.write(module.cubin)
    """
)


def test_concurrent_processes_compile_once(root, tmp_path, headers):
    marker = tmp_path / "compiles.txt"
    env = {**os.environ, "NCDC_CACHE": str(root), "PYTHONPATH": str(REPO)}
    start = time.time() + 2.0
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, SOURCE, str(marker), str(start), str(headers)],
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in range(4)
    ]
    cubins = [w.communicate(timeout=60)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0]
    assert marker.read_text() == "compile\n"
    assert len(set(cubins)) == 1 and cubins[0][:4] == b"\x7fELF"
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


# ---- a cache nobody else can poison -------------------------------------------------------


def test_planted_cubin_with_a_matching_sha256_is_not_used(root, compiles):
    """Whoever plants a cubin can write its sha256 beside it; the HMAC needs the key."""
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    stem = only_stem(root)
    meta = json.loads(stem.with_suffix(".json").read_text())
    evil = b"\x7fELF planted" + bytes(64)
    import hashlib

    meta["cubin_bytes"], meta["cubin_sha256"] = len(evil), hashlib.sha256(evil).hexdigest()
    meta["hmac"] = hashlib.sha256(evil).hexdigest()  # a guess without the key
    stem.with_suffix(".cubin").write_bytes(evil)
    stem.with_suffix(".json").write_text(json.dumps(meta))
    module = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert module.cubin != evil and module.cubin[:4] == b"\x7fELF"
    assert len(compiles) == 2
    assert stem.with_suffix(".cubin").read_bytes() == module.cubin  # the entry was rebuilt


def test_an_entry_signed_under_another_key_is_rebuilt(root, compiles):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    (root / paths.KEY_FILE).unlink()  # a new key: every old entry is someone else's
    paths._key_for.cache_clear()
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert len(compiles) == 2


def test_a_cache_that_cannot_be_written_degrades_with_a_warning(
    root, compiles, monkeypatch, capsys
):
    import errno

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache, "write_atomic", full)
    paths._warn_once.cache_clear()
    module = cache.cached_compile(SOURCE, "sm_80", name=NAME)
    assert module.cubin[:4] == b"\x7fELF"
    err = capsys.readouterr().err
    assert "warning: cache" in err and "No space left" in err and "without a cache" in err
    assert not list(root.rglob("*.cubin"))


def test_a_root_that_cannot_be_created_degrades(tmp_path, monkeypatch, headers, compiles, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NCDC_CACHE", str(blocker / "cache"))  # a folder under a file
    paths._warn_once.cache_clear()
    assert cache.cached_compile(SOURCE, "sm_80", name=NAME).cubin[:4] == b"\x7fELF"
    assert "without a cache" in capsys.readouterr().err


def test_one_header_digest_for_both_caches(headers):
    from ncdc.backends import cpu

    before = cache.headers_digest()
    (headers / "sub").mkdir()
    (headers / "sub" / "x.h").write_text("int x;\n")  # a nested header counts too
    assert cache.headers_digest() != before
    # The emulator keys on the same function (no digest of its own) over the same folder.
    assert cpu.include_dir() == headers
    assert not hasattr(cpu, "_headers_digest")


@pytest.mark.parametrize("all_versions", [True, False])
def test_clear_refuses_a_folder_ncdc_did_not_make(tmp_path, monkeypatch, all_versions):
    # Issue 31: with NCDC_CACHE=$HOME, `ncdc cache clear --all` deleted every file but the
    # key, exit 0. A folder holding more than ncdc's own entries is never marked as ncdc's.
    home = tmp_path / "home"
    (home / "thesis").mkdir(parents=True)
    (home / "thesis" / "chapter1.tex").write_text("mine")
    (home / "notes.txt").write_text("mine too")
    (home / ncdc.__version__).mkdir()  # even a folder named like one of ncdc's
    (home / ncdc.__version__ / "mine.txt").write_text("mine")
    monkeypatch.setenv("NCDC_CACHE", str(home))
    paths.secret_key()  # ncdc used the folder as its cache
    with pytest.raises(paths.CacheError, match="not a cache ncdc made") as e:
        cache.clear_cache(all_versions=all_versions)
    assert e.value.exit_code == 2 and "hint: check NCDC_CACHE" in e.value.line()
    assert (home / "thesis" / "chapter1.tex").read_text() == "mine"
    assert (home / "notes.txt").read_text() == "mine too"
    assert (home / ncdc.__version__ / "mine.txt").read_text() == "mine"


def test_clear_all_removes_only_what_ncdc_made(root, compiles):
    cache.cached_compile(SOURCE, "sm_80", name=NAME)
    (root / "emu").mkdir()
    (root / "emu" / "k.so").write_bytes(b"x")
    (root / "0.0.9").mkdir()  # an older version's entries
    (root / "README.txt").write_text("a file of the user's beside the cache")
    assert paths.is_marked(root)
    assert cache.clear_cache(all_versions=True) == root
    left = sorted(p.name for p in root.iterdir())
    assert left == [paths.MARKER_FILE, "README.txt", paths.KEY_FILE]
    assert (root / "README.txt").read_text().startswith("a file of the user's")


def test_clear_from_the_command_line_is_exit_2_in_a_folder_of_the_users(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "data.csv").write_text("1,2\n")
    result = support.ncdc("cache", "clear", "--all", env={"NCDC_CACHE": str(folder)})
    support.assert_error(result, 2, contains="not a cache ncdc made")
    assert (folder / "data.csv").read_text() == "1,2\n"
