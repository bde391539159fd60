"""Parallel CI jobs and interrupted runs: several `ncdc compile` processes at once on the same
and on different specs all succeed and compile each kernel once; Ctrl-C during a compile
leaves no partial output and no held lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT
pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")


def start_compile(spec: str, out: Path, cache: Path) -> subprocess.Popen:
    """`ncdc compile` as a terminal's foreground job starts it: SIGINT at its default.

    A shell starts a background job (`make test &`, nohup, CI runners) with SIGINT ignored,
    and children inherit that; Python then installs no KeyboardInterrupt handler, as POSIX
    asks of a program that finds a signal ignored. ncdc keeps that convention, so the test
    sets the disposition a Ctrl-C at a terminal would meet instead of relying on its own.
    """
    env = {**os.environ, "NCDC_CACHE": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-m", "ncdc", "compile", spec, "-o", str(out), "--format", "json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cache_entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.cubin"))


def test_parallel_compiles_of_the_same_and_different_specs(tmp_path):
    cache = tmp_path / "cache"
    specs = ["diagrams/softmax.yaml"] * 4 + ["diagrams/rmsnorm.yaml"] * 2 + [
        "diagrams/layernorm.yaml", "diagrams/matmul.yaml"]  # fmt: skip
    procs = [start_compile(s, tmp_path / f"out{i}", cache) for i, s in enumerate(specs)]
    results = [p.communicate(timeout=600) for p in procs]
    replaced = set()
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        data = json.loads(out)
        assert data["format"] == "ncdc.kernel/1"
        replaced |= set(data["notes"])  # a candidate ptxas refuted was compiled too
    # One cache entry per distinct module compiled: each once, whoever asked first.
    assert len(cache_entries(cache)) == 4 + len(replaced)
    # Every output folder has its three files and nothing half-written.
    for i, spec in enumerate(specs):
        names = sorted(p.name for p in (tmp_path / f"out{i}").iterdir())
        stem = Path(spec).stem
        assert names == [f"{stem}.cu", f"{stem}.cubin", f"{stem}.json"]
    # No lock is left held: taking each one without blocking succeeds.
    import fcntl

    for lock in cache.rglob("*.lock"):
        with lock.open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_ctrl_c_during_compile_leaves_no_partial_file(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    proc = start_compile("diagrams/", out, cache)
    time.sleep(3.0)  # planning and NVRTC are under way by now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in err
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    # What was written is whole: every .json parses and its .cu and .cubin are beside it.
    for meta in out.glob("*.json") if out.exists() else []:
        json.loads(meta.read_text())
        assert meta.with_suffix(".cu").exists() and meta.with_suffix(".cubin").exists()
    # A second run completes and reuses what the first one finished.
    again = start_compile("diagrams/softmax.yaml", out, cache)
    assert again.wait(timeout=600) == 0
