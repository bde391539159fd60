"""SASS analysis (ncdc.backends.sass): the main loop, the instruction mix and its bounds, checked on
a hand-written listing in cuobjdump's format, and on a real cubin where the tools exist."""

from __future__ import annotations

import pytest

from ncdc.backends import loop_bounds, sass
from ncdc.errors import CompileError

LISTING = """
        Function : k
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
        /*0020*/                   LDSM.16.M88.4 R8, [R3] ;
        /*0030*/                   LDSM.16.MT88.4 R12, [R3+0x800] ;
        /*0040*/                   HMMA.16816.F32.BF16 R16, R8, R12, R16 ;
        /*0050*/                   HMMA.16816.F32.BF16 R20, R8, R14, R20 ;
        /*0060*/                   FMNMX R1, R16, R17, !PT ;
        /*0070*/                   FFMA R1, R16, 0.5, -R1 ;
        /*0080*/                   MUFU.EX2 R1, R1 ;
        /*0090*/                   IADD3 R3, R3, 0x20, RZ ;
        /*00a0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00b0*/              @!P0 BRA 0x20 ;
        /*00c0*/                   STG.E [R6.64], R16 ;
        /*00d0*/                   EXIT ;
"""


def test_main_loop_is_the_backward_branch_and_its_mix_counts_every_slot():
    loop = sass.main_loop(sass.parse_sass(LISTING))
    assert [i.addr for i in (loop[0], loop[-1])] == [0x20, 0xB0]  # LDSM .. BRA, not the copy
    mix = sass.count_classes(loop)
    assert (mix["tensor"], mix["ldmatrix"], mix["fp32"], mix["mufu"]) == (2, 2, 2, 1)
    assert (mix["integer"], mix["barrier"], mix["control"], mix["async_copy"]) == (1, 1, 1, 0)
    assert sum(mix.values()) == len(loop) == 10


def test_missing_tools_are_one_clear_line(monkeypatch):
    monkeypatch.setattr(sass, "find_tool", lambda name="cuobjdump": None)
    with pytest.raises(CompileError, match="cuobjdump and nvdisasm are not installed"):
        sass.disassemble(b"")


@pytest.mark.skipif(sass.find_tool("nvdisasm") is None, reason="nvdisasm wheel not installed")
def test_a_compiled_attention_kernel_has_an_hmma_main_loop():
    # NVRTC's cubin of the library attention for sm_80: a loop of HMMAs fed by LDSM, with
    # the softmax's MUFU.EX2 inside it, as FA2 order puts them.
    pytest.importorskip("cuda.bindings")
    from ncdc.backends.compile import compile_plan
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.plan.search import plan_diagram

    axes = {"b": 1, "h": 1, "q": 128, "x": 128, "d": 64}
    plan = plan_diagram(load_diagram("diagrams/attention.yaml", axes), load_hardware("a100"))
    report = compile_plan(plan, "sm_80")
    loop = sass.main_loop(sass.parse_sass(sass.disassemble(report.cubin)))
    mix = sass.count_classes(loop)
    assert mix["tensor"] > 0 and mix["ldmatrix"] > 0 and mix["mufu"] > 0
    bound = loop_bounds.loop_bound(loop, 2048)
    assert 0 < bound.tensor_share <= 1
