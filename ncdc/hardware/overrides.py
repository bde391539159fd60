"""What-if questions: a profile with a level's capacity or bandwidth replaced
(`--hw LEVEL.capacity=BYTES`, `--hw LEVEL.bandwidth=BYTES_PER_S`), the new number's source
recorded as an override.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from ncdc.errors import HardwareError
from ncdc.hardware.load import level_limits
from ncdc.hardware.machine import Hardware, Level, Source

OVERRIDE_FIELDS = ("capacity", "bandwidth")


def apply_overrides(hw: Hardware, overrides: Sequence[str]) -> Hardware:
    """A copy of `hw` with level capacities or bandwidths replaced, for what-if questions.

    Each override is `LEVEL.FIELD=NUMBER` with FIELD `capacity` (bytes) or `bandwidth`
    (bytes per second). The launch limit a level states follows it (smem capacity is
    smem_per_block, l2 capacity is l2, rf capacity the registers per SM), and the source
    of each new number is recorded.

    >>> from ncdc.hardware.load import load_hardware
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
    # the launch limits a level states follow it (ncdc.hardware.load.level_limits)
    limits = dataclasses.replace(hw.limits, **level_limits(levels))
    unit = "B" if attr == "capacity" else "B/s"
    sources = {**hw.sources, f"levels.{name}.{attr}": Source(value, unit, text, "override")}
    achievable = hw.achievable
    if attr == "bandwidth" and name in achievable.bandwidth:
        # the model prices a measured copy bandwidth before the datasheet's: the question
        # "what if this level moved VALUE" replaces the measured figure too
        measured = {k: v for k, v in achievable.bandwidth.items() if k != name}
        achievable = dataclasses.replace(achievable, bandwidth=measured)
    return dataclasses.replace(
        hw, levels=levels, limits=limits, sources=sources, achievable=achievable
    )


def _override_level(level: Level, attr: str, value: float) -> Level:
    if attr == "capacity":
        return dataclasses.replace(level, capacity_bytes=int(value))
    return dataclasses.replace(level, bandwidth_bytes_per_s=value)
