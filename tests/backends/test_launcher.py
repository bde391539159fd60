"""Launches through the driver's cuLaunchKernel (ncdc.backends.launcher): the packed
parameter arrays, the choice of launcher, and, against a recording driver
(fake_libcuda.c), a diagram called through `ncdc.load` whose launches carry exactly the
arguments CuPy's launch would have passed."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends import cuda, launcher
from ncdc.errors import NcdcError
from tests import support
from tests.backends import fakecuda


def test_a_packed_parameter_points_at_its_bytes_and_a_map_is_64_aligned():
    map_words = np.array([tuple(range(100, 116))], dtype=cuda.TENSOR_MAP_DTYPE)
    args = [np.uint64(0x7F0012345600), np.int64(-5), np.int32(7), np.float32(1.5), map_words]
    packed = launcher.pack("k", 0, 0x1234, (3, 2, 1), (128, 1, 1), 4096, args)
    assert (packed.function, packed.grid, packed.block, packed.smem) == (0x1234, (3, 2, 1),
                                                                          (128, 1, 1), 4096)  # fmt: skip
    for pointer, arg in zip(packed.params, args, strict=True):
        raw = np.asarray(arg).tobytes()
        assert ctypes.string_at(pointer, len(raw)) == raw
    assert packed.params[4] % 64 == 0 and all(p % 8 == 0 for p in packed.params)


def test_the_launcher_is_chosen_by_ncdc_launch(monkeypatch):
    launcher.driver.cache_clear()
    monkeypatch.setenv(launcher.LAUNCH_ENV, "cupy")
    assert launcher.driver() is None
    launcher.driver.cache_clear()
    monkeypatch.setenv(launcher.LAUNCH_ENV, "warp-drive")
    with pytest.raises(NcdcError, match="NCDC_LAUNCH='warp-drive' is not a way to launch"):
        launcher.driver()
    launcher.driver.cache_clear()
    monkeypatch.delenv(launcher.LAUNCH_ENV)
    launcher.driver()  # the driver library where it loads, None where not: no error
    launcher.driver.cache_clear()


# The child: ncdc.load on a stand-in GPU whose functions are handles the recording driver
# reads as the kernel's name; the launches go to the recording driver. It prints, as JSON,
# what CuPy's launch would have passed for the same buffers, and the kernels' parameter
# kinds (set for the recording driver before the call).
CHILD = textwrap.dedent(
    """
    import ctypes, functools, json, os, sys
    import ml_dtypes, numpy as np
    from tests.api import fakes
    from ncdc.backends import cuda

    names = {}
    plain_init = fakes.FakeFunction.__init__

    def named(self, gpu, name):
        plain_init(self, gpu, name)
        names[name] = ctypes.create_string_buffer(name.encode())
        self.ptr = ctypes.addressof(names[name])

    fakes.FakeFunction.__init__ = named
    gpu = fakes.FakeGpu()
    gpu.cuda.get_current_stream = lambda: type("Stream", (), {"ptr": 0x77})()
    sys.modules["cupy"] = gpu
    cuda.tensor_map_argument = functools.cache(fakes.emulated_tensor_map)

    import ncdc
    from ncdc.render import render_plan

    spec, shapes = sys.argv[1], json.loads(sys.argv[2])
    kernel = ncdc.load(spec)
    module = render_plan(kernel.at(**json.loads(sys.argv[3])).plan)
    kinds = {"tensor": "b", "workspace": "b", "int64": "l", "int32": "i", "float32": "f"}
    os.environ["FAKE_CUDA_KINDS"] = ";".join(
        launch.kernel + "=" + "".join("m" if p.tensor_map else kinds[p.kind] for p in launch.params)
        for launch in module.launches
    )
    rng = np.random.default_rng(0)
    arrays = [gpu.asarray(rng.standard_normal(s).astype(ml_dtypes.bfloat16).view(np.uint16))
              for s in shapes]
    out = kernel(*arrays)
    kernel(*arrays, out=out)  # the same buffers: the parameter arrays packed by the first
    (run,) = kernel._shared.runs.values()
    loaded = run.loaded
    (key,) = loaded._bound
    expected = loaded.arguments(dict(zip(loaded.buffer_names, key)))
    print(json.dumps([[launch.kernel, [np.asarray(a).tobytes().hex() for a in args]]
                      for launch, args in zip(module.launches, expected)]))
    """
)

CASES = {  # a row-wise kernel (pointers and sizes) and the Hopper GEMM (tensor maps too)
    "softmax": ("diagrams/softmax.yaml", [[64, 1000]], {"m": 64, "n": 1000}),
    "matmul": ("diagrams/matmul.yaml", [[256, 128], [128, 256]], {"m": 256, "n": 256, "k": 128}),
}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if fakecuda.compiler() is None:
        pytest.skip("no C compiler for the recording driver")
    return fakecuda.build_driver(tmp_path_factory.mktemp("driver"))


def _run_child(driver: Path, tmp_path: Path, case: str, **env: str):
    spec, shapes, sizes = CASES[case]
    log = tmp_path / "driver.log"
    environ = {**os.environ, "PYTHONPATH": str(support.ROOT), "LD_LIBRARY_PATH": str(driver),
               "FAKE_CUDA_LOG": str(log), "NCDC_CACHE": str(tmp_path / "cache"), **env}  # fmt: skip
    environ.pop(launcher.LAUNCH_ENV, None)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, spec, json.dumps(shapes), json.dumps(sizes)],
        capture_output=True, text=True, cwd=support.ROOT, env=environ, timeout=300,
    )  # fmt: skip
    return child, log


@pytest.mark.parametrize("case", list(CASES))
def test_a_call_launches_through_the_driver_with_cupys_arguments(driver, tmp_path, case):
    child, log = _run_child(driver, tmp_path, case)
    assert child.returncode == 0, child.stderr
    expected = json.loads(child.stdout)
    launches = [line.split() for line in log.read_text().splitlines() if line.startswith("launch")]
    assert len(launches) == 2 * len(expected)  # two calls, every kernel each time
    for n, words in enumerate(launches):
        name, args = expected[n % len(expected)]
        assert words[1] == name and int(words[13]) == 0x77  # on CuPy's current stream
        values = words[17:]
        assert len(values) == len(args)
        for got, want in zip(values, args, strict=True):
            raw = bytes.fromhex(want)
            if got.startswith("map:"):  # the recording driver prints a map's first two words
                _, w0, w1, aligned = got.split(":")
                assert aligned == "1", "a tensor map's bytes start 64-byte aligned"
                assert (int(w0), int(w1, 16)) == tuple(np.frombuffer(raw, "<u8")[:2])
            elif "p" in got:  # a float, printed in hexadecimal
                assert float.fromhex(got) == float(np.frombuffer(raw, "<f4")[0])
            else:
                assert int(got) == int.from_bytes(raw, "little", signed=got.startswith("-"))


def test_a_thread_with_no_context_current_gets_the_devices_primary_one(driver, tmp_path):
    """A launch on a thread where no CUDA call made a context current (the driver answers
    CUDA_ERROR_INVALID_CONTEXT) makes the device's primary context current and launches."""
    child, log = _run_child(driver, tmp_path, "softmax", FAKE_CUDA_NO_CONTEXT="1")
    assert child.returncode == 0, child.stderr
    lines = log.read_text().splitlines()
    first = lines.index("launch refused: no context")
    assert lines[first + 1 : first + 3] == ["retain primary context of device 0", "set context 0x2"]
    assert sum(line.startswith("launch softmax") for line in lines) == 2


def test_a_launch_the_driver_refuses_is_one_error_line(driver, tmp_path):
    child, _ = _run_child(driver, tmp_path, "softmax", FAKE_CUDA_LAUNCH_RESULT="1")
    assert child.returncode == 1 and "Traceback" in child.stderr  # the child does not catch
    last = child.stderr.strip().splitlines()[-1]
    assert "cuLaunchKernel refused softmax_rowwise" in last
    assert "CUDA_ERROR_INVALID_VALUE (1)" in last and "NCDC_LAUNCH=cupy" in last
