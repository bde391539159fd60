"""Timing on a GPU, on a machine without one (ncdc.measure.timing): quantiles, the L2 flush,
repetitions and graph replay, with a fake device.
"""

from __future__ import annotations

import contextlib
import math

import pytest

from ncdc.measure import bench
from tests.measure.fakes import H200, FakeCupy, FakeEvent, kernel


def test_quantiles_interpolate_like_torch_quantile():
    # numpy's default (linear) method: p20 of 1..5 sits 0.8 of the way from 1 to 2.
    t = bench.quantiles([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (t.median_ms, t.p20_ms, t.p80_ms, t.repetitions) == (3.0, 1.8, 4.2, 5)
    with pytest.raises(ValueError):
        bench.quantiles([])


def test_flush_is_twice_l2():
    # The H200 profile's L2 is 60 MiB: flushing writes 120 MiB.
    assert bench.flush_bytes(H200) == 2 * 60 * 2**20


def test_repetitions_fill_the_milliseconds():
    assert bench.repetitions(0.5, 25, 100) == (50, 200)
    assert bench.repetitions(500.0, 25, 100) == (1, 1)  # a slow kernel still runs once
    assert bench.repetitions(0.0, 25, 100) == (bench.MAX_REPETITIONS, bench.MAX_REPETITIONS)


def test_time_gpu_flushes_before_every_timed_call():
    """Control flow only: one untimed call, ESTIMATE_CALLS flushed estimate calls, the
    warm-up, then one flush and one event pair per repetition around the call alone."""
    cupy = FakeCupy(flush_ms=0.01)
    flush = cupy.empty(10)
    fn, calls = kernel(cupy, 0.49)  # estimate = 0.49 + 0.01 flush = 0.5 ms a call
    t = bench.time_gpu(cupy, fn, flush=flush, warmup_ms=25, rep_ms=100)
    warm, reps = bench.repetitions(0.5, 25, 100)
    assert len(calls) == 1 + bench.ESTIMATE_CALLS + warm + reps
    assert flush.fills == bench.ESTIMATE_CALLS + reps
    assert t.repetitions == reps
    assert math.isclose(t.median_ms, 0.49) and math.isclose(t.p80_ms, 0.49)  # flush excluded


def test_make_timer_sizes_its_flush_from_the_profile():
    cupy = FakeCupy()
    timer = bench.make_timer(cupy, H200, 1.0, 1.0)
    fn, _ = kernel(cupy, 0.1)
    timer(fn)
    assert cupy.arrays[0].nbytes == bench.flush_bytes(H200)


class CapturingCupy(FakeCupy):
    """A FakeCupy with streams that capture: while a stream captures, work costs no time
    and is recorded instead; a graph replays it. Python dispatch costs DISPATCH_MS a call
    outside a graph, which the events must not see once the work is captured."""

    DISPATCH_MS = 0.05

    def __init__(self) -> None:
        super().__init__()
        fake = self
        self.capturing = False
        self.current: object = None
        self.recorded_on: list[object] = []

        class _Graph:
            def __init__(self, work: list) -> None:
                self.work = work
                self.launches = 0

            def launch(self, stream: object) -> None:
                assert stream is fake.current, "a replay runs on its own stream"
                self.launches += 1
                for w in self.work:
                    w()

        class _Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.work: list = []

            def __enter__(self) -> _Stream:
                fake.current = self
                return self

            def __exit__(self, *exc: object) -> None:
                fake.current = None

            def synchronize(self) -> None:
                pass

            def begin_capture(self) -> None:
                fake.capturing = True

            def end_capture(self) -> _Graph:
                fake.capturing = False
                fake.graph = _Graph(self.work)
                return fake.graph

        class _Event(FakeEvent):
            def record(self) -> None:
                fake.recorded_on.append(fake.current)
                super().record()

        self.cuda.Stream = _Stream
        self.cuda.Event = staticmethod(lambda: _Event(fake.clock))


def test_the_timer_replays_a_cuda_graph_so_dispatch_is_not_timed():
    cupy = CapturingCupy()
    calls = []

    def launch() -> None:  # the kernel's time, once dispatched
        cupy.clock.now += 0.2

    def fn() -> None:  # what module_runner returns: Python dispatch, then the launch
        calls.append(1)
        if cupy.capturing:
            cupy.current.work.append(launch)
            return
        cupy.clock.now += cupy.DISPATCH_MS
        launch()

    t = bench.make_timer(cupy, H200, 1.0, 1.0)(fn)
    assert len(calls) == 2  # once to warm up, once captured: the loop replays the graph
    assert cupy.graph.launches > t.repetitions
    assert t.method == "cuda graph (cupy)" and math.isclose(t.median_ms, 0.2)  # no dispatch
    assert all(s is not None for s in cupy.recorded_on)  # events on the graph's stream


def test_work_a_graph_cannot_hold_is_timed_directly_and_says_so():
    cupy = FakeCupy()  # its streams cannot capture
    fn, calls = kernel(cupy, 0.1)
    t = bench.make_timer(cupy, H200, 1.0, 1.0)(fn)
    assert t.method == "direct" and math.isclose(t.median_ms, 0.1) and calls


def test_pytorch_work_is_captured_with_pytorch_graphs():
    replays = []

    class FakeGraph:
        def replay(self) -> None:
            replays.append(1)

    class FakeTorchCuda:
        CUDAGraph = FakeGraph

        @staticmethod
        def Stream() -> object:
            class S:
                def wait_stream(self, other: object) -> None:
                    pass

            return S()

        @staticmethod
        def current_stream() -> object:
            return FakeTorchCuda.Stream()

        @staticmethod
        def stream(s: object) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

        @staticmethod
        def graph(g: object) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

        @staticmethod
        def synchronize() -> None:
            pass

    class FakeTorch:
        cuda = FakeTorchCuda

    from ncdc.measure.timing import torch_work

    cupy = FakeCupy()
    ran = []
    fn = torch_work(FakeTorch, lambda: ran.append(1))
    replay = bench.capture(cupy, fn)
    assert replay.method == "cuda graph (torch)" and len(ran) == 2  # warm-up, capture
    replay.run()
    assert replays == [1]
