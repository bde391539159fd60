"""Isolated jobs (ncdc.measure.isolate): a child that hangs is killed at its timeout with
the processes it started, one that crashes is reported with its signal, and both name the
stage they were in; the jobs after them run as if nothing happened."""

from __future__ import annotations

import sys
from pathlib import Path

from ncdc.measure.isolate import run_isolated, run_many

# A child that behaves as its job says: reports its stages, then finishes, hangs (with a
# grandchild that would outlive a plain kill), crashes with SIGSEGV, or exits without a result.
CHILD = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
from ncdc.measure.isolate import Stages

stages = Stages(Path(sys.argv[1]))
job = stages.job()
stages.enter("compile")
stages.enter("run")
if job["do"] == "hang":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
elif job["do"] == "segfault":
    os.kill(os.getpid(), signal.SIGSEGV)
elif job["do"] == "exit":
    print("cudaErrorIllegalAddress: an illegal memory access was encountered")
    sys.exit(3)
stages.enter("bench")
stages.finish({"name": job["name"], "env": os.environ.get("SLOT", "")})
"""


def _command(tmp_path: Path) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return [sys.executable, str(script)]


def test_a_hang_is_killed_at_its_timeout_and_names_its_stage(tmp_path):
    out = run_isolated(_command(tmp_path), {"name": "h", "do": "hang"}, tmp_path / "h", 3.0)
    assert (out.status, out.stage, out.result) == ("timeout", "run", None)
    assert "no end within 3 s" in out.detail and not out.ok


def test_a_crash_names_its_signal_and_stage(tmp_path):
    out = run_isolated(_command(tmp_path), {"name": "s", "do": "segfault"}, tmp_path / "s", 60)
    assert (out.status, out.stage) == ("crashed", "run")
    assert out.detail.startswith("killed by SIGSEGV")
    out = run_isolated(_command(tmp_path), {"name": "e", "do": "exit"}, tmp_path / "e", 60)
    assert (out.status, out.stage) == ("crashed", "run")
    assert out.detail.startswith("exit code 3") and "illegal memory access" in out.detail


def test_the_jobs_after_a_fault_run_and_each_slot_has_its_environment(tmp_path):
    jobs = [
        {"name": "a", "do": "finish"},
        {"name": "b", "do": "hang"},
        {"name": "c", "do": "segfault"},
        {"name": "d", "do": "finish"},
        {"name": "e", "do": "finish"},
    ]
    slots = [{"SLOT": "0"}, {"SLOT": "1"}]
    outcomes = list(run_many(_command(tmp_path), jobs, tmp_path / "jobs", lambda j: 4.0, slots))
    by_name = {o.job["name"]: o for o in outcomes}
    assert sorted(by_name) == ["a", "b", "c", "d", "e"]
    assert [by_name[n].status for n in "abcde"] == ["ok", "timeout", "crashed", "ok", "ok"]
    assert {by_name[n].result["env"] for n in "ade"} <= {"0", "1"}
    assert by_name["d"].stage == "bench" and by_name["d"].to_dict()["result"]["name"] == "d"
