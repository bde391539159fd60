"""Attention kernels: the family that runs fused attention (FlashAttention-2 order on
mma.sync, split keys, FlashAttention-3 order on sm_90a) and the decode family, sharing
one reading of the diagram."""
