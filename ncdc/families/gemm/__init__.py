"""GEMM kernels: one contraction and its epilogue, on mma.sync or CUDA cores, split along k
for small grids, and with TMA and wgmma on sm_90a."""
