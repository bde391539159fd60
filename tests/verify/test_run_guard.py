"""Guards for the CPU backend: an emulation's memory is estimated before it runs and one over
the limit is refused (exit 2, a hint naming --set); the estimate bounds the measured peak;
Ctrl-C stops an emulated kernel within a second; Ctrl-C during a folder compile cancels the
queued work."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ncdc.errors import UsageError
from ncdc.language.load import load_diagram
from ncdc.verify.run import check_emulation_fits, estimate_emulation, memory_limit
from tests.support import ROOT, assert_error, ncdc


def test_full_size_attention_is_refused_before_it_runs(tmp_path):
    cache = tmp_path / "cache"
    result = ncdc(
        "run", "diagrams/attention.yaml", "--backend", "cpu", env={"NCDC_CACHE": str(cache)}
    )
    line = assert_error(result, 2, contains="--set")
    assert "GiB of memory" in line and "--max-memory" in line
    assert not list(cache.rglob("*.so"))  # planning only: no emulator built, no kernel run


def test_max_memory_lowers_and_raises_the_limit(tmp_path):
    small = ("run", "diagrams/softmax.yaml", "--set", "m=4", "--set", "n=64")
    assert_error(ncdc(*small, "--max-memory", "1M"), 2, contains="over the limit of 1.00 MiB")
    assert ncdc(*small, "--max-memory", "2G").returncode == 0


@pytest.mark.parametrize("text", ["lots", "-1G", "0", "0%", "150%", "1.5X", ""])
def test_bad_max_memory_is_refused(text):
    with pytest.raises(UsageError, match="--max-memory"):
        memory_limit(text)


def test_memory_limit_units_and_default():
    assert memory_limit("1K") == 1024 and memory_limit("2GiB") == 2 << 30
    assert memory_limit("100%") >= memory_limit(None) > 0  # the default is a share


def test_a_compiled_kernel_over_the_limit_names_recompiling():
    d = load_diagram("diagrams/softmax.yaml")
    from ncdc.verify.run import _no_module

    estimate = estimate_emulation(d, _no_module())
    with pytest.raises(UsageError) as e:
        check_emulation_fits(estimate, 1 << 20, compiled=True)
    assert "ncdc compile SPEC --set" in e.value.line()


def test_the_estimate_bounds_the_measured_peak():
    sets = ["--set", "m=1024", "--set", "n=8192"]
    args = [sys.executable, "-m", "ncdc", "run", "diagrams/softmax.yaml", *sets]
    # A wrapper process whose only child is the run: its RUSAGE_CHILDREN is that run's peak.
    wrapper = (
        "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, *args], cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    code, kib = proc.stdout.split()[-2:]
    assert code == "0", proc.stderr
    peak = int(kib) * 1024
    from ncdc.verify.run import _no_module

    d = load_diagram("diagrams/softmax.yaml", {"m": 1024, "n": 8192})
    estimate = estimate_emulation(d, _no_module()).memory_bytes
    assert peak <= 1.25 * estimate, (peak, estimate)  # a guard that is not fooled
    assert estimate <= 3 * peak, (peak, estimate)  # nor so loose that it refuses good runs


SPIN = textwrap.dedent(
    r"""
    import sys, time
    import numpy as np
    from ncdc.backends import cpu
    src = '''#include "ncdc_runtime.cuh"
    #include <ctime>
    extern "C" __global__ void spin(int* x) {
      timespec t0, t; clock_gettime(CLOCK_MONOTONIC, &t0);
      do { clock_gettime(CLOCK_MONOTONIC, &t); } while (t.tv_sec - t0.tv_sec < 3600);
      x[0] = 1;
    }
    NCDC_EXPORT_KERNEL(spin);
    '''
    module = cpu.build(src)
    x = np.zeros(1, np.int32)
    print("launching", flush=True)
    try:
        module.launch("spin", 1, 1, [x])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def _default_sigint() -> None:
    """SIGINT as a terminal's foreground job meets it: a harness that starts the tests in the
    background passes SIGINT on ignored, and Python then installs no KeyboardInterrupt
    handler (tests/backends/test_concurrency.py keeps the same convention)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_an_emulated_kernel_within_a_second(tmp_path):
    env = {"NCDC_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", SPIN], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True, preexec_fn=_default_sigint)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "launching"
        time.sleep(0.5)  # inside the kernel now, which spins for an hour unless stopped:
        proc.send_signal(signal.SIGINT)  # an end at all is the kernel interrupted
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()  # never an hour's spin left behind on the test machine, pass or fail
        proc.wait()
    assert proc.returncode == 130 and "interrupted" in out


def test_ctrl_c_during_a_folder_compile_cancels_the_queue(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [sys.executable, "-m", "ncdc", "compile", "diagrams/", "-o", str(out), "-j", "1",
            "--arch", "sm_90a", "--no-cache"]  # fmt: skip
    env = {"NCDC_CACHE": str(cache), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)  # fmt: skip
    try:
        time.sleep(4.0)  # the first diagrams are compiling, the rest queued
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # the queue of diagrams would take minutes
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert not out.exists() or not list(out.iterdir())  # nothing written: it was cancelled
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
