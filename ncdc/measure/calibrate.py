"""`ncdc calibrate`: a profile whose figures were measured on this GPU.

The microbenchmarks (ncdc.measure.microbench, on a GPU) give raw samples: an amount
(bytes, FLOPs, operations, cycles) and the seconds it took. This module turns them into the
figures the model reads from a profile, each in the profile's unit, and writes a copy of a
built-in profile with those figures replaced: every one it replaces says
`measured on <device> at <date> by ncdc calibrate` and how. Figures it did not measure keep
their sources. `ncdc cost --hardware FILE` then prices with it.

    >>> figures = calibrated_figures({"hbm_copy": Sample(8e9, 2.5e-3, "copy")}, sms=132)
    >>> figures["achievable.bandwidth.hbm"].value  # 8 GB in 2.5 ms
    3.2
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ncdc.errors import UsageError
from ncdc.files import write_atomic
from ncdc.hardware.machine import Hardware
from ncdc.measure.microbench import Sample

HMMA_FLOPS = 4096  # one HMMA.16816 (m16n8k16) of one sub-partition
SUB_PARTITIONS = 4  # per SM (Hopper, Ada, Ampere)


@dataclass(frozen=True)
class Figure:
    """A profile entry's new value, in the entry's unit, and how it was measured."""

    value: float
    unit: str
    method: str


def calibrated_figures(samples: Mapping[str, Sample], sms: int) -> dict[str, Figure]:
    """The profile entries (by YAML path) the samples measure. HBM is the copy's rate
    (bytes read plus written); L2 the best read rate over buffers of at most half the L2;
    the clock is clock64's cycles over %globaltimer's nanoseconds under mma.sync; a
    sub-partition's cycles per HMMA.16816 follow from mma.sync bf16's rate and that clock;
    a library's wgmma matrix product gives the tensor rate of its dtype."""
    out: dict[str, Figure] = {}

    def put(path: str, key: str, scale: float, unit: str) -> None:
        if key in samples:
            s = samples[key]
            out[path] = Figure(round(s.rate / scale, 4), unit, s.method)

    put("achievable.bandwidth.hbm", "hbm_copy", 1e12, "TB/s")
    sweep = [s for k, s in samples.items() if k.startswith("l2_sweep_") and float(k[9:]) <= 0.5]
    if sweep:
        best = max(sweep, key=lambda s: s.rate)
        out["achievable.bandwidth.l2"] = Figure(round(best.rate / 1e12, 4), "TB/s", best.method)
    if "l2_size" in samples:
        size = samples["l2_size"]
        out["levels.l2.capacity"] = Figure(round(size.amount / 2**20, 3), "MiB", size.method)
    put("levels.smem.bandwidth", "smem", 1e12, "TB/s")
    put("rates.sfu.exp", "sfu_exp", 1.0, "exp/s")
    if "launch" in samples:
        s = samples["launch"]
        out["achievable.launch"] = Figure(round(s.seconds / s.amount * 1e6, 3), "us", s.method)
    if "clock" in samples:
        put("achievable.clock", "clock", 1e6, "MHz")
        if "mma_sync_bf16" in samples:
            per_sm_clock = samples["mma_sync_bf16"].rate / (sms * samples["clock"].rate)
            cycles = SUB_PARTITIONS * HMMA_FLOPS / per_sm_clock
            method = f"mma.sync bf16 at {samples['clock'].rate / 1e6:.0f} MHz on {sms} SMs"
            out["hmma_cycles"] = Figure(round(cycles, 2), "cycle", method)
    for dtype in ("bf16", "fp16", "fp8_e4m3"):
        put(f"rates.tensor.{dtype}", f"library_{dtype}", 1e12, "TFLOP/s")
    return out


def calibrated_profile(
    base: Mapping[str, Any], figures: Mapping[str, Figure], device: str, date: str
) -> dict[str, Any]:
    """A copy of the profile tree `base` with each figure's entry replaced by a measured
    one (its peak bookkeeping, `per_sm_per_clock` and `quoted_at_mhz`, dropped: it is no
    longer a quoted peak) and the name `<base>-measured`."""
    tree = copy.deepcopy(dict(base))
    tree["name"] = f"{base['name']}-measured"
    tree["title"] = f"{base.get('title', base['name'])}, measured on {device}"
    for path, figure in figures.items():
        parent, key = _entry_parent(tree, path)
        parent[key] = {
            "value": figure.value, "unit": figure.unit, "kind": "measured",
            "source": f"measured on {device} at {date} by ncdc calibrate: {figure.method}",
        }  # fmt: skip
    return tree


def _entry_parent(tree: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The mapping holding `path`'s entry and its key; a level is found by its name."""
    *head, key = path.split(".")
    node: Any = tree
    for part in head:
        if part == "levels":
            node = node["levels"]
        elif isinstance(node, list):
            node = next(level for level in node if level["name"] == part)
        else:
            node = node.setdefault(part, {})
    return node, key


def write_profile(path: Path, tree: Mapping[str, Any], base_name: str) -> None:
    """The profile YAML, atomically, with a header saying where it came from."""
    header = (
        f"# Written by ncdc calibrate from the {base_name} profile: each entry whose source\n"
        "# says 'measured on' was measured on that GPU; the others keep their sources.\n"
    )
    body = yaml.safe_dump(dict(tree), sort_keys=False, width=100)
    write_atomic(path, (header + body).encode())


def builtin_tree(hw: Hardware) -> dict[str, Any]:
    """The YAML tree of a built-in profile, as its file holds it."""
    from importlib import resources

    text = resources.files("ncdc.hardware.profiles").joinpath(f"{hw.name}.yaml").read_text()
    return dict(yaml.safe_load(text))


def calibrate(
    hw: Hardware, out: Path, *, quick: bool = False, on_stage: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure this GPU (ncdc.measure.microbench), write `out` from the built-in profile
    `hw`, and return the figures written (JSON-ready). Refuses to overwrite a file that is
    not a profile it wrote."""
    from ncdc.backends.cuda import device_info, require_gpu
    from ncdc.measure.microbench import measure

    if out.exists() and "ncdc calibrate" not in out.read_text(errors="replace")[:200]:
        raise UsageError(f"{out} exists and is not a profile ncdc calibrate wrote", where=str(out),
                         hint="choose another -o, or remove it")  # fmt: skip
    cupy = require_gpu()
    device = device_info(cupy)["name"]
    samples = measure(cupy, hw, quick=quick, on_stage=on_stage)
    figures = calibrated_figures(samples, int(hw.limits.sms))
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    write_profile(out, calibrated_profile(builtin_tree(hw), figures, device, date), hw.name)
    found = {k: {"value": f.value, "unit": f.unit, "method": f.method} for k, f in figures.items()}
    found["samples"] = {k: {"amount": s.amount, "seconds": s.seconds, "method": s.method}
                        for k, s in samples.items()}  # fmt: skip
    return found
