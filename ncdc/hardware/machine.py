"""The machine as the model reads it: memory levels from the top down, compute rates,
launch limits and what the GPU sustains, as frozen values (loaded from a profile by
ncdc.hardware.load).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncdc.errors import HardwareError
from ncdc.hardware.arch import HMMA_16816, SUB_PARTITIONS


@dataclass(frozen=True)
class Source:
    """Where one number of a profile came from, as written in the file."""

    value: float
    unit: str
    source: str
    kind: str  # datasheet | measured | derived | abstract (| override, set by apply_overrides)


@dataclass(frozen=True)
class Level:
    """One memory level: capacity of one core of it, and the rate data is read out of it."""

    name: str
    capacity_bytes: int
    bandwidth_bytes_per_s: float
    per: str  # what one core of this level is: "device" | "sm"
    holds: str = ""  # what a kernel keeps here: "block" (shared tile), "thread" (registers)


@dataclass(frozen=True)
class Limits:
    """Launch and residency limits of one SM and of the device."""

    sms: int
    warp_size: int
    threads_per_block: int
    threads_per_sm: int
    blocks_per_sm: int
    regs_per_sm: int  # 32-bit registers
    regs_per_thread: int
    smem_per_sm_bytes: int
    smem_per_block_bytes: int  # opt-in maximum
    l2_bytes: int


@dataclass(frozen=True)
class Achievable:
    """What a GPU sustains, beside its datasheet: the SM clock under sustained tensor load,
    the copy bandwidth measured per device-wide level, the launch latency of a kernel, and
    the tensor load its power limit allows. The cost model prices with these; the datasheet
    figures stay in `Hardware.levels` and `Hardware.rates` for the report. Absent (the
    napkin machine): the datasheet, no launch, no power limit.

    `power_duty` is the share of the datasheet tensor peak the GPU sustains on random data
    under its power limit: a kernel that would keep the tensor pipe busier runs at the
    clock that holds it there (0: none known)."""

    clock_hz: float = 0.0  # 0: the datasheet clock
    bandwidth: dict[str, float] = field(default_factory=dict, hash=False)  # level -> B/s
    launch_s: float = 0.0
    power_duty: float = 0.0


@dataclass(frozen=True)
class Hardware:
    """A GPU (or the paper's abstract machine): levels from the top down, rates and limits.

    `rates` and `sources` are plain dicts shared by every caller of a cached profile: treat
    them as read-only. They take no part in the hash, so a Hardware can key a cache.
    """

    name: str
    title: str
    arch: str
    clock_hz: float
    levels: tuple[Level, ...]
    rates: dict[str, dict[str, float]] = field(hash=False)
    limits: Limits
    sources: dict[str, Source] = field(hash=False, repr=False)
    # Cycles one sub-partition's tensor pipe takes per HMMA.16816 (16-bit inputs, fp32
    # accumulate) issued by mma.sync, the instruction ncdc's kernels use; 0: the tensor
    # peak's own pace (Ampere, Ada). More on Hopper, whose peak needs wgmma.
    hmma_cycles: float = 0.0
    achievable: Achievable = field(default_factory=Achievable)
    # the clock each rate's peak was quoted at ("unit.kind" -> Hz), when not `clock_hz`
    quoted_hz: dict[str, float] = field(default_factory=dict, hash=False, repr=False)

    @property
    def mma_sync_share(self) -> float:
        """The tensor peak's share that mma.sync's HMMAs reach: the peak's cycles per
        HMMA.16816 on one sub-partition over `hmma_cycles` (1 where that is the peak's).

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("h100").mma_sync_share, 3)   # 4 of 6 cycles
        0.667
        """
        if not self.hmma_cycles or "bf16" not in self.rates.get("tensor", {}):
            return 1.0
        quoted = self.quoted_hz.get("tensor.bf16", self.clock_hz)
        per_sub = self.rates["tensor"]["bf16"] / (self.limits.sms * quoted * SUB_PARTITIONS)
        return min(1.0, HMMA_16816.flops / per_sub / self.hmma_cycles)

    @property
    def achieved_clock_hz(self) -> float:
        """The sustained SM clock (the datasheet clock where the profile gives none)."""
        return self.achievable.clock_hz or self.clock_hz

    @property
    def launch_s(self) -> float:
        """Seconds from one kernel's launch to its first block running (0 when unknown)."""
        return self.achievable.launch_s

    def power_rate(self, kind: str) -> float:
        """The tensor rate of `kind` the power limit sustains under full load: the peak
        times `Achievable.power_duty` (0 where no limit is known), whatever the sustained
        clock (a limit of watts, not of cycles).

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("h200").power_rate("bf16") / 1e12)
        783
        """
        duty = self.achievable.power_duty
        if not duty or kind not in self.rates.get("tensor", {}):
            return 0.0
        return self.rates["tensor"][kind] * duty

    def clock_share(self, quoted_hz: float = 0.0) -> float:
        """Sustained clock over the clock a peak was quoted at (at most 1).

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("a100").clock_share(), 3)
        0.851
        """
        sustained = self.achievable.clock_hz or self.clock_hz
        return min(1.0, sustained / (quoted_hz or self.clock_hz))

    def achieved_rate(self, unit: str, kind: str) -> float:
        """The rate `unit` sustains for `kind`: its peak at the sustained clock.

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("a100").achieved_rate("tensor", "bf16") / 1e12)
        266
        """
        quoted = self.quoted_hz.get(f"{unit}.{kind}", 0.0)
        return self.rate(unit, kind) * self.clock_share(quoted)

    def achieved_bandwidth(self, level: str) -> float:
        """The bandwidth out of `level` a kernel sustains: the measured copy bandwidth of a
        device-wide level where the profile gives one, a per-SM level's peak at the
        sustained clock, else the datasheet figure.

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("a100").achieved_bandwidth("hbm") / 1e12, 2)
        1.8
        """
        lv = self.level(level)
        if level in self.achievable.bandwidth:
            return self.achievable.bandwidth[level]
        if lv.per == "sm":
            return lv.bandwidth_bytes_per_s * self.clock_share()
        return lv.bandwidth_bytes_per_s

    @property
    def block_level(self) -> str:
        """The level a thread block's shared tile lives in ("" on an abstract machine)."""
        return next((lv.name for lv in self.levels if lv.holds == "block"), "")

    @property
    def register_level(self) -> str:
        """The level a thread's registers are ("" on an abstract machine)."""
        return next((lv.name for lv in self.levels if lv.holds == "thread"), "")

    @property
    def is_gpu(self) -> bool:
        """A machine ncdc can build kernels for: an architecture, and levels for a block's
        shared tile and a thread's registers. The paper's abstract machine is not one."""
        return self.arch != "none" and bool(self.block_level) and bool(self.register_level)

    @property
    def cache_level(self) -> str:
        """The device-wide level below the top (L2) that a wave of blocks shares, or ""."""
        below = self.levels[1:]
        return next((lv.name for lv in below if lv.per == "device"), "")

    def level(self, name: str) -> Level:
        for level in self.levels:
            if level.name == name:
                return level
        raise HardwareError(
            f"unknown level {name!r} on {self.name}",
            hint=f"levels are {', '.join(self.level_names())}",
        )

    def level_names(self) -> list[str]:
        return [level.name for level in self.levels]

    def bandwidth(self, level: str) -> float:
        return self.level(level).bandwidth_bytes_per_s

    def rate(self, unit: str, kind: str) -> float:
        if unit not in self.rates:
            raise HardwareError(
                f"unknown compute unit {unit!r} on {self.name}",
                hint=f"units are {', '.join(sorted(self.rates))}",
            )
        if kind not in self.rates[unit]:
            raise HardwareError(
                f"{self.name} has no {unit} rate for {kind!r}",
                hint=f"{unit} kinds are {', '.join(sorted(self.rates[unit]))}",
            )
        return self.rates[unit][kind]

    def ridge_point(self, unit: str, kind: str, level: str) -> float:
        """FLOP per byte moved at `level` above which the `unit` rate, not the level, bounds.

        >>> from ncdc.hardware.load import load_hardware

        >>> round(load_hardware("h100").ridge_point("tensor", "bf16", "hbm"))
        295
        """
        return self.rate(unit, kind) / self.bandwidth(level)
