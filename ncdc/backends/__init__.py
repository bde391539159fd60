"""Building and launching: NVRTC and the compile cache, the `.cu`/`.cubin`/`.json` a compile
writes, launch arguments, the SASS of a cubin, and the two backends that run kernels: the
CPU emulator (`cpu`) and CuPy on a GPU (`cuda`)."""
