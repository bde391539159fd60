"""SASS analysis (ncdc.backends.sass): the main loop, the instruction mix and its bounds, checked on
a hand-written listing in cuobjdump's format, and on a real cubin where the tools exist."""

from __future__ import annotations

import pytest

from ncdc.backends import loop_bounds, loop_mixes, sass
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


def test_loop_bound_turns_the_mix_into_cycles():
    # sm_80: 2048 tensor FLOPs per clock per SM, 512 per sub-partition, so an m16n8k16 HMMA
    # (4096 FLOPs) takes 8 cycles: 16 for two. One MUFU is 32 lanes at 4 a clock: 8. Two
    # LDSM.x4 of 512 B in each of 4 sub-partitions: 4096 B at 128 B a clock, 32 cycles.
    # Issue: 10 slots. Shared memory bounds this loop; the tensor pipe is busy half of it.
    bound = loop_bounds.loop_bound(sass.main_loop(sass.parse_sass(LISTING)), 2048)
    assert bound.cycles == {"issue": 10.0, "tensor": 16.0, "mufu": 8.0, "smem": 32.0}
    assert bound.bound == "smem" and bound.tensor_share == 0.5


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


ROW_LISTING = """
        Function : row
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/               @P0 BRA 0x80 ;
        /*0020*/                   LDG.E.U16 R4, desc[UR4][R2.64] ;
        /*0030*/                   HADD2.F32 R5, -RZ, R4.H0_H0 ;
        /*0040*/                   LDG.E.U16 R6, desc[UR4][R2.64+0x2] ;
        /*0050*/                   FADD R7, R5, R6 ;
        /*0060*/                   STG.E.U16 desc[UR4][R8.64], R7 ;
        /*0070*/                   BRA 0xd0 ;
        /*0080*/                   LDG.E.128 R12, desc[UR4][R2.64] ;
        /*0090*/                   LDG.E.128 R16, desc[UR4][R2.64+0x200] ;
        /*00a0*/                   FADD R20, R12, R16 ;
        /*00b0*/                   FMUL R21, R13, R17 ;
        /*00c0*/                   STG.E.128 desc[UR4][R8.64], R20 ;
        /*00d0*/              @!P1 BRA 0x10 ;
        /*00e0*/                   EXIT ;
"""


def test_a_memory_loop_is_read_along_its_vector_path():
    # The loop body (0x10 .. 0xd0) holds a scalar variant (two U16 loads, each used before
    # the next is issued: 2 round trips) and a vector one (two 128-bit loads in flight
    # together, then their uses: 1 trip). Both branches are uniform; the vector path moves
    # 3 x 512 B per warp (2 loads, 1 store of 16 B at 32 lanes) in 7 slots.
    ins = sass.parse_sass(ROW_LISTING)
    path = loop_bounds.stream_path(sass.main_loop(ins))
    assert [i.addr for i in path] == [0x10, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0]
    assert loop_bounds.round_trips(path) == 1
    scalar = [i for i in sass.main_loop(ins) if 0x20 <= i.addr <= 0x70]
    assert loop_bounds.round_trips(scalar) == 2
    bound = loop_bounds.kernel_bound(ins, 2048)
    assert (bound.issue_slots, bound.global_bytes, bound.load_bytes) == (7, 1536, 1024)
    stats = loop_bounds.bound_to_dict(bound)["static_bounds"]
    assert stats["global_round_trips"] == 1 and stats["tensor_flops_per_issue"] == 0


def test_static_bounds_of_a_tensor_loop():
    # Two m16n8k16 HMMAs (4096 FLOPs each) in 10 issue slots; two LDSM.x4 (512 B each):
    # 8 wavefronts of 128 B.
    bound = loop_bounds.kernel_bound(sass.parse_sass(LISTING), 2048)
    assert (bound.tensor_flops, bound.issue_slots, bound.smem_wavefronts) == (8192, 10, 8)
    assert bound.flops_per_issue == 819.2


TWO_COPIES = """
        Function : attn
        /*0000*/                   LDSM.16.M88.4 R8, [R3] ;
        /*0010*/                   HMMA.16816.F32.BF16 R16, R8, R12, R16 ;
        /*0020*/                   MUFU.EX2 R1, R1 ;
        /*0030*/              @!P0 BRA 0x0 ;
        /*0040*/                   LDSM.16.M88.4 R8, [R3] ;
        /*0050*/                   HMMA.16816.F32.BF16 R16, R8, R12, R16 ;
        /*0060*/                   ISETP.GT.AND P2, PT, R5, R6, PT ;
        /*0070*/                   FSEL R16, R16, -INF , !P2 ;
        /*0080*/                   MUFU.EX2 R1, R1 ;
        /*0090*/              @!P1 BRA 0x40 ;
        /*00a0*/                   EXIT ;
"""


def test_the_hot_loop_is_the_first_copy_and_the_masked_one_is_weighted_by_its_chunks():
    # Two copies of the key loop with the same MMAs: the first (no mask code) is the hot
    # one whatever their lengths; the second (compare and select) runs the diagonal's
    # chunks. Causal q = x = 256 in 64 x 64 tiles: block t visits t + 1 chunks, its last
    # one masked, so 4 of the 10 visits take the masked copy.
    ins = sass.parse_sass(TWO_COPIES)
    hot, masked = sass.tensor_loops(ins)
    assert sass.main_loop(ins) == hot and [i.addr for i in masked] == [
        0x40 + 16 * k for k in range(6)
    ]
    from ncdc.families.attention.mix import masked_share

    share = masked_share(256, 256, 64, 64, 0)
    assert share == pytest.approx(4 / 10)
    assert masked_share(256, 256, 64, 64, None) == 0.0  # no mask, no x tail: all clear
    assert masked_share(256, 77, 64, 80, None) == 1.0  # one 80-key chunk of 77 keys: a tail
    mix = loop_mixes.blend(loop_mixes.loop_mix(hot), loop_mixes.loop_mix(masked), share)
    # hot: 4 slots, masked: 6 (ISETP, FSEL more); 0.6 x 4 + 0.4 x 6 = 4.8
    assert mix.slots == pytest.approx(4.8) and mix.tensor_flops == 4096
