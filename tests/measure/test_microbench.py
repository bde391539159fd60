"""`ncdc calibrate`'s microbenchmark kernels (ncdc/templates/include/ncdc_calibrate.cuh,
run by ncdc.measure.microbench on a GPU): each compiles with NVRTC for an Ampere and a
Hopper GPU, and its SASS holds the work it is timed for (nothing hoisted or removed)."""

from __future__ import annotations

import pytest

from ncdc.backends import sass
from ncdc.measure import microbench

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")


def _compiled(arch: str):
    from ncdc.backends.nvrtc import compile_cuda, ncdc_include_dir

    source = (ncdc_include_dir() / "ncdc_calibrate.cuh").read_text()
    return compile_cuda(source, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_kernel_compiles_without_spills(arch):
    module = _compiled(arch)
    kernels = {"read_passes", "write_only", "copy", "empty", "smem_reads", "sfu_exp2"}
    assert kernels | set(microbench.MMA_KINDS.values()) == set(module.resources)
    assert all(r.spill_stores_bytes == 0 for r in module.resources.values())


def test_the_timed_work_is_in_the_sass():
    if sass.find_tool("cuobjdump") is None or sass.find_tool("nvdisasm") is None:
        pytest.skip("the SASS tools are not installed")
    functions = sass.split_functions(sass.disassemble(_compiled("sm_90a").cubin))

    def count(kernel: str, opcode: str) -> int:
        text = next(t for f, t in functions.items() if kernel in f)
        return sum(i.opcode.startswith(opcode) for i in sass.parse_sass(text))

    # 4 accumulators x ITERS_UNROLL mma.sync per step, each one HMMA.16816 on sm_90
    per_step = microbench.CHAINS * microbench.UNROLL
    assert count("mma_bf16", "HMMA") % per_step == 0 and count("mma_bf16", "HMMA") >= per_step
    assert count("sfu_exp2", "MUFU") % per_step == 0 and count("sfu_exp2", "MUFU") > 0
    assert count("smem_reads", "LDS") % microbench.UNROLL == 0 and count("smem_reads", "LDS") > 0
