"""The command-line contract other tools and CI rely on (DESIGN.md, "Command line").

Exit codes: 0 ok, 1 a check failed, 2 bad input or usage, 3 compile error, 4 no GPU where
one is needed. Every error is one line on stderr starting with `error:`, no traceback
(unless `--debug`), and nothing on stdout. Data goes to stdout, messages to stderr.
`ncdc compile -o DIR` never overwrites a file in DIR that ncdc did not write.

Every case runs the real `ncdc` in a subprocess, as a script or CI would.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import MATMUL, ROOT, SOFTMAX, assert_error, ncdc, ncdc_version


def commands() -> set[str]:
    from ncdc.cli.main import app

    return {c.name or c.callback.__name__ for c in app.registered_commands}  # type: ignore[union-attr]


def needs(command: str) -> None:
    assert command in commands(), f"`ncdc {command}` is part of the command-line contract"


# --------------------------------------------------------------------------------------
# 0: success, data on stdout


@pytest.mark.parametrize(
    "args",
    [
        ("show", SOFTMAX),
        ("show", SOFTMAX, "--format", "json"),
        ("cost", MATMUL),
        ("cost", MATMUL, "--format", "json"),
        ("hardware",),
        ("hardware", "h200", "--format", "json"),
    ],
    ids=lambda a: "-".join(Path(x).stem if x.endswith(".yaml") else x for x in a),
)
def test_ok_prints_data_on_stdout(args):
    needs(args[0])
    result = ncdc(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "error" not in result.stderr
    if "json" in args:
        json.loads(result.stdout)  # nothing but the data on stdout


def test_check_prints_messages_on_stderr_only():
    result = ncdc("check", str(ROOT / "diagrams"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().endswith("specs valid")


def test_version():
    result = ncdc("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("ncdc ")


# --------------------------------------------------------------------------------------
# 1: a check that ran and failed


def test_check_baseline_regression_exits_1(tmp_path):
    needs("check")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        json.dumps(
            {
                "format": "ncdc.baseline/1",
                "ncdc_version": ncdc_version(),
                "hardware": ["h200"],
                "arch": ["sm_90a"],
                "diagrams": {"matmul": {"predicted_time_s": 1e-12, "hbm_bytes": 1}},
            }
        )
    )
    result = ncdc("check", MATMUL, "--baseline", str(baseline))
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "matmul" in result.stderr and "grew" in result.stderr


# --------------------------------------------------------------------------------------
# 2: bad input or usage


BAD_INPUT = {
    "unknown_option": (("show", SOFTMAX, "--bogus"), "--bogus"),
    "unknown_command": (("frobnicate",), "frobnicate"),
    "missing_argument": (("show",), ""),
    "missing_file": (("show", "no/such/spec.yaml"), "no such file"),
    "directory_as_spec": (("show", str(ROOT / "diagrams")), ""),
    "set_zero": (("show", SOFTMAX, "--set", "m=0"), "--set"),
    "set_not_a_number": (("show", SOFTMAX, "--set", "m=big"), "--set"),
    "set_no_equals": (("show", SOFTMAX, "--set", "m"), "--set"),
    "set_unknown_axis": (("show", SOFTMAX, "--set", "zz=4"), "zz"),
    "set_too_big": (("cost", SOFTMAX, "--set", "m=2147483648"), "--set"),
    "tile_bad": (("cost", MATMUL, "--tile", "m=-1"), "--tile"),
    "tile_unknown_axis": (("cost", MATMUL, "--tile", "zz=64"), "zz"),
    "hw_bad": (("show", SOFTMAX, "--hw", "nonsense"), ""),
    "hw_unknown_level": (("show", SOFTMAX, "--hw", "dram.capacity=1"), ""),
    "hw_bad_value": (("show", SOFTMAX, "--hw", "smem.capacity=lots"), ""),
    "hardware_unknown": (("show", SOFTMAX, "--hardware", "tpu9000"), "tpu9000"),
    "hardware_cmd_unknown": (("hardware", "tpu9000"), "tpu9000"),
    "format_unknown": (("show", SOFTMAX, "--format", "xml"), "xml"),
    "cost_format_unknown": (("cost", SOFTMAX, "--format", "yaml"), "yaml"),
    "check_missing": (("check", "no/such/dir"), ""),
    "backend_unknown": (("run", SOFTMAX, "--backend", "tpu"), "tpu"),
    "arch_unknown": (("compile", SOFTMAX, "--arch", "sm_12"), "sm_12"),
    "sanitize_unknown": (("run", SOFTMAX, "--sanitize", "thread"), ""),
    "seed_negative": (("run", SOFTMAX, "--seed", "-1"), "--seed"),
    "tolerance_word": (("check", MATMUL, "--baseline", "b.json", "--tolerance", "abc"), "abc"),
    "tolerance_bare": (("check", MATMUL, "--baseline", "b.json", "--tolerance", "5"), "'5'"),
    "tolerance_nan": (("check", MATMUL, "--baseline", "b.json", "--tolerance", "nan%"), "nan"),
    "tolerance_negative": (("check", MATMUL, "--baseline", "b.json", "--tolerance", "-1%"), "-1"),
    "baseline_missing": (("check", MATMUL, "--baseline", "no-such.json"), "no-such.json"),
    "out_unwritable": (("compile", SOFTMAX, "--arch", "sm_90a", "-o", "/proc/ncdc-out"), "/proc"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_exits_2_with_one_line(case, tmp_path):
    args, contains = BAD_INPUT[case]
    needs(args[0]) if args[0] != "frobnicate" else None
    if args[0] == "compile" and "-o" not in args:
        args = (*args, "-o", str(tmp_path))
    assert_error(ncdc(*args, cwd=tmp_path), 2, contains=contains)


def test_bad_spec_names_file_line_and_path(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(Path(SOFTMAX).read_text().replace("dtype: bf16", "dtype: bfloat16"))
    line = assert_error(ncdc("show", str(spec)), 2)
    assert "bad.yaml:" in line and "inputs.X.dtype" in line and "bfloat16" in line


def test_check_names_every_bad_spec(tmp_path):
    (tmp_path / "good.yaml").write_text(Path(SOFTMAX).read_text())
    (tmp_path / "a.yaml").write_text("ncdc: 1\n")
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe")
    result = ncdc("check", str(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    errors = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 2 and "Traceback" not in result.stderr
    assert "1 of 3 specs valid" in result.stderr


def test_debug_shows_the_traceback():
    result = ncdc("--debug", "show", "no/such/spec.yaml")
    assert result.returncode == 2  # the contract's code, with the traceback
    assert "Traceback" in result.stderr and "SpecError" in result.stderr
    after = ncdc("show", "no/such/spec.yaml", "--debug")  # accepted anywhere on the line
    assert "Traceback" in after.stderr


# --------------------------------------------------------------------------------------
# Tensors past 2**31 values: planned (with the sizes it was given) or one clear line.


@pytest.mark.parametrize(
    "sets",
    [
        ("m=65536", "n=65536"),  # C has 2**32 values
        ("m=2147483647", "n=2147483647", "k=2147483647"),
        ("m=1", "n=1", "k=2147483647"),
    ],
)
def test_cost_with_tensors_past_2_31_values(sets):
    needs("cost")
    args = [x for s in sets for x in ("--set", s)]
    result = ncdc("cost", MATMUL, *args, "--format", "json")
    assert "Traceback" not in result.stderr
    if result.returncode == 0:
        data = json.loads(result.stdout)
        assert data
    else:
        assert_error(result, 2)


def _nvrtc_available() -> bool:
    try:
        from ncdc.backends.nvrtc import nvrtc_version  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.slow
def test_compile_with_a_tensor_past_2_31_values(tmp_path):
    needs("compile")
    result = ncdc(
        "compile", MATMUL, "--set", "m=65536", "--set", "n=65536", "-o", str(tmp_path),
        "--arch", "sm_90a",
    )  # fmt: skip
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode != 0:
        assert_error(result, result.returncode)
        assert result.returncode in (2, 3)


# --------------------------------------------------------------------------------------
# 3: compile errors, 4: no GPU


def _path_without_compilers(tmp_path: Path) -> str:
    """A PATH with python's folder only when it holds no C++ compiler, else an empty one."""
    folder = Path(sys.executable).parent
    if any((folder / c).exists() for c in ("g++", "c++", "clang++")):
        folder = tmp_path / "bin"
        folder.mkdir()
    return str(folder)


