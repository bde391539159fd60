"""`ncdc tune`: time the model's best few tilings on the GPU and keep the fastest.

The model ranks every feasible tiling (`rank_tiles`); the top K are compiled in parallel
processes, each checked against the float64 reference on the GPU at a moderate size (the
same tiles, warps and stages), then timed at the real size. A candidate that fails to
compile or gives a wrong answer scores infinity and is reported, never fatal. The fastest
is kept in the tuning cache (ncdc.plan.choose), with the candidates themselves, keyed by the
problem, the hardware profile, the architecture and the GPU it ran on. The report gives
the Spearman rank correlation of predicted and measured times, and how much slower the
model's own pick ran than the best.

Tiles: explicit (`schedule.tiles`, `--tile`) beat tuned, which beat modelled:
`ncdc.plan.choose.choose_plan` applies that order for `compile`, `run` and `bench`.

    >>> result = tune_spec(Path("diagrams/matmul.yaml"), load_hardware("h200"))  # doctest: +SKIP
    >>> result.best.config.tiles, result.spearman  # doctest: +SKIP
    ({'m': 128, 'n': 256, 'k': 64}, 0.8)
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ncdc.errors import CheckFailed, NcdcError
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram
from ncdc.model.values import Plan
from ncdc.output import json_number
from ncdc.plan.choose import Config, plan_config, select_config, write_tuned
from ncdc.plan.published import published_plans
from ncdc.plan.search import rank_tiles

FORMAT = "ncdc.tune/1"
CACHE_FORMAT = 1  # bump when the key or the entry layout changes
DEFAULT_TOP_K = 4
CHECK_SIZE = 256  # axes longer than this are cut to it (or to two tiles) for the check
MATCH_SEARCH = 64  # plans ranked when looking for a stored configuration


# -------------------------------------------------------------------------- statistics


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Spearman rank correlation over the pairs where both are finite (average ranks for
    ties); NaN with fewer than two such pairs or no spread.

        >>> spearman([1, 2, 3, 4], [10, 30, 20, 40])
        0.8
    """
    pairs = [
        (p, m)
        for p, m in zip(predicted, measured, strict=True)
        if math.isfinite(p) and math.isfinite(m)
    ]
    if len(pairs) < 2:
        return math.nan
    a = _ranks([p for p, _ in pairs])
    b = _ranks([m for _, m in pairs])
    if a.std() == 0 or b.std() == 0:
        return math.nan
    return round(float(np.corrcoef(a, b)[0, 1]), 12)


def _ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span."""
    x = np.asarray(values, float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tied = x == v
        ranks[tied] = ranks[tied].mean()
    return ranks


# ---------------------------------------------------------------------------- tuning


@dataclass(frozen=True)
class Candidate:
    """One tiling the model proposed, and what the GPU made of it."""

    rank: int  # the model's rank, 0 = its pick
    config: Config
    predicted_s: float
    measured_ms: float  # median; inf when it failed
    error: str = ""  # why it scored infinity

    @property
    def ok(self) -> bool:
        return math.isfinite(self.measured_ms)


@dataclass(frozen=True)
class TuneResult:
    name: str
    hardware: str
    gpu: str
    arch: str
    axes: Mapping[str, int] = field(hash=False)
    check_axes: Mapping[str, int] = field(hash=False)
    candidates: tuple[Candidate, ...]
    cache_file: str = ""
    # False for a tune on the CPU emulator (ncdc.measure.distribute): correctness only, and
    # the best is the model's best candidate that is correct
    timed: bool = True

    @property
    def best(self) -> Candidate | None:
        if not self.timed:
            return next((c for c in self.candidates if not c.error), None)
        ok = [c for c in self.candidates if c.ok]
        return min(ok, key=lambda c: c.measured_ms) if ok else None

    @property
    def spearman(self) -> float:
        return spearman(
            [c.predicted_s for c in self.candidates], [c.measured_ms for c in self.candidates]
        )

    @property
    def model_pick_gap(self) -> float:
        """How much slower the model's pick ran than the measured best (0.1 = 10%)."""
        best = self.best
        pick = self.candidates[0] if self.candidates else None
        if best is None or pick is None:
            return math.nan
        return pick.measured_ms / best.measured_ms - 1


