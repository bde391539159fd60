"""The CPU backend's object cache cannot be poisoned: a planted shared object, a planted
header and a forged signature are never used; a corrupt object is rebuilt; concurrent
builds compile once; SIGTERM during a build leaves no temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ncdc import paths
from ncdc.backends import cpu
from ncdc.errors import NcdcError, UsageError
from tests import support

REPO = support.ROOT
SOURCE = (
    '#include "ncdc_runtime.cuh"\n'
    'extern "C" __global__ void k(int* x) { x[0] = V; }\n'
    "NCDC_EXPORT_KERNEL(k);\n"
)


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("NCDC_CACHE", str(tmp_path / "cache"))
    paths._key_for.cache_clear()
    return tmp_path / "cache"


def value_of(module: cpu.EmulatedModule) -> int:
    x = np.zeros(1, np.int32)
    module.launch("k", 1, 1, [x])
    return int(x[0])


def evil_object(tmp_path: Path) -> bytes:
    """A real shared object with the same kernel that writes 666."""
    lib = tmp_path / "evil.so"
    src = tmp_path / "evil.cu"
    src.write_text(SOURCE)
    cxx = cpu.find_compiler()
    cmd = [cxx, "-std=c++17", "-O0", "-fPIC", "-shared", "-pthread", "-DV=666",
           "-I", str(cpu.include_dir()), "-x", "c++", str(src), "-o", str(lib)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return lib.read_bytes()


def test_planted_object_and_forged_signature_are_not_loaded(root, tmp_path):
    first = cpu.build(SOURCE, defines={"V": 1})
    assert value_of(first) == 1
    lib = first.library
    assert lib.parent == root / "emu"
    evil = evil_object(tmp_path)
    import hashlib

    lib.unlink()
    lib.write_bytes(evil)  # same path, a plausible digest beside it
    lib.with_name(lib.name + ".hmac").write_text(hashlib.sha256(evil).hexdigest())
    again = cpu.build(SOURCE, defines={"V": 1})
    assert again.library == lib and lib.read_bytes() != evil
    # A fresh process (the planted file was never dlopen'ed here) gets the rebuilt object.
    code = (
        "import numpy as np, sys; from ncdc.backends import cpu; "
        "m = cpu.build(sys.argv[1], defines={'V': 1}); x = np.zeros(1, np.int32); "
        "m.launch('k', 1, 1, [x]); print(int(x[0]))"
    )
    out = subprocess.run([sys.executable, "-c", code, SOURCE], env=child_env(root), cwd=REPO,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "1"


def test_planted_header_in_the_cache_is_not_included(root):
    cpu.build(SOURCE, defines={"V": 2})  # creates the folder
    for name in ("ncdc_runtime.cuh", "ncdc_emu.h"):
        (root / "emu" / name).write_text('#error "planted header was included"\n')
    module = cpu.build(SOURCE, defines={"V": 3})
    assert value_of(module) == 3
    assert not list((root / "emu").glob("*.cu"))  # sources never land in the cache


def test_corrupt_object_is_rebuilt(root):
    lib = cpu.build(SOURCE, defines={"V": 4}).library
    damaged = lib.read_bytes()[:200]
    lib.unlink()  # a new file: the loaded one stays mapped in this process
    lib.write_bytes(damaged)  # truncated, as a crash or a full disk leaves it
    module = cpu.build(SOURCE, defines={"V": 4})
    assert len(module.library.read_bytes()) > 200
    assert value_of(module) == 4


def test_an_unsafe_cache_dir_is_refused(root, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(paths.CacheError) as e:
        cpu.build(SOURCE, defines={"V": 5}, cache_dir=shared)
    assert e.value.exit_code == 2
    assert list(shared.iterdir()) == []


def child_env(root: Path) -> dict[str, str]:
    return {**os.environ, "NCDC_CACHE": str(root), "PYTHONPATH": str(REPO)}


BUILDER = textwrap.dedent(
    """
    import sys, time
    from ncdc.backends import cpu
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
    print(cpu.build(sys.argv[1], defines={"V": 7}).library)
    """
)


def test_concurrent_builds_compile_once(root, tmp_path, monkeypatch):
    # Each compiler run appends to a log: a wrapper around the real compiler.
    log = tmp_path / "cxx.log"
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\necho run >> {log}\nexec {cpu.find_compiler()} "$@"\n')
    wrapper.chmod(0o755)
    env = {**child_env(root), "CXX": str(wrapper)}
    start = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, SOURCE, str(start)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outs)) == 1
    builds = [line for line in log.read_text().splitlines() if line == "run"]
    # One `--version` probe per process, one real compile in all.
    assert len(builds) == 3 + 1


def test_sigterm_during_a_build_leaves_no_temporary(root, tmp_path):
    wrapper = tmp_path / "cxx"
    real = cpu.find_compiler()
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec {real} "$@";; esac\nsleep 30\n')
    wrapper.chmod(0o755)
    env = {**child_env(root), "CXX": str(wrapper)}
    code = "import sys; from ncdc.cli.main import main; main(sys.argv[1:])"
    args = ["run", "diagrams/softmax.yaml", "--set", "m=2", "--set", "n=33"]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=REPO,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline and not list(root.rglob("*.tmp.so")):
        time.sleep(0.05)
    assert list(root.rglob("*.tmp.so")), "the build never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert "Traceback" not in err
    assert not [p for p in root.rglob("*") if ".tmp" in p.name]


def test_a_cache_that_cannot_be_written_still_builds(root, monkeypatch, capsys):
    import errno

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cpu, "write_atomic", full)
    paths._warn_once.cache_clear()
    module = cpu.build(SOURCE, defines={"V": 9})
    assert value_of(module) == 9
    assert "No space left" in capsys.readouterr().err
    assert not module.library.is_relative_to(root)


def test_emulator_threads_default_to_the_cpus_allowed(root, monkeypatch):
    from ncdc.system import default_jobs

    monkeypatch.delenv("NCDC_EMU_THREADS", raising=False)
    value_of(cpu.build(SOURCE, defines={"V": 10}))
    assert os.environ["NCDC_EMU_THREADS"] == str(default_jobs())
    monkeypatch.setenv("NCDC_EMU_THREADS", "1")  # the user's choice stands
    value_of(cpu.build(SOURCE, defines={"V": 10}))
    assert os.environ["NCDC_EMU_THREADS"] == "1"


@pytest.mark.parametrize(
    ("name", "value"),
    [("NCDC_EMU_STACK_KIB", "1"), ("NCDC_EMU_STACK_KIB", "128k"), ("NCDC_EMU_THREADS", "0"),
     ("NCDC_EMU_THREADS", "-4"), ("NCDC_EMU_THREADS", "lots"), ("NCDC_EMU_THREADS", "99999")],
)  # fmt: skip
def test_a_bad_emulator_setting_is_one_line_before_any_launch(root, monkeypatch, name, value):
    # Issue 31: NCDC_EMU_STACK_KIB=1 segfaulted (exit 139, no message); bad NCDC_EMU_THREADS
    # values were silently ignored.
    module = cpu.build(SOURCE, defines={"V": 11})
    monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=f"{name}='{value}' is not a whole number") as e:
        value_of(module)
    assert e.value.exit_code == 2 and f"hint: unset {name}" in e.value.line()
    monkeypatch.setenv(name, "")  # empty is unset, for ncdc as for the emulator
    assert value_of(module) == 11


def test_a_tiny_fiber_stack_from_the_command_line_is_exit_2(tmp_path):
    env = {"NCDC_EMU_STACK_KIB": "1", "NCDC_CACHE": str(tmp_path / "cache")}
    result = support.ncdc("run", support.SOFTMAX, "--set", "m=4", "--set", "n=64", env=env)
    support.assert_error(result, 2, contains="NCDC_EMU_STACK_KIB='1'")


def _asan_or_skip() -> None:
    try:
        cpu.sanitizer_runtime("address")
    except NcdcError:
        pytest.skip("no AddressSanitizer runtime")


@pytest.mark.parametrize("sanitize", [None, "address"])
def test_a_library_swapped_after_its_check_is_not_the_one_run(root, tmp_path, monkeypatch,
                                                              sanitize):  # fmt: skip
    # Issue 31: the library was loaded by path after its HMAC was verified (the sanitizer's
    # child about half a second later): a process swapping it in between had its code run.
    if sanitize:
        _asan_or_skip()
    build = "import sys; from ncdc.backends import cpu; "
    build += "cpu.build(sys.argv[1], defines={'V': 5}, sanitize=sys.argv[2] or None)"
    subprocess.run([sys.executable, "-c", build, SOURCE, sanitize or ""], env=child_env(root),
                   cwd=REPO, check=True, capture_output=True)  # fmt: skip
    (lib,) = (root / "emu").glob("*.so")
    evil, verify = evil_object(tmp_path), paths.verify

    def verify_then_swap(data: bytes, mac: str) -> bool:
        verified = verify(data, mac)
        lib.unlink()
        lib.write_bytes(evil)  # the swap lands just after the check
        return verified

    monkeypatch.setattr(paths, "verify", verify_then_swap)
    module = cpu.build(SOURCE, defines={"V": 5}, sanitize=sanitize)
    assert lib.read_bytes() == evil and value_of(module) == 5


def test_the_sanitizer_child_imports_nothing_from_the_current_folder(root, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    # Issue 31: the child was started with `python -c`, which puts the working folder first
    # on the import path (so does a PYTHONPATH ending in ':'): an untrusted checkout's
    # pickle.py ran as the caller.
    _asan_or_skip()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    ran = tmp_path / "planted-code-ran"
    (checkout / "pickle.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PYTHONPATH", f"{checkout}:")
    module = cpu.build(SOURCE, defines={"V": 9}, sanitize="address")
    assert value_of(module) == 9
    assert not ran.exists()