@pytest.mark.parametrize("how", ["no_compiler", "failing_compiler"])
def test_cpu_backend_without_a_working_compiler_exits_3(how, tmp_path):
    needs("run")
    if how == "no_compiler":
        env = {"PATH": _path_without_compilers(tmp_path), "CXX": "/nonexistent/g++"}
    else:
        env = {"CXX": shutil.which("false") or "/bin/false"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # no cached build to fall back on
    env["NCDC_CACHE"] = str(tmp_path / "cache")
    result = ncdc("run", SOFTMAX, "--set", "m=4", "--set", "n=64", "--backend", "cpu", env=env)
    assert_error(result, 3)


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.parametrize("command", ["run", "bench", "tune"])
def test_gpu_commands_without_a_gpu_exit_4(command):
    needs(command)
    if _has_gpu():
        pytest.skip("this machine has a GPU")
    args = [command, SOFTMAX, "--set", "m=4", "--set", "n=64"]
    if command == "run":
        args += ["--backend", "cuda"]
    assert_error(ncdc(*args), 4)


# --------------------------------------------------------------------------------------
# Nothing the user had is overwritten


@pytest.mark.parametrize("suffix", [".cu", ".json", ".cubin"])
def test_compile_never_overwrites_a_foreign_file(tmp_path, suffix):
    needs("compile")
    foreign = tmp_path / f"softmax{suffix}"
    foreign.write_bytes(b"my own work\n")
    result = ncdc("compile", SOFTMAX, "-o", str(tmp_path), "--arch", "sm_90a")
    assert_error(result, 2, contains="not written by ncdc")
    assert foreign.read_bytes() == b"my own work\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [foreign.name]


def test_compile_rewrites_its_own_files(tmp_path):
    needs("compile")
    first = ncdc("compile", SOFTMAX, "-o", str(tmp_path), "--arch", "sm_90a")
    assert first.returncode == 0, first.stderr
    again = ncdc("compile", SOFTMAX, "-o", str(tmp_path), "--arch", "sm_90a")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "softmax.cu").read_bytes().startswith(b"// Generated by ncdc")


