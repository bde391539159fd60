"""ncdc: the neural circuit diagram compiler.

Reads a diagram (YAML), builds its hierarchical memory graph, predicts its cost per memory
level, picks tiles, renders CUDA kernels, compiles them and runs them on a GPU or on the CPU.

    >>> import ncdc
    >>> kernel = ncdc.load("diagrams/softmax.yaml")  # a function of arrays
    >>> ncdc.cost("diagrams/softmax.yaml")["bound"]  # what `ncdc cost --format json` says
    'hbm'

The API (docs/python-api.md) loads on first use, so that `import ncdc` and the command
line start fast.
"""

from typing import Any

from ncdc.version import __version__

__all__ = ["Kernel", "__version__", "check", "compile", "cost", "load"]
_API = {"Kernel", "check", "compile", "cost", "load"}


def __getattr__(name: str) -> Any:
    if name in _API:
        import ncdc.api

        return getattr(ncdc.api, name)
    raise AttributeError(f"module 'ncdc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
