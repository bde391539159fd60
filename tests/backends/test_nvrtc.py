"""NVRTC from the pip wheels: cubin for each arch, the ptxas resource report, one-line errors.

No GPU is needed; each compile takes well under a second.
"""

from __future__ import annotations

import sys

import pytest

from ncdc.backends import nvrtc
from ncdc.errors import EXIT_COMPILE_ERROR, CompileError, UsageError

# One warp computes a 16x8 tile with a bf16 tensor-core MMA (fragments loaded naively);
# the shared array and barrier make smem and barriers show up in the report.
MMA_BF16 = r"""
#include <cuda_bf16.h>
extern "C" __global__ void mma_bf16(const unsigned* a, const unsigned* b, float* c) {
    const unsigned t = threadIdx.x;
    unsigned a0 = a[4 * t], a1 = a[4 * t + 1], a2 = a[4 * t + 2], a3 = a[4 * t + 3];
    unsigned b0 = b[2 * t], b1 = b[2 * t + 1];
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    __shared__ float staged[256];
    staged[t] = d0;
    __syncthreads();
    c[4 * t] = staged[(t + 1) % 256];
    c[4 * t + 1] = d1;
    c[4 * t + 2] = d2;
    c[4 * t + 3] = __bfloat162float(__float2bfloat16(d3));
}
"""

# 64 live floats per thread against a cap of 32 registers (256 threads x 8 blocks on a
# 64K-register SM): ptxas has to spill.
SPILLS = r"""
extern "C" __global__ void __launch_bounds__(256, 8) spills(float* x) {
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = x[i * threadIdx.x];
    float s = 0.f;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) s += a[i] * a[j] * x[i + j];
    x[threadIdx.x] = s;
}
"""

TRIVIAL = 'extern "C" __global__ void trivial(float* x) { x[threadIdx.x] = 1.f; }\n'


def test_version_and_include_dirs():
    assert nvrtc.nvrtc_version().replace(".", "").isdigit()
    cuda, ncdc_headers = nvrtc.include_dirs()
    for header in ("cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h"):
        assert (cuda / header).is_file()
    assert ncdc_headers.parts[-3:] == ("ncdc", "templates", "include")


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
def test_mma_bf16_compiles_to_cubin(arch):
    module = nvrtc.compile_cuda(MMA_BF16, arch, name="mma_bf16.cu")
    assert module.cubin[:4] == b"\x7fELF"
    assert module.arch == arch
    assert module.nvrtc_version == nvrtc.nvrtc_version()
    assert f"for '{arch}'" in module.log
    res = module.resources["mma_bf16"]
    assert 10 <= res.registers <= 64
    assert (res.spill_stores_bytes, res.spill_loads_bytes, res.stack_bytes) == (0, 0, 0)
    assert res.static_smem_bytes == 256 * 4
    assert res.barriers == 1


def test_spills_are_reported():
    res = nvrtc.compile_cuda(SPILLS, "sm_90a").resources["spills"]
    assert res.registers <= 32
    assert res.spill_stores_bytes > 0
    assert res.spill_loads_bytes > 0
    assert res.stack_bytes > 0


def test_extra_options_are_passed():
    module = nvrtc.compile_cuda(TRIVIAL, "sm_80", options=["--use_fast_math", "-DTILE=4"])
    assert set(module.resources) == {"trivial"}


def test_parse_resources_of_a_real_log():
    # Shortened from an sm_80 compile; `helper` is a noinline device function whose
    # stack frame must not be charged to the kernel.
    log = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function '_Z4gemmPf' for 'sm_80'
ptxas info    : Function properties for _Z4gemmPf
ptxas         .     16 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads
ptxas info    : Function properties for helper
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 16 bytes cumulative stack size, \
49152 bytes smem, 368 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 4.060 ms
ptxas info    : Compiling entry function 'copy' for 'sm_80'
ptxas info    : Function properties for copy
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""
    res = nvrtc.parse_resources(log)
    assert res["_Z4gemmPf"] == nvrtc.KernelResources(
        name="_Z4gemmPf",
        registers=168,
        spill_stores_bytes=12,
        spill_loads_bytes=4,
        static_smem_bytes=49152,
        stack_bytes=16,
        barriers=1,
        cmem_bytes=376,
    )
    assert res["copy"].registers == 8
    assert res["copy"].static_smem_bytes == 0


