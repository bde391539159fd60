"""The SASS in the plan's time (ncdc.backends.loop_mixes): a kernel's main loops as the
model's issue-slot mix.
"""

from __future__ import annotations

import pytest

from ncdc.backends import loop_mixes, sass

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
