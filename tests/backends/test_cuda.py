"""The cuda backend on a machine without a GPU: one line, exit 4, never a traceback
(ncdc.backends.cuda; tests/gpu runs it on a GPU).
"""

from __future__ import annotations

import sys

import pytest

from ncdc.backends import cuda
from tests.measure.fakes import FakeCupy
from tests.support import ncdc


def test_cuda_backend_without_a_gpu_exits_4():
    result = ncdc(
        "run", "diagrams/softmax.yaml", "--set", "m=2", "--set", "n=8", "--backend", "cuda"
    )
    assert result.returncode == 4
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_no_device_is_exit_4(monkeypatch):
    """Control flow only: CuPy present but no device."""

    class NoDevice:
        class cuda:
            class runtime:
                @staticmethod
                def getDeviceCount() -> int:
                    raise RuntimeError("cudaErrorNoDevice")

    monkeypatch.setitem(sys.modules, "cupy", NoDevice)
    from ncdc.errors import NoGpuError

    with pytest.raises(NoGpuError) as e:
        cuda.require_gpu()
    assert e.value.exit_code == 4 and "no CUDA GPU" in e.value.line()


def test_device_info_versions():
    info = cuda.device_info(FakeCupy())
    assert info["name"] == "Fake H200"
    assert info["driver_version"] == "13.0" and info["runtime_version"] == "12.9"
