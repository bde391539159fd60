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


def test_tensor_map_argument_applies_the_driver_workaround(monkeypatch):
    """The driver's words pass through mend_tensor_map with the driver's version: a 4 KiB
    tensor under a CUDA 13.0 driver loses bit 21 of word 1 and keeps every other bit."""
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")
    from cuda.bindings import driver

    from ncdc.families.base import TensorMapSpec

    class Encoded:
        opaque = [0xFFFF_FFFF_FFFF_FFFF] * 16

    monkeypatch.setattr(cuda, "_encode_tiled", lambda *_: (driver.CUresult.CUDA_SUCCESS, Encoded))
    monkeypatch.setattr(cuda, "_driver_version", lambda _: 13000)
    spec = TensorMapSpec("A", "bf16", (64, 32), (256,), (64, 32), 128)
    words = list(cuda.tensor_map_argument(spec, 0x10000)[0])
    assert words[1] == 0xFFFF_FFFF_FFFF_FFFF ^ (1 << 21)
    assert words[:1] + words[2:] == Encoded.opaque[:1] + Encoded.opaque[2:]
