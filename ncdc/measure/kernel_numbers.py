"""What a compiler made of a kernel, as numbers to compare across machines: registers,
spills and the SASS instruction mix (instructions per class, ncdc.backends.sass).

The static numbers behind ncdc's figures come from the NVRTC of the machine they were made
on; a GPU machine may carry another (scripts/device-check records the differences, since
every register count, spill and instruction the model was checked against may move).

    >>> was = {"jobs": [{"kernels": [{"kernel": "k", "registers": 168, "spills": 0, "sass": {}}]}]}
    >>> here = [{"kernels": [{"kernel": "k", "registers": 160, "spills": 0, "sass": {}}]}]
    >>> differences(here, was)
    [{'kernel': 'k', 'registers': {'static': 168, 'here': 160}}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

FIELDS = ("registers", "spills", "sass")


def kernel_numbers(kernel: str, registers: int, spills: int, cubin: bytes) -> dict[str, Any]:
    """One kernel's numbers (spills: bytes stored and loaded a thread)."""
    return {
        "kernel": kernel,
        "registers": registers,
        "spills": spills,
        "sass": sass_mix(cubin, kernel),
    }


def sass_mix(cubin: bytes, kernel: str) -> dict[str, int]:
    """Instructions per class in `kernel`'s SASS; {} without the SASS tools."""
    from ncdc.backends import sass

    if sass.find_tool("cuobjdump") is None or sass.find_tool("nvdisasm") is None:
        return {}
    functions = sass.split_functions(sass.disassemble(cubin))
    text = next((t for f, t in functions.items() if kernel in f), "")
    return {k: v for k, v in sass.count_classes(sass.parse_sass(text)).items() if v}


def differences(
    built: Sequence[Mapping[str, Any]], static: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Every kernel of `built` (jobs, each with its `kernels`) whose numbers differ from
    those of the same kernel in `static`; a kernel `static` lacks is a difference too (the
    source changed since). A SASS mix missing on either side (no tools) is not compared."""
    known = {k["kernel"]: k for job in static.get("jobs", []) for k in job["kernels"]}
    out: list[dict[str, Any]] = []
    for job in built:
        for k in job["kernels"]:
            was = known.get(k["kernel"])
            if was is None:
                out.append({"kernel": k["kernel"], "missing": "not in the static numbers"})
                continue
            changed = {
                f: {"static": was.get(f), "here": k[f]}
                for f in FIELDS
                if was.get(f) != k[f] and (f != "sass" or (was.get(f) and k[f]))
            }
            if changed:
                out.append({"kernel": k["kernel"], **changed})
    return out