def test_grad_writes_a_pair_that_checks_and_refuses_to_overwrite(tmp_path) -> None:
    rmsnorm = str(ROOT / "diagrams" / "rmsnorm.yaml")
    out = tmp_path / "pair"
    first = ncdc("grad", rmsnorm, "-o", str(out), "--set", "m=64")
    assert first.returncode == 0, first.stderr
    assert "chosen" in first.stdout
    assert ncdc("check", str(out)).returncode == 0
    again = ncdc("grad", rmsnorm, "-o", str(out))
    assert_error(again, 2, contains="does not overwrite files")
    assert_error(ncdc("grad", rmsnorm), 2, contains="-o DIR")
    refused = ncdc("grad", str(ROOT / "diagrams" / "int8_quantize.yaml"), "--cost")
    assert_error(refused, 2, contains="cannot differentiate")


def test_grad_deterministic_writes_a_backward_that_sums_in_one_order(tmp_path) -> None:
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.plan.search import plan_diagram

    causal = str(ROOT / "diagrams" / "attention_causal.yaml")
    sizes = ("--set", "q=256", "--set", "x=256")
    result = ncdc("grad", causal, "-o", str(tmp_path), "--deterministic", *sizes)
    assert result.returncode == 0, result.stderr
    backward = tmp_path / "attention_causal_bwd.yaml"
    assert "deterministic: true" in backward.read_text()
    assert ncdc("check", str(backward)).returncode == 0
    plan = plan_diagram(load_diagram(backward), load_hardware("h200"))
    fused = next(k for k in plan.kernels if k.family.name == "attention_backward")
    assert fused.candidate.param("dq_pass") == 1 and not fused.candidate.accumulates
