"""Tuning over every GPU of a machine, or over a Ray cluster: `ncdc tune DIR --gpus all`,
`ncdc tune DIR --ray ADDRESS`.

The work of a tune is split where it can run apart: the model ranks each spec's tilings
here; each candidate is compiled by a CPU task (into the compile cache of the machine that
runs it); each candidate is then one trial, a GPU task: checked against the float64
reference at a moderate size and timed at the real one. Trials are isolated
(ncdc.measure.isolate): locally, one child process per trial with its own timeout, at most
one per GPU at a time (`CUDA_VISIBLE_DEVICES` names its GPU), so a candidate that hangs or
faults is one failed trial; on Ray, one task per trial asking for one GPU. The results come
back here and are merged per spec into the tuning cache, under the entry's lock.

Where no GPU is, `backend="cpu"` runs the trials on the CPU emulator: correctness, not
timings. Its best is then the model's best candidate that is correct, kept under the
arch `emulated-<arch>`, which no GPU compile ever reads (the tuning key names the arch).

    >>> results = tune_many([Path("diagrams/matmul.yaml")], load_hardware("h200"),
    ...                     workers=LocalWorkers(gpu_slots()))  # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ncdc.errors import CheckFailed, NcdcError, UsageError
from ncdc.hardware.machine import Hardware
from ncdc.language.load import load_diagram
from ncdc.measure.isolate import Stages, run_many
from ncdc.measure.tune import Candidate, TuneResult, check_candidate, check_sizes, tune_to_dict
from ncdc.paths import locked, private_dir
from ncdc.plan.choose import Config, plan_config, select_config, tuning_path, write_tuned
from ncdc.plan.search import rank_tiles

TRIAL_TIMEOUT_S = 300.0  # a trial's check and timing; a hung kernel is killed here
EMULATED = "emulated"


@dataclass(frozen=True)
class Trial:
    """One candidate of one spec, as a GPU task gets it (JSON-ready: it crosses processes
    and machines)."""

    spec: str
    sizes: Mapping[str, int]
    check_sizes: Mapping[str, int]
    hardware: str
    rank: int
    config: Mapping[str, Any]
    backend: str
    arch: str
    seed: int = 0
    warmup_ms: float = 10.0
    rep_ms: float = 50.0

    def to_job(self) -> dict[str, Any]:
        return {"kind": "trial", "name": f"{Path(self.spec).stem} #{self.rank}", **self.__dict__}

    @staticmethod
    def from_job(job: Mapping[str, Any]) -> Trial:
        fields = Trial.__dataclass_fields__
        return Trial(**{k: v for k, v in job.items() if k in fields})


def plan_trials(
    spec: Path, hw: Hardware, top_k: int, backend: str, arch: str,
    sizes: Mapping[str, int] | None = None,
) -> list[Trial]:  # fmt: skip
    """The model's top `top_k` tilings of `spec` as trials."""
    diagram = load_diagram(spec, sizes)
    configs = [plan_config(p) for p in rank_tiles(diagram, hw, max(top_k, 1))]
    small = check_sizes(diagram, configs)
    return [
        Trial(str(spec), dict(diagram.axes), small, hw.name, i, c.to_dict(), backend, arch)
        for i, c in enumerate(configs)
    ]


def compile_trial(job: Mapping[str, Any]) -> str:
    """A CPU task: compile a trial's candidate at both sizes into this machine's compile
    cache; its error as one line, or ''."""
    from ncdc.backends.compile import compile_plan
    from ncdc.hardware.load import load_hardware

    t = Trial.from_job(job)
    try:
        hw, config = load_hardware(t.hardware), Config.from_dict(t.config)
        for sizes in (t.sizes, t.check_sizes):
            compile_plan(select_config(load_diagram(Path(t.spec), sizes), hw, config), t.arch)
    except NcdcError as e:
        return f"compile: {e.line()}"
    except Exception as e:  # a broken renderer fails its candidate, not the tune
        return f"compile: {type(e).__name__}: {e}"
    return ""


