"""Conventions users know from ruff, pytest and the hf CLI: -h, -V, -q/-v, -j, usage on
stdout with no arguments, `ncdc cache info|clear`, worker counts from affinity and cgroup."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ncdc import __version__
from ncdc.system import cgroup_cpus, default_jobs
from tests.support import SOFTMAX, ncdc


def test_no_arguments_prints_usage_on_stdout():
    result = ncdc()
    assert result.returncode == 0
    assert result.stdout.startswith("Usage: ncdc") and result.stderr == ""


def test_short_help_and_version():
    assert ncdc("-h").stdout == ncdc("--help").stdout
    assert "Usage: ncdc compile" in ncdc("compile", "-h").stdout
    assert ncdc("-V").stdout.strip() == f"ncdc {__version__}"


def test_quiet_hides_notes_but_not_errors(tmp_path):
    loud = ncdc("check", SOFTMAX)
    assert "1 of 1 specs valid" in loud.stderr
    quiet = ncdc("-q", "check", SOFTMAX)
    assert quiet.returncode == 0 and quiet.stderr == ""
    bad = tmp_path / "bad.yaml"
    bad.write_text("ncdc: 1\n")
    assert "error: " in ncdc("-q", "check", str(bad)).stderr


def test_cache_info_and_clear(tmp_path):
    env = {"NCDC_CACHE": str(tmp_path / "c")}
    ran = ncdc("run", SOFTMAX, "--set", "m=2", "--set", "n=33", env=env)
    assert ran.returncode == 0, ran.stderr
    info = json.loads(ncdc("cache", "info", "--format", "json", env=env).stdout)
    assert info["safe"] and info["key"] and info["sections"]["emu"]["entries"] >= 1
    cleared = ncdc("cache", "clear", "--all", env=env)
    assert cleared.returncode == 0 and "removed" in cleared.stderr
    after = json.loads(ncdc("cache", "info", "--format", "json", env=env).stdout)
    assert after["sections"]["emu"]["entries"] == 0 and after["key"]


def test_cache_info_reports_an_unsafe_root(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    info = json.loads(
        ncdc("cache", "info", "--format", "json", env={"NCDC_CACHE": str(shared)}).stdout
    )
    assert not info["safe"] and "writable by others" in info["problem"]


def test_jobs_default_follows_affinity_and_quota(tmp_path):
    assert default_jobs() <= len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("50000 100000\n")
    assert cgroup_cpus(quota) == 1
    quota.write_text("max 100000\n")
    assert cgroup_cpus(quota) is None
    assert cgroup_cpus(Path("/no/such/file")) is None


def test_jobs_option_is_validated(tmp_path):
    result = ncdc("compile", SOFTMAX, "-j", "0", "-o", str(tmp_path))
    assert result.returncode == 2 and "-j" in result.stderr


def test_check_json_and_github_annotations(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(SOFTMAX).read_text().replace("dtype: bf16", "dtype: bfloat16", 1))
    assert bad.read_text() != Path(SOFTMAX).read_text()
    as_json = ncdc("check", SOFTMAX, str(bad), "--format", "json")
    assert as_json.returncode == 2
    data = json.loads(as_json.stdout)
    assert data["ok"] is False and data["valid"] == 1 and data["total"] == 2
    (entry,) = [s for s in data["specs"] if not s["ok"]]
    assert entry["path"] == str(bad) and entry["line"] == 7 and "bfloat16" in entry["error"]
    github = ncdc("check", SOFTMAX, str(bad), "--format", "github")
    assert github.returncode == 2
    (line,) = github.stdout.splitlines()
    assert line.startswith(f"::error file={bad},line=7::") and "bfloat16" in line
    assert ncdc("check", SOFTMAX, "--format", "github").stdout == ""
    assert ncdc("check", SOFTMAX, "--format", "xml").returncode == 2


def test_progress_shows_on_a_terminal_for_long_runs(monkeypatch):
    import io
    import time

    from rich.console import Console

    from ncdc import output
    from ncdc.verify import run

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80)
    monkeypatch.setattr(output, "stderr", lambda: console)
    with run._progress(1.0):  # estimated under 2 s: nothing
        time.sleep(0.2)
    assert buffer.getvalue() == ""
    with run._progress(5.0):
        time.sleep(0.3)
    assert "emulating on the CPU (estimated 5 s)" in buffer.getvalue()
    piped = Console(file=io.StringIO(), force_terminal=False)
    monkeypatch.setattr(output, "stderr", lambda: piped)
    with run._progress(50.0):
        pass
    assert piped.file.getvalue() == ""
