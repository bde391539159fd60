"""The kernel's own instructions in the plan's time: issue slots per main-loop iteration.

An SM issues one warp instruction per clock per sub-partition (4 per SM on sm_80 .. sm_90),
whatever the instruction: an HMMA, an ldmatrix, a cp.async, an FFMA of the softmax, an
address increment. A kernel whose main loop needs more issue slots than its tensor pipe
needs cycles is bound by issue, not by the tensor cores. The mix comes from one of two
places, and the plan says which:

- **per-family estimate**: what the family's template issues per iteration of one warp,
  from its structure (the warp tile, the key chunk, the k step), before anything is
  compiled (each family's `loop_mix`: ncdc/families/gemm/mix.py, attention/mix.py);
- **from the SASS**: the instructions of the compiled cubin's main loop, counted by class
  (`ncdc.backends.loop_mixes.loop_mix`), once `ncdc compile` has put the kernel in the
  compile cache.

    >>> mix = LoopMix({"tensor": 32, "ldmatrix": 12, "integer": 30}, 2 * 64 * 32 * 32)
    >>> mix.slots, round(mix.slots_per_mma, 2)
    (74.0, 2.31)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ncdc.hardware.arch import HMMA_16816, SUB_PARTITIONS

if TYPE_CHECKING:
    from ncdc.hardware.machine import Hardware

ISSUE = "issue"  # the name of the issue slots' time among a kernel's compute units
MMA_16816_FLOPS = HMMA_16816.flops  # one HMMA.16816: the unit `slots_per_mma` counts in
ESTIMATE = "per-family estimate"
SASS = "from the SASS"


@dataclass(frozen=True)
class LoopMix:
    """Issue slots of one warp per main-loop iteration, by class (ncdc.backends.sass.CLASS_ORDER),
    and the tensor FLOPs that iteration does; `source` is ESTIMATE or SASS."""

    classes: Mapping[str, float] = field(hash=False)
    tensor_flops: float  # tensor FLOPs one warp does in one iteration
    source: str = ESTIMATE

    @property
    def slots(self) -> float:
        return float(sum(self.classes.values()))

    @property
    def slots_per_mma(self) -> float:
        """Issue slots per m16n8k16-equivalent of tensor work (4096 FLOPs)."""
        return self.slots * MMA_16816_FLOPS / self.tensor_flops if self.tensor_flops else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "slots_per_iteration": self.slots,
            "tensor_flops_per_iteration": self.tensor_flops,
            "slots_per_mma": self.slots_per_mma,
            "classes": {k: v for k, v in self.classes.items() if v},
        }


def issue_time_s(mix: LoopMix, tensor_flops: float, hw: Hardware) -> float:
    """Seconds the SMs need to issue a kernel's main loops that do `tensor_flops` in all:
    iterations (tensor_flops / the mix's FLOPs per iteration) x slots each, at
    one per sub-partition (SUB_PARTITIONS per SM) per clock of the sustained clock, over every SM.

        >>> from ncdc.hardware.load import load_hardware
        >>> hw = load_hardware("a100")   # 108 SMs at the sustained 1200 MHz
        >>> mix = LoopMix({"tensor": 1, "integer": 3}, MMA_16816_FLOPS)
        >>> round(issue_time_s(mix, MMA_16816_FLOPS * 4 * 108 * 1.2e9, hw), 6)   # 4 slots each
        4.0
    """
    if not mix.tensor_flops:
        return 0.0
    iterations = tensor_flops / mix.tensor_flops
    return iterations * mix.slots / (SUB_PARTITIONS * hw.limits.sms * hw.achieved_clock_hz)


def add_slots(classes: dict[str, float], slots: Mapping[str, float], times: float = 1.0) -> None:
    """Add `slots` (class -> slots), `times` over, into `classes`."""
    for k, v in slots.items():
        classes[k] = classes.get(k, 0.0) + v * times