def check_sizes(diagram: Diagram, configs: Sequence[Config]) -> dict[str, int]:
    """A moderate size for the reference check: each axis cut to CHECK_SIZE, or to twice
    the largest tile any candidate uses on it, whichever is larger (never grown)."""
    out = {}
    for axis, size in diagram.axes.items():
        tile = max((c.tiles.get(axis, 1) for c in configs), default=1)
        out[axis] = min(size, max(CHECK_SIZE, 2 * tile))
    return out


def tune_spec(
    spec: Path, hardware: Hardware, *, sizes: Mapping[str, int] | None = None,
    top_k: int = DEFAULT_TOP_K, warmup_ms: float = 10.0, rep_ms: float = 50.0,
    seed: int = 0, write: bool = True,
) -> TuneResult:  # fmt: skip
    """Rank, compile, check and time the top `top_k` tilings of `spec`; keep the fastest."""
    from ncdc.backends.cuda import device_arch, device_info, require_gpu
    from ncdc.measure.bench import make_timer, module_runner
    from ncdc.render import render_plan

    cupy = require_gpu()
    arch = device_arch(cupy)
    gpu = device_info(cupy)["name"]
    diagram = load_diagram(spec, sizes)
    plans = tuning_plans(diagram, hardware, top_k)
    configs = [plan_config(p) for p in plans]
    small_sizes = check_sizes(diagram, configs)
    small = load_diagram(spec, small_sizes)
    failures = compile_candidates(spec, hardware, arch, [dict(diagram.axes), small_sizes], configs)
    timer = make_timer(cupy, hardware, warmup_ms, rep_ms)
    candidates = []
    for i, (plan, config) in enumerate(zip(plans, configs, strict=True)):
        measured, error = math.inf, failures[i]
        if not error:
            try:
                error = check_candidate(small, hardware, config, seed + i)
                if not error:
                    runner = module_runner(cupy, diagram, render_plan(plan), arch, seed)
                    measured = timer(runner).median_ms
            except NcdcError as e:
                error = e.line()
            except Exception as e:  # a launch CuPy refuses (shared memory, registers)
                error = f"{type(e).__name__}: {e}"[:200]
        candidates.append(Candidate(i, config, plan.predicted_time_s, measured, error))
    result = TuneResult(
        diagram.name, hardware.name, gpu, arch, dict(diagram.axes), small_sizes, tuple(candidates)
    )
    best = result.best
    if best is None:
        raise CheckFailed(
            f"all {len(candidates)} candidates failed; first: {candidates[0].error}",
            where=str(spec),
            hint="ncdc run --backend cuda shows the model's pick in detail",
        )
    if write:
        record = {"gpu": gpu, "arch": arch, "date": _now(), "result": tune_to_dict(result)}
        path = write_tuned(diagram, hardware.name, arch, gpu, best.config, record)
        result = TuneResult(**{**result.__dict__, "cache_file": str(path)})
    return result


def tuning_plans(diagram: Diagram, hardware: Hardware, top_k: int) -> list[Plan]:
    """The model's best `top_k` plans, then each published kernel's tiling that applies and
    is not among them (ncdc.plan.published): a GPU run settles what the model alone cannot."""
    plans = rank_tiles(diagram, hardware, max(top_k, 1))
    seen = [plan_config(p) for p in plans]
    for *_, extra in published_plans(plans[0]):
        if plan_config(extra) not in seen:
            plans.append(extra)
            seen.append(plan_config(extra))
    return plans


