"""GPU hardware profiles: memory levels, compute rates and launch limits, read from YAML.

Built-in profiles live in `ncdc/hardware/profiles/<name>.yaml`; a user can pass a path to their own.
Every number in a profile carries its unit, its source and its kind (datasheet, measured,
derived or abstract), and a profile is checked on load: units, ordering of the levels, and
that each peak agrees with SMs x work per SM per clock x clock (which catches a sparse rate
quoted as dense). See docs/hardware-profiles.md for the schema.

    >>> hw = load_hardware("h100")
    >>> round(hw.rate("tensor", "bf16") / 1e12)
    989
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ncdc.errors import HardwareError

PROFILES_DIR = Path(__file__).parent / "profiles"
FORMAT_VERSION = 1
PEAK_TOLERANCE = 0.03  # quoted peaks agree with SMs x per-SM-per-clock x clock within 3%

SOURCE_KINDS = ("datasheet", "measured", "derived", "abstract")
PER_CHOICES = ("device", "sm")
HOLDS_CHOICES = ("block", "thread")  # optional `holds` of a level: what a kernel keeps there
RATE_KINDS: dict[str, tuple[str, ...]] = {
    "tensor": ("bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2", "int8"),
    "cuda": ("fp32", "fp16", "bf16"),
    "sfu": ("exp",),
}
RATE_DIMENSION = {"tensor": "flop/s", "cuda": "flop/s", "sfu": "exp/s"}

# unit as written -> (dimension, factor to the base unit of that dimension)
UNITS: dict[str, tuple[str, float]] = {
    "B": ("B", 1), "KB": ("B", 1e3), "MB": ("B", 1e6), "GB": ("B", 1e9), "TB": ("B", 1e12),
    "KiB": ("B", 2**10), "MiB": ("B", 2**20), "GiB": ("B", 2**30), "TiB": ("B", 2**40),
    "B/s": ("B/s", 1), "GB/s": ("B/s", 1e9), "TB/s": ("B/s", 1e12),
    "Hz": ("Hz", 1), "MHz": ("Hz", 1e6), "GHz": ("Hz", 1e9),
    "FLOP/s": ("flop/s", 1), "TFLOP/s": ("flop/s", 1e12), "PFLOP/s": ("flop/s", 1e15),
    "OP/s": ("flop/s", 1), "TOP/s": ("flop/s", 1e12), "POP/s": ("flop/s", 1e15),
    "exp/s": ("exp/s", 1),
    "SM": ("SM", 1), "thread": ("thread", 1), "block": ("block", 1),
    "register": ("register", 1),
    "fraction": ("share", 1),
    "cycle": ("cycle", 1),
    "s": ("s", 1), "ms": ("s", 1e-3), "us": ("s", 1e-6), "ns": ("s", 1e-9),
}  # fmt: skip

# YAML key under `limits` -> (Limits field, dimension)
LIMIT_KEYS: dict[str, tuple[str, str]] = {
    "sms": ("sms", "SM"),
    "warp_size": ("warp_size", "thread"),
    "threads_per_block": ("threads_per_block", "thread"),
    "threads_per_sm": ("threads_per_sm", "thread"),
    "blocks_per_sm": ("blocks_per_sm", "block"),
    "regs_per_sm": ("regs_per_sm", "register"),
    "regs_per_thread": ("regs_per_thread", "register"),
    "smem_per_sm": ("smem_per_sm_bytes", "B"),
    "smem_per_block": ("smem_per_block_bytes", "B"),
    "l2": ("l2_bytes", "B"),
}

QUANTITY_KEYS = ("value", "unit", "source", "kind")
PEAK_KEYS = ("per_sm_per_clock", "quoted_at_mhz")  # optional, on rates and bandwidths
OVERRIDE_FIELDS = ("capacity", "bandwidth")
# A level whose capacity mirrors a launch limit: overriding one updates the other.
MIRRORED_LIMITS = {"smem": "smem_per_block_bytes", "l2": "l2_bytes"}
ACHIEVABLE_KEYS = ("clock", "bandwidth", "launch")  # the optional `achievable` block
SUB_PARTITIONS = 4  # per SM on sm_80 .. sm_100: each has its own tensor pipe and scheduler
HMMA_16816_FLOPS = 2 * 16 * 8 * 16


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
    the copy bandwidth measured per device-wide level, and the launch latency of a kernel.
    The cost model prices with these; the datasheet figures stay in `Hardware.levels` and
    `Hardware.rates` for the report. Absent (the napkin machine): the datasheet, no launch."""

    clock_hz: float = 0.0  # 0: the datasheet clock
    bandwidth: dict[str, float] = field(default_factory=dict, hash=False)  # level -> B/s
    launch_s: float = 0.0


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

        >>> round(load_hardware("h100").mma_sync_share, 3)   # 4 of 6 cycles
        0.667
        """
        if not self.hmma_cycles or "bf16" not in self.rates.get("tensor", {}):
            return 1.0
        quoted = self.quoted_hz.get("tensor.bf16", self.clock_hz)
        per_sub = self.rates["tensor"]["bf16"] / (self.limits.sms * quoted * SUB_PARTITIONS)
        return min(1.0, HMMA_16816_FLOPS / per_sub / self.hmma_cycles)

    @property
    def achieved_clock_hz(self) -> float:
        """The sustained SM clock (the datasheet clock where the profile gives none)."""
        return self.achievable.clock_hz or self.clock_hz

    @property
    def launch_s(self) -> float:
        """Seconds from one kernel's launch to its first block running (0 when unknown)."""
        return self.achievable.launch_s

    def clock_share(self, quoted_hz: float = 0.0) -> float:
        """Sustained clock over the clock a peak was quoted at (at most 1).

        >>> round(load_hardware("a100").clock_share(), 3)
        0.851
        """
        sustained = self.achievable.clock_hz or self.clock_hz
        return min(1.0, sustained / (quoted_hz or self.clock_hz))

    def achieved_rate(self, unit: str, kind: str) -> float:
        """The rate `unit` sustains for `kind`: its peak at the sustained clock.

        >>> round(load_hardware("a100").achieved_rate("tensor", "bf16") / 1e12)
        266
        """
        quoted = self.quoted_hz.get(f"{unit}.{kind}", 0.0)
        return self.rate(unit, kind) * self.clock_share(quoted)

    def achieved_bandwidth(self, level: str) -> float:
        """The bandwidth out of `level` a kernel sustains: the measured copy bandwidth of a
        device-wide level where the profile gives one, a per-SM level's peak at the
        sustained clock, else the datasheet figure.

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

        >>> round(load_hardware("h100").ridge_point("tensor", "bf16", "hbm"))
        295
        """
        return self.rate(unit, kind) / self.bandwidth(level)


