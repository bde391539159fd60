"""Measuring on a GPU: timing with CUDA events, the library kernels timed beside ncdc's,
`ncdc bench` and `ncdc tune`."""
