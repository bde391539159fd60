"""Which architecture to build for and which profile to plan with (ncdc.backends.targets)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import support
from tests.support import ncdc


def test_fp8_on_an_arch_without_fp8_tensor_cores_is_one_line(tmp_path):
    result = ncdc("compile", "diagrams/fp8_matmul.yaml", "--arch", "sm_80", "-o", str(tmp_path))
    assert result.returncode == 2
    assert "fp8_e4m3 on tensor cores, which sm_80 lacks" in result.stderr
    assert list(tmp_path.iterdir()) == []


def _ncdc(*args: str) -> subprocess.CompletedProcess:
    root = support.DIAGRAMS.parent
    return subprocess.run([sys.executable, "-m", "ncdc", *args], capture_output=True,
                          text=True, cwd=root)  # fmt: skip


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("arch, profile", [("sm_80", "a100"), ("sm_89", "l40s")])
def test_arch_alone_plans_for_its_profile(tmp_path: Path, arch: str, profile: str) -> None:
    # --arch alone plans for that arch's own profile, says so in one line, and compiles
    result = _ncdc("compile", "diagrams/attention.yaml", "--set", "d=256", "--arch", arch,
                   "-o", str(tmp_path), "--format", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"planning for the {profile} profile of {arch}" in result.stderr
    report = json.loads(result.stdout)
    assert report["hardware"] == profile
    # naming another profile is the user's choice, refused in one line where it cannot run
    # (h200's plan of d = 256 fits sm_80's SMEM, not sm_89's; a 64-key tile fits neither)
    refused = _ncdc("compile", "diagrams/attention.yaml", "--set", "d=256", "--arch", arch,
                    "--hardware", "h200", "--tile", "x=64", "-o", str(tmp_path / "h"))  # fmt: skip
    assert refused.returncode == 2 and f"--hardware {profile}" in refused.stderr
