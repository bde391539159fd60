"""Plan choice: explicit tiles beat tuned tiles, which beat the model's pick.

`choose_plan` applies that order for `compile`, `run` and `bench`. Tuned choices live in
the tuning cache, one JSON file per problem under `cache_root()/tune/`, keyed by the
diagram's name, axis sizes, input dtypes, a hash of its operations and schedule, the
hardware profile, the architecture and the GPU it was measured on, and the ncdc version.
An entry stores the chosen candidates themselves (ncdc.model.launch.Candidate), so the plan it
rebuilds launches exactly what was timed. `ncdc tune` (ncdc.measure.tune) writes the entries.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> choose_plan(load_diagram("diagrams/matmul.yaml"), load_hardware("h200")).tiles
    {'m': 128, 'n': 256, 'k': 64}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncdc.bounded import read_json
from ncdc.errors import NcdcError, PlanError
from ncdc.files import write_atomic
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.model.launch import Candidate, candidate_from_dict
from ncdc.model.values import Plan
from ncdc.plan.search import plan_diagram, plan_from_candidates, rank_tiles, with_unfused
from ncdc.version import __version__

FORMAT = "ncdc.tune/1"
CACHE_FORMAT = 2  # bump when the key or the entry layout changes
MATCH_SEARCH = 64  # plans ranked when looking for a stored configuration
TUNE_FOLDER = "tune"  # under the cache root
MAX_RECORD_BYTES = 4 << 20  # a record holds a few candidates and their timings


@dataclass(frozen=True)
class Config:
    """What tuning chooses: block tiles, per kernel its warps, stages and splits, and the
    candidates themselves (their whole launches), from which the plan is rebuilt."""

    tiles: Mapping[str, int] = field(hash=False)
    kernels: tuple[tuple[int, int, int], ...]  # (warps, stages, splits) per kernel
    candidates: tuple[Candidate, ...] = ()  # per kernel (none on an abstract machine)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tiles": dict(self.tiles),
            "kernels": [{"warps": w, "stages": st, "splits": sp} for w, st, sp in self.kernels],
            "candidates": [c.to_dict() for c in self.candidates],
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Config:
        kernels = tuple(
            (int(k["warps"]), int(k["stages"]), int(k["splits"])) for k in data["kernels"]
        )
        candidates = tuple(candidate_from_dict(c) for c in data.get("candidates", ()))
        return Config({str(a): int(v) for a, v in data["tiles"].items()}, kernels, candidates)


def plan_config(plan: Plan) -> Config:
    """The configuration a plan runs: what a tuning entry stores."""
    candidates = tuple(k.candidate for k in plan.kernels if k.candidate is not None)
    if len(candidates) != len(plan.kernels):
        candidates = ()
    return Config(
        plan.tiles, tuple((k.warps, k.stages, k.splits) for k in plan.kernels), candidates
    )


# ------------------------------------------------------------------------ tuning cache


def tuning_key(diagram: Diagram, hardware_name: str, arch: str, device: str) -> dict[str, Any]:
    """Everything a tuned choice depends on: the problem, the hardware profile, the
    architecture compiled for, the GPU it was timed on, and the ncdc version.

    The operations are hashed with their operands, axes, dtypes, scales and parameters, and
    the schedule's stream, group and materialize lists (not its tiles: explicit tiles
    bypass the tuning cache anyway).
    """
    ops = [
        [op.out, op.fn, list(map(str, op.operands)), list(op.over), list(op.axes), op.dtype,
         list(map(str, op.scale)), sorted((k, str(v)) for k, v in op.params.items())]
        for op in diagram.ops
    ]  # fmt: skip
    s = diagram.schedule
    shape = {
        "ops": ops,
        "outputs": list(diagram.outputs),
        "schedule": [list(s.stream), list(s.group), list(s.materialize)],
    }
    return {
        "format": CACHE_FORMAT,
        "name": diagram.name,
        "axes": dict(diagram.axes),
        "dtypes": {t.name: t.dtype for t in diagram.inputs},
        "ops_sha256": hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest(),
        "hardware": hardware_name,
        "arch": arch,
        "device": device,
        "ncdc": __version__,
    }


def tuning_folder() -> Path:
    """`<cache_root>/tune`."""
    from ncdc.paths import cache_root

    return cache_root() / TUNE_FOLDER


def tuning_path(diagram: Diagram, hardware_name: str, arch: str, device: str) -> Path:
    """`<cache_root>/tune/<name>-<first 16 hex of the key's sha256>.json`."""
    key = tuning_key(diagram, hardware_name, arch, device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return tuning_folder() / f"{diagram.name}-{digest}.json"


@dataclass(frozen=True)
class Tuned:
    """A tuning entry that applies: its configuration and the file it came from."""

    config: Config
    path: Path
    device: str


def find_tuned(
    diagram: Diagram, hardware_name: str, arch: str, device: str | None = None
) -> Tuned | None:
    """The tuned configuration for this problem, or None (missing, stale or unreadable).
    With `device` None (no GPU to ask, as when compiling), an entry timed on any GPU of
    this profile and architecture applies: the most recently written. A cache root that
    others could write is refused (CacheError) before any record is read."""
    from ncdc.paths import readable_dir

    if readable_dir(TUNE_FOLDER) is None:
        return None
    if device is not None:
        paths = [tuning_path(diagram, hardware_name, arch, device)]
    else:
        paths = sorted(
            tuning_folder().glob(f"{diagram.name}-*.json"),
            key=lambda p: p.stat().st_mtime if p.exists() else 0,
            reverse=True,
        )
    for path in paths:
        found = _read_entry(path, diagram, hardware_name, arch, device)
        if found is not None:
            return found
    return None


def _read_entry(
    path: Path, diagram: Diagram, hardware_name: str, arch: str, device: str | None
) -> Tuned | None:
    try:
        entry = read_json(path, MAX_RECORD_BYTES, what="a tuning record")
        key = entry["key"]
        wanted = tuning_key(
            diagram, hardware_name, arch, key["device"] if device is None else device
        )
        if entry.get("format") != FORMAT or key != wanted:
            return None
        return Tuned(Config.from_dict(entry["best"]), path, str(key["device"]))
    except (OSError, NcdcError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing, planted as a FIFO, damaged: not a record that applies


def read_tuned(
    diagram: Diagram, hardware_name: str, arch: str, device: str | None = None
) -> Config | None:
    """`find_tuned`'s configuration alone."""
    found = find_tuned(diagram, hardware_name, arch, device)
    return found.config if found else None


