"""A small fake CuPy for the GPU path's logic on a machine with no GPU: events on a fake
clock that each launch advances. Tests that use it check control flow only (how many
flushes, warm-up and timed calls, which events are read), not that anything runs."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.plan.search import plan_diagram
from tests import support

DIAGRAMS = support.DIAGRAMS
H200 = load_hardware("h200")


class FakeClock:
    now = 0.0  # milliseconds


class FakeEvent:
    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.t: float | None = None

    def record(self) -> None:
        self.t = self.clock.now

    def synchronize(self) -> None:
        pass


class FakeArray:
    def __init__(self, clock: FakeClock, nbytes: int, cost_ms: float):
        self.clock, self.nbytes, self.cost_ms = clock, nbytes, cost_ms
        self.fills = 0
        self.data = self

    def fill(self, value: float) -> None:
        self.fills += 1
        self.clock.now += self.cost_ms

    def copy_from_device_async(self, src: FakeArray, nbytes: int) -> None:
        self.clock.now += nbytes / 4e9  # 4 TB/s, in ms


class FakeCupy:
    """Just enough of CuPy for timing: events, a device, empty buffers, a runtime."""

    float32 = "float32"
    uint8 = "uint8"

    def __init__(self, flush_ms: float = 0.01):
        self.clock = FakeClock()
        self.flush_ms = flush_ms
        self.arrays: list[FakeArray] = []
        clock = self.clock

        class _Device:
            id = 0
            compute_capability = "90"

            def synchronize(self) -> None:
                pass

        class _Runtime:
            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def getDeviceProperties(i: int) -> dict:
                return {"name": b"Fake H200", "multiProcessorCount": 132, "l2CacheSize": 1 << 20}

            @staticmethod
            def driverGetVersion() -> int:
                return 13000

            @staticmethod
            def runtimeGetVersion() -> int:
                return 12090

        class _Cuda:
            Device = _Device
            runtime = _Runtime

            @staticmethod
            def Event() -> FakeEvent:
                return FakeEvent(clock)

            @staticmethod
            def get_elapsed_time(start: FakeEvent, end: FakeEvent) -> float:
                assert start.t is not None and end.t is not None, "event read before recorded"
                return end.t - start.t

        self.cuda = _Cuda

    def empty(self, n: int, dtype: str = "float32") -> FakeArray:
        size = 4 if dtype == "float32" else 1
        array = FakeArray(self.clock, n * size, self.flush_ms)
        self.arrays.append(array)
        return array


def kernel(cupy: FakeCupy, ms: float):
    calls = []

    def fn() -> None:
        calls.append(1)
        cupy.clock.now += ms

    return fn, calls


def plan_of(name: str, **sizes: int):
    return plan_diagram(load_diagram(DIAGRAMS / f"{name}.yaml", sizes or None), H200)
