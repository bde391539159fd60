"""A CUDA driver made for the export tests (fake_libcuda.c): built once per session, it
records every driver call an export makes; `check_log` holds the record against the
launches the compiled `.json` describes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from ncdc.backends import nvrtc

HERE = Path(__file__).parent
KINDS = {"tensor": "b", "workspace": "b", "int64": "l", "int32": "i", "float32": "f"}
STREAM = 0x77
WORKSPACE = 0x40000000
SPAN_BUG_BYTES = 128 * 1024


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")


def cuda_include() -> Path:
    """The CUDA headers of the NVRTC wheels (cuda.h, cudaTypedefs.h)."""
    return nvrtc.cuda_include_dir()


def build_driver(folder: Path) -> Path:
    """libcuda.so.1 in `folder`, from fake_libcuda.c."""
    folder.mkdir(parents=True, exist_ok=True)
    cc = compiler()
    assert cc is not None
    subprocess.run(
        [cc, "-std=gnu11", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{cuda_include()}",
         str(HERE / "fake_libcuda.c"), "-o", str(folder / "libcuda.so.1")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return folder


def environment(driver: Path, log: Path, meta: dict, version: int = 13000) -> dict[str, str]:
    """The environment a run of an export sees the fake driver in."""
    kinds = ";".join(
        k["name"] + "=" + "".join("m" if p["tensor_map"] else KINDS[p["kind"]] for p in k["params"])
        for k in meta["kernels"]
    )
    return {**os.environ, "LD_LIBRARY_PATH": str(driver), "FAKE_CUDA_LOG": str(log),
            "FAKE_CUDA_KINDS": kinds, "FAKE_CUDA_VERSION": str(version)}  # fmt: skip


def addresses(meta: dict, diagram) -> dict[str, int]:
    """A distinct, 256-byte aligned fake address per input and output."""
    names = [t.name for t in diagram.inputs] + list(diagram.outputs)
    return {name: 0x10000000 * (i + 1) for i, name in enumerate(names)}


def check_log(log: Path, meta: dict, given: dict[str, int], workspace_bytes: int,
              version: int, calls: int) -> None:  # fmt: skip
    """The recorded driver calls are the `.json`'s launches, `calls` times, on STREAM, over
    the `given` addresses (and the workspace): grids, blocks, shared memory and its opt-in,
    scalars, and every tensor map's encoding with CUTLASS's workaround where it applies."""
    lines = log.read_text().splitlines()
    assert sum(line == "load elf" for line in lines) == 1, "the cubin loaded once"
    for k in meta["kernels"]:
        if k["dynamic_smem_bytes"] > 48 * 1024:
            assert f"attribute {k['name']} 8 {k['dynamic_smem_bytes']}" in lines
    launches = [line.split() for line in lines if line.startswith("launch ")]
    assert len(launches) == calls * len(meta["kernels"])
    # every call sets its accumulators to zero first, on its stream, inside the workspace
    zeroed = [w for w in meta["workspace"] if w["zeroed"]]
    sizes = sorted(max(1, w["values"] * {"fp32": 4, "int32": 4}[w["dtype"]]) for w in zeroed)
    order = [line.split()[0] for line in lines if line.startswith(("memset ", "launch "))]
    assert order == (["memset"] * len(zeroed) + ["launch"] * len(meta["kernels"])) * calls
    memsets = [line.split() for line in lines if line.startswith("memset ")]
    for n in range(calls):
        these = memsets[n * len(zeroed) : (n + 1) * len(zeroed)]
        assert sorted(int(w[3]) for w in these) == sizes
        for w in these:
            assert WORKSPACE <= int(w[1]) < WORKSPACE + workspace_bytes and int(w[1]) % 256 == 0
            assert w[2] == "0" and int(w[5]) == STREAM
    encodes = iter(line.split() for line in lines if line.startswith("encode "))
    scratch: set[int] = set()
    for n, words in enumerate(launches):
        k = meta["kernels"][n % len(meta["kernels"])]
        assert words[1] == k["name"]
        assert [int(w) for w in words[3:6]] == k["grid"] and [int(w) for w in words[7:10]] == k[
            "block"
        ]
        assert int(words[11]) == k["dynamic_smem_bytes"] and int(words[13]) == STREAM
        assert words[15] == "0", "no extra"
        for p, got in zip(k["params"], words[17:], strict=True):
            if p["tensor_map"]:
                _check_map(next(encodes), got, p["tensor_map"], given, version)
            elif p["kind"] in ("tensor", "workspace"):
                if p["name"] in given:
                    assert int(got) == given[p["name"]], p["name"]
                else:
                    scratch.add(int(got))
                    assert WORKSPACE <= int(got) < WORKSPACE + workspace_bytes
                    assert int(got) % 256 == 0
            elif p["kind"] == "float32":
                assert float.fromhex(got) == float(np.float32(p["value"])), p["name"]
            else:
                assert int(got) == p["value"], p["name"]


def _check_map(
    encode: list[str], got: str, spec: dict, given: dict[str, int], version: int
) -> None:
    fields = dict(zip(encode[1::2], encode[2::2], strict=False))
    address = given.get(spec["tensor"])
    if address is not None:
        assert int(fields["address"]) == address
    assert [int(x) for x in fields["dims"].split(",")] == spec["dims"]
    strides = fields.get("strides", "")
    assert [int(x) for x in strides.split(",") if x] == spec["strides"]
    assert [int(x) for x in fields["box"].split(",")] == spec["box"]
    assert fields["elements"] == ",".join(["1"] * len(spec["dims"]))
    assert (fields["interleave"], fields["l2"], fields["oob"]) == ("0", "2", "0")
    assert int(fields["swizzle"]) == {0: 0, 32: 1, 64: 2, 128: 3}[spec["swizzle"]]
    _, word0, word1, aligned = got.split(":")
    assert int(word0) == int(fields["address"]) and aligned == "1"
    esize = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}[
        spec["dtype"]
    ]
    span = (spec["dims"][0] - 1) * esize + sum(
        (d - 1) * s for d, s in zip(spec["dims"][1:], spec["strides"], strict=True)) + esize  # fmt: skip
    mended = version <= 13010 and span < SPAN_BUG_BYTES
    assert int(word1, 16) == (0xFFFFFFFF & ~(1 << 21) if mended else 0xFFFFFFFF), (span, version)


def read_meta(folder: Path, name: str) -> dict:
    return json.loads((folder / f"{name}.json").read_text())
