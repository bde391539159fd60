"""Kernel launch arguments: a parameter's value as the C ABI takes it, for either backend.

>>> from ncdc.families.base import Param
>>> scalar_argument(Param("ncdc_size_m", "int64", value=4096))
np.int64(4096)
"""

from __future__ import annotations

import numpy as np

from ncdc.families.base import Param

SCALAR_TYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32}


def scalar_argument(p: Param) -> np.generic:
    """The value of a scalar parameter in its C type."""
    return SCALAR_TYPES[p.kind](p.value)  # type: ignore[arg-type, no-any-return]
