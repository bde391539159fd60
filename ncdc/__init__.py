"""ncdc: the neural circuit diagram compiler.

Reads a diagram (YAML), builds its hierarchical memory graph, predicts its cost per memory
level, picks tiles, renders CUDA kernels, compiles them and runs them on a GPU or on the CPU.
"""

from ncdc.version import __version__

__all__ = ["__version__"]
