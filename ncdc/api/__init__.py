"""The Python API: `ncdc.load` (a diagram as a function of arrays) and the commands as
functions (`ncdc.cost`, `ncdc.compile`, `ncdc.check`). docs/python-api.md is its contract.
"""

from ncdc.api.commands import check, compile, cost
from ncdc.api.kernel import Kernel, load

__all__ = ["Kernel", "check", "compile", "cost", "load"]