# ---------------------------------------------------------------------------- loading


def list_profiles() -> list[str]:
    """Names of the built-in profiles, sorted: `["a100", "b200", "h100", ...]`."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str | Path) -> Hardware:
    """A built-in profile by name, or a user profile from a YAML file, checked.

    >>> load_hardware("h200").level("smem").capacity_bytes
    232448
    >>> load_hardware("my-gpu.yaml")  # doctest: +SKIP
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith((".yaml", ".yml")) or "/" in text:
        return _load_file(Path(name_or_path))
    return _load_builtin(text)


@functools.cache
def _load_builtin(name: str) -> Hardware:
    choices = list_profiles()
    if name not in choices:
        raise HardwareError(
            f"unknown hardware profile {name!r}",
            hint=f"choose one of {', '.join(choices)}, or pass a path to a profile YAML file",
        )
    return _load_file(PROFILES_DIR / f"{name}.yaml")


def _load_file(path: Path) -> Hardware:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise HardwareError(
            f"cannot read hardware profile: {error.strerror or error}",
            where=str(path),
            hint=f"pass an existing YAML file or one of {', '.join(list_profiles())}",
        ) from None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or "malformed YAML"
        raise HardwareError(f"not valid YAML: {problem}", where=where) from None
    return _Reader(str(path)).hardware(data)