def check_candidate(diagram: Diagram, hardware: Hardware, config: Config, seed: int) -> str:
    """Run `config` on `diagram` with the cuda backend against the reference: '' when
    every output matches, else what went wrong."""
    from ncdc.render import render_plan
    from ncdc.verify.run import run_diagram

    module = render_plan(select_config(diagram, hardware, config))
    result = run_diagram(diagram, module, backend="cuda", seed=seed)
    for c in result.checks:
        if not c.ok:
            return (
                f"wrong result: {c.name} off by {c.max_abs_error:.3g} (allowed "
                f"{c.tolerance:g} x {c.scale:.3g}), {c.unexpected_nan} unexpected NaN, "
                f"{c.nonfinite_mismatch} NaN or inf where the reference differs"
            )
    return ""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def compile_candidates(
    spec: Path, hardware: Hardware, arch: str, sizes: Sequence[Mapping[str, int]],
    configs: Sequence[Config],
) -> list[str]:  # fmt: skip
    """Compile every candidate at every size in worker processes (through the compile
    cache, so later loads are hits); per candidate, the first error or ''."""
    jobs = [(spec, dict(s), hardware, c, arch) for c in configs for s in sizes]
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        errors = list(pool.map(_compile_candidate, jobs))
    out = []
    for i in range(len(configs)):
        mine = [e for e in errors[i * len(sizes) : (i + 1) * len(sizes)] if e]
        out.append(mine[0] if mine else "")
    return out


def _compile_candidate(job: tuple) -> str:
    """Compile one candidate into the cache; the error as one line, or ''."""
    from ncdc.backends.compile import compile_plan

    spec, sizes, hardware, config, arch = job
    try:
        compile_plan(select_config(load_diagram(spec, sizes), hardware, config), arch)
    except NcdcError as e:
        return f"compile: {e.line()}"
    except Exception as e:  # a broken family renderer must not stop the search
        return f"compile: {type(e).__name__}: {e}"
    return ""


# ----------------------------------------------------------------------------- report


def tune_to_dict(r: TuneResult) -> dict[str, Any]:
    """The versioned record of one tuning run (documented in docs/gpu.md)."""

    best = r.best
    return {
        "format": FORMAT,
        "name": r.name,
        "hardware": r.hardware,
        "gpu": r.gpu,
        "arch": r.arch,
        "axes": dict(r.axes),
        "check_axes": dict(r.check_axes),
        "candidates": [
            {
                "rank": c.rank,
                **c.config.to_dict(),
                "predicted_s": c.predicted_s,
                "measured_ms": json_number(c.measured_ms),
                "error": c.error or None,
            }
            for c in r.candidates
        ],
        "best_rank": best.rank if best else None,
        "spearman": json_number(r.spearman),
        "model_pick_gap": json_number(r.model_pick_gap),
        "cache_file": r.cache_file or None,
    }


def tune_table(r: TuneResult) -> Any:
    from rich.table import Table

    table = Table(title=f"ncdc tune {r.name} on {r.gpu} ({r.arch})")
    for col in ("rank", "tiles", "warps/stages/splits", "predicted us", "measured ms", "result"):
        table.add_column(col, overflow="fold")
    best = r.best
    for c in r.candidates:
        launch = ", ".join(f"{w}/{st}/{sp}" for w, st, sp in c.config.kernels)
        passed = c.ok or (not r.timed and not c.error)
        verdict = "best" if c is best else ("ok" if passed else c.error)
        measured = f"{c.measured_ms:.3f}" if c.ok else ("inf" if r.timed else "-")
        table.add_row(
            str(c.rank), " ".join(f"{a}={v}" for a, v in c.config.tiles.items()), launch,
            f"{c.predicted_s * 1e6:.1f}", measured, verdict,
        )  # fmt: skip
    kept = f"kept in {r.cache_file or '(not written)'}"
    if not r.timed:
        table.caption = f"checked on the CPU emulator, not timed: the model's best correct; {kept}"
        return table
    table.caption = (
        f"Spearman(predicted, measured) = {r.spearman:.2f}; the model's pick ran "
        f"{r.model_pick_gap:+.1%} against the best; {kept}"
    )
    return table
