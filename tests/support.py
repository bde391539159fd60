"""What many test modules share: the repository's folders and the command line run as a
script or CI runs it (a subprocess of `python -m ncdc`), with its error contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "diagrams"
SPECS = ROOT / "tests" / "specs"
UNBUILDABLE = ROOT / "tests" / "unbuildable"
EMULATOR_KERNELS = ROOT / "tests" / "emulator_kernels"
GOLDEN = ROOT / "tests" / "golden"
SOFTMAX = str(DIAGRAMS / "softmax.yaml")
MATMUL = str(DIAGRAMS / "matmul.yaml")


def ncdc(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: int = 300):
    """`ncdc ARGS...` in a subprocess, at 200 columns, its output captured."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ncdc", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


def ncdc_version() -> str:
    from ncdc import __version__

    return __version__


def assert_error(result, code: int, *, contains: str = "") -> str:
    """Exit `code`, one `error:` line on stderr, no traceback, nothing on stdout."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == "", result.stdout
    assert contains in lines[0], lines[0]
    return lines[0]
