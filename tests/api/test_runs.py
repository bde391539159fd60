"""ncdc.load's GPU path (ncdc/api/runs.py, ncdc.backends.cuda.DeviceModule) on a GPU made
of the CPU emulator (tests/api/fakes.py): the arguments, outputs, scratch buffers, tensor
maps, shared-memory opt-in and stream a real launch would get, with results checked
against the reference. The real GPU runs in scripts/device-check.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ncdc
from ncdc.api.runs import stream_handle
from ncdc.errors import ArrayError
from ncdc.render import render_plan
from tests import support
from tests.api.fakes import fake_gpu
from tests.api.test_kernel import check_against_reference, rng

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda backend compiles with NVRTC")

SOFTMAX = str(support.DIAGRAMS / "softmax.yaml")
MULTI = str(support.SPECS / "multi_mlp_two_gemms.yaml")


def test_softmax_on_device_arrays_runs_on_the_callers_stream(monkeypatch) -> None:
    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX)
        x = rng().standard_normal((5, 300)).astype(ml_dtypes.bfloat16)
        y = softmax(gpu.asarray(x.view(np.uint16)))  # CuPy holds bf16 as its bits
        assert type(y).__name__ == "FakeDeviceArray" and y.dtype == np.uint16
        check_against_reference(SOFTMAX, {"X": x}, {"Y": y.host.view(ml_dtypes.bfloat16)})
        assert gpu.launches[-1][4] is None  # CuPy's current stream

        class Stream:  # a cupy.cuda.Stream as the launch reads it
            ptr = 0x5EED

        out = gpu.empty((5, 300), np.uint16)
        assert softmax(gpu.asarray(x.view(np.uint16)), out=out, stream=Stream()) is out
        assert np.array_equal(out.host, y.host) and gpu.launches[-1][4].ptr == 0x5EED


def test_a_diagram_of_two_kernels_gets_its_intermediate_allocated(monkeypatch) -> None:
    d = ncdc.load(MULTI).diagram
    with fake_gpu(monkeypatch) as gpu:
        mlp = ncdc.load(MULTI, sizes={"m": 24})
        sizes = {"m": 24, **{a: n for a, n in d.axes.items() if a != "m"}}
        inputs = {
            t.name: (rng().standard_normal([sizes[a] for a in t.axes]) * 0.5).astype(
                ml_dtypes.bfloat16 if t.dtype == "bf16" else np.float32
            )
            for t in d.inputs
        }
        got = mlp(*(gpu.asarray(inputs[t.name].view(np.uint16) if t.dtype == "bf16"
                                else inputs[t.name]) for t in d.inputs))  # fmt: skip
        assert len({launch[0] for launch in gpu.launches}) >= 2  # two kernels, in order
        results = got if isinstance(got, tuple) else (got,)
        outputs = {
            name: r.host.view(ml_dtypes.bfloat16) if d.tensor(name).dtype == "bf16" else r.host
            for name, r in zip(d.outputs, results, strict=True)
        }
        check_against_reference(MULTI, inputs, outputs)


def test_a_hopper_kernel_gets_its_tensor_maps_and_shared_memory_opt_in(monkeypatch) -> None:
    # fp8 attention runs only in the sm_90a wgmma kernel: TMA loads, > 48 KiB of smem
    spec = str(support.DIAGRAMS / "attention_fp8.yaml")
    with fake_gpu(monkeypatch) as gpu:
        attention = ncdc.load(spec)
        shape = (1, 2, 70, 128)
        q = (rng().standard_normal(shape) * 4).astype(ml_dtypes.float8_e4m3fn)
        k = (rng().standard_normal(shape) * 4).astype(ml_dtypes.float8_e4m3fn)
        v = rng().standard_normal(shape).astype(ml_dtypes.float8_e4m3fn)
        o = attention(*(gpu.asarray(a.view(np.uint8) if a.dtype.itemsize == 1 else a)
                        for a in (q, k, v)))  # fmt: skip
        name, _, _, smem, _ = gpu.launches[-1]
        assert "wgmma" in name and smem > 48 * 1024
        assert (8, smem) in [(attribute, value) for _, attribute, value in gpu.attributes]
        module = render_plan(attention.plan)
        sums = dict(module.sums)  # S as Hopper's fp8 wgmma sums it
        softmaxes = dict(module.softmaxes)  # P rounded to e4m3 tile by tile
        assert sums and softmaxes
        check_against_reference(spec, {"Q": q, "K": k, "V": v}, {"O": o.host}, sums, softmaxes)


def test_host_arrays_run_on_the_gpu_with_backend_cuda(monkeypatch) -> None:
    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX, backend="cuda")
        x = rng().standard_normal((2, 64)).astype(ml_dtypes.bfloat16)
        y = softmax(x)
        assert isinstance(y, np.ndarray) and y.dtype == ml_dtypes.bfloat16
        assert gpu.launches, "ran on the (fake) GPU"
        check_against_reference(SOFTMAX, {"X": x}, {"Y": y})


def test_misaligned_and_scattered_device_arrays_are_refused(monkeypatch) -> None:
    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX)
        whole = gpu.asarray(np.zeros(2 * 64 + 1, np.uint16))
        shifted = type(whole)(whole.host[1:].reshape(2, 64))
        with pytest.raises(ArrayError, match="not on a 16-byte boundary"):
            softmax(shifted)
        elsewhere = type(whole)(np.zeros((2, 64), np.uint16), device=1)
        with pytest.raises(ArrayError, match="input B is on cuda:1, but A is on cuda:0"):
            ncdc.load(str(support.DIAGRAMS / "matmul.yaml"))(
                gpu.asarray(np.zeros((2, 8), np.uint16)), elsewhere
            )


def test_a_stream_is_its_handle() -> None:
    class TorchStream:
        cuda_stream = 11

    class CupyStream:
        ptr = 12

    assert [stream_handle(s) for s in (TorchStream(), CupyStream(), 13)] == [11, 12, 13]
    with pytest.raises(ArrayError, match="expected a CUDA stream"):
        stream_handle("default")


def test_a_repeated_call_skips_the_checks_but_not_alignment_or_new_arrays(monkeypatch) -> None:
    """Arrays of a signature seen before (shape, dtype, device, layout) are not checked
    again, but each call's addresses are: a misaligned view of a known shape is refused, and
    a new shape, a wrong dtype or a wrong out= is checked as on a first call."""
    from ncdc.api import kernel as kernel_module

    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX)
        x = gpu.asarray(np.zeros((2, 64), np.uint16))
        softmax(x)
        binds = []
        real = kernel_module.bind_sizes
        monkeypatch.setattr(kernel_module, "bind_sizes", lambda *a: binds.append(1) or real(*a))
        out = gpu.empty((2, 64), np.uint16)
        softmax(gpu.asarray(np.ones((2, 64), np.uint16)), out=out)
        softmax(gpu.asarray(np.ones((2, 64), np.uint16)), out=out)
        assert binds == []  # the signature was admitted by the first call
        whole = gpu.asarray(np.zeros(2 * 64 + 1, np.uint16))
        with pytest.raises(ArrayError, match="input X starts at .* not on a 16-byte boundary"):
            softmax(type(whole)(whole.host[1:].reshape(2, 64)))
        with pytest.raises(ArrayError, match="output Y starts at .* not on a 16-byte boundary"):
            softmax(x, out=type(whole)(whole.host[1:].reshape(2, 64)))
        with pytest.raises(ArrayError, match="output Y: expected shape"):
            softmax(x, out=gpu.empty((2, 65), np.uint16))
        with pytest.raises(
            ArrayError, match="input X: expected bfloat16 or uint16 for bf16, found float32"
        ):
            softmax(gpu.asarray(np.zeros((2, 64), np.float32)))
        softmax(gpu.asarray(np.zeros((3, 64), np.uint16)))
        assert len(binds) == 3  # the misaligned, the float32 and the new shape: checked


def test_a_kernel_at_other_sizes_keeps_its_own_calls(monkeypatch) -> None:
    """`Kernel.at` shares the builds but not the admitted calls: an axis no input carries
    takes each Kernel's own size."""
    with fake_gpu(monkeypatch) as gpu:
        mlp = ncdc.load(MULTI, sizes={"m": 24})
        d = mlp.diagram
        shapes = [[{"m": 24, **d.axes}[a] for a in t.axes] for t in d.inputs]
        arrays = [gpu.asarray(np.zeros(s, np.uint16 if t.dtype == "bf16" else np.float32))
                  for s, t in zip(shapes, d.inputs, strict=True)]  # fmt: skip
        mlp(*arrays)
        assert mlp.at(m=24)._calls == {} and mlp._calls


