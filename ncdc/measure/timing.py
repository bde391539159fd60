"""What a timed run gives: quantiles of one callable's times, and a baseline's result.

Shared by `ncdc bench` (ncdc.measure.bench) and the library baselines it times beside the kernels
(ncdc.measure.baselines), which import it and not each other.

    >>> BaselineResult("copy", Timing(1.5, 1.4, 1.6, 20)).ms
    1.5
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Timer = Callable[[Callable[[], None]], "Timing"]


@dataclass(frozen=True)
class Timing:
    """Quantiles of the per-repetition times of one callable, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    repetitions: int
    method: str = "direct"  # how the events bracketed the work: a CUDA graph, or directly


@dataclass(frozen=True)
class BaselineResult:
    """One library run of the same problem, or why it was skipped."""

    name: str
    timing: Timing | None
    skipped: str = ""  # the reason it did not run, when timing is None
    bytes_moved: int = 0  # for the copy ceiling: bytes read plus written

    @property
    def ms(self) -> float:
        return self.timing.median_ms if self.timing else math.nan


@dataclass(frozen=True)
class Replay:
    """What the timed loop calls: the work captured once as a CUDA graph and replayed, so
    the events bracket the kernels alone and not Python's dispatch of each launch."""

    run: Callable[[], None]
    stream: Any = None  # the CuPy stream the replay, the flush and the events run on
    method: str = "direct"  # "cuda graph (cupy)", "cuda graph (torch)" or "direct"


def torch_work(torch: Any, fn: Callable[[], None]) -> Callable[[], None]:
    """Mark `fn` as PyTorch work, captured with `torch.cuda.graph` (`capture`): PyTorch
    launches on its own streams, which CuPy's capture does not see. The replay runs on
    PyTorch's current stream, the legacy default stream that CuPy's events record on."""

    def graph() -> Replay:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # warm-up off the default stream, as graph capture wants
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return Replay(g.replay, None, "cuda graph (torch)")

    fn.torch_graph = graph  # type: ignore[attr-defined]
    return fn
