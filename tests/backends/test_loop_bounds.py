"""Static bounds from a kernel's SASS (ncdc.backends.loop_bounds)."""

from __future__ import annotations

from ncdc.backends import loop_bounds, sass

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


def test_loop_bound_turns_the_mix_into_cycles():
    # sm_80: 2048 tensor FLOPs per clock per SM, 512 per sub-partition, so an m16n8k16 HMMA
    # (4096 FLOPs) takes 8 cycles: 16 for two. One MUFU is 32 lanes at 4 a clock: 8. Two
    # LDSM.x4 of 512 B in each of 4 sub-partitions: 4096 B at 128 B a clock, 32 cycles.
    # Issue: 10 slots. Shared memory bounds this loop; the tensor pipe is busy half of it.
    bound = loop_bounds.loop_bound(sass.main_loop(sass.parse_sass(LISTING)), 2048)
    assert bound.cycles == {"issue": 10.0, "tensor": 16.0, "mufu": 8.0, "smem": 32.0}
    assert bound.bound == "smem" and bound.tensor_share == 0.5


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