def test_a_loaded_module_binds_each_set_of_addresses_once(monkeypatch) -> None:
    """The launches' argument tuples are kept per set of buffer addresses (a program's
    loop passes the same ones), and built anew for others; the cache is bounded."""
    from ncdc.backends import cuda

    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX)
        x, y = gpu.asarray(np.zeros((2, 64), np.uint16)), gpu.empty((2, 64), np.uint16)
        softmax(x, out=y)
        (run,) = softmax._shared.runs.values()
        bound = run.loaded._bound
        assert len(bound) == 1
        softmax(x, out=y)
        assert len(bound) == 1
        other = gpu.empty((2, 64), np.uint16)
        softmax(x, out=other)
        assert len(bound) == 2 and any(int(other.data.ptr) in key for key in bound)
        # the key follows the module's buffer names, not the order a mapping is built in
        addresses = {"Y": int(y.data.ptr), "X": int(x.data.ptr)}
        run.loaded.run(addresses)
        assert len(bound) == 2
        monkeypatch.setattr(cuda, "BOUND_ARGUMENTS", 2)
        softmax(gpu.asarray(np.zeros((2, 64), np.uint16)), out=other)
        assert len(bound) == 1  # full: cleared, then the new set kept


def test_an_out_of_another_library_device_or_read_only_is_refused(monkeypatch) -> None:
    """A host array given as the output of a GPU call would have the kernel write through a
    host pointer; a read-only NumPy output would be written anyway: each is one line."""
    with fake_gpu(monkeypatch) as gpu:
        softmax = ncdc.load(SOFTMAX)
        x = gpu.asarray(np.zeros((2, 64), np.uint16))
        with pytest.raises(ArrayError, match="output Y is a numpy array on the host, but the "
                           "inputs are cupy arrays on cuda:0"):  # fmt: skip
            softmax(x, out=np.zeros((2, 64), np.uint16))
        elsewhere = type(x)(np.zeros((2, 64), np.uint16), device=1)
        with pytest.raises(ArrayError, match="output Y is a cupy array on cuda:1"):
            softmax(x, out=elsewhere)
    frozen = np.zeros((2, 64), ml_dtypes.bfloat16)
    frozen.flags.writeable = False
    with pytest.raises(ArrayError, match="output Y is a read-only array"):
        ncdc.load(SOFTMAX)(np.ones((2, 64), ml_dtypes.bfloat16), out=frozen)


def test_host_arrays_are_copied_in_on_the_stream_the_kernels_run_on(monkeypatch) -> None:
    """backend='cuda' with stream=: the copies to the GPU are made on that stream (a torch
    stream is non-blocking: copies on another stream could land after the kernels read)."""
    import contextlib

    with fake_gpu(monkeypatch) as gpu:
        entered: list[int] = []
        copies: list[list[int]] = []

        @contextlib.contextmanager
        def external(ptr):
            entered.append(ptr)
            yield
            entered.pop()

        gpu.cuda.ExternalStream = external
        real = gpu.asarray
        monkeypatch.setattr(gpu, "asarray", lambda a: copies.append(list(entered)) or real(a))
        softmax = ncdc.load(SOFTMAX, backend="cuda")

        class Stream:
            ptr = 0x5EED

        softmax(np.ones((2, 64), ml_dtypes.bfloat16), stream=Stream())
        assert copies == [[0x5EED]] and gpu.launches[-1][4].ptr == 0x5EED