def test_compile_error_is_one_line_pointing_at_the_template():
    source = 'extern "C" __global__ void k(float* x) {\n    x[0] = y;\n    int z = "a";\n}\n'
    with pytest.raises(CompileError) as caught:
        nvrtc.compile_cuda(
            source, "sm_80", name="gemm_bf16.cu", line_origin=lambda n: f"gemm.cu.j2:{n + 40}"
        )
    err = caught.value
    assert err.exit_code == EXIT_COMPILE_ERROR
    assert "\n" not in err.line()
    assert err.line().startswith('gemm_bf16.cu(2) from gemm.cu.j2:42: identifier "y" is undefined')
    assert "--debug" in err.line()
    assert "2 errors detected" in err.log


def test_error_in_a_header_is_not_mapped_to_the_template():
    source = '#line 7 "ncdc/mma.cuh"\n__device__ void f() { undefined_call(); }\n'
    with pytest.raises(CompileError) as caught:
        nvrtc.compile_cuda(source, "sm_80", name="k.cu", line_origin=lambda n: "k.cu.j2:1")
    assert caught.value.where == "ncdc/mma.cuh(7)"


def test_ptxas_error():
    source = 'extern "C" __global__ void k() { asm volatile("bad.instr;"); }\n'
    with pytest.raises(CompileError, match="ptxas") as caught:
        nvrtc.compile_cuda(source, "sm_89")
    assert "\n" not in caught.value.line()


def test_unknown_arch_lists_the_choices():
    with pytest.raises(UsageError) as caught:
        nvrtc.compile_cuda(TRIVIAL, "sm_70")
    assert "sm_70" in caught.value.line()
    assert "sm_80" in caught.value.line() and "sm_90a" in caught.value.line()


def test_missing_nvrtc_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    with pytest.raises(CompileError) as caught:
        nvrtc.compile_cuda(TRIVIAL, "sm_80")
    assert "NVRTC is not installed" in caught.value.line()
    assert "pip install 'ncdc[nvrtc]'" in caught.value.line()


def test_cuda_headers_fall_back_to_the_toolkit(tmp_path, monkeypatch):
    """Without the runtime wheel's headers, $CUDA_HOME/include (then $CUDA_PATH, then
    /usr/local/cuda) is used: the GPU machine has nvcc's headers but maybe not the wheel."""
    monkeypatch.setattr(nvrtc, "_wheel_include_dir", lambda: None)
    monkeypatch.setattr(nvrtc, "TOOLKIT_DEFAULT", tmp_path / "none")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert nvrtc.cuda_include_dir() is None
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_bf16.h").write_text("")
    monkeypatch.setenv("CUDA_PATH", str(toolkit))
    assert nvrtc.cuda_include_dir() == toolkit / "include"
    other = tmp_path / "home"
    (other / "include").mkdir(parents=True)
    (other / "include" / "cuda_bf16.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(other))  # CUDA_HOME is asked first
    assert nvrtc.cuda_include_dir() == other / "include"
    assert nvrtc.include_dirs()[0] == other / "include"


def test_nvrtc_own_cache_is_off_where_it_exists(monkeypatch):
    """NVRTC 12.9+ serves repeated programs from a cache of its own, and a hit skips ptxas's
    report; ncdc turns it off there and passes no option older NVRTCs would refuse."""
    for version, expected in (((12, 8), False), ((12, 9), True), ((13, 0), True)):
        monkeypatch.setattr(nvrtc, "_version_tuple", lambda v=version: v)
        assert (nvrtc.NO_CACHE_OPTION in nvrtc.compile_options("sm_90a")) is expected
    monkeypatch.undo()
    module = nvrtc.compile_cuda(TRIVIAL, "sm_90a")
    assert module.resources["trivial"].registers > 0


def test_a_kernel_without_its_report_is_refused(monkeypatch):
    """What a cache hit inside NVRTC looked like on an H200 (NVRTC 13.0): the cubin holds
    the kernel and the log says nothing of it. One error naming it, not a report
    missing a kernel that plan feedback would trip over later."""
    two = TRIVIAL + 'extern "C" __global__ void other(float* x) { x[0] = 2.f; }\n'
    assert nvrtc.cubin_kernels(nvrtc.compile_cuda(two, "sm_80").cubin) == {"trivial", "other"}
    real = nvrtc._program_log

    def without_other(nv, prog):
        return real(nv, prog).replace("entry function 'other'", "nothing")

    monkeypatch.setattr(nvrtc, "_program_log", without_other)
    with pytest.raises(CompileError, match="built other but reported no registers") as err:
        nvrtc.compile_cuda(two, "sm_80")
    assert "CUDA_CACHE_DISABLE=1" in (err.value.hint or "")
    assert nvrtc.cubin_kernels(b"not an ELF file") == set()
