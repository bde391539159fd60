"""ncdc.backends.exports (`ncdc compile --emit c`): the C export compiles warning-free as C11
and its header as C++, links with no CUDA library, and at a call asks a driver (a fake one,
tests/backends/fake_libcuda.c, that records each call) for exactly the launches the
compiled `.json` describes: the cubin loaded once, the shared-memory opt-in, every tensor
map encoded over its buffer with CUTLASS's driver workaround, scalars, grids and the
stream. The torch export runs the same check in tests/test_torch.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import ncdc
from ncdc.backends import exports, nvrtc
from ncdc.errors import SpecError, UsageError
from ncdc.language.load import load_diagram
from tests import support
from tests.backends import fakecuda

pytestmark = [
    pytest.mark.skipif(not nvrtc.available(), reason="compiling needs NVRTC"),
    pytest.mark.skipif(fakecuda.compiler() is None, reason="needs a C compiler"),
]

# a Hopper kernel (tensor maps, > 48 KiB of shared memory), two kernels with an
# intermediate and split-k partials in the workspace, and a scatter-add's accumulator and
# status word (set to zero at every call)
CASES = {
    "attention_fp8": (support.DIAGRAMS / "attention_fp8.yaml", {"b": 1, "h": 2, "q": 70, "x": 70}),
    "multi_mlp_two_gemms": (support.SPECS / "multi_mlp_two_gemms.yaml", {"m": 24}),
    "scatter_add_odd": (support.SPECS / "scatter_add_odd.yaml", {}),
}

MAIN = r"""
#include <stdio.h>
#include "@NAME@.h"
int main(void) {
    for (int call = 0; call < 2; call++) {
        CUresult s = ncdc_@NAME@((CUstream)@STREAM@, @ARGS@, @WORKSPACE@);
        if (s != CUDA_SUCCESS) { printf("error %d\n", (int)s); return 1; }
    }
    printf("ok %zu\n", (size_t)NCDC_@UPPER@_WORKSPACE_BYTES);
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return fakecuda.build_driver(tmp_path_factory.mktemp("driver"))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("version", [13000, 13020])
def test_the_c_export_launches_what_the_json_describes(tmp_path, driver, name, version) -> None:
    spec, sizes = CASES[name]
    out = tmp_path / "out"
    ncdc.compile(str(spec), out=out, sizes=sizes, emit=["c"])
    meta = fakecuda.read_meta(out, name)
    diagram = load_diagram(spec, meta["axes"])
    given = fakecuda.addresses(meta, diagram)
    args = ", ".join(f"(CUdeviceptr){given[n]}ull" for n in given)
    (out / "main.c").write_text(
        MAIN.replace("@NAME@", name).replace("@UPPER@", name.upper()).replace("@ARGS@", args)
        .replace("@STREAM@", str(fakecuda.STREAM)).replace("@WORKSPACE@", str(fakecuda.WORKSPACE))
    )  # fmt: skip
    include = f"-I{fakecuda.cuda_include()}"
    cc = fakecuda.compiler()
    build = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", include, "-I", str(out),
         str(out / f"{name}.c"), str(out / "main.c"), "-o", str(out / "main"), "-ldl", "-lpthread"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    cxx = subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", include, "-fsyntax-only",
                          "-x", "c++", str(out / f"{name}.h")], capture_output=True, text=True)  # fmt: skip
    assert cxx.returncode == 0, cxx.stderr
    log = tmp_path / "driver.log"
    ran = subprocess.run([str(out / "main")], capture_output=True, text=True,
                         env=fakecuda.environment(driver, log, meta, version))  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.startswith("ok "), (ran.stdout, ran.stderr)
    workspace = int(ran.stdout.split()[1])
    assert workspace == sum(
        -(-w["values"] * {"fp32": 4}.get(w["dtype"], 2) // 256) * 256 for w in meta["workspace"]
    ) + sum(-(-diagram.size(diagram.tensor(t)) * 2 // 256) * 256
            for t in ("H",) if name == "multi_mlp_two_gemms")  # fmt: skip
    fakecuda.check_log(log, meta, given, workspace, version, calls=2)
    entries = [line for line in log.read_text().splitlines() if line.startswith("entry ")]
    assert entries and all(line.endswith(" 12000 0") for line in entries)


def test_no_driver_is_an_error_code_not_a_crash(tmp_path) -> None:
    out = tmp_path / "out"
    ncdc.compile(support.SOFTMAX, out=out, sizes={"m": 3}, emit=["c"])
    (out / "main.c").write_text(
        '#include <stdio.h>\n#include "softmax.h"\nint main(void) {\n'
        '  printf("%d\\n", (int)ncdc_softmax(0, 0x1000, 0x2000, 0));\n  return 0;\n}\n'
    )
    subprocess.run([fakecuda.compiler(), "-std=c11", f"-I{fakecuda.cuda_include()}", "-I", str(out),
                    str(out / "softmax.c"), str(out / "main.c"), "-o", str(out / "main"), "-ldl",
                    "-lpthread"], check=True)  # fmt: skip
    ran = subprocess.run([str(out / "main")], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": str(tmp_path / "nowhere"), "PATH": "/usr/bin"})  # fmt: skip
    # where the machine has a real libcuda, the fake softmax pointers fail differently
    assert ran.returncode == 0 and int(ran.stdout) != 0


@pytest.mark.parametrize("word", ["lambda", "torch"])
def test_names_the_generated_code_cannot_hold_are_refused(tmp_path, word) -> None:
    # C and C++ keywords are refused by the spec's own checks; these pass them
    text = support.renamed_text(support.DIAGRAMS / "softmax.yaml", {"X": word})
    with pytest.raises(SpecError, match=f"'{word}' is a word of C, C\\+\\+ or Python"):
        ncdc.compile(text, out=tmp_path, emit=["torch"])
    assert list(tmp_path.iterdir()) == []  # nothing of the set written


def test_an_export_never_replaces_a_users_file(tmp_path) -> None:
    mine = tmp_path / "softmax.h"
    mine.write_text("// my own header\n")
    with pytest.raises(UsageError, match="was not written by ncdc"):
        ncdc.compile(support.SOFTMAX, out=tmp_path, emit=["c"])
    assert mine.read_text() == "// my own header\n"
    assert not (tmp_path / "softmax.cu").exists()  # nothing of the set written
    mine.unlink()
    ncdc.compile(support.SOFTMAX, out=tmp_path, emit=["c"])
    ncdc.compile(support.SOFTMAX, out=tmp_path, emit=["c"])  # its own files: replaced
    assert exports.is_generated(tmp_path / "softmax.h")


def test_unknown_exports_are_one_line(tmp_path) -> None:
    result = support.ncdc("compile", support.SOFTMAX, "-o", str(tmp_path), "--emit", "rust")
    support.assert_error(result, 2, contains="unknown export 'rust'")


def test_compile_emit_says_how_to_build_the_c_export(tmp_path) -> None:
    result = support.ncdc("compile", support.SOFTMAX, "-o", str(tmp_path), "--emit", "c",
                          "--emit", "torch", "--format", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        f"cc -c {tmp_path / 'softmax'}.c -I " in result.stderr and "-ldl -lpthread" in result.stderr
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "softmax.c",
        "softmax.cu",
        "softmax.cubin",
        "softmax.h",
        "softmax.json",
        "softmax.py",
    ]


def test_includes_names_the_folders_a_cu_and_the_c_export_are_built_with() -> None:
    result = support.ncdc("includes", "--format", "json")
    assert result.returncode == 0, result.stderr
    folders = json.loads(result.stdout)
    assert (Path(folders["ncdc"]) / "ncdc_runtime.cuh").is_file()
    assert (Path(folders["cuda"]) / "cuda.h").is_file()
    flags = support.ncdc("includes", "--flags").stdout.split()
    assert flags == [f"-I{folders['ncdc']}", f"-I{folders['cuda']}"]


CONTEXTS = """#include <stdio.h>
#include <stdlib.h>
#include "softmax.h"
int main(void) {
    /* context 1, twice; context 2 (another context on the device); 1 again; then none */
    const char *order[] = {"1", "1", "2", "1"};
    for (int i = 0; i < 4; i++) {
        setenv("FAKE_CUDA_CONTEXT", order[i], 1);
        printf("%d ", (int)ncdc_softmax(0, 0x1000, 0x2000, 0));
    }
    printf("\\n");
    return 0;
}
"""


def test_the_c_export_loads_its_cubin_once_per_context(tmp_path, driver) -> None:
    """Functions of one context are not launched in another (a context of the app's own,
    or one made again after a reset): the cubin is loaded in each context once; with no
    context current the call is CUDA_ERROR_INVALID_CONTEXT, not a launch."""
    out = tmp_path / "out"
    ncdc.compile(support.SOFTMAX, out=out, sizes={"m": 3}, emit=["c"])
    (out / "main.c").write_text(CONTEXTS)
    subprocess.run([fakecuda.compiler(), "-std=gnu11", f"-I{fakecuda.cuda_include()}", "-I",
                    str(out), str(out / "softmax.c"), str(out / "main.c"), "-o", str(out / "main"),
                    "-ldl", "-lpthread"], check=True)  # fmt: skip
    meta = fakecuda.read_meta(out, "softmax")
    log = tmp_path / "driver.log"
    env = fakecuda.environment(driver, log, meta)
    ran = subprocess.run([str(out / "main")], capture_output=True, text=True, env=env)
    assert ran.returncode == 0 and ran.stdout.split() == ["0"] * 4, (ran.stdout, ran.stderr)
    assert log.read_text().splitlines().count("load elf") == 2  # contexts 1 and 2
    log.unlink()
    none = subprocess.run([str(out / "main")], capture_output=True, text=True,
                          env={**env, "FAKE_CUDA_NO_CONTEXT": "1"})  # fmt: skip
    assert none.stdout.split() == ["201"] * 4  # CUDA_ERROR_INVALID_CONTEXT
    assert "load elf" not in log.read_text()


def test_a_fifo_where_an_export_goes_is_refused_without_hanging(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "softmax.h")
    with pytest.raises(UsageError, match="was not written by ncdc"):
        ncdc.compile(support.SOFTMAX, out=out, sizes={"m": 3}, emit=["c"])
