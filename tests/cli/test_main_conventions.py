"""Conventions users know from ruff, pytest and the hf CLI: -h, -V, -q/-v, -j, usage on
stdout with no arguments, `ncdc cache info|clear`, worker counts from affinity and cgroup."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ncdc import __version__
from ncdc.system import cgroup_cpus, default_jobs
from tests.support import SOFTMAX, assert_error, ncdc


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


def test_verbose_times_every_phase_of_a_run():
    result = ncdc("run", SOFTMAX, "--set", "m=4", "--set", "n=64", "-v", "--format", "json")
    assert result.returncode == 0, result.stderr
    (summary,) = [line for line in result.stderr.splitlines() if line.startswith("time: ")]
    for name in (
        "planning",
        "making the inputs",
        "computing the reference",
        "building the emulator",
        "running",
        "comparing",
        "start-up and output",
    ):
        assert f"{name} " in summary, summary  # fmt: skip
    data = json.loads(result.stdout)
    assert data["seconds"] >= data["kernel_seconds"] > 0
    quiet = ncdc("run", SOFTMAX, "--set", "m=4", "--set", "n=64")
    assert "time: " not in quiet.stderr and "s from planning to the check)" in quiet.stdout


def test_quiet_and_verbose_are_accepted_after_the_command():
    after = ncdc("check", SOFTMAX, "-q")
    assert after.returncode == 0 and after.stderr == ""
    verbose = ncdc("cost", SOFTMAX, "--verbose")
    assert verbose.returncode == 0 and "hardware h200 (built-in default)" in verbose.stderr
    assert ncdc("cost", SOFTMAX, "--", "-q").returncode == 2  # after --, an argument


def test_an_option_error_hints_the_commands_help():
    line = assert_error(ncdc("cost", SOFTMAX, "--bogus"), 2, contains="--bogus")
    assert line.endswith("(hint: ncdc cost --help)")
    line = assert_error(ncdc("cache", "info", "--bogus"), 2)
    assert line.endswith("(hint: ncdc cache info --help)")


def test_defaults_come_from_the_environment_then_the_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ncdc]\nhardware = "a100"\n')
    from_file = ncdc("-v", "cost", SOFTMAX, cwd=tmp_path)
    assert from_file.returncode == 0, from_file.stderr
    assert "softmax on a100" in from_file.stdout
    assert f"hardware a100 (from {tmp_path / 'pyproject.toml'} [tool.ncdc])" in from_file.stderr
    from_env = ncdc("cost", SOFTMAX, "-v", cwd=tmp_path, env={"NCDC_HARDWARE": "l40s"})
    assert "softmax on l40s" in from_env.stdout
    assert "hardware l40s (from NCDC_HARDWARE)" in from_env.stderr
    line = ncdc("cost", SOFTMAX, "--hardware", "h100", "-v", cwd=tmp_path).stderr
    assert "hardware h100 (from --hardware)" in line


def test_a_bad_default_is_one_line_naming_its_source(tmp_path):
    bad = ncdc("cost", SOFTMAX, env={"NCDC_HARDWARE": "h900"})
    assert_error(bad, 2, contains="NCDC_HARDWARE: unknown hardware 'h900'")
    assert_error(ncdc("cost", SOFTMAX, env={"NCDC_ARCH": "sm_99"}), 2, contains="NCDC_ARCH")
    (tmp_path / "pyproject.toml").write_text('[tool.ncdc]\nhardwear = "a100"\n')
    assert_error(ncdc("cost", SOFTMAX, cwd=tmp_path), 2, contains="unknown key 'hardwear'")


def test_shell_completion_is_on():
    script = ncdc("--show-completion", "bash")
    assert script.returncode == 0 and "_ncdc_completion" in script.stdout
    env = {"_NCDC_COMPLETE": "complete_bash", "COMP_WORDS": "ncdc co", "COMP_CWORD": "1"}
    assert ncdc(env=env).stdout.split() == ["cost", "compile"]


def test_compile_without_o_refuses_a_folder_of_other_files(tmp_path):
    (tmp_path / "README.md").write_text("my project\n")
    result = ncdc("compile", SOFTMAX, cwd=tmp_path)
    assert_error(result, 2, contains="the current folder holds files ncdc did not write")
    assert "-o DIR" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]
