"""Compiling many specs at once (`ncdc compile FOLDER`): a process pool over the machine's
cores, each spec's failure reported on its own line, the others carried on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncdc.backends.compile import CompileReport, compile_spec
from ncdc.backends.outputs import check_out_dir, write_outputs
from ncdc.errors import CompileError, NcdcError, file_error
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import check_unique_names
from ncdc.output import phase
from ncdc.system import default_jobs


@dataclass(frozen=True)
class SpecFailure:
    """A spec of a batch that could not be compiled or written, and why."""

    spec: Path
    error: NcdcError


@dataclass(frozen=True)
class CompileBatch:
    """What a compile of several specs produced: the kernels written and the failures."""

    reports: tuple[CompileReport, ...]
    failures: tuple[SpecFailure, ...]

    @property
    def exit_code(self) -> int:
        """0 when everything compiled, else the highest exit code among the failures."""
        return max((f.error.exit_code for f in self.failures), default=0)


def compile_specs(
    specs: Sequence[Path], hardware: Hardware, *, out_dir: Path, arch: str | None = None,
    sizes: Mapping[str, int] | None = None, tiles: Mapping[str, int] | None = None,
    use_cache: bool = True, strict: bool = False, jobs: int | None = None,
    use_tuned: bool = True, emit: Sequence[str] = (),
) -> CompileBatch:  # fmt: skip
    """Compile every spec (in `jobs` worker processes when there are several) and write
    each one's outputs together. One spec: its error is raised. Several: a spec that fails
    does not stop the others; the batch lists each failure.

    With `strict`, a kernel that spills registers is a compile error (exit 3) and nothing
    is written for its diagram. `emit` adds exports (`ncdc.backends.exports.EMITS`).
    """
    check_out_dir(out_dir)
    check_unique_names(specs)
    work = [(spec, hardware, arch, sizes, tiles, use_cache, use_tuned) for spec in specs]
    if len(work) == 1:
        report = _compile_job(work[0])
        _finish(report, out_dir, strict, emit)
        return CompileBatch((report,), ())
    reports, failures = _compile_parallel(work, jobs or default_jobs())
    written = []
    for report in reports:
        try:
            _finish(report, out_dir, strict, emit)
            written.append(report)
        except NcdcError as e:
            failures.append(SpecFailure(Path(report.diagram.source), e))
        except OSError as e:
            failures.append(SpecFailure(Path(report.diagram.source), file_error(e)))
    order = {spec: i for i, spec in enumerate(specs)}
    failures.sort(key=lambda f: order.get(f.spec, len(order)))
    return CompileBatch(tuple(written), tuple(failures))


def compile_diagram(
    diagram: Diagram, hardware: Hardware, *, out_dir: Path, arch: str | None = None,
    tiles: Mapping[str, int] | None = None, use_cache: bool = True, strict: bool = False,
    use_tuned: bool = True, emit: Sequence[str] = (),
) -> CompileBatch:  # fmt: skip
    """`compile_specs` of one loaded diagram, in this process."""
    from ncdc.backends.compile import compile_diagram as compile_one

    check_out_dir(out_dir)
    report = compile_one(
        diagram, hardware, arch=arch, tiles=tiles, use_cache=use_cache, use_tuned=use_tuned
    )
    _finish(report, out_dir, strict, emit)
    return CompileBatch((report,), ())


def _finish(report: CompileReport, out_dir: Path, strict: bool, emit: Sequence[str]) -> None:
    if strict and report.spills:
        spilled = [k.launch.kernel for k in report.kernels if k.spill_stores_bytes]
        raise CompileError(
            f"{', '.join(spilled)} spills {report.spills} bytes of registers",
            where=report.diagram.source,
            hint="try smaller tiles with --tile, or drop --strict",
        )
    with phase("writing the files"):
        write_outputs(report, out_dir, tuple(emit))


def _compile_job(job: tuple) -> CompileReport:
    spec, hardware, arch, sizes, tiles, use_cache, use_tuned = job
    return compile_spec(
        spec, hardware, arch=arch, sizes=sizes, tiles=tiles, use_cache=use_cache,
        use_tuned=use_tuned,
    )  # fmt: skip


def _pool_context() -> Any:
    """Worker processes start by spawning when CUDA or torch is loaded here: a fork after
    their initialisation hangs or crashes; otherwise the platform default."""
    import multiprocessing
    import sys

    if any(name in sys.modules for name in ("cupy", "torch")):
        return multiprocessing.get_context("spawn")
    return None


def _compile_parallel(
    jobs: list[tuple], workers: int
) -> tuple[list[CompileReport], list[SpecFailure]]:
    """Compile in worker processes; "compiling n/N" on a terminal, silence in CI. Ctrl-C
    cancels every queued job and stops the workers."""
    from ncdc.output import progress

    results: dict[int, CompileReport] = {}
    failures: list[SpecFailure] = []
    pool = ProcessPoolExecutor(
        max_workers=min(len(jobs), workers), mp_context=_pool_context(), initializer=_worker_init
    )
    try:
        with phase("compiling"):
            progress(f"compiling 0/{len(jobs)} specs")
            futures = {pool.submit(_compile_job, job): i for i, job in enumerate(jobs)}
            for done, future in enumerate(as_completed(futures), 1):
                i = futures[future]
                try:
                    results[i] = future.result()
                except NcdcError as e:
                    failures.append(SpecFailure(jobs[i][0], e))
                progress(f"compiling {done}/{len(jobs)} specs")
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown()
    return [results[i] for i in sorted(results)], failures


def _worker_init() -> None:
    """In a worker: SIGTERM ends it at once, even inside NVRTC (the parent's handler would
    wait for the compile to return); Ctrl-C is the parent's to handle."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the workers now (on Ctrl-C or SIGTERM)."""
    processes = list(getattr(pool, "_processes", {}).values())
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    if wakeup is not None:
        _quiet_wakeup(wakeup)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=1.0)
    # The pool's manager thread closes its wake-up pipe as it ends; at interpreter exit,
    # concurrent.futures wakes every manager thread through that pipe, and a wake-up racing
    # the close raised "Bad file descriptor" in an exit hook (a traceback after Ctrl-C). Let
    # the thread end first, so the hook finds the pipe closed and skips it.
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        with contextlib.suppress(Exception):
            manager.join(timeout=5.0)
        if manager.is_alive():
            # still ending on a loaded machine: take its wake-up off the exit hook's list,
            # or the hook may write to the pipe as the thread closes it (the interpreter
            # still waits for the thread at exit)
            from concurrent.futures import process as futures_process

            with contextlib.suppress(Exception):
                futures_process._threads_wakeups.pop(manager, None)  # type: ignore[attr-defined]


def _quiet_wakeup(wakeup: Any) -> None:
    """A stopped pool's wake-up of its manager thread, made silent where the pipe is closed
    under it: concurrent.futures checks the pipe open, then writes, while the manager thread
    may close it in between (the exit hook takes no lock), and the write's "Bad file
    descriptor" printed a traceback after Ctrl-C on a loaded machine. Waking a pool that is
    stopped does nothing, so an error there is dropped."""
    send = wakeup.wakeup

    def quiet() -> None:
        with contextlib.suppress(OSError, ValueError):
            send()

    wakeup.wakeup = quiet
