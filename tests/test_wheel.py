"""The wheel alone carries ncdc: built from the package sources, installed into a fresh
virtual environment, it runs `check`, `cost`, `compile`, `run --backend cpu` and `draw` from
a folder outside the checkout.

The fresh environment gets the wheel with `--no-deps`; its third-party dependencies (typer,
NumPy, the NVRTC wheels, ...) are linked in from the environment running the tests, leaving
out every trace of ncdc there (the editable install's finder, `.pth` files and metadata), so
a module or data file the wheel lacks fails here instead of being found in the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT
SPEC = ROOT / "diagrams" / "softmax.yaml"
SMALL = ["--set", "m=64", "--set", "n=256"]  # the CPU backend runs every GPU thread
DATA_SUFFIXES = (".py", ".j2", ".cuh", ".h", ".yaml", ".json")

if int(version("setuptools").split(".")[0]) < 77:
    pytest.skip(
        "building the wheel offline needs setuptools>=77 (pip install -e '.[dev]')",
        allow_module_level=True,
    )


def _package_files() -> set[str]:
    """Every file of the ncdc package in the source tree, as a path inside the wheel."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "ncdc").rglob("*")
        if p.is_file() and p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of what it is made of (nothing is written in the tree)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "ncdc", src / "ncdc", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(dist), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (built,) = dist.glob("ncdc-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel and links to ncdc's dependencies."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    fresh = _purelib(python)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not _leaks_ncdc(entry.name) and not (fresh / entry.name).exists():
            (fresh / entry.name).symlink_to(entry)
    return root


def _purelib(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(python), "-c", code]).stdout.strip())


def _leaks_ncdc(name: str) -> bool:
    """ncdc's own entries (package, metadata, editable finder) and `.pth` files, which
    could put the checkout on the path; pip is left out as the venv needs none."""
    return name.startswith(("ncdc", "__editable__", "pip")) or name.endswith(".pth")


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NCDC_CACHE"] = str(tmp / "cache")
    return env


def _run(cmd: list[str], cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_wheel_holds_every_module_and_data_file(wheel: Path):
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    missing = sorted(_package_files() - names)
    assert missing == []
    assert "ncdc/templates/include/ncdc_runtime.cuh" in names
    assert "ncdc/hardware/profiles/h200.yaml" in names


def test_installed_ncdc_is_the_wheel(venv: Path, tmp_path: Path):
    code = (
        "import ncdc, ncdc.families, ncdc.draw, ncdc.templates.include as inc; "
        "print(ncdc.__file__); print(inc.__file__)"
    )
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr
    for line in out.stdout.split():
        assert Path(line).resolve().is_relative_to(venv.resolve()), line


@pytest.mark.parametrize(
    "command",
    [
        ["check", "softmax.yaml"],
        ["cost", "softmax.yaml"],
        pytest.param(
            ["compile", "softmax.yaml", "-o", "out", "--emit", "c", "--emit", "torch"],
            marks=pytest.mark.skipif(
                importlib.util.find_spec("cuda") is None, reason="NVRTC wheels not installed"
            ),
        ),
        ["run", "softmax.yaml", "--backend", "cpu", *SMALL],
        ["draw", "softmax.yaml", "-o", "softmax.svg"],
    ],
    ids=lambda c: c[0],
)
def test_installed_command_runs_outside_the_checkout(venv: Path, tmp_path: Path, command):
    shutil.copy2(SPEC, tmp_path / SPEC.name)
    out = _run([str(venv / "bin" / "ncdc"), *command], cwd=tmp_path, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr


API = """
import ml_dtypes, numpy as np, ncdc
softmax = ncdc.load("softmax.yaml")
x = np.random.default_rng(0).standard_normal((3, 70)).astype(ml_dtypes.bfloat16)
y = softmax(x).astype(np.float64)
assert abs(y.sum(axis=1) - 1).max() < 0.02, y.sum(axis=1)
assert ncdc.cost("softmax.yaml")["spec"] == "softmax"
print("ok")
"""


def test_the_installed_api_calls_a_kernel_on_numpy_arrays(venv: Path, tmp_path: Path):
    shutil.copy2(SPEC, tmp_path / SPEC.name)
    out = _run([str(venv / "bin" / "python"), "-c", API], cwd=tmp_path, env=_env(tmp_path))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