class _Reader:
    """Turns the YAML tree of one profile into a checked Hardware, collecting sources."""

    def __init__(self, file: str):
        self.file = file
        self.sources: dict[str, Source] = {}

    def fail(self, path: str, message: str, hint: str | None = None) -> NoReturn:
        raise HardwareError(message, where=f"{self.file}: {path}" if path else self.file, hint=hint)

    def mapping(
        self, node: Any, path: str, required: Sequence[str], optional: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(node, dict):
            self.fail(path, f"expected a mapping, found {_describe(node)}")
        allowed = [*required, *optional]
        for key in node:
            if key not in allowed:
                self.fail(
                    _join(path, str(key)),
                    f"unknown key {key!r}",
                    hint=f"allowed keys are {', '.join(allowed)}",
                )
        for key in required:
            if key not in node:
                self.fail(path, f"missing field {key!r}", hint=f"add '{key}:' (see docs)")
        return node

    def string(self, node: Any, path: str) -> str:
        if not isinstance(node, str) or not node.strip():
            self.fail(path, f"expected a non-empty string, found {_describe(node)}")
        return node

    def number(self, node: Any, path: str) -> float:
        # PyYAML reads "141e9" (no dot) as a string, so accept numeric strings too.
        if isinstance(node, bool) or not isinstance(node, (int, float, str)):
            self.fail(path, f"expected a number, found {_describe(node)}")
        try:
            value = float(node)
        except ValueError:
            self.fail(path, f"expected a number, found {node!r}")
        if not value > 0 or value == float("inf"):
            self.fail(path, f"expected a positive number, found {node!r}")
        return value

    def quantity(self, node: Any, path: str, dimension: str, peak: bool = False) -> float:
        """Value of a `{value, unit, source, kind}` entry in base units; records its Source."""
        q = self.mapping(node, path, QUANTITY_KEYS, PEAK_KEYS if peak else ())
        value = self.number(q["value"], f"{path}.value")
        unit = q["unit"]
        if unit not in UNITS or UNITS[unit][0] != dimension:
            fitting = [name for name, (dim, _) in UNITS.items() if dim == dimension]
            self.fail(
                f"{path}.unit",
                f"expected a unit of {dimension}, found {unit!r}",
                hint=f"use one of {', '.join(fitting)}",
            )
        kind = q["kind"]
        if kind not in SOURCE_KINDS:
            self.fail(
                f"{path}.kind",
                f"expected a source kind, found {kind!r}",
                hint=f"use one of {', '.join(SOURCE_KINDS)}",
            )
        source = self.string(q["source"], f"{path}.source")
        self.sources[path] = Source(value, unit, source, kind)
        return value * UNITS[unit][1]

    def hmma(self, node: Any) -> float:
        """The optional `hmma_cycles`: a positive number of cycles, 0 when absent."""
        if node is None:
            return 0.0
        value = self.quantity(node, "hmma_cycles", "cycle")
        if value <= 0:
            self.fail("hmma_cycles.value", f"expected a positive number of cycles, found {value:g}")
        return value

    def integer(self, node: Any, path: str, dimension: str) -> int:
        value = self.quantity(node, path, dimension)
        if value != int(value):
            self.fail(f"{path}.value", f"expected a whole number of {dimension}, found {value:g}")
        return int(value)

    def hardware(self, data: Any) -> Hardware:
        top = self.mapping(
            data,
            "",
            ("ncdc_hardware", "name", "title", "arch", "clock", "levels", "rates", "limits"),
            ("hmma_cycles", "achievable"),
        )
        if top["ncdc_hardware"] != FORMAT_VERSION:
            self.fail(
                "ncdc_hardware",
                f"expected format version {FORMAT_VERSION}, found {top['ncdc_hardware']!r}",
            )
        name = self.string(top["name"], "name")
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", name):
            self.fail("name", f"expected a lower-case name like 'h100', found {name!r}")
        arch = self.string(top["arch"], "arch")
        if not re.fullmatch(r"sm_\d+a?|none", arch):
            self.fail("arch", f"expected 'sm_NN', 'sm_NNa' or 'none', found {arch!r}")
        clock_hz = self.quantity(top["clock"], "clock", "Hz")
        limits = self.limits(top["limits"])
        hw = Hardware(
            name=name,
            title=self.string(top["title"], "title"),
            arch=arch,
            clock_hz=clock_hz,
            levels=self.levels(top["levels"]),
            rates=self.rates(top["rates"]),
            limits=limits,
            sources=self.sources,
            hmma_cycles=self.hmma(top.get("hmma_cycles")),
        )
        achievable = self.achievable(top.get("achievable"), hw)
        hw = dataclasses.replace(hw, achievable=achievable, quoted_hz=self.quoted(top, hw))
        self.check_peaks(top, hw)
        self.check_levels(hw)
        return hw

    def achievable(self, node: Any, hw: Hardware) -> Achievable:
        """The optional `achievable` block: sustained clock, measured bandwidth of device-wide
        levels, launch latency. Each is below its datasheet figure."""
        if node is None:
            return Achievable()
        entries = self.mapping(node, "achievable", (), ACHIEVABLE_KEYS)
        clock_hz = 0.0
        if "clock" in entries:
            clock_hz = self.quantity(entries["clock"], "achievable.clock", "Hz")
            if clock_hz > hw.clock_hz:
                self.fail("achievable.clock", "a sustained clock above the datasheet clock")
        bandwidth: dict[str, float] = {}
        levels = self.mapping(entries.get("bandwidth", {}), "achievable.bandwidth", (),
                              [lv.name for lv in hw.levels if lv.per == "device"])  # fmt: skip
        for name, value in levels.items():
            path = f"achievable.bandwidth.{name}"
            bandwidth[name] = self.quantity(value, path, "B/s")
            if bandwidth[name] > hw.level(name).bandwidth_bytes_per_s * (1 + PEAK_TOLERANCE):
                self.fail(path, f"a measured bandwidth above the {name} peak")
        launch_s = 0.0
        if "launch" in entries:
            launch_s = self.quantity(entries["launch"], "achievable.launch", "s")
        return Achievable(clock_hz, bandwidth, launch_s)

    def quoted(self, top: dict[str, Any], hw: Hardware) -> dict[str, float]:
        """ "unit.kind" -> the clock its peak was quoted at, where a profile says one."""
        out = {}
        for unit, kinds in hw.rates.items():
            for kind in kinds:
                entry = _lookup(top, f"rates.{unit}.{kind}")
                if "quoted_at_mhz" in entry:
                    out[f"{unit}.{kind}"] = float(entry["quoted_at_mhz"]) * 1e6
        return out

    def levels(self, node: Any) -> tuple[Level, ...]:
        if not isinstance(node, list) or not node:
            self.fail("levels", f"expected a non-empty list of levels, found {_describe(node)}")
        levels: list[Level] = []
        for i, item in enumerate(node):
            entry = self.mapping(
                item, f"levels[{i}]", ("name", "per", "capacity", "bandwidth"), ("holds",)
            )
            name = self.string(entry["name"], f"levels[{i}].name")
            if name in [level.name for level in levels]:
                self.fail(f"levels[{i}].name", f"level {name!r} appears twice")
            if name in RATE_KINDS:  # a plan names its bound by level or unit: keep them apart
                self.fail(
                    f"levels[{i}].name",
                    f"level {name!r} has the name of a compute unit",
                    hint="name levels after memories, such as hbm, l2, smem, rf",
                )
            if entry["per"] not in PER_CHOICES:
                self.fail(
                    f"levels.{name}.per",
                    f"expected one of {', '.join(PER_CHOICES)}, found {entry['per']!r}",
                )
            path = f"levels.{name}"
            capacity = self.integer(entry["capacity"], f"{path}.capacity", "B")
            bandwidth = self.quantity(entry["bandwidth"], f"{path}.bandwidth", "B/s", peak=True)
            holds = entry.get("holds", "")
            if holds not in ("", *HOLDS_CHOICES):
                self.fail(
                    f"{path}.holds",
                    f"expected one of {', '.join(HOLDS_CHOICES)}, found {holds!r}",
                    hint="block: a thread block's shared memory; thread: a thread's registers",
                )
            if holds and holds in [level.holds for level in levels]:
                self.fail(f"{path}.holds", f"two levels hold a {holds}")
            levels.append(Level(name, capacity, bandwidth, entry["per"], holds))
        if not any(level.holds for level in levels):
            # a profile written before `holds`: the GPU names say what each level holds
            implied = {"smem": "block", "rf": "thread"}
            if all(n in [level.name for level in levels] for n in implied):
                levels = [dataclasses.replace(lv, holds=implied.get(lv.name, "")) for lv in levels]
        return tuple(levels)

    def rates(self, node: Any) -> dict[str, dict[str, float]]:
        units = self.mapping(node, "rates", tuple(RATE_KINDS))
        rates: dict[str, dict[str, float]] = {}
        for unit, kinds in RATE_KINDS.items():
            entries = self.mapping(units[unit], f"rates.{unit}", (), kinds)
            if not entries:
                self.fail(f"rates.{unit}", "expected at least one rate", hint=f"kinds: {kinds}")
            rates[unit] = {
                kind: self.quantity(value, f"rates.{unit}.{kind}", RATE_DIMENSION[unit], peak=True)
                for kind, value in entries.items()
            }
        return rates

    def limits(self, node: Any) -> Limits:
        entries = self.mapping(node, "limits", tuple(LIMIT_KEYS))
        values = {
            attr: self.integer(entries[key], f"limits.{key}", dimension)
            for key, (attr, dimension) in LIMIT_KEYS.items()
        }
        limits = Limits(**values)
        if limits.smem_per_block_bytes > limits.smem_per_sm_bytes:
            self.fail("limits.smem_per_block", "shared memory per block exceeds that per SM")
        if limits.threads_per_block > limits.threads_per_sm:
            self.fail("limits.threads_per_block", "threads per block exceed threads per SM")
        return limits

    def check_peaks(self, top: dict[str, Any], hw: Hardware) -> None:
        """Each quoted peak that gives `per_sm_per_clock` must equal SMs x it x clock."""
        paths = [f"levels.{level.name}.bandwidth" for level in hw.levels]
        paths += [f"rates.{unit}.{kind}" for unit in hw.rates for kind in hw.rates[unit]]
        for path in paths:
            entry = _lookup(top, path)
            if "per_sm_per_clock" not in entry:
                continue
            per_clock = self.number(entry["per_sm_per_clock"], f"{path}.per_sm_per_clock")
            clock_hz = hw.clock_hz
            if "quoted_at_mhz" in entry:
                clock_hz = self.number(entry["quoted_at_mhz"], f"{path}.quoted_at_mhz") * 1e6
            quoted = self.sources[path]
            quoted_base = quoted.value * UNITS[quoted.unit][1]
            expected = hw.limits.sms * per_clock * clock_hz
            ratio = quoted_base / expected
            if abs(ratio - 1) > PEAK_TOLERANCE:
                self.fail(
                    path,
                    f"quoted {quoted.value:g} {quoted.unit} is {ratio:.2f}x the "
                    f"{expected / UNITS[quoted.unit][1]:.4g} {quoted.unit} of {hw.limits.sms} "
                    f"SMs x {per_clock:g} per SM per clock x {clock_hz / 1e6:g} MHz",
                    hint="a 2x excess is usually a 2:4-sparse rate quoted as dense; "
                    "otherwise set quoted_at_mhz to the clock the peak was quoted at",
                )

    def check_levels(self, hw: Hardware) -> None:
        """Top-down order: each level is faster than the one above, device levels come first
        and shrink, and every per-SM level is smaller than every device-wide one. (Per-SM
        levels need not shrink: an SM's register file outsizes the shared memory a block may
        use on every NVIDIA GPU since Volta.)"""
        for above, below in itertools.pairwise(hw.levels):
            path = f"levels.{below.name}"
            if below.bandwidth_bytes_per_s <= above.bandwidth_bytes_per_s:
                self.fail(
                    f"{path}.bandwidth",
                    f"level {below.name!r} is no faster than {above.name!r} above it",
                    hint="list levels from the top (largest, slowest) down",
                )
            if above.per == "sm" and below.per == "device":
                self.fail(f"{path}.per", "a device-wide level below a per-SM level")
            if below.per == "device" and below.capacity_bytes > above.capacity_bytes:
                self.fail(f"{path}.capacity", f"larger than {above.name!r} above it")
        device = [level for level in hw.levels if level.per == "device"]
        for level in hw.levels:
            if device and level.per == "sm" and level.capacity_bytes >= device[-1].capacity_bytes:
                self.fail(f"levels.{level.name}.capacity", f"not smaller than {device[-1].name!r}")
        self.check_mirrors(hw)

    def check_mirrors(self, hw: Hardware) -> None:
        """Levels that restate a launch limit must agree with it."""
        names = hw.level_names()
        mirrors = {level: getattr(hw.limits, attr) for level, attr in MIRRORED_LIMITS.items()}
        mirrors["rf"] = hw.limits.regs_per_sm * 4
        for name, expected in mirrors.items():
            found = hw.level(name).capacity_bytes if name in names else expected
            if found != expected:
                self.fail(
                    f"levels.{name}.capacity",
                    f"expected {expected} B to match limits, found {found} B",
                    hint="smem = limits.smem_per_block, l2 = limits.l2, "
                    "rf = 4 x limits.regs_per_sm",
                )


def _lookup(top: dict[str, Any], path: str) -> dict[str, Any]:
    """The YAML entry at a dotted path of an already-checked profile (levels by name)."""
    parts = path.split(".")
    if parts[0] == "levels":
        level = next(item for item in top["levels"] if item["name"] == parts[1])
        return level[parts[2]]
    node: dict[str, Any] = top
    for part in parts:
        node = node[part]
    return node


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(node: Any) -> str:
    if isinstance(node, dict):
        return "a mapping"
    if isinstance(node, list):
        return "a list"
    return f"{type(node).__name__} {node!r}"


# ---------------------------------------------------------------------------- overrides


def apply_overrides(hw: Hardware, overrides: Sequence[str]) -> Hardware:
    """A copy of `hw` with level capacities or bandwidths replaced, for what-if questions.

    Each override is `LEVEL.FIELD=NUMBER` with FIELD `capacity` (bytes) or `bandwidth`
    (bytes per second). The launch limit a level mirrors follows it (smem capacity sets
    smem_per_block, l2 capacity sets l2), and the source of each new number is recorded.

    >>> apply_overrides(load_hardware("napkin"), ["l1.capacity=65536"]).level("l1").capacity_bytes
    65536
    """
    for text in overrides:
        hw = _apply_override(hw, text)
    return hw


def _apply_override(hw: Hardware, text: str) -> Hardware:
    names = ", ".join(hw.level_names())
    fields = "|".join(OVERRIDE_FIELDS)
    hint = f"write LEVEL.FIELD=NUMBER with LEVEL one of {names} and FIELD {fields}"
    match = re.fullmatch(r"\s*([\w.-]+)\.(\w+)\s*=\s*(\S+)\s*", text)
    if match is None:
        raise HardwareError(f"cannot read hardware override {text!r}", hint=hint)
    name, attr, number = match.groups()
    if name not in hw.level_names():
        raise HardwareError(f"unknown level {name!r} in hardware override {text!r}", hint=hint)
    if attr not in OVERRIDE_FIELDS:
        raise HardwareError(f"unknown field {attr!r} in hardware override {text!r}", hint=hint)
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf") or (attr == "capacity" and value != int(value)):
        expected = "a positive whole number of bytes" if attr == "capacity" else "a positive number"
        raise HardwareError(f"expected {expected} in hardware override {text!r}", hint=hint)

    levels = tuple(
        _override_level(level, attr, value) if level.name == name else level for level in hw.levels
    )
    limits = hw.limits
    if attr == "capacity" and name in MIRRORED_LIMITS:
        limits = dataclasses.replace(limits, **{MIRRORED_LIMITS[name]: int(value)})
    if attr == "capacity" and name == "rf":
        limits = dataclasses.replace(limits, regs_per_sm=int(value) // 4)
    unit = "B" if attr == "capacity" else "B/s"
    sources = {**hw.sources, f"levels.{name}.{attr}": Source(value, unit, text, "override")}
    return dataclasses.replace(hw, levels=levels, limits=limits, sources=sources)


def _override_level(level: Level, attr: str, value: float) -> Level:
    if attr == "capacity":
        return dataclasses.replace(level, capacity_bytes=int(value))
    return dataclasses.replace(level, bandwidth_bytes_per_s=value)


# ---------------------------------------------------------------------------- output


def hardware_to_dict(hw: Hardware) -> dict[str, Any]:
    """The profile as plain JSON-ready data (numbers in base units), with every source."""
    data = dataclasses.asdict(hw)
    return {"ncdc_hardware": FORMAT_VERSION, **data}
