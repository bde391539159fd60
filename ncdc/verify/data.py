"""A run on the user's own data: `ncdc run --inputs FILE.npz` and `--save FILE.npz`.

An inputs file holds one array per diagram input, by name (`numpy.savez("in.npz", Q=q,
K=k, V=v)`). An array holds an input's values in any real NumPy type (rounded to the
input's dtype as a kernel would read them: fp32 values become bf16 by round-to-nearest-even)
or, for bf16 and fp8, its raw bits (uint16, uint8) or its ml_dtypes type. Arrays are read
without pickle. The outputs file holds one array per output, by name, in a NumPy type that
holds every value exactly (float32 for bf16 and fp8, float16 for fp16), and an `ncdc`
entry saying what wrote it; it is written atomically and never over a file ncdc did not
write.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ncdc.errors import NcdcError, UsageError, excerpt
from ncdc.files import read_regular, write_atomic
from ncdc.language.diagram import Diagram
from ncdc.language.dtypes import DTYPES
from ncdc.language.text import did_you_mean, listing
from ncdc.verify.reference import from_storage, round_to, value_dtype

SAVED_FORMAT = "ncdc.outputs/1"
MARK = "ncdc"  # the entry of a saved file that names what wrote it
MAX_NPZ_BYTES = 1 << 34  # 16 GiB: read through the guarded reader (a FIFO would hang np.load)


def read_arrays(path: Path, diagram: Diagram) -> dict[str, np.ndarray]:
    """The arrays of an inputs file, by name, each one a diagram input (all of them)."""
    raw = read_regular(path, MAX_NPZ_BYTES, what="an .npz file", error=UsageError)
    try:
        loaded = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # an .npy: one array, no names
            raise UsageError(
                "holds one array with no name (an .npy file); expected an .npz of named "
                "arrays", where=str(path), hint="write it with numpy.savez(path, NAME=array, ...)",
            )  # fmt: skip
        with loaded as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        if isinstance(e, OSError) and e.filename is not None:
            raise
        raise UsageError(
            f"not an .npz of arrays NumPy can read without pickle ({excerpt(str(e))})",
            where=str(path), hint="write it with numpy.savez(path, NAME=array, ...)",
        ) from None  # fmt: skip
    names = [t.name for t in diagram.inputs]
    for name in arrays:
        if name not in names:
            raise UsageError(
                f"array '{name}' is not an input of {diagram.name}", where=str(path),
                hint=did_you_mean(name, names) or f"the inputs are {listing(names)}",
            )  # fmt: skip
    missing = [n for n in names if n not in arrays]
    if missing:
        raise UsageError(
            f"no array for input {', '.join(missing)}", where=str(path),
            hint=f"save one array per input: {', '.join(names)}",
        )  # fmt: skip
    return {n: arrays[n] for n in names}


def input_values(path: Path, diagram: Diagram, arrays: Mapping[str, np.ndarray]) -> dict:
    """Each input's values in float64, rounded to its dtype (shapes checked by the caller
    against the diagram's sizes)."""
    values = {}
    for t in diagram.inputs:
        a = arrays[t.name]
        expected = tuple(diagram.axes[x] for x in t.axes)
        if a.shape != expected:
            raise UsageError(
                f"array '{t.name}' has shape {a.shape}; input {t.name}[{', '.join(t.axes)}] "
                f"is {expected}", where=str(path),
                hint="save arrays of the diagram's sizes, or run the spec with other --set",
            )  # fmt: skip
        values[t.name] = round_to(_values(path, t.name, t.dtype, a), t.dtype)
    return values


def _values(path: Path, name: str, dtype: str, a: np.ndarray) -> np.ndarray:
    d = DTYPES[dtype]
    bits = np.dtype(d.bits)
    if a.dtype == value_dtype(dtype):
        return np.asarray(a.astype(np.float64))
    if not d.integer and a.dtype == bits and bits != value_dtype(dtype):
        return from_storage(a, dtype)  # raw bits of bf16 or fp8
    if a.dtype.kind == "V" and a.dtype.itemsize == d.bytes and not d.integer:
        return from_storage(a.view(bits), dtype)  # an ml_dtypes array saved by NumPy
    if a.dtype.kind in "biuf":
        return np.asarray(a, dtype=np.float64)
    raise UsageError(
        f"array '{name}' is {a.dtype}; input {name} is {dtype}", where=str(path),
        hint=f"save real numbers, or the raw bits as {d.bits}" if bits != value_dtype(dtype)
        else "save real numbers",
    )  # fmt: skip


def saved_dtype(dtype: str) -> np.dtype:
    """The NumPy type an output is saved as: one that holds all its values exactly."""
    d = DTYPES[dtype]
    if d.integer or dtype in ("fp32", "fp16"):
        return value_dtype(dtype)
    return np.dtype(np.float32)  # bf16 and fp8 values are all float32 values


def save_outputs(path: Path, diagram: Diagram, outputs: Mapping[str, np.ndarray]) -> None:
    """Write `outputs` (float64 values by name) to `path` as an .npz, atomically; a file
    already there is replaced only when ncdc wrote it."""
    if path.exists() and not _ours(path):
        raise UsageError(
            "exists and was not written by ncdc run --save",
            where=str(path),
            hint="choose another path, or remove the file",
        )
    arrays = {
        name: outputs[name].astype(saved_dtype(diagram.tensor(name).dtype))
        for name in diagram.outputs
    }
    mark = json.dumps({"format": SAVED_FORMAT, "diagram": diagram.name,
                       "axes": dict(diagram.axes)})  # fmt: skip
    buffer = io.BytesIO()
    entries: dict[str, Any] = {**arrays, MARK: np.array(mark)}
    np.savez(buffer, **entries)
    write_atomic(path, buffer.getvalue())


def _ours(path: Path) -> bool:
    try:
        raw = read_regular(path, MAX_NPZ_BYTES)
        loaded = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            return False  # an .npy: not one ncdc saved
        with loaded as data:
            return MARK in data.files and SAVED_FORMAT in str(data[MARK])
    except (OSError, NcdcError, ValueError, zipfile.BadZipFile, EOFError):
        return False  # missing, a FIFO, not an .npz: not one ncdc saved
