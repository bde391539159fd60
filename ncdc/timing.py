"""What a timed run gives: quantiles of one callable's times, and a baseline's result.

Shared by `ncdc bench` (ncdc.bench) and the library baselines it times beside the kernels
(ncdc.baselines), which import it and not each other.

    >>> BaselineResult("copy", Timing(1.5, 1.4, 1.6, 20)).ms
    1.5
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Timer = Callable[[Callable[[], None]], "Timing"]


@dataclass(frozen=True)
class Timing:
    """Quantiles of the per-repetition times of one callable, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    repetitions: int


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
