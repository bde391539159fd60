"""Jobs that may hang or crash, each in its own process with its own timeout.

A kernel that faults poisons its CUDA context and one that never returns holds its process
forever: neither must take the jobs after it along. `run_isolated` runs one job (a JSON
object) in a fresh child process of its own session, waits at most `timeout_s`, and kills
the child's whole process group when it does not finish. The child reports the stage it
is in (`Stages.enter`) and its result (`Stages.finish`) through files, so a hang or a crash
still says where it happened. `run_many` runs a list of jobs over a few slots at once (one
per GPU: each slot's environment names its device) and hands each outcome over as it
arrives.

    >>> job = {"name": "x"}
    >>> outcome = run_isolated([sys.executable, "worker.py"], job, folder, 60)  # doctest: +SKIP
    >>> outcome.status, outcome.stage  # doctest: +SKIP
    ('timeout', 'run')
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncdc.files import write_atomic

JOB, STAGE, RESULT, LOG = "job.json", "stage", "result.json", "output.txt"
LOG_TAIL = 400  # characters of a failed child's output kept in its outcome


@dataclass(frozen=True)
class Outcome:
    """How one isolated job ended. `status`: "ok" (it wrote a result), "crashed" (it exited
    without one: a signal, an exit code, an interpreter that died), or "timeout" (killed
    after `timeout_s`). `stage` is the last stage the child entered ("" when it entered
    none); `detail` says what ended it (the signal, the exit code, the output's tail)."""

    job: Mapping[str, Any]
    status: str
    stage: str
    seconds: float
    result: Mapping[str, Any] | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "stage": self.stage,
            "seconds": round(self.seconds, 2),
            "detail": self.detail,
            "result": self.result,
        }


class Stages:
    """The child's side: `enter(name)` before each stage, `finish(result)` at the end."""

    def __init__(self, folder: Path):
        self.folder = folder

    def job(self) -> dict[str, Any]:
        return dict(json.loads((self.folder / JOB).read_text(encoding="utf-8")))

    def enter(self, name: str) -> None:
        write_atomic(self.folder / STAGE, name.encode())

    def finish(self, result: Mapping[str, Any]) -> None:
        write_atomic(self.folder / RESULT, json.dumps(result, default=str).encode())


def run_isolated(
    command: Sequence[str], job: Mapping[str, Any], folder: Path, timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> Outcome:  # fmt: skip
    """Run `command FOLDER` on `job` (written to FOLDER/job.json) in a new session; the
    child reads its job and reports through `Stages(FOLDER)`. Killed, with every process
    it started, after `timeout_s` seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (STAGE, RESULT):
        (folder / name).unlink(missing_ok=True)
    write_atomic(folder / JOB, json.dumps(dict(job), default=str).encode())
    start = time.monotonic()
    with open(folder / LOG, "wb") as log:
        proc = subprocess.Popen(
            [*command, str(folder)], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
    seconds = time.monotonic() - start
    stage = _read(folder / STAGE)
    result = _result(folder)
    if rc is None:
        return Outcome(job, "timeout", stage, seconds, result, f"no end within {timeout_s:g} s")
    if rc == 0 and result is not None:
        return Outcome(job, "ok", stage, seconds, result)
    return Outcome(job, "crashed", stage, seconds, result, _ended(rc, folder))


def run_many(
    command: Sequence[str], jobs: Sequence[Mapping[str, Any]], folder: Path,
    timeout_s: Callable[[Mapping[str, Any]], float],
    slots: Sequence[Mapping[str, str]] = ({},),
) -> Iterator[Outcome]:  # fmt: skip
    """Every job of `jobs` isolated (FOLDER/<index>), at most one per slot at a time (a
    slot is the environment its jobs run in, e.g. one GPU's CUDA_VISIBLE_DEVICES), each
    outcome yielded as it arrives."""
    free = list(range(len(slots)))
    pending = list(enumerate(jobs))
    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        running: dict[Any, int] = {}

        def start() -> None:
            while free and pending:
                i, job = pending.pop(0)
                slot = free.pop(0)
                where = folder / f"{i:03d}"
                future = pool.submit(run_isolated, command, job, where, timeout_s(job), slots[slot])
                running[future] = slot

        start()
        while running:
            done = next(as_completed(running))
            free.append(running.pop(done))
            start()
            yield done.result()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (its own session: nothing else is in it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


def _result(folder: Path) -> dict[str, Any] | None:
    text = _read(folder / RESULT)
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _ended(rc: int, folder: Path) -> str:
    """What ended a child: its signal or exit code, and the tail of its output."""
    how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
    tail = _read(folder / LOG)[-LOG_TAIL:]
    return f"{how}: {tail}" if tail else how
