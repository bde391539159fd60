"""How a built diagram runs on the arrays of one call: emulated on the host, launched on a
GPU, or host arrays carried to a GPU and back. A run is made once per sizes and device
(`ncdc.api.kernel.Kernel`) and called with the checked `ArrayView`s of each call.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ncdc.api import arrays as arr
from ncdc.api.arrays import ArrayView
from ncdc.backends.arguments import scratch_buffers
from ncdc.errors import ArrayError
from ncdc.language.dtypes import DTYPES

Inputs = Sequence[tuple[str, tuple[str, ...], str]]  # (name, axes, dtype) in inputs: order


def _returned(results: list[Any]) -> Any:
    """One output as itself, several as a tuple in `outputs:` order."""
    return results[0] if len(results) == 1 else tuple(results)


class HostRun:
    """The cpu backend: the build's source emulated, on copies of the host arrays."""

    def __init__(self, built: Any, inputs: Inputs):
        from ncdc.backends.cpu import build

        self.built = built
        self.inputs = inputs
        self.lib = build(built.module.source)

    def __call__(self, views: Sequence[ArrayView], outs: list[ArrayView] | None,
                 stream: Any) -> Any:  # fmt: skip
        from ncdc.verify.reference import from_storage
        from ncdc.verify.run import allocate_storage, check_indices, run_emulated

        if stream is not None:
            raise ArrayError(
                "stream= is for GPU arrays; host arrays run on the cpu backend",
                hint="drop stream=, or pass torch or CuPy arrays on a GPU",
            )
        bits = {
            name: arr.host_bits(v, dtype)
            for (name, _, dtype), v in zip(self.inputs, views, strict=True)
        }
        module, diagram = self.built.module, self.built.diagram
        buffers = allocate_storage(module, diagram, bits)
        run_emulated(self.lib, module, buffers)
        values = {n: from_storage(b, diagram.tensor(n).dtype) for n, b in bits.items()}
        check_indices(diagram, buffers, values)  # an index out of range: refused
        family = views[0].family if views else "numpy"
        results = []
        for i, name in enumerate(diagram.outputs):
            dtype = diagram.tensor(name).dtype
            if outs is None:
                results.append(arr.from_host_bits(buffers[name], dtype, family))
            else:
                arr.host_bits(outs[i], dtype)[...] = buffers[name]
                results.append(outs[i].array)
        return _returned(results)


_NO_CONTEXT = contextlib.nullcontext()  # reusable: it holds no state
_BITS = {name: np.dtype(d.bits) for name, d in DTYPES.items()}  # what CuPy holds each dtype as
_BYTES = np.dtype(np.uint8)


class _Stream:
    """A stream as CuPy's launch takes it: anything whose `.ptr` is the handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


def stream_handle(stream: Any) -> int:
    """The CUstream of `stream`: a torch.cuda.Stream, a CuPy stream, or the handle."""
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(handle)
    if isinstance(stream, int) and stream >= 0:
        return stream
    raise ArrayError(
        f"expected a CUDA stream for stream=, found a {type(stream).__name__}",
        hint="pass a torch.cuda.Stream, a cupy.cuda.Stream or its handle (an int)",
    )


class DeviceRun:
    """The cuda backend: every launch of the build enqueued on the caller's stream, over
    the caller's arrays (no copy); outputs, intermediates and workspaces allocated by the
    caller's library on that stream."""

    def __init__(self, built: Any, inputs: Inputs, device: int):
        from ncdc.backends.cuda import DeviceModule, require_gpu

        if built.cubin is None:
            raise ArrayError("no cubin was compiled for the GPU", hint="pip install 'ncdc[cuda]'")
        self.cupy = require_gpu()
        self.device = device
        self.inputs = inputs
        self.loaded = DeviceModule(self.cupy, built.module, built.cubin, device)
        diagram = built.diagram
        self.outputs = [
            (name, tuple(diagram.axes[a] for a in diagram.tensor(name).axes),
             diagram.tensor(name).dtype)
            for name in diagram.outputs
        ]  # fmt: skip
        self.scratch = scratch_buffers(built.diagram, built.module)
        # accumulators (atomics' fp32 sums, an index status word) start every call at zero
        zeroed = {w.name for w in built.module.workspace if w.zeroed}
        self.zeroed = [name in zeroed for name, _ in self.scratch]
        names = [n for n, _, _ in inputs] + list(diagram.outputs) + [n for n, _ in self.scratch]
        # where each buffer the module passes comes from, in the module's order
        self.order = [names.index(name) for name in self.loaded.buffer_names]
        self.torch_device: Any = None  # torch.device("cuda", device), made on first use
        self.cupy_memory = _CupyMemory(self, None)
        # with one GPU, it is always the current one: no runtime call a launch to ask
        self.one_gpu = int(self.cupy.cuda.runtime.getDeviceCount()) == 1

    def __call__(self, views: Sequence[ArrayView], outs: list[ArrayView] | None,
                 stream: Any) -> Any:  # fmt: skip
        return _returned(self.launch(views, outs, stream))

    def launch(self, views: Sequence[ArrayView], outs: list[ArrayView] | None,
               stream: Any) -> list[Any]:  # fmt: skip
        family = views[0].family if views else "cupy"
        here = self.one_gpu or self.cupy.cuda.runtime.getDevice() == self.device
        if family == "torch":
            alloc: _TorchMemory | _CupyMemory = _TorchMemory(self, stream)
        elif stream is None:  # CuPy's current stream: the same allocator every call
            alloc = self.cupy_memory
        else:
            alloc = _CupyMemory(self, stream)
        address = alloc.address
        # every address in inputs, outputs, scratch order, then in the module's order
        found = [v.address for v in views]
        if outs is not None and not self.scratch:  # nothing to allocate
            results = [v.array for v in outs]
            found += [v.address for v in outs]
            scratch: list[Any] = []
        else:
            with alloc.on_stream(here):
                if outs is None:
                    results = [alloc.output(shape, dtype) for _, shape, dtype in self.outputs]
                else:
                    results = [v.array for v in outs]
                # Scratch memory returns to the allocator when this call returns: allocated
                # on the launch stream, its next user there waits for these kernels. The
                # buffers are held in `scratch` until the launches are enqueued.
                scratch = [
                    alloc.scratch(nbytes, zero)
                    for (_, nbytes), zero in zip(self.scratch, self.zeroed, strict=True)
                ]
            found += [address(r) for r in results]
        found += [address(b) for b in scratch]
        key = tuple([found[i] for i in self.order])
        if here:
            self.loaded.run_at(key, alloc.stream)
        else:
            with self.cupy.cuda.Device(self.device):
                self.loaded.run_at(key, alloc.stream)
        return results