def write_tuned(
    diagram: Diagram, hardware_name: str, arch: str, device: str, best: Config, record: dict
) -> Path:
    """Store `best` (with the run's record beside it) atomically; returns the file."""
    from ncdc.paths import private_dir

    path = tuning_path(diagram, hardware_name, arch, device)
    private_dir(path.parent.name)  # the checked root, created private (see ncdc.backends.cache)
    entry = {
        "format": FORMAT,
        "key": tuning_key(diagram, hardware_name, arch, device),
        "best": best.to_dict(),
        **record,
    }
    write_atomic(path, (json.dumps(entry, indent=2) + "\n").encode())
    return path


def select_config(diagram: Diagram, hardware: Hardware, config: Config) -> Plan:
    """The plan that runs `config`'s candidates, rebuilt and checked against `hardware`;
    without stored candidates, the plan with `config`'s tiles whose kernels use its warps,
    stages and splits, or the best with those tiles when none matches exactly."""
    if config.candidates:
        return plan_from_candidates(diagram, hardware, config.candidates)
    plans = rank_tiles(diagram, hardware, MATCH_SEARCH, dict(config.tiles))
    for plan in plans:
        if plan_config(plan).kernels == config.kernels:
            return plan
    return plans[0]


@dataclass(frozen=True)
class PlanSource:
    """Where a plan's tiles came from: "explicit" (--tile, schedule.tiles), "tuned" (the
    tuning cache, `path` names the file) or "model" (the cost model's pick)."""

    kind: str
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.path}

    def describe(self) -> str:
        """One line for stderr, e.g. "tiles from the tuning cache: /c/tune/mm-1a.json"."""
        if self.kind == "tuned":
            return f"tiles from the tuning cache: {self.path} (--no-tuned ignores it)"
        return "tiles given explicitly" if self.kind == "explicit" else "tiles from the model"


def choose_plan_source(
    diagram: Diagram,
    hardware: Hardware,
    tiles: Mapping[str, int] | None = None,
    *,
    arch: str | None = None,
    device: str | None = None,
    use_tuned: bool = True,
) -> tuple[Plan, PlanSource]:
    """Explicit tiles (`tiles`, or the spec's `schedule.tiles`) beat tuned beat modelled;
    the plan, and where its tiles came from. Tuned entries are those for `arch` (the
    profile's own by default) and `device`; `use_tuned=False` ignores the cache."""
    if tiles or diagram.schedule.tiles:
        plan = plan_diagram(diagram, hardware, dict(tiles) if tiles else None)
        return plan, PlanSource("explicit")
    found = None
    if use_tuned and hardware.is_gpu:
        found = find_tuned(diagram, hardware.name, arch or hardware.arch, device)
    if found is not None:
        try:
            return select_config(diagram, hardware, found.config), PlanSource(
                "tuned", str(found.path)
            )
        except PlanError:
            pass  # the profile changed under the entry: fall back to the model
    return plan_diagram(diagram, hardware), PlanSource("model")


def rank_with_source(
    diagram: Diagram,
    hardware: Hardware,
    top_k: int = 1,
    tiles: Mapping[str, int] | None = None,
    *,
    use_tuned: bool = True,
    model_only: bool = False,
) -> tuple[list[Plan], PlanSource]:
    """`ncdc cost`: the chosen plan first (tuned when the cache has one), then the model's
    runners-up, and where the first one's tiles came from. The first plan carries the
    unfused comparison, which the report shows; `model_only` as in `rank_tiles`."""
    ranked = rank_tiles(
        diagram, hardware, max(top_k, 1), dict(tiles) if tiles else None,
        compare_unfused=True, model_only=model_only,
    )  # fmt: skip
    if tiles or diagram.schedule.tiles:
        return ranked, PlanSource("explicit")
    if model_only:
        return ranked, PlanSource("model")  # no kernel is built: no tuned kernel applies
    plan, source = choose_plan_source(diagram, hardware, use_tuned=use_tuned)
    if source.kind != "tuned":
        return ranked, source
    return [with_unfused(plan), *ranked[: max(top_k, 1) - 1]], source


def choose_plan(
    diagram: Diagram,
    hardware: Hardware,
    tiles: Mapping[str, int] | None = None,
    *,
    arch: str | None = None,
    device: str | None = None,
    use_tuned: bool = True,
) -> Plan:
    """`choose_plan_source`'s plan alone.

    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.hardware.load import load_hardware
    >>> choose_plan(load_diagram("diagrams/matmul.yaml"), load_hardware("h200")).tiles
    {'m': 128, 'n': 256, 'k': 64}
    """
    return choose_plan_source(
        diagram, hardware, tiles, arch=arch, device=device, use_tuned=use_tuned
    )[0]