def run_trial(job: Mapping[str, Any]) -> dict[str, Any]:
    """A GPU task (a CPU one for the cpu backend): check the candidate against the
    reference at the check size, then time it at the real size (cuda only)."""
    from ncdc.hardware.load import load_hardware

    t = Trial.from_job(job)
    hw, config = load_hardware(t.hardware), Config.from_dict(t.config)
    out: dict[str, Any] = {"rank": t.rank, "spec": t.spec, "measured_ms": None, "error": ""}
    try:
        small = load_diagram(Path(t.spec), t.check_sizes)
        if t.backend == "cpu":
            out.update(gpu="cpu emulator", arch=f"{EMULATED}-{t.arch}")
            out["error"] = _check_emulated(small, hw, config, t.seed + t.rank)
            return out
        out.update(_device())
        out["error"] = check_candidate(small, hw, config, t.seed + t.rank)
        if not out["error"]:
            out["measured_ms"] = _time_trial(t, hw, config)
    except NcdcError as e:
        out["error"] = e.line()
    except Exception as e:  # a launch CuPy refuses (shared memory, registers)
        out["error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def _check_emulated(diagram: Any, hw: Hardware, config: Config, seed: int) -> str:
    from ncdc.render import render_plan
    from ncdc.verify.run import run_diagram

    result = run_diagram(diagram, render_plan(select_config(diagram, hw, config)), seed=seed)
    bad = [c.name for c in result.checks if not c.ok]
    return f"wrong result: {', '.join(bad)}" if bad else ""


def _device() -> dict[str, str]:
    from ncdc.backends.cuda import device_arch, device_info, require_gpu

    cupy = require_gpu()
    return {"gpu": device_info(cupy)["name"], "arch": device_arch(cupy)}


def _time_trial(t: Trial, hw: Hardware, config: Config) -> float:
    from ncdc.backends.cuda import device_arch, require_gpu
    from ncdc.measure.bench import make_timer, module_runner
    from ncdc.render import render_plan

    cupy = require_gpu()
    diagram = load_diagram(Path(t.spec), t.sizes)
    module = render_plan(select_config(diagram, hw, config))
    timer = make_timer(cupy, hw, t.warmup_ms, t.rep_ms)
    runner = module_runner(cupy, diagram, module, device_arch(cupy), t.seed)
    return float(timer(runner).median_ms)


# ------------------------------------------------------------------------------ workers


class Workers(Protocol):
    """Where the tasks run: `compile` CPU tasks and `run` trials, results in job order."""

    def compile(self, jobs: Sequence[Mapping[str, Any]]) -> list[str]: ...
    def run(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]: ...


class LocalWorkers:
    """This machine: compiles over its cores, trials in isolated children, one per slot
    (`gpu_slots()`: one per GPU) at a time."""

    def __init__(self, slots: Sequence[Mapping[str, str]], timeout_s: float = TRIAL_TIMEOUT_S):
        self.slots, self.timeout_s = list(slots), timeout_s

    def compile(self, jobs: Sequence[Mapping[str, Any]]) -> list[str]:
        from ncdc.system import default_jobs

        spawn = multiprocessing.get_context("spawn")  # the children may initialise CUDA
        with ProcessPoolExecutor(max(1, min(len(jobs), default_jobs())), mp_context=spawn) as pool:
            return list(pool.map(compile_trial, jobs))

    def run(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        command = [sys.executable, "-m", "ncdc.measure.distribute"]
        by_index: dict[int, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="ncdc-tune-") as tmp:
            indexed = [{**j, "index": i} for i, j in enumerate(jobs)]
            for o in run_many(command, indexed, Path(tmp), lambda _: self.timeout_s, self.slots):
                error = f"{o.status} at {o.stage or 'start'}: {o.detail}"[:300]
                failed = {"rank": o.job["rank"], "measured_ms": None, "error": error}
                by_index[int(o.job["index"])] = dict(o.result) if o.ok and o.result else failed
        return [by_index[i] for i in range(len(jobs))]


class RayWorkers:
    """A Ray cluster (`ray.init(address)`): one CPU task per compile, one task asking for
    one GPU per trial (one CPU on the cpu backend). Ray is an optional extra."""

    def __init__(self, address: str):
        try:
            import ray
        except ImportError:
            raise UsageError(
                "--ray needs Ray, which is not installed", where="--ray",
                hint="pip install 'ncdc[ray]'",
            ) from None  # fmt: skip
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False)
        self.ray = ray
        self._compile = ray.remote(num_cpus=1)(compile_trial)
        self._gpu = ray.remote(num_gpus=1, max_retries=0)(run_trial)
        self._cpu = ray.remote(num_cpus=1, max_retries=0)(run_trial)

    def compile(self, jobs: Sequence[Mapping[str, Any]]) -> list[str]:
        return list(self.ray.get([self._compile.remote(dict(j)) for j in jobs]))

    def run(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        tasks = [(self._cpu if j["backend"] == "cpu" else self._gpu).remote(dict(j)) for j in jobs]
        out = []
        for job, task in zip(jobs, tasks, strict=True):
            try:
                found: Any = self.ray.get(task)
                out.append(dict(found))
            except Exception as e:  # the worker died (a fault in its kernel): this trial
                out.append(
                    {
                        "rank": job["rank"],
                        "measured_ms": None,
                        "error": f"{type(e).__name__}: {e}"[:300],
                    }
                )
        return out


def gpu_slots(count: int | None = None) -> list[dict[str, str]]:
    """One environment per GPU of this machine (those CUDA_VISIBLE_DEVICES allows), at
    most `count`; one empty slot where no GPU is found."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip()]
    else:
        ids = [str(i) for i in range(_device_count())]
    ids = ids[: count or None]
    return [{"CUDA_VISIBLE_DEVICES": i} for i in ids] or [{}]


def _device_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver, no device
        return 0


# -------------------------------------------------------------------------------- merge


def tune_many(
    specs: Sequence[Path], hw: Hardware, *, workers: Workers, top_k: int = 4,
    backend: str = "cuda", sizes: Mapping[str, int] | None = None, write: bool = True,
) -> list[TuneResult]:  # fmt: skip
    """Tune every spec: trials planned here, compiled (cuda) and run by `workers`, merged
    per spec and kept in the tuning cache."""
    from ncdc.backends.targets import default_arch

    arch = default_arch(hw)
    trials = [t for s in specs for t in plan_trials(s, hw, top_k, backend, arch, sizes)]
    jobs = [t.to_job() for t in trials]
    failures = workers.compile(jobs) if backend == "cuda" else [""] * len(jobs)
    ready = [j for j, e in zip(jobs, failures, strict=True) if not e]
    ran = iter(workers.run(ready))
    results = [
        next(ran) if not e else {"rank": j["rank"], "measured_ms": None, "error": e}
        for j, e in zip(jobs, failures, strict=True)
    ]
    out = []
    for spec in specs:
        mine = [(t, r) for t, r in zip(trials, results, strict=True) if t.spec == str(spec)]
        out.append(merge(spec, hw, mine, backend, write))
    return out


def tune_specs(
    specs: Sequence[Path], hw: Hardware, *, top_k: int = 4, backend: str = "cuda",
    gpus: int | None = None, ray: str | None = None, sizes: Mapping[str, int] | None = None,
) -> list[TuneResult]:  # fmt: skip
    """`ncdc tune` over many GPUs: `specs` on this machine's GPUs (at most `gpus`), or on
    the Ray cluster at `ray`."""
    if backend not in ("cuda", "cpu"):
        raise UsageError(f"unknown backend '{backend}'; expected cuda or cpu", where="--backend")
    workers: Workers = RayWorkers(ray) if ray else LocalWorkers(gpu_slots(gpus))
    return tune_many(specs, hw, workers=workers, top_k=top_k, backend=backend, sizes=sizes or None)


def merge(
    spec: Path, hw: Hardware, trials: Sequence[tuple[Trial, Mapping[str, Any]]], backend: str,
    write: bool = True,
) -> TuneResult:  # fmt: skip
    """One spec's trials as a TuneResult; its best kept in the tuning cache under the
    entry's lock (other tunes may write the same entry)."""
    diagram = load_diagram(spec, trials[0][0].sizes)
    candidates = []
    for t, r in trials:
        measured = r.get("measured_ms")
        candidates.append(Candidate(
            t.rank, Config.from_dict(t.config), _predicted(diagram, hw, t),
            float(measured) if measured is not None else math.inf, str(r.get("error") or ""),
        ))  # fmt: skip
    ran = next((r for _, r in trials if r.get("gpu")), {})
    timed = backend == "cuda"
    result = TuneResult(
        diagram.name, hw.name, str(ran.get("gpu", "")), str(ran.get("arch", "")),
        dict(diagram.axes), dict(trials[0][0].check_sizes),
        tuple(sorted(candidates, key=lambda c: c.rank)), timed=timed,
    )  # fmt: skip
    best = result.best
    if best is None:
        raise CheckFailed(f"{diagram.name}: all {len(candidates)} candidates failed; first: "
                          f"{candidates[0].error}", where=str(spec))  # fmt: skip
    if write and result.gpu:
        path = tuning_path(diagram, hw.name, result.arch, result.gpu)
        private_dir(path.parent.name)
        with locked(path.with_suffix(".lock")):
            record = {"gpu": result.gpu, "arch": result.arch, "date": _now(), "backend": backend,
                      "result": tune_to_dict(result)}  # fmt: skip
            written = write_tuned(diagram, hw.name, result.arch, result.gpu, best.config, record)
        result = TuneResult(**{**result.__dict__, "cache_file": str(written)})
    return result


def _predicted(diagram: Any, hw: Hardware, t: Trial) -> float:
    return float(select_config(diagram, hw, Config.from_dict(t.config)).predicted_time_s)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _child(folder: Path) -> None:
    """A local trial's process (`python -m ncdc.measure.distribute FOLDER`)."""
    stages = Stages(folder)
    job = stages.job()
    stages.enter("trial")
    stages.finish(run_trial(job))


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