class _TorchMemory:
    """Allocation through torch's caching allocator, on torch's current stream (or the
    given one): memory freed after the call is reused only behind its kernels."""

    def __init__(self, run: DeviceRun, stream: Any):
        self.torch = sys.modules["torch"]
        if run.torch_device is None:
            run.torch_device = self.torch.device("cuda", run.device)
        self.device = run.torch_device
        self.given = stream
        if stream is None:
            handle = self.torch.cuda.current_stream(self.device).cuda_stream
        else:
            handle = stream_handle(stream)
        self.stream = _Stream(handle)

    def on_stream(self, here: bool) -> Any:
        """The given stream made torch's current one while outputs are allocated."""
        if self.given is None:
            return _NO_CONTEXT
        s = self.given
        if not isinstance(s, self.torch.cuda.Stream):
            s = self.torch.cuda.ExternalStream(self.stream.ptr, device=self.device)
        return self.torch.cuda.stream(s)

    def output(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=arr.torch_dtype(dtype), device=self.device)

    def scratch(self, nbytes: int, zeroed: bool) -> Any:
        make = self.torch.zeros if zeroed else self.torch.empty  # on the current stream
        return make(nbytes, dtype=self.torch.uint8, device=self.device)

    @staticmethod
    def address(t: Any) -> int:
        return int(t.data_ptr())


class _CupyMemory:
    """Allocation through CuPy's memory pool, on CuPy's current stream (or the given one):
    the pool reuses a block freed on a stream only on that stream."""

    def __init__(self, run: DeviceRun, stream: Any):
        self.cupy = run.cupy
        self.device = run.device
        self.given = stream
        self.stream = None if stream is None else _Stream(stream_handle(stream))

    def on_stream(self, here: bool) -> Any:
        """CuPy's device (when another is current) and the given stream made current while
        outputs are allocated: its pool serves blocks freed on that stream."""
        if here and self.stream is None:
            return _NO_CONTEXT
        stack = contextlib.ExitStack()
        stack.enter_context(self.cupy.cuda.Device(self.device))
        if self.stream is not None:
            stack.enter_context(self.cupy.cuda.ExternalStream(self.stream.ptr))
        return stack

    def output(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.cupy.empty(shape, dtype=_BITS[dtype])

    def scratch(self, nbytes: int, zeroed: bool) -> Any:
        make = self.cupy.zeros if zeroed else self.cupy.empty  # on the current stream
        return make(nbytes, dtype=_BYTES)

    @staticmethod
    def address(a: Any) -> int:
        return int(a.data.ptr)


class HostOnDevice:
    """backend='cuda' on host arrays: copied to the current GPU, run there, copied back."""

    def __init__(self, built: Any, inputs: Inputs):
        from ncdc.backends.cuda import require_gpu

        self.cupy = require_gpu()
        self.inputs = inputs
        self.built = built
        self.device = int(self.cupy.cuda.runtime.getDevice())
        self.run = DeviceRun(built, inputs, self.device)

    def __call__(self, views: Sequence[ArrayView], outs: list[ArrayView] | None,
                 stream: Any) -> Any:  # fmt: skip
        cupy = self.cupy
        # the copies in go on the stream the kernels run on: a given stream (torch's are
        # non-blocking) would otherwise run them before the copies land
        on_stream = (
            _NO_CONTEXT if stream is None else cupy.cuda.ExternalStream(stream_handle(stream))
        )
        with cupy.cuda.Device(self.device), on_stream:
            on_gpu = [
                arr.view(cupy.asarray(np.ascontiguousarray(arr.host_bits(v, dtype))))
                for (_, _, dtype), v in zip(self.inputs, views, strict=True)
            ]
            results = self.run.launch(on_gpu, None, stream)
            cupy.cuda.Device(self.device).synchronize()
            bits = [cupy.asnumpy(r) for r in results]
        family = views[0].family if views else "numpy"
        diagram = self.built.diagram
        returned = []
        for i, (name, b) in enumerate(zip(diagram.outputs, bits, strict=True)):
            dtype = diagram.tensor(name).dtype
            if outs is None:
                returned.append(arr.from_host_bits(b, dtype, family))
            else:
                arr.host_bits(outs[i], dtype)[...] = b
                returned.append(outs[i].array)
        return _returned(returned)
