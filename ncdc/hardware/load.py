"""GPU hardware profiles read from YAML and checked.

Built-in profiles live in `ncdc/hardware/profiles/<name>.yaml`; a user can pass a path to
their own. Every number in a profile carries its unit, its source and its kind (datasheet,
measured, derived or abstract), and a profile is checked on load: units, ordering of the
levels, and that each peak agrees with SMs x work per SM per clock x clock (which catches a
sparse rate quoted as dense). A capacity is stated once: a level's (the shared memory a
block may use, the L2, the register file) is the launch limit too. See
docs/hardware-profiles.md for the schema.

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
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ncdc.bounded import BoundedLoader
from ncdc.errors import HardwareError, excerpt
from ncdc.files import read_regular
from ncdc.hardware.machine import Achievable, Hardware, Level, Limits, Source

PROFILES_DIR = Path(__file__).parent / "profiles"


FORMAT_VERSION = 1
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few hundred lines


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


ACHIEVABLE_KEYS = ("clock", "bandwidth", "launch", "power_duty")
# the model's compute units besides the rates' (ncdc.model.issue, ncdc.model.overlap)
CEILINGS = ("issue", "power")  # the optional `achievable` block


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
        raw = read_regular(path, MAX_PROFILE_BYTES, what="a hardware profile (YAML)",
                           error=HardwareError)  # fmt: skip
        text = raw.decode("utf-8")
    except OSError as error:
        raise HardwareError(
            f"cannot read hardware profile: {error.strerror or error}",
            where=str(path),
            hint=f"pass an existing YAML file or one of {', '.join(list_profiles())}",
        ) from None
    except UnicodeDecodeError as error:
        raise HardwareError(f"expected UTF-8 text ({error.reason})", where=str(path)) from None
    try:
        data = yaml.load(text, Loader=BoundedLoader)
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
        except (ValueError, OverflowError):  # OverflowError: an integer like 10**400
            self.fail(path, f"expected a number, found {excerpt(repr(node))}")
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
        levels = self.levels(top["levels"])
        limits = self.limits(top["limits"], levels)
        hw = Hardware(
            name=name,
            title=self.string(top["title"], "title"),
            arch=arch,
            clock_hz=clock_hz,
            levels=levels,
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
        levels, launch latency, the tensor duty the power limit allows. Each is below its
        datasheet figure."""
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
        duty = 0.0
        if "power_duty" in entries:
            duty = self.quantity(entries["power_duty"], "achievable.power_duty", "share")
            if not 0 < duty <= 1:
                found = f"a share of the tensor peak in (0, 1], found {duty:g}"
                self.fail("achievable.power_duty", found)
        return Achievable(clock_hz, bandwidth, launch_s, duty)

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
            if name in RATE_KINDS or name in CEILINGS:  # a bound is a level or a unit
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

    def limits(self, node: Any, levels: tuple[Level, ...]) -> Limits:
        """The launch limits; those a level states (the shared memory a block may use, the
        L2, the register file) come from the level, and stating one again is an error."""
        own = level_limits(levels)
        keys = [k for k in LIMIT_KEYS if LIMIT_KEYS[k][0] not in own]
        entries = self.mapping(node, "limits", keys)
        values: dict[str, int] = dict(own)
        for key in keys:
            attr, dimension = LIMIT_KEYS[key]
            values[attr] = self.integer(entries[key], f"limits.{key}", dimension)
        limits = Limits(**values)
        if limits.smem_per_block_bytes > limits.smem_per_sm_bytes:
            where = "levels.smem" if "smem_per_block_bytes" in own else "limits.smem_per_block"
            self.fail(where, "shared memory per block exceeds that per SM")
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


def level_limits(levels: tuple[Level, ...]) -> dict[str, int]:
    """The launch limits the levels state: a block's shared memory at most the capacity of
    the level holding blocks' tiles, the L2 the capacity of the device-wide level below the
    top, and the registers per SM the register level's capacity in 32-bit registers. An
    abstract machine without such levels states them under `limits`.

        >>> from ncdc.hardware.machine import Level
        >>> level_limits((Level("hbm", 2**36, 1e12, "device"), Level("l2", 2**25, 5e12, "device"),
        ...               Level("smem", 2**17, 2e13, "sm", "block")))
        {'smem_per_block_bytes': 131072, 'l2_bytes': 33554432}
    """
    out = {}
    for level in levels:
        if level.holds == "block":
            out["smem_per_block_bytes"] = level.capacity_bytes
        elif level.holds == "thread":
            out["regs_per_sm"] = level.capacity_bytes // 4
    cache = next((lv for lv in levels[1:] if lv.per == "device"), None)
    if cache is not None:
        out["l2_bytes"] = cache.capacity_bytes
    return out


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


def hardware_to_dict(hw: Hardware) -> dict[str, Any]:
    """The profile as plain JSON-ready data (numbers in base units), with every source."""
    data = dataclasses.asdict(hw)
    return {"ncdc_hardware": FORMAT_VERSION, **data}
